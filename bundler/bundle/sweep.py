"""The secret sweep as an export runs it: riding on the copy, over every carried byte and name.

:class:`bundler.rules.secrets.Sweeper` is the pure matcher; this adapter feeds it each chunk the
copier reads back (so it sees exactly the bytes that travel), sweeps every carried path, folders
included, applies the ``--scan-secrets`` mode, and keeps a secret that is part of a name out of
every report and message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bundler.errors import Refused, RefusedWithList
from bundler.rules.names import escape_display
from bundler.rules.secrets import WITHHELD, Hit, Sweeper, SweepStream


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

    def __init__(self, sweeper: Sweeper | None, mode: str) -> None:
        self.sweeper = sweeper if sweeper is not None and not sweeper.empty else None
        self.mode = mode
        self.hits: list[Hit] = []
        self._in_names: set[Hit] = set()
        self._stream: SweepStream | None = None
        self._current = ""

    @property
    def observer(self) -> Callable[[str, memoryview], None] | None:
        """The hook to give ``copy_tree``, or None when no content is swept."""
        return self.observe if self.sweeper is not None and self.mode != "off" else None

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
        if self._current == relpath:
            self._finish()
        self._add(self._names_hits(relpath), in_name=True)

    def folder(self, relpath: str) -> None:
        """Sweep the relative path of a carried folder (it travels even when empty)."""
        if self.observer is not None:
            self._add(self._names_hits(relpath), in_name=True)

    def scan(self, name: str, data: bytes) -> None:
        """Sweep a whole rendered file (``config.toml``, the manifest)."""
        if self.observer is not None:
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
        if self.mode != "refuse" or not self.hits:
            return
        if len(self.hits) == 1:
            hit = self.hits[0]
            raise Refused(
                f"{self._where(hit)}; {self._fix(hit)} (or pass --scan-secrets warn) and export "
                "again",
                path=hit.file,
            )
        files = len({hit.file for hit in self.hits})
        raise RefusedWithList(
            f"{len(self.hits)} known secrets found in {files} carried files or names (listed "
            "below); nothing was published: remove each value, rename what holds one in its "
            "name, or keep the file behind with --exclude, then export again (or pass "
            "--scan-secrets warn)",
            details=[f"{self._where(hit)}; {self._fix(hit)}" for hit in self.hits],
            key="secret_hits",
            listing=[
                {
                    "file": hit.file,
                    "secret_path": hit.secret_path,
                    "encoding": hit.encoding,
                    "in": "name" if hit in self._in_names else "content",
                }
                for hit in self.hits
            ],
            path=self.hits[0].file,
        )

    def _where(self, hit: Hit) -> str:
        shown = escape_display(hit.file)
        where = f"the name of {shown} holds" if hit in self._in_names else f"{shown} contains"
        return f"{where} the value of {hit.secret_path} ({hit.encoding})"

    def _fix(self, hit: Hit) -> str:
        return "rename it" if hit in self._in_names else "remove it from the file"
