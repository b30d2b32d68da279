"""What the CLI prints: results on stdout, errors as one ``error:`` line on stderr (05 §3).

With ``--json`` exactly one JSON object goes to stdout, on success and on failure.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from bundler.errors import BundlerError
from bundler.rules import hints
from bundler.rules.names import escape_display

# seconds of work before a progress bar is drawn
PROGRESS_DELAY = 0.5


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
    quiet_text: list[str] | None = None


class Output:
    """The process's stdout/stderr discipline: JSON mode, quiet mode, progress on a terminal."""

    def __init__(self, json_mode: bool = False) -> None:
        self.json_mode = json_mode
        self.quiet = False
        self.progress_allowed = True

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
    def progress(self, description: str, total: int | None) -> Iterator[Callable[[int], None]]:
        """A context yielding ``advance(n)``; draws a rich bar on a terminal, else does nothing.

        The bar (and rich's import, a large share of a short command's start-up) begins only
        once the work has taken :data:`PROGRESS_DELAY` seconds: a command that ends sooner has
        nothing to show progress of.
        """
        if not self.shows_progress:
            yield lambda _n: None
            return
        started = time.monotonic()
        pending = 0
        with ExitStack() as stack:
            bar: Any = None
            task: Any = None

            def advance(n: int) -> None:
                nonlocal bar, task, pending
                if bar is None:
                    pending += n
                    if time.monotonic() - started < PROGRESS_DELAY:
                        return
                    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

                    bar = stack.enter_context(
                        Progress(
                            TextColumn("{task.description}"),
                            BarColumn(),
                            DownloadColumn(),
                            transient=True,
                        )
                    )
                    task = bar.add_task(escape_display(description), total=total)
                    n, pending = pending, 0
                bar.advance(task, n)

            yield advance

    def warn(self, message: str) -> None:
        """A warning line on stderr (not in --json mode: put warnings in the payload there)."""
        if not self.json_mode:
            print("\n".join(hints.lines("warning: ", message)), file=sys.stderr)

    def emit(self, result: Result) -> int:
        """Print a command's result; returns its exit code."""
        if self.json_mode:
            document: dict[str, Any] = {"ok": result.code == 0, **result.payload}
            if result.code != 0:
                document["error"] = {
                    "code": result.code,
                    "message": result.error_message or "failed",
                    "path": result.error_path,
                }
            if result.warnings and "warnings" not in document:
                document["warnings"] = result.warnings
            print(json.dumps(document, ensure_ascii=False, default=str))
            return result.code
        for warning in result.warnings:
            if not self.quiet or isinstance(warning, hints.Hinted):
                print("\n".join(hints.lines("warning: ", warning)), file=sys.stderr)
        text = result.text if result.quiet_text is None or not self.quiet else result.quiet_text
        if text:
            print("\n".join(text))
        if result.code != 0 and result.error_message:
            print(f"error: {result.error_message}", file=sys.stderr)
        return result.code

    def fail(self, err: BundlerError) -> int:
        """Print an error on one line (or as the JSON envelope); returns its exit code."""
        message = " ".join(str(err.message).splitlines())
        if self.json_mode:
            error: dict[str, Any] = {"code": err.code, "message": message, "path": err.path}
            if isinstance(err.message, hints.Hinted):
                error["fix"] = err.message.fix
            print(json.dumps({"ok": False, "error": error}, ensure_ascii=False))
        elif isinstance(err.message, hints.Hinted) and "\n" not in err.message:
            # the error itself stays one line; the command to paste follows on its own
            print("\n".join(hints.lines("error: ", err.message)), file=sys.stderr)
        else:
            print(f"error: {message}", file=sys.stderr)
        return err.code
