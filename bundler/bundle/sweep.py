"""The secret sweep as an export runs it: riding on the copy, over every carried byte and name.

:class:`bundler.rules.sweeper.Sweeper` is the pure matcher; this adapter feeds it each chunk the
copier reads back (so it sees exactly the bytes that travel), sweeps every carried path, folders
included, applies the ``--scan-secrets`` mode, and keeps a secret that is part of a name out of
every report and message.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from bundler.bundle.manifest import CONFIG_NAME, MANIFEST_NAME
from bundler.errors import SecretFound
from bundler.fs.interrupts import handed_over, joined, wait_for
from bundler.fs.threads import Thread, start_thread
from bundler.rules.names import escape_display
from bundler.rules.secrets import WITHHELD, ScanSecrets
from bundler.rules.sweeper import Hit, Sweeper, SweepStream


class ExportSweep:
    """The exact-value sweep riding on the copy: one stream per file, fed every chunk.

    ``refuse`` and ``warn`` collect every hit of the run; :meth:`refuse_if_found`, called once
    everything that travels was swept and before anything is published, raises one error
    listing them all under ``refuse`` (stopping at the first hit made a user fixing several
    re-copy the whole tree once per hit). ``off`` sweeps no content. Every carried path
    is swept as well, folders (empty ones too) included, since a name travels like a byte
    (02 §5.3). Whatever the mode, :meth:`redact` keeps a secret that is part of a *name* out of
    every report, and :meth:`withhold` out of every message (see :func:`withholding`).
    """

    def __init__(self, sweeper: Sweeper | None, mode: ScanSecrets | str) -> None:
        self.sweeper = sweeper if sweeper is not None and not sweeper.empty else None
        self.mode = ScanSecrets(mode)
        self.hits: list[Hit] = []
        self._in_names: set[Hit] = set()
        self._stream: SweepStream | None = None
        self._current = ""
        self._lane: _Lane | None = None

    @property
    def observer(self) -> Callable[[str, memoryview], None] | None:
        """The hook to give ``copy_tree``, or None when no content is swept."""
        if self.sweeper is None or self.mode is ScanSecrets.OFF:
            return None
        return self.observe if self._lane is None else self._lane.observe

    @contextmanager
    def beside(self) -> Iterator[None]:
        """Sweep on a thread of its own while the block copies, so that both use a core.

        Inside the block :attr:`observer`, :meth:`file_done`, :meth:`folder` and :meth:`scan`
        only queue their work, in order, for one sweeping thread: the copy of the next files
        (``copy_file_range``, the read-back, the digest) overlaps the sweep of the previous
        ones, both in C calls that release the GIL. What is reported is unchanged: the same
        hits in the same order. :meth:`refuse_if_found` waits for the sweeping thread before it
        decides, so no hit still queued is missed. An error of the sweep itself surfaces at the
        next queued call or when the block ends; the block never ends normally with sweeping
        left undone.
        """
        if self.observer is None or self._lane is not None:
            yield
            return
        lane = self._lane = _Lane(self)
        try:
            yield
        except BaseException as error:
            self._lane = None
            refusal = lane.finish()
            if refusal is not None and refusal is not error:
                raise refusal from error
            raise
        self._lane = None
        refusal = lane.finish()
        if refusal is not None:
            raise refusal

    def observe(self, relpath: str, chunk: memoryview) -> None:
        """``copy_tree``'s observer: every chunk of every carried file, in order."""
        if self._stream is None or relpath != self._current:
            self._finish()
            assert self.sweeper is not None
            self._current = relpath
            self._stream = self.sweeper.stream(relpath)
        self._stream.feed(chunk)

    def file_done(self, relpath: str) -> None:
        """Close the file's stream and sweep its relative path as well."""
        if self.observer is None:
            return
        if self._lane is not None:
            self._lane.put(self._file_done, relpath)
            return
        self._file_done(relpath)

    def _file_done(self, relpath: str) -> None:
        if self._current == relpath:
            self._finish()
        self._add(self._names_hits(relpath), in_name=True)

    def folder(self, relpath: str) -> None:
        """Sweep the relative path of a carried folder (it travels even when empty)."""
        if self.observer is None:
            return
        if self._lane is not None:
            self._lane.put(self._folder, relpath)
            return
        self._folder(relpath)

    def _folder(self, relpath: str) -> None:
        self._add(self._names_hits(relpath), in_name=True)

    def scan(self, name: str, data: bytes) -> None:
        """Sweep a whole rendered file (``config.toml``, the manifest)."""
        if self.observer is None:
            return
        if self._lane is not None:
            self._lane.put(self._scan, name, data)
            return
        self._scan(name, data)

    def _scan(self, name: str, data: bytes | memoryview) -> None:
        assert self.sweeper is not None
        self._add(self.sweeper.scan_bytes(name, data))

    def _names_hits(self, relpath: str) -> list[Hit]:
        assert self.sweeper is not None
        return self.sweeper.scan_bytes(relpath, relpath.encode("utf-8", "surrogateescape"))

    def redact(self, relpath: str) -> str:
        """``relpath`` with every component that holds a known secret replaced by a marker."""
        if self.sweeper is None or not self._names_hits(relpath):
            return relpath
        parts = [WITHHELD if self._names_hits(part) else part for part in relpath.split("/")]
        shown = "/".join(parts)
        # a value holding "/" (base64 does) can span components: withhold all but the top
        return shown if not self._names_hits(shown) else f"{parts[0]}/{WITHHELD}"

    def withhold(self, text: str) -> str:
        """``text`` with every known secret, in every encoding the sweep knows, withheld."""
        return text if self.sweeper is None else self.sweeper.withhold(text)

    def _finish(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            self._add(stream.close())

    def _add(self, hits: Sequence[Hit], *, in_name: bool = False) -> None:
        for found in hits:
            hit = Hit(self.redact(found.file), found.secret_path, found.encoding)
            if hit not in self.hits:
                self.hits.append(hit)
                if in_name:
                    self._in_names.add(hit)

    def refuse_if_found(self) -> None:
        """Under ``refuse``, raise one error naming every hit (file and config path, never
        the value); one hit keeps the one-line message, several are listed under a summary."""
        if self._lane is not None:
            self._lane.wait()  # what the sweeping thread still holds may hit too
        if self.mode is not ScanSecrets.REFUSE or not self.hits:
            return
        if len(self.hits) == 1:
            hit = self.hits[0]
            raise SecretFound(
                f"{self._where(hit)}; {self._fix(hit)} (or pass --scan-secrets warn) and export "
                "again",
                path=hit.file,
                listing=self._listing(),
            )
        files = len({hit.file for hit in self.hits})
        raise SecretFound(
            f"{len(self.hits)} known secrets found in {files} carried files or names (listed "
            "below); nothing was published: remove each value, rename what holds one in its "
            "name, or keep the file behind with --exclude, then export again (or pass "
            "--scan-secrets warn)",
            details=[f"{self._where(hit)}; {self._fix(hit)}" for hit in self.hits],
            listing=self._listing(),
            path=self.hits[0].file,
        )

    def _listing(self) -> list[dict[str, str]]:
        """Every hit as ``--json`` lists it in ``secret_hits``: where, never the value."""
        return [
            {
                "file": hit.file,
                "secret_path": hit.secret_path,
                "encoding": hit.encoding,
                "in": "name" if hit in self._in_names else "content",
            }
            for hit in self.hits
        ]

    def _where(self, hit: Hit) -> str:
        shown = escape_display(hit.file)
        where = f"the name of {shown} holds" if hit in self._in_names else f"{shown} contains"
        return f"{where} the value of {hit.secret_path} ({hit.encoding})"

    def _fix(self, hit: Hit) -> str:
        if hit in self._in_names:
            return "rename it"
        if hit.file in RENDERED_FILES:
            return "the export writes this file from the install's config: remove it there"
        return "remove it from the file"


RENDERED_FILES = frozenset({CONFIG_NAME, MANIFEST_NAME})
"""The bundle's files the export writes from the config rather than copies."""


# Work queued for the sweeping thread is sent in batches of about this many bytes (and at
# most BATCH_CALLS calls): one hand-over per small file would cost more than its sweep.
BATCH_BYTES = 256 << 10
BATCH_CALLS = 64
# Batches waiting at most: with 1 MiB chunks, about this many MiB of copied bytes in memory.
QUEUE_BATCHES = 8

_Call = tuple[Callable[..., None], tuple[object, ...]]


class _Lane:
    """The sweeping thread of :meth:`ExportSweep.beside`, and the ordered queue that feeds it."""

    def __init__(self, sweep: ExportSweep) -> None:
        self._sweep = sweep
        self._batch: list[_Call] = []
        self._bytes = 0
        self._queue: queue.Queue[list[_Call] | None] = queue.Queue(QUEUE_BATCHES)
        self._error: BaseException | None = None
        # in the copying thread's context, so that a refusal made there is withheld the same
        # way (errors.withholding keeps its scrubbers in a context variable)
        context = contextvars.copy_context()
        self._thread = Thread(lambda: context.run(self._run), name="bundler-sweep")
        start_thread(self._thread)

    def observe(self, relpath: str, chunk: memoryview) -> None:
        """``copy_tree``'s observer: the chunk is copied, as the copier reuses its buffer."""
        self.put(self._sweep.observe, relpath, bytes(chunk), size=len(chunk))

    def put(self, call: Callable[..., None], *args: object, size: int = 0) -> None:
        """Queue ``call(*args)``; raise the sweep's refusal if one came meanwhile."""
        if self._error is not None:
            raise self._error
        self._batch.append((call, args))
        self._bytes += size
        if self._bytes >= BATCH_BYTES or len(self._batch) >= BATCH_CALLS:
            self._flush()

    def wait(self) -> None:
        """Return once everything queued so far is swept; raise the sweep's error if one came."""
        swept = threading.Event()
        self.put(swept.set)
        self._flush()
        # a failed sweep drains its queue without running it, so the event may never be set
        wait_for(lambda timeout: swept.wait(timeout) or self._error is not None)
        if self._error is not None:
            raise self._error

    def _flush(self) -> None:
        if self._batch:
            with handed_over():
                batch, self._batch, self._bytes = self._batch, [], 0
                self._queue.put(batch)

    def finish(self) -> BaseException | None:
        """Sweep what is queued, stop the thread; the first error the sweep raised, if any."""
        self._flush()
        with handed_over():
            self._queue.put(None)
        wait_for(joined(self._thread))
        return self._error

    def _run(self) -> None:
        while (batch := self._queue.get()) is not None:
            if self._error is not None:
                continue  # drained unswept: the export is refused already
            try:
                for call, args in batch:
                    call(*args)
            except BaseException as error:  # handed to the copying thread, raised there
                self._error = error
