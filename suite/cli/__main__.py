"""``python -m suite.cli``: the ``suite`` command."""

from suite.cli.main import console_main

if __name__ == "__main__":  # multiprocessing's spawn re-imports this module as __mp_main__: it must not run again
    console_main()
