"""``checksums.xxh3`` compared with the files a walk finds, read beside the walk (02 §9.2).

The file is read twice through one descriptor and never held whole (06 P4): once for its digest
and the rules of its lines, then again as a merge of two sorted lists beside the walk.
"""

from __future__ import annotations

from collections.abc import Iterator

import xxhash

from bundler.bundle.fragment import Problem
from bundler.bundle.manifest import (
    CHECKSUMS_NAME,
    MAX_CHECKSUMS_BYTES,
    ChecksumLine,
    checksum_sort_text,
    checksums_by_path,
    iter_checksums,
)
from bundler.bundle.rootfile import PastLimit, cannot_read, read_chunks
from bundler.bundle.walk import DEFERRED
from bundler.errors import InvalidInput, Tampered, TooLarge
from bundler.rules.names import escape_display
from bundler.rules.units import human_size


def read_checksums(raw: bytes) -> tuple[dict[str, str] | None, Problem | None]:
    """``{path: digest}`` of ``checksums.xxh3`` (02 §9.2), or the first line at fault."""
    try:
        return checksums_by_path(raw), None
    except InvalidInput as exc:
        return None, checksums_line_problem(exc)


def checksums_line_problem(exc: InvalidInput) -> Problem:
    where = exc.path or CHECKSUMS_NAME  # "checksums.xxh3:<line>"
    return Problem(where, exc.message.removeprefix(f"{where}: "), type(exc))


def not_matching(rel: str) -> Problem:
    return Problem(
        escape_display(rel), f"content does not match its digest in {CHECKSUMS_NAME}", Tampered
    )


class ChecksumReader:
    """``checksums.xxh3``, read twice through one descriptor and never held whole (06 P4).

    :meth:`check` reads it before the walk: its XXH3-128 and every rule of its lines
    (:func:`bundler.bundle.manifest.iter_checksums`). :meth:`found` then takes each regular
    file the walk finds, in walk order, which is the file's order (02 §9.2), and reads the
    lines again beside it, as a merge of two sorted lists: a line before the file is listed but
    not found, the file's own line is compared, none is a file not listed. :meth:`finish`
    reads what is left and checks that the second reading was the file the first one checked.
    The findings are those of comparing two whole tables, in the same order: every file not
    listed or not matching, in walk order, then every listed path not found, in the file's.
    """

    def __init__(self, fd: int, elsewhere: tuple[str, ...]) -> None:
        self.fd = fd
        self.elsewhere = elsewhere  # listed paths here are looked for elsewhere, not reported
        self.digest = ""
        self.compared: list[Problem] = []  # not listed, or not matching
        self.missing: list[Problem] = []  # listed, not found
        self.problem: Problem | None = None  # the second reading differs from the first
        self._hasher = xxhash.xxh3_128()
        self._lines: Iterator[ChecksumLine] = iter(())
        self._next: ChecksumLine | None = None

    def _hashed(self) -> Iterator[bytes]:
        # 64 KiB (about 800 lines) at a time: the regex engine's state over a block of lines
        # grows with it (a 1 MiB block cost 28 MB of peak memory, 64 KiB 1.5 MB), and is faster
        for chunk in read_chunks(self.fd, MAX_CHECKSUMS_BYTES, 1 << 16):
            self._hasher.update(chunk)
            yield chunk

    def check(self, keep: dict[str, str] | None, tops: set[str] | None) -> Problem | None:
        """Read the whole file: its digest (``self.digest``), and the first fault of its lines
        or of reading it. ``keep`` receives every line as {path: digest}, ``tops`` every top
        folder a path is listed under."""
        try:
            for _key, path, digest in iter_checksums(self._hashed()):
                if keep is not None:
                    keep[path] = digest
                if tops is not None:
                    tops.add(path.partition("/")[0])
        except InvalidInput as exc:
            problem: Problem | None = checksums_line_problem(exc)
        except PastLimit:
            return Problem(
                CHECKSUMS_NAME, f"larger than {human_size(MAX_CHECKSUMS_BYTES)}", TooLarge
            )
        except OSError as exc:
            return cannot_read(CHECKSUMS_NAME, exc)
        else:
            problem = None
        self.digest = self._hasher.hexdigest()
        if problem is None:
            self._hasher = xxhash.xxh3_128()
            self._lines = iter_checksums(self._hashed())
            self._advance()
        return problem

    def _advance(self) -> None:
        if self.problem is not None:
            self._next = None
            return
        try:
            self._next = next(self._lines, None)
        except (InvalidInput, PastLimit):
            self._changed()
        except OSError as exc:
            self.problem = cannot_read(CHECKSUMS_NAME, exc)
            self._next = None

    def _changed(self) -> None:
        self.problem = Problem(
            CHECKSUMS_NAME, "changed while it was verified: verify again", Tampered
        )
        self._next = None

    def _listed_not_found(self, path: str) -> None:
        if not (self.elsewhere and path.startswith(self.elsewhere)):
            self.missing.append(
                Problem(
                    escape_display(path),
                    f"listed in {CHECKSUMS_NAME} but not a regular file of the bundle",
                    Tampered,
                )
            )

    def found(self, rel: str, digest: str) -> None:
        """One regular file the walk found, with its digest
        (:data:`bundler.bundle.walk.DEFERRED` when unread)."""
        # a walked path holds no control character and no lone surrogate
        key = checksum_sort_text(rel)
        while self._next is not None and self._next[0] < key:
            self._listed_not_found(self._next[1])
            self._advance()
        if self._next is not None and self._next[0] == key:
            expected = self._next[2]
            self._advance()
            if expected != digest and digest != DEFERRED:
                self.compared.append(not_matching(rel))
        else:
            self.compared.append(
                Problem(escape_display(rel), f"not listed in {CHECKSUMS_NAME}", Tampered)
            )

    def finish(self, errors: list[Problem], *, walked_all: bool) -> None:
        """Add the findings to ``errors``; listed paths not found only when the walk saw the
        whole bundle (one stopped early found only part of it)."""
        while self._next is not None:
            self._listed_not_found(self._next[1])
            self._advance()
        if self.problem is None and self._hasher.hexdigest() != self.digest:
            self._changed()
        errors += self.compared
        if walked_all:
            errors += self.missing
        if self.problem is not None:
            errors.append(self.problem)
