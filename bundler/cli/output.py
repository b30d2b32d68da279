"""What the CLI prints: results on stdout, errors as one ``error:`` line on stderr (05 §3).

With ``--json`` exactly one JSON object goes to stdout, on success and on failure.
"""

from __future__ import annotations

import codecs
import io
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

from bundler.api import Progress, display
from bundler.api import process as interrupts
from bundler.errors import (
    EXIT_FAILED,
    BundlerError,
    Interrupted,
    RefusedWithList,
    error_kind,
    kind_of_code,
)


@dataclass
class Result:
    """What a command produced: its JSON payload, its human text and its exit code.

    ``payload`` must not hold ``ok``; it is added from ``code``. ``text`` lines go to stdout,
    ``warnings`` to stderr (in ``--json`` mode they are in the payload instead). A findings
    command (validate, verify, doctor) that fails sets ``code`` and ``error_message``.
    ``quiet_text``, when set, is what ``--quiet`` prints instead of ``text``: the one result
    line a script wants (a bundle, a receipt, a backup); under ``--quiet`` only the warnings that
    carry a command to run are printed.
    """

    payload: dict[str, Any] = field(default_factory=dict)
    text: list[str] = field(default_factory=list)
    code: int = 0
    warnings: list[str] = field(default_factory=list)
    error_message: str = ""
    error_path: str = ""
    # the kind of the failure, when the findings say more than the exit code (a verify whose
    # first fault is a digest that does not match: tampered)
    error_kind: str = ""
    quiet_text: list[str] | None = None
    # not prose (a script, a man page, a file's content, a value, a table): printed as it is
    verbatim: bool = False


class Output:
    """The process's stdout/stderr discipline: JSON mode, quiet mode, progress on a terminal."""

    def __init__(self, json_mode: bool = False, closed: frozenset[str] = frozenset()) -> None:
        self.json_mode = json_mode
        self.quiet = False
        self.progress_allowed = True
        # the standard streams the process started without ("stdin", "stdout", "stderr"), each
        # now on /dev/null (stand_in_for_closed_streams): a command that reads stdin must not
        # take a closed one for an empty input
        self.closed = closed

    def configure(self, *, json_mode: bool, quiet: bool, progress: bool) -> None:
        """Apply the global options once they are parsed."""
        self.json_mode = json_mode
        self.quiet = quiet
        self.progress_allowed = progress

    @property
    def shows_progress(self) -> bool:
        """Progress goes to stderr on a terminal only, never with --quiet/--json/--no-progress."""
        return (
            self.progress_allowed and not self.quiet and not self.json_mode and sys.stderr.isatty()
        )

    @contextmanager
    def progress(self) -> Iterator[Progress | None]:
        """A context yielding the bar library calls report to, or None when none is shown.

        None (not a bar that draws nothing) so the library skips work done only for the
        display, such as counting a tree before copying it. The bar is gone on exit.
        """
        if not self.shows_progress:
            yield None
            return
        from bundler.cli.progress_bar import Bar

        bar = Bar()
        try:
            yield bar
        finally:
            bar.stop()

    def withhold(self, scrub: Callable[[str], str]) -> None:
        """Apply ``scrub`` to everything printed from now on, stdout and stderr, ``--json``
        included: for the credentials a registry was sent, whose served bundle is the
        registry's text and could repeat them anywhere in a report, not only in an error."""
        _SCRUBS.append(scrub)

    def warn(self, message: str) -> None:
        """A warning line on stderr (not in --json mode: put warnings in the payload there)."""
        if not self.json_mode:
            _print(display.lines("warning: ", message), sys.stderr)

    def emit(self, result: Result) -> int:
        """Print a command's result; returns its exit code (:meth:`_stdout_failed`'s when
        stdout cannot take it)."""
        try:
            return self._emit(result)
        except _StdoutFailed as failed:
            # in --json mode the warnings were in the document that was lost
            return self._stdout_failed(
                failed.err, result, result.warnings if self.json_mode else []
            )

    def _emit(self, result: Result) -> int:
        if self.json_mode:
            document: dict[str, Any] = {"ok": result.code == 0, **result.payload}
            if result.code != 0:
                document["error"] = {
                    "kind": result.error_kind or kind_of_code(result.code),
                    "code": result.code,
                    "message": result.error_message or "failed",
                    "path": result.error_path,
                }
            if result.warnings and "warnings" not in document:
                document["warnings"] = result.warnings
            _to_stdout(_json(document))
            return result.code
        for warning in result.warnings:
            if not self.quiet or isinstance(warning, display.Hinted):
                _print(display.lines("warning: ", warning), sys.stderr)
        text = result.text if result.quiet_text is None or not self.quiet else result.quiet_text
        if text and result.verbatim:
            _to_stdout("\n".join(text))
        elif text:
            _print(text, sys.stdout)
        if result.code != 0 and result.error_message:
            _print(f"error: {result.error_message}".splitlines(), sys.stderr)
        return result.code

    def _stdout_failed(self, err: OSError, result: Result, warnings: list[str]) -> int:
        """Say on stderr that the result could not be written to stdout; returns the exit code.

        A command that committed has made its change whatever became of its report: a failure
        after the commit point, so a warning and exit 0 (05 §2), never a claim that it failed.
        Before the commit (or for a command that changes nothing) the user did not get what
        they asked for: exit 1, or the command's own failing code. A reader that went away
        (EPIPE: ``| head``) wanted no more, so only a committed change is mentioned then.
        """
        reason = err.strerror or type(err).__name__
        gone = isinstance(err, BrokenPipeError)
        committed = interrupts.committed() and result.code == 0
        if gone and not committed:
            return result.code or EXIT_FAILED
        for warning in warnings:
            _print(display.lines("warning: ", warning), sys.stderr)
        if committed:
            lost = (
                "the reader of standard output went away before the result was written"
                if gone
                else f"the result could not be written to standard output ({reason})"
            )
            _print([f"warning: {lost}; the change was made and stands"], sys.stderr)
            return 0
        if result.code != 0:
            _print(
                [f"warning: the output could not be written to standard output ({reason})"],
                sys.stderr,
            )
            if result.error_message:
                _print(f"error: {result.error_message}".splitlines(), sys.stderr)
            return result.code
        _print(
            [
                f"error: cannot write the output to standard output ({reason}); free space "
                "or send it elsewhere, and run the command again"
            ],
            sys.stderr,
        )
        return EXIT_FAILED

    def fail(self, err: BundlerError | Interrupted, *, warnings: Sequence[str] = ()) -> int:
        """Print an error on one line (or as the JSON envelope); returns its exit code.

        ``warnings`` (what the failed run left behind) come before it on stderr, or in the
        envelope's ``warnings``."""
        message = " ".join(str(err.message).splitlines())
        if self.json_mode:
            error: dict[str, Any] = {
                "kind": error_kind(err),
                "code": err.code,
                "message": message,
                "path": err.path,
            }
            if isinstance(err.message, display.Hinted):
                error["fix"] = err.message.fix
            if isinstance(err, RefusedWithList):
                error[err.key] = err.listing
            document: dict[str, Any] = {"ok": False, "error": error}
            if warnings:
                document["warnings"] = list(warnings)
            try:
                _to_stdout(_json(document))
                return err.code
            except _StdoutFailed as failed:
                if isinstance(failed.err, BrokenPipeError):
                    return err.code  # the reader went away: it wants nothing more
                # stderr is the one place left to say what failed (self.warn is silent in
                # --json mode, and the warnings were in the document lost)
                for warning in warnings:
                    _print(display.lines("warning: ", warning), sys.stderr)
        else:
            for warning in warnings:
                self.warn(warning)
        if isinstance(err, RefusedWithList):
            # the error stays one line; what it found follows, one thing a line
            _print([f"error: {message}"], sys.stderr)
            if err.details:  # one hit is said on the one line, with nothing under it
                _print_as_is("\n".join(f"  {line}" for line in err.details), sys.stderr)
        elif isinstance(err.message, display.Hinted) and "\n" not in err.message:
            # the error itself stays one line; the command to paste follows on its own
            _print(display.lines("error: ", err.message), sys.stderr)
        else:
            _print([f"error: {message}"], sys.stderr)
        return err.code


class _StdoutFailed(Exception):
    """stdout refused what was written to it (a full disk, /dev/full, a file size limit, a
    reader gone); ``err`` is the system's error."""

    def __init__(self, err: OSError) -> None:
        super().__init__(str(err))
        self.err = err


_STANDARD = (
    ("stdin", 0, os.O_RDONLY, "r"),
    ("stdout", 1, os.O_WRONLY, "w"),
    ("stderr", 2, os.O_WRONLY, "w"),
)


def stand_in_for_closed_streams() -> frozenset[str]:
    """Put /dev/null in place of each standard stream the process started without; returns
    their names (``"stdin"``, ``"stdout"``, ``"stderr"``).

    A stream closed by the caller (``<&-``, ``>&-``, ``2>&-``, as some daemons and cron jobs
    run a program) is None in ``sys``, and code everywhere asks it ``isatty()`` or prints to it:
    with stderr closed every command that may draw progress died silently, nothing done. With
    a stand-in on /dev/null, what is written there is dropped and stdin reads as empty (a
    caller that must tell it from an empty input asks :attr:`Output.closed`). The descriptor
    itself is filled too when it is free, so that no file the command opens takes its number
    and gets what a child process writes to it.
    """
    closed: set[str] = set()
    for name, number, flags, mode in _STANDARD:
        if getattr(sys, name) is not None:
            continue
        closed.add(name)
        null = os.open(os.devnull, flags | os.O_CLOEXEC)
        try:
            os.fstat(number)
        except OSError:  # free: the stand-in takes the very number
            os.dup2(null, number)
            os.close(null)
            null = number
        # as the streams Python makes: open for the life of the process, so no context manager
        stand_in = open(null, mode, encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
        setattr(sys, name, stand_in)
    return frozenset(closed)


def escape_what_cannot_be_encoded() -> None:
    """Make stdout and stderr show a character their encoding cannot hold as an escape
    (``\\xe9``) instead of raising: a legacy terminal or ``PYTHONIOENCODING`` must not turn a
    value or an error into a traceback."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def _json(document: dict[str, Any]) -> str:
    # characters as they are where stdout is UTF-8; JSON's own \\u escapes elsewhere, so that
    # the document stays valid (an escape of the stream's would not be JSON)
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        utf8 = codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        utf8 = False
    # withheld before it is encoded: an escape would hide a credential from a text scrub
    return json.dumps(_withheld(document), ensure_ascii=not utf8, default=str)


def _print(lines: list[str], stream: TextIO) -> None:
    """Human lines to ``stream``, prose folded to a terminal's width (never in --json); as
    they are when the folding cannot be loaded (an error said with memory running out)."""
    try:
        from bundler.cli.wrap import fold_all  # a run that prints nothing (--quiet) never needs it
    except (MemoryError, SystemError):  # SystemError: an import that failed for want of memory
        _print_as_is("\n".join(lines), stream)
        return
    _print_as_is("\n".join(fold_all(lines, stream)), stream)


def _to_stdout(text: str) -> None:
    """``text`` and a newline to stdout, flushed: raises :class:`_StdoutFailed` when it cannot
    be written, so the caller can say so instead of a traceback (the buffered write itself
    succeeds and the error came at the interpreter's exit, too late to report)."""
    _print_as_is(text, sys.stdout)


_SCRUBS: list[Callable[[str], str]] = []
"""What :meth:`Output.withhold` registered: applied to every text printed, for the life of the
process (one command)."""


def _withheld(value: Any) -> Any:
    """``value`` (a text, or a JSON document's node) with every :data:`_SCRUBS` applied."""
    if isinstance(value, str):
        for scrub in _SCRUBS:
            value = scrub(value)
        return value
    if isinstance(value, dict):
        return {_withheld(key): _withheld(sub) for key, sub in value.items()}
    if isinstance(value, (list, tuple)):
        return [_withheld(sub) for sub in value]
    return value


def _print_as_is(text: str, stream: TextIO) -> None:
    """``text`` and a newline to ``stream``, flushed. stdout's failure raises
    :class:`_StdoutFailed`; stderr's is dropped: there is no other place to report it, and the
    exit code still says how the command ended."""
    text = _withheld(text)
    try:
        stream.write(text + "\n")
        stream.flush()
    except OSError as err:
        _discard_the_rest(stream)
        if stream is sys.stdout:
            raise _StdoutFailed(err) from None


def _discard_the_rest(stream: TextIO) -> None:
    """Point ``stream``'s descriptor at /dev/null: what its buffer still holds is flushed again
    as the interpreter exits, and would fail there once more ("Exception ignored", exit 120)."""
    try:
        number = stream.fileno()
    except (OSError, ValueError):  # not on a descriptor (a test's capture): nothing is retried
        return
    null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.dup2(null, number)
    finally:
        os.close(null)
