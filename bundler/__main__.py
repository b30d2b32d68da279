"""The ``bundler`` console script, and ``python -m bundler``."""

import os
import signal
import sys

from bundler.fs import interrupts


def run() -> None:
    """Run the command line as a process of its own: a signal during start-up is noted from
    the first moment the package runs, and taken once the command line can report it."""
    interrupts.note_until_main()
    from bundler.cli import lost_for_want_of_memory, main, out_of_memory_line

    last_words = out_of_memory_line()
    try:
        code = main()
    except (MemoryError, SystemError) as err:
        if not lost_for_want_of_memory(err):
            raise
        # memory ran out even for the command line's report of a failure: the line made
        # before, written without making anything more, and exit 1 as that report's would
        os.write(2, last_words)
        code = 1
    # the command is over, its exit code said: a signal while the interpreter shuts down must
    # not turn it into a death by that signal
    for signum in interrupts.HELD:
        signal.signal(signum, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    run()
