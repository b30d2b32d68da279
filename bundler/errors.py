"""Exceptions a user can cause: each carries the exit code, the path at fault and a message.

The CLI prints them on one line as ``error: <message>``; the library raises them unchanged.
Messages never contain a secret value: callers name config paths, never values. Where a message
must name something that can itself hold a secret (a file name the user chose), the operation
runs inside :func:`withholding`, so the secret is withheld where the error is *made*: no
exception object, not its ``args`` nor its ``repr``, ever holds it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INVALID = 3
EXIT_INTERRUPTED = 130


class BundlerError(Exception):
    """A failure the user can act on; ``code`` is the process exit code of 05 §2."""

    code: int = EXIT_FAILED

    def __init__(self, message: str, *, path: str = "", code: int | None = None) -> None:
        for scrub in _SCRUBBERS.get():
            message, path = scrub(message), scrub(path)
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


class EnvironmentFailure(Refused):
    """The system failed a read or write, not the input: no descriptor or memory left, a disk
    that cannot be read (exit 1). A verification stops at it rather than report it as one of
    the bundle's faults, with the follow-on mismatches of the entries it could not read."""


# what to do when the system, not the file, fails: too few descriptors, too little memory, a
# disk that answers with an error
_ENVIRONMENT_HINTS = {
    errno.EMFILE: "raise this process's limit of open files (ulimit -n) and try again",
    errno.ENFILE: "the system has too many files open: close some programs and try again",
    errno.ENOMEM: "free some memory and try again",
    errno.ENOBUFS: "free some memory and try again",
    errno.EIO: "check the disk and try again",
}


def environment_hint(exc: OSError) -> str | None:
    """What to do when ``exc`` is the system's failure rather than the file's; None when it
    is not."""
    return _ENVIRONMENT_HINTS.get(exc.errno or 0)


def environment_failure(verb: str, what: str, exc: OSError) -> EnvironmentFailure | None:
    """``cannot VERB WHAT (reason): hint`` when ``exc`` is the system's failure rather than the
    file's (:class:`EnvironmentFailure`); None for any other error."""
    hint = environment_hint(exc)
    if hint is None:
        return None
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return EnvironmentFailure(f"cannot {verb} {what} ({reason}): {hint}", path=what)


class RefusedWithList(Refused):
    """A refusal that found several things to fix at once (exit 1), e.g. every secret hit.

    ``message`` is the one ``error:`` line (a summary and what to do); ``details`` are the
    human lines listed under it, one per thing; ``listing`` is the same list for ``--json``,
    put in the error object under ``key``. Both are withheld like the message.
    """

    def __init__(
        self,
        message: str,
        *,
        details: list[str],
        key: str,
        listing: list[dict[str, str]],
        path: str = "",
    ) -> None:
        super().__init__(message, path=path)
        self.details = [withheld(line) for line in details]
        self.key = key
        self.listing = [{name: withheld(value) for name, value in row.items()} for row in listing]


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived; the operation cleaned up like a failure (exit 130).

    Not a :class:`BundlerError`, nor an ``Exception``, as ``KeyboardInterrupt`` is not: code that
    handles a user's error and carries on (a verify that records an unreadable file and goes
    on with the next) must never take an interrupt for one, or Ctrl-C during ``bundle verify``
    would be reported as the bundle's fault, exit 3. It has what the command line prints of an
    error (``code``, ``message``, ``path``).
    """

    code = EXIT_INTERRUPTED

    def __init__(self, message: str, *, signal_name: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = ""
        self.signal_name = signal_name  # SIGINT, SIGTERM, SIGHUP: what a caller's words name

    def __str__(self) -> str:
        return self.message


def error_kind(error: type[BaseException] | BaseException) -> str:
    """The stable name of an error's kind, for a program reading ``--json``: the class's name
    in snake case (``InvalidInput`` → ``invalid_input``). A class is renamed only as the API's
    names are (CHANGELOG.md), so a caller may branch on it."""
    name = (error if isinstance(error, type) else type(error)).__name__
    return "".join(
        f"_{ch.lower()}" if ch.isupper() and at else ch.lower() for at, ch in enumerate(name)
    )


_BY_CODE: dict[int, type[BaseException]] = {
    cls.code: cls for cls in (Refused, UsageError, InvalidInput, Interrupted)
}


def kind_of_code(code: int) -> str:
    """The kind of a failure a command reports as a result, not as an exception (a ``verify``
    that found faults, a ``doctor`` that found problems): that of the error its exit code is."""
    return error_kind(_BY_CODE.get(code, Refused))


Scrub = Callable[[str], str]
_SCRUBBERS: ContextVar[tuple[Scrub, ...]] = ContextVar("bundler_scrubbers", default=())


def withheld(text: str) -> str:
    """``text`` with every secret of the active :func:`withholding` scopes withheld.

    For what is not an error but is printed all the same (warnings, notes); an unchanged text is
    returned as the same object, so a :class:`~bundler.rules.hints.Hinted` keeps its command.
    """
    for scrub in _SCRUBBERS.get():
        scrubbed = scrub(text)
        if scrubbed != text:
            text = scrubbed
    return text


@contextmanager
def withholding(scrub: Scrub) -> Iterator[None]:
    """Within the block, every :class:`BundlerError` is made with ``scrub`` applied.

    ``scrub(text)`` returns ``text`` with every secret it knows withheld. It is applied to the
    message and the path when the error is constructed (so ``args``, ``str`` and ``repr`` agree
    and none holds a secret). An exception leaving the block is also cleaned along its
    ``__cause__``/``__context__`` chain: an ``OSError`` the system made names the file it was
    given, which may be a secret name, so its ``filename`` is scrubbed; any other link whose
    text holds a secret is cut from the chain.
    """
    token = _SCRUBBERS.set((*_SCRUBBERS.get(), scrub))
    try:
        yield
    except BaseException as exc:
        _clean_chain(exc, scrub)
        raise
    finally:
        _SCRUBBERS.reset(token)


def _holds(exc: BaseException, scrub: Scrub) -> bool:
    texts = [str(exc), repr(exc), *(a for a in exc.args if isinstance(a, str))]
    return any(scrub(text) != text for text in texts)


def _clean_chain(top: BaseException, scrub: Scrub) -> None:
    if not isinstance(top, BundlerError) and _holds(top, scrub):
        # not ours (a bug surfacing): keep the type, withhold the text
        top.args = tuple(scrub(a) if isinstance(a, str) else a for a in top.args)
    seen: set[int] = set()
    pending = [top]
    while pending:
        link = pending.pop()
        if id(link) in seen:
            continue
        seen.add(id(link))
        if isinstance(link, OSError):
            for attr in ("filename", "filename2"):
                value = getattr(link, attr)
                if isinstance(value, str) and scrub(value) != value:
                    setattr(link, attr, scrub(value))
        linked = [e for e in (link.__cause__, link.__context__) if e is not None]
        if any(not isinstance(e, (OSError, BundlerError)) and _holds(e, scrub) for e in linked):
            link.__cause__ = None
            link.__context__ = None
            link.__suppress_context__ = True
            continue
        pending += linked
