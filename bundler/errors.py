"""Exceptions a user can cause: each carries the exit code, the path at fault and a message.

The CLI prints them on one line as ``error: <message>``; the library raises them unchanged.
Messages never contain a secret value: callers name config paths, never values.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INVALID = 3
EXIT_INTERRUPTED = 130


class BundlerError(Exception):
    """A failure the user can act on; ``code`` is the process exit code of 05 §2."""

    code: int = EXIT_FAILED

    def __init__(self, message: str, *, path: str = "", code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class UsageError(BundlerError):
    """Unknown command or option, missing or conflicting arguments (exit 2)."""

    code = EXIT_USAGE


class InvalidInput(BundlerError):
    """What validation or verification finds in a config, Agent.yaml, bundle or backup (exit 3)."""

    code = EXIT_INVALID


class Refused(BundlerError):
    """Refused or failed; the previous state is intact or recoverable (exit 1)."""

    code = EXIT_FAILED


class Interrupted(BundlerError):
    """SIGINT, SIGTERM or SIGHUP arrived; the operation cleaned up like a failure (exit 130)."""

    code = EXIT_INTERRUPTED
