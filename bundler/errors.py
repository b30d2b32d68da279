"""Exceptions a user can cause: each carries the exit code, the path at fault and a message.

One class per concept (:class:`NotFound`, :class:`DestinationExists`, :class:`SecretFound`,
:class:`RegistryUnreachable`, :class:`NoSpace`, :class:`Tampered`, :class:`Hostile`...), each a
subclass of the base whose exit code it carries (:class:`UsageError` 2, :class:`InvalidInput` 3,
:class:`Refused` 1), so a caller tells failures apart by class and ``--json`` by ``kind``, never
by the words of the message, which may change.

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
from typing import TypeVar

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

    def restated(self: _E, message: str, *, path: str | None = None) -> _E:
        """A new error of this one's class saying ``message``: for a layer that adds what it
        knows (the archive an entry is in, a cleanup left incomplete) without losing the
        concept, the exit code or the data the class carries. The new message is withheld like
        any other; raise it ``from`` this one."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        for scrub in _SCRUBBERS.get():
            message = scrub(message)
        BaseException.__init__(new, message)
        new.message = message
        if path is not None:
            new.path = withheld(path)
        return new


_E = TypeVar("_E", bound=BundlerError)


class UsageError(BundlerError):
    """An unknown command or option, missing or conflicting arguments, an argument of the wrong
    form (a reference, a config path, a recipient) (exit 2). Fix the command line (``--help``)."""

    code = EXIT_USAGE


class InvalidInput(BundlerError):
    """What validation or verification finds in a config, Agent.yaml, bundle or backup (exit 3)."""

    code = EXIT_INVALID


# --- what is wrong with the input (exit 3) ------------------------------------------------------
# Each names what the input is and what is wrong with it; the user fixes or replaces the input.


class NotABundle(InvalidInput):
    """The input is not the kind of thing the command reads: a folder with no manifest, a file
    that is no tar archive or zip, an OCI artifact of another kind, a backup, receipt or journal
    bundler did not write. Name the right input."""


class Malformed(InvalidInput):
    """The input is of the right kind but does not parse or breaks its format: TOML, JSON or
    YAML that does not parse, text that is not UTF-8, a manifest or checksum line that breaks its
    schema, a zip record that contradicts another. Fix the file, or export it again."""


class InvalidConfig(InvalidInput):
    """A config parses but breaks a rule of its validation (01 §5): config.toml, Agent.yaml, an
    environment override, a value given to ``config set`` or ``--bind``, or the config an import
    or an undo would write. Nothing changed; fix what the message names."""


class Tampered(InvalidInput):
    """The input is not what was recorded of it: a digest or checksum that does not match, a
    manifest digest other than the one asked for, a file changed, added or gone since it was
    verified. Take the bundle, backup or artifact again from a source you trust."""


class Hostile(InvalidInput):
    """The input asks for what bundler never does: an entry named with an absolute path or
    ``..``, a link, a device or other special file, two entries on one path, a part that
    writes outside its place, a redirect to another host or to plain HTTP. Refused whole;
    do not use the input."""


class TooLarge(InvalidInput):
    """The input is beyond one of bundler's limits: too many bytes, entries, tags, nested
    levels or expanded values. The limits keep a hostile input from exhausting memory or disk;
    a real bundle, backup or config stays far below them."""


class Undecryptable(InvalidInput):
    """An encrypted value that the key at hand does not open: a secret stored under another
    install's key, a value given already encrypted under another key, a sealed ``secrets.age``
    for another identity, a stored secret with no key file to open it. Give the plain value,
    the right key or identity, or restore the install's own key file."""


class Unsupported(InvalidInput):
    """The input uses a format version newer than this bundler, or a feature it does not read
    (an encrypted zip entry, a passphrase-less key kind). Use a newer bundler, or write the
    input without the feature."""


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
    errno.ENOSPC: "free some space and try again",
    errno.EDQUOT: "free some space (the disk quota is reached) and try again",
}
_FULL = (errno.ENOSPC, errno.EDQUOT)


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
    made = NoSpace if exc.errno in _FULL else EnvironmentFailure
    return made(f"cannot {verb} {what} ({reason}): {hint}", path=what)


def os_failure(message: str, exc: OSError, *, path: str = "") -> Refused:
    """The refusal ``message`` for a read or write the system failed with ``exc``, of the
    concept its errno names: :class:`NoSpace` for a full disk or quota,
    :class:`EnvironmentFailure` for too few descriptors or too little memory or a disk error,
    :class:`NotFound` for a name that is not there, :class:`CannotAccess` for the rest
    (permissions, a read-only file system...). So a caller tells a full disk from a missing
    permission by the class, never by the words."""
    number = exc.errno or 0
    if number in _FULL:
        return NoSpace(message, path=path)
    if number in _ENVIRONMENT_HINTS:
        return EnvironmentFailure(message, path=path)
    if number == errno.ENOENT:
        return NotFound(message, path=path)
    return CannotAccess(message, path=path)


class RefusedWithList(Refused):
    """A refusal that found several things to fix at once (exit 1): the base of
    :class:`SecretFound`, which lists every secret hit.

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


# --- what the environment or the state refuses (exit 1) ---------------------------------------
# The previous state is intact or recoverable; the user changes the environment and runs again.


class NoSpace(EnvironmentFailure):
    """The file system is full (or the user's quota is): free space, or write elsewhere, and run
    again. What was being written is discarded."""


class CannotAccess(Refused):
    """The system refused to open, read, write, list or create a file or folder bundler needed:
    permissions, a read-only file system, a name the system will not take. Fix what the message
    names (its permissions, the path given) and run again."""


class NotFound(Refused):
    """What the command names does not exist: a bundle, archive, install, config entry, agent,
    project folder, repository, receipt or import to undo. Name one that exists."""


class DestinationExists(Refused):
    """What the command would create exists already, and bundler never replaces it unasked: a
    folder or file, a bundle, a backup, a tag naming another artifact, an agent alias, a skill.
    Choose another name, move it away, or pass ``--force`` where the message offers it."""


class UnsuitablePath(Refused):
    """A path names something bundler will not use there: a symbolic link, a file where a folder
    is needed or a folder where a file is, a special file, a file far larger than the kind it
    must be (a pattern file, a credentials file), a destination inside what it would read or
    write. Name another path."""


class ChangedMeanwhile(Refused):
    """Something changed while bundler read or wrote it: a file grew or was replaced, a folder
    appeared, config.toml was edited by someone else. Nothing was published; stop what writes
    there and run again."""


class Locked(Refused):
    """Another bundler process holds the lock of what this one would change (a restore, a
    recovery or a backup of the same data home). Wait for it to finish and run again."""


class RecoveryNeeded(Refused):
    """An interrupted or failed operation left its journal, or an undo that could not be
    completed: the state needs ``bundler recover`` (the message gives the command) before
    anything else changes it; or the journal is damaged and recovery refuses to guess."""


class Damaged(Refused):
    """A file of the user's that bundler must read, not an input it judges, is damaged: a
    database failing its integrity check, a journal that recovery cannot read without guessing.
    Nothing was done; repair it (or restore it from a backup) and run again."""


class NoAnswer(Refused):
    """bundler needed an answer from the user (a passphrase, a value) and none came: there is no
    terminal, standard input is closed, nothing was typed. Run the command at a terminal, or give
    the answer by the option or the pipe the message names."""


class PolicyRefused(Refused):
    """A rule of bundler's own refuses the request: a risk not accepted, an override that would
    turn a guarded field on, a memory backend locked by written memory, a registry blocked in
    registries.conf, credentials over plain HTTP, a name that is not portable. Do what the message
    says, or pass the option that accepts it."""


class SecretFound(RefusedWithList):
    """An export found a known secret value where it would travel (in a carried file, a file
    name, or an encrypted value outside a secret field); nothing was published. Remove the value,
    keep the file behind with ``--exclude``, or pass ``--scan-secrets warn``. ``listing`` (the
    ``--json`` ``secret_hits``) names every hit, never the value."""

    def __init__(
        self,
        message: str,
        *,
        path: str = "",
        details: list[str] | None = None,
        listing: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(
            message, details=details or [], key="secret_hits", listing=listing or [], path=path
        )


class JailError(Refused):
    """A file tool's path (04 §2.1) is refused: outside its volume, through a link, a write to a
    read-only volume, a volume that is not there. The message names the path as the agent wrote
    it, never a machine path; the agent names another path."""


class RegistryUnreachable(Refused):
    """The connection to a registry closed, was reset or timed out, or none could be made, or
    the registry answered that it is overloaded every time it was asked: nothing the registry
    sent is judged, and trying again may succeed.

    ``host`` is the registry's host and port as the message names it (``""`` when none is
    known); ``cause`` what happened (see :mod:`bundler.registry.network`)."""

    def __init__(self, message: str, *, host: str = "", cause: str = "", path: str = "") -> None:
        super().__init__(message, path=path)
        self.host = host
        self.cause = cause


class CredentialsRefused(Refused):
    """Credentials were refused or cannot be had: a registry refused the user name and password
    or asked for some and none were found, a credentials file or a credential helper fails, a
    passphrase does not open a key. Log in again (``bundler login``), give the right key, or
    fix what the message names."""


class RegistryRefused(Refused):
    """The registry answered, and refused the request or answered in a way bundler does not
    follow: an HTTP error, a certificate not trusted, an upload or token service elsewhere, a
    token that cannot be sent. Trying again alone does not help; fix what the message names."""


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
