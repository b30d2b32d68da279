"""The progress bar on a terminal's stderr: files and bytes done of the total, rate and ETA.

:class:`Bar` implements :class:`bundler.rules.progress.Progress`. Its per-file call only adds
to two counters and reads the clock; the bar is redrawn at most every
:data:`REDRAW_SECONDS` (about 10 times a second), so a million small files cost a million
additions, not a million redraws. rich is imported when the first phase starts, so a command
that shows no bar never loads it. The bar is transient: once a phase stops, nothing of it is
left on the terminal, and stdout never sees it.

A phase is drawn only once it has run :data:`DELAY_SECONDS`: a command that ends sooner has no
progress worth showing, and importing rich is a large share of a short command's start-up.

``BUNDLER_PROGRESS_INTERVAL`` (seconds, a float) replaces the redraw interval and that delay.
It exists for the tests, which set it to 0 so that a tree of a few files draws every figure;
it is not a user setting and is not documented in the help.
"""

from __future__ import annotations

import os
import time
from typing import Any

from bundler.api.display import escape_display, human_size

REDRAW_SECONDS = 0.1
DELAY_SECONDS = 0.5
INTERVAL_ENV = "BUNDLER_PROGRESS_INTERVAL"


def _interval() -> float:
    try:
        value = float(os.environ.get(INTERVAL_ENV, REDRAW_SECONDS))
    except ValueError:
        return REDRAW_SECONDS
    return value if value >= 0 else REDRAW_SECONDS


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    whole = max(0, int(seconds + 0.5))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def figures(task: Any) -> str:
    """``files 3/10  1.0 MiB/4.0 MiB  2.0 MiB/s  eta 0:00:02`` for a rich task."""
    files, files_total = task.fields["files"], task.fields["files_total"]
    done = int(task.completed)
    parts = [
        f"files {files}/{files_total if files_total is not None else '?'}",
        f"{human_size(done)}/{human_size(int(task.total)) if task.total is not None else '?'}",
    ]
    speed = task.speed
    parts.append(f"{human_size(int(speed))}/s" if speed is not None else "?/s")
    if task.total is not None and task.completed >= task.total:
        parts.append("eta 0:00:00")
    else:
        parts.append(f"eta {_clock(task.time_remaining)}")
    return "  ".join(parts)


class Bar:
    """A :class:`~bundler.rules.progress.Progress` drawn with rich on stderr (a terminal)."""

    def __init__(self) -> None:
        self.interval = _interval()
        self.delay = self.interval if INTERVAL_ENV in os.environ else DELAY_SECONDS
        self.pending: tuple[str, int | None, int | None] | None = None
        self.show_at = 0.0
        self.display: Any = None
        self.task: Any = None
        self.files = 0
        self.nbytes = 0
        self.files_total: int | None = None
        self.bytes_total: int | None = None
        self.next_draw = 0.0

    def start(self, label: str, files: int | None = None, nbytes: int | None = None) -> None:
        """Begin a phase; its bar appears once the phase has run :data:`DELAY_SECONDS`."""
        self.stop()
        self.files, self.nbytes = 0, 0
        self.files_total, self.bytes_total = files, nbytes
        self.pending = (label, files, nbytes)
        self.show_at = time.monotonic() + self.delay
        if self.delay <= 0:
            self._show()

    def _show(self) -> None:
        """Draw the pending phase's bar (the first one imports rich)."""
        assert self.pending is not None
        label, files, nbytes = self.pending
        self.pending = None
        from rich.console import Console
        from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn
        from rich.text import Text

        class Figures(ProgressColumn):
            def render(self, task: Any) -> Text:
                return Text(figures(task))

        self.display = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=20),
            Figures(),
            console=Console(stderr=True),
            transient=True,
            auto_refresh=False,
            # stdout is the result's alone, even for a print made while the bar is up
            redirect_stdout=False,
            # the rate of the last few seconds, so a stall shows as one
            speed_estimate_period=10,
        )
        self.task = self.display.add_task(
            escape_display(label), total=nbytes, files=self.files, files_total=files
        )
        self.display.start()
        self.next_draw = 0.0
        self._draw()

    def __call__(self, files: int, nbytes: int) -> None:
        """Count files and bytes done; redraw when the interval has passed."""
        self.files += files
        self.nbytes += nbytes
        if self.display is not None:
            if time.monotonic() >= self.next_draw:
                self._draw()
        elif self.pending is not None and time.monotonic() >= self.show_at:
            self._show()

    def _draw(self) -> None:
        # an estimated total (a tree counted before it was copied) may be passed: grow it
        if self.files_total is not None and self.files > self.files_total:
            self.files_total = self.files
        if self.bytes_total is not None and self.nbytes > self.bytes_total:
            self.bytes_total = self.nbytes
        self.display.update(
            self.task,
            completed=self.nbytes,
            total=self.bytes_total,
            files=self.files,
            files_total=self.files_total,
        )
        self.display.refresh()
        self.next_draw = time.monotonic() + self.interval

    def stop(self) -> None:
        """Remove the bar from the terminal (a phase not yet drawn is dropped)."""
        self.pending = None
        if self.display is not None:
            self.display.stop()
            self.display = None
