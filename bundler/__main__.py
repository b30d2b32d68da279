"""The ``bundler`` console script, and ``python -m bundler``."""

import signal
import sys

from bundler.fs import interrupts


def run() -> None:
    """Run the command line as a process of its own: a signal during start-up is noted from
    the first moment the package runs, and taken once the command line can report it."""
    interrupts.note_until_main()
    from bundler.cli import main

    code = main()
    # the command is over, its exit code said: a signal while the interpreter shuts down must
    # not turn it into a death by that signal
    for signum in interrupts.HELD:
        signal.signal(signum, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    run()
