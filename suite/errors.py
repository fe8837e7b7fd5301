"""The one exception type that means "the user asked for something wrong".

The CLI turns a :class:`UserError` into a single stderr line and exit code 2, never a traceback
(STYLE.md, "Errors"). Everything else is a bug or a trial failure and is handled as such.
"""


class UserError(Exception):
    """A mistake in the user's input: unknown id, bad value, unreadable file.

    The message must name what was wrong and what is allowed, in one line.
    """
