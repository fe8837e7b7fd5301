"""The ``suite`` command line.

Every user mistake ends in one ``suite: error: ...`` line on stderr and exit code 2 (never a traceback).
SIGINT (Ctrl-C) and SIGTERM end any command with one ``suite: interrupted ...`` line and exit code 130 / 143
(128 + the signal number); an interrupted run says how many trials were saved and loses none of them.

One module per command group (:mod:`~suite.cli.catalog` ``list``, :mod:`~suite.cli.run`, :mod:`~suite.cli.results`
``status``/``export``/``merge``, :mod:`~suite.cli.report`, :mod:`~suite.cli.reproduce`, :mod:`~suite.cli.evaluate`,
:mod:`~suite.cli.profile`, :mod:`~suite.cli.regress`), each with its parser and its command; the option groups they
share in :mod:`~suite.cli.options`; :mod:`~suite.cli.main` assembles the parser and runs a command.
"""

from suite.cli.main import COMMANDS, TRAINING_COMMANDS, build_parser, console_main, main
from suite.cli.options import EXIT_INTERRUPTED, EXIT_USAGE

__all__ = ["COMMANDS", "EXIT_INTERRUPTED", "EXIT_USAGE", "TRAINING_COMMANDS", "build_parser", "console_main", "main"]
