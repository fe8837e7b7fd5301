"""The suite's own exception types, on the lowest floor so every module can raise or catch them.

:class:`UserError` means "the user asked for something wrong": the CLI turns it into a single stderr line and
exit code 2, never a traceback (STYLE.md, "Errors"). :class:`Diverged` means a trial's numbers blew up: the trial
runner records the trial as ``diverged``. Everything else is a bug or a trial failure and is handled as such.
"""


class UserError(Exception):
    """A mistake in the user's input: unknown id, bad value, unreadable file.

    The message must name what was wrong and what is allowed, in one line.
    """


class Diverged(RuntimeError):
    """A loss, gradient or parameter became NaN/inf; the trial is recorded as ``diverged``."""
