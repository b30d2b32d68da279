"""The secret sweep's matcher, pure: find exact secret values in bytes (02 §5.3).

It looks for the exact values of every secret of the *whole* source config
(:func:`bundler.rules.secrets.sweep_targets`) in carried bytes, in the forms a value usually
takes when pasted somewhere: raw, base64 at each of the three alignments, URL-encoded and
JSON-escaped, each in the spellings common encoders write (:func:`encodings_of`). It is one
pass over the bytes with a single compiled matcher.

Nothing here ever puts a secret value into a message, a ``repr`` or a :class:`Hit`.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import urllib.parse
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bundler.rules import sweep_hyperscan
from bundler.rules.names import escape_display
from bundler.rules.secrets import WITHHELD, SweepTarget


@dataclass(frozen=True)
class Hit:
    """A secret found in carried bytes: which file, which config path, in which encoding."""

    file: str
    secret_path: str
    encoding: str


def encodings_of(value: str) -> list[tuple[str, bytes]]:
    """The byte patterns that reveal ``value``, each once, by encoding:

    - ``raw``: its UTF-8;
    - ``base64`` at each of the three alignments, in the standard alphabet and the URL-safe one
      (JWTs, signed URLs);
    - ``url-encoded``: spaces as ``%20`` or ``+``, ``/`` encoded or not, with upper-case hex
      digits (Python, RFC 3986's advice) or lower-case ones (which other encoders write);
    - ``json-escaped``: as most encoders write it (non-ASCII kept or ``\\u``-escaped), with
      ``/`` escaped too (PHP's default), and with ``<``, ``>`` and ``&`` as ``\\u`` escapes (Go's);
    - ``display-escaped``: as :func:`~bundler.rules.names.escape_display` shows it, control and
      bidi characters escaped (when that differs from raw).

    A base64 pattern keeps only the characters fully determined by the value's own bytes at
    that alignment (the text around it changes the first and last groups). A value that is
    bytes rather than text (surrogate-escaped: a key's raw bytes) has only its raw and base64
    forms.
    """
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        # bytes that are no text (a key's raw bytes, surrogate-escaped): as they are and in base64
        raw = value.encode("utf-8", "surrogateescape")
        return _unique([("raw", raw), *_base64_forms(raw)])
    forms: list[tuple[str, bytes]] = [("raw", raw), *_base64_forms(raw)]
    for encoded in (
        urllib.parse.quote(value, safe=""),
        urllib.parse.quote(value),  # "/" left as it is: Python's default, a path's encoding
        urllib.parse.quote_plus(value, safe=""),
    ):
        forms.append(("url-encoded", encoded.encode("ascii")))
        forms.append(("url-encoded", _PERCENT.sub(_lower, encoded).encode("ascii")))
    for escaped in (json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]):
        forms.append(("json-escaped", escaped.encode("utf-8")))
        forms.append(("json-escaped", escaped.replace("/", "\\/").encode("utf-8")))
        forms.append(("json-escaped", escaped.translate(_HTML_SAFE).encode("utf-8")))
    # how every message shows a name: a path holding a secret with a control or bidi character
    # is escaped for display before it is withheld (the walker lists it so), and withholding
    # by the raw value alone would let it through in that spelling
    forms.append(("display-escaped", escape_display(value).encode("utf-8")))
    return _unique(forms)


def _base64_forms(raw: bytes) -> list[tuple[str, bytes]]:
    forms: list[tuple[str, bytes]] = []
    for shift in range(3):
        body = raw[(3 - shift) % 3 :]
        body = body[: len(body) // 3 * 3]
        if len(body) >= 3:
            forms.append(("base64", base64.b64encode(body)))
            forms.append(("base64", base64.urlsafe_b64encode(body)))
    return forms


def _unique(forms: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    unique: list[tuple[str, bytes]] = []
    seen: set[bytes] = set()
    for name, pattern in forms:
        if pattern and pattern not in seen:
            seen.add(pattern)
            unique.append((name, pattern))
    return unique


_PERCENT = re.compile(r"%[0-9A-F]{2}")
_HTML_SAFE = {ord(char): f"\\u{ord(char):04x}" for char in "<>&"}


def _lower(escape: re.Match[str]) -> str:
    return escape.group().lower()


def _trie_regex(patterns: Sequence[bytes]) -> bytes:
    """One regex matching any of ``patterns``, factored as a trie.

    A flat alternation makes ``re`` try every pattern at every position; the trie tries one
    branch per distinct next byte, which measured about 6x faster for 100 secrets.
    """
    trie: dict[int, Any] = {}
    for pattern in patterns:
        node = trie
        for byte in pattern:
            node = node.setdefault(byte, {})
        node[-1] = {}

    def emit(node: dict[int, Any]) -> bytes:
        branches = [
            re.escape(bytes([byte])) + emit(sub) for byte, sub in sorted(node.items()) if byte != -1
        ]
        if not branches:
            return b""
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        return b"(?:" + body + b")?" if -1 in node else body

    return emit(trie)


Record = Callable[[bytes], None]


class _Runs:
    """Prefilter: a match lies inside a run of at least ``min_length`` bytes of the alphabet.

    Every byte of every pattern belongs to a small alphabet. ``bytes.translate`` marks those
    bytes and ``bytes.find`` jumps from run to run at C speed, so binary data and ordinary text
    (short words between spaces) are mostly skipped without running any Python per byte.
    """

    def __init__(self, patterns: Sequence[bytes]) -> None:
        alphabet = {byte for pattern in patterns for byte in pattern}
        self.min_length = min(len(p) for p in patterns)
        self._mask = bytes(1 if byte in alphabet else 0 for byte in range(256))
        self._run = b"\x01" * self.min_length

    def __call__(self, buffer: bytes) -> Iterator[tuple[int, int]]:
        mask = buffer.translate(self._mask)
        position, size = 0, len(mask)
        while True:
            start = mask.find(self._run, position)
            if start < 0:
                return
            end = mask.find(b"\x00", start + self.min_length)
            end = size if end < 0 else end
            yield start, end
            position = end


class _TrieEngine:
    """Patterns too short for :class:`_GramEngine`: one trie regex searched inside each run."""

    def __init__(self, patterns: Sequence[bytes]) -> None:
        self._patterns = sorted(patterns, key=len, reverse=True)
        self._max_length = len(self._patterns[0])
        self._regex = re.compile(_trie_regex(self._patterns))
        self._runs = _Runs(patterns)

    def scan(self, buffer: bytes, record: Record) -> None:
        for start, end in self._runs(buffer):
            position = start
            while True:
                match = self._regex.search(buffer, position, end)
                if match is None:
                    break
                at = match.start()
                # The regex reports the longest pattern at this start; a shorter pattern that
                # also starts here (a secret contained in another) is found by checking all.
                window = buffer[at : min(at + self._max_length, end)]
                for pattern in self._patterns:
                    if window.startswith(pattern):
                        record(pattern)
                position = at + 1


class _GramEngine:
    """Patterns of at least ``2 * GRAM - 1`` bytes, found by sampling aligned 8-byte words.

    A pattern of ``L`` bytes, wherever it lies, fully contains one of the region's 8-byte
    words counted from the region's start, and one of every ``stride`` such words when
    ``L >= 8 * stride + 7``. The region is read as an ``array('Q')``, every ``stride``-th word
    kept, and the whole checked against every 8-gram of every pattern by one
    ``set.isdisjoint``, in C. Only a region sharing a word with a pattern is narrowed down by
    halving, and a candidate is confirmed with ``bytes.startswith``. Unlike a regex, the cost
    does not grow when the data looks like the secrets (long base64 or hex runs); sparse data
    (binary, ordinary text) is cut into alphabet runs first and mostly skipped by ``find``.
    """

    GRAM = 8
    _LEAF = 64  # sampled words examined one by one once a candidate region is this small

    def __init__(self, patterns: Sequence[bytes]) -> None:
        self._grams: dict[int, list[tuple[bytes, int]]] = {}
        for pattern in patterns:
            for offset in range(len(pattern) - self.GRAM + 1):
                word = int.from_bytes(pattern[offset : offset + self.GRAM], sys.byteorder)
                self._grams.setdefault(word, []).append((pattern, offset))
        self._keys = self._grams.keys()
        self._runs = _Runs(patterns)
        self._stride = max(1, (min(len(p) for p in patterns) - self.GRAM + 1) // self.GRAM)
        self._step = self._stride * self.GRAM  # bytes between two sampled words

    def scan(self, buffer: bytes, record: Record) -> None:
        view = memoryview(buffer)
        # Each run costs a few microseconds of Python; in dense data (base64, hex) runs are
        # many and short, so past a budget the rest of the buffer is scanned as one region.
        budget = 16 + len(buffer) // 2048
        for start, end in self._runs(buffer):
            budget -= 1
            if budget < 0:
                self._region(buffer, view, start, len(buffer), record)
                return
            self._region(buffer, view, start, end, record)

    def _region(
        self, buffer: bytes, view: memoryview, start: int, end: int, record: Record
    ) -> None:
        # array('Q') iterates as ints about twice as fast as a memoryview cast to 'Q'
        words = array("Q")
        words.frombytes(view[start : start + (end - start) // self.GRAM * self.GRAM])
        if self._stride > 1:
            words = words[:: self._stride]
        if not self._keys.isdisjoint(words):
            self._narrow(buffer, words, start, record)

    def _narrow(self, buffer: bytes, words: array[int], base: int, record: Record) -> None:
        if len(words) <= self._LEAF:
            for k, word in enumerate(words):
                candidates = self._grams.get(word)
                if candidates is None:
                    continue
                at = base + k * self._step
                for pattern, offset in candidates:
                    if at >= offset and buffer.startswith(pattern, at - offset):
                        record(pattern)
            return
        half = len(words) // 2
        for part, part_base in ((words[:half], base), (words[half:], base + half * self._step)):
            if not self._keys.isdisjoint(part):
                self._narrow(buffer, part, part_base, record)


ENGINE_VARIABLE = "BUNDLER_SWEEP_ENGINE"
ENGINES = ("hyperscan", "python")


def sweep_engine(environ: Mapping[str, str] | None = None) -> str:
    """The engine a :class:`Sweeper` uses: ``hyperscan`` where the module imports, else ``python``.

    ``BUNDLER_SWEEP_ENGINE=python`` forces the pure-Python engine (tests run the sweep with
    both; it is also the way out should the wheel misbehave on some machine).
    """
    chosen = (os.environ if environ is None else environ).get(ENGINE_VARIABLE, "")
    if chosen == "python" or not sweep_hyperscan.available():
        return "python"
    return "hyperscan"


class _PythonMatcher:
    """The pure-Python engine: patterns of 15 bytes or more go to the sampling engine, shorter
    ones to a trie regex; each engine runs only inside the runs its prefilter finds."""

    def __init__(self, patterns: Sequence[bytes]) -> None:
        self._index = {pattern: i for i, pattern in enumerate(patterns)}
        self.max_length = max(len(p) for p in patterns)
        long_min = 2 * _GramEngine.GRAM - 1
        long = [p for p in patterns if len(p) >= long_min]
        short = [p for p in patterns if len(p) < long_min]
        self._engines: list[_TrieEngine | _GramEngine] = []
        if long:
            self._engines.append(_GramEngine(long))
        if short:
            self._engines.append(_TrieEngine(short))

    def scan(self, data: bytes | bytearray | memoryview, record: Callable[[int], None]) -> None:
        """Report the index of every pattern found in ``data`` to ``record``."""
        buffer = data if isinstance(data, bytes) else bytes(data)
        index = self._index

        def found(pattern: bytes) -> None:
            record(index[pattern])

        for engine in self._engines:
            engine.scan(buffer, found)

    def stream(self, record: Callable[[int], None]) -> _PythonStream:
        """A stream of chunks reporting to ``record``."""
        return _PythonStream(self, record)


class _PythonStream:
    """Feeds chunks to a :class:`_PythonMatcher`, keeping only a pattern-length tail.

    Each chunk is scanned alone (no copy), then the short window made of the previous chunk's
    tail and the new chunk's head is scanned for a value that straddles the boundary.
    """

    def __init__(self, matcher: _PythonMatcher, record: Callable[[int], None]) -> None:
        self._matcher = matcher
        self._record = record
        self._tail = b""

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        keep = self._matcher.max_length - 1
        if not chunk:
            return
        data = chunk if isinstance(chunk, bytes) else bytes(chunk)
        if self._tail and keep > 0:
            self._matcher.scan(self._tail + data[:keep], self._record)
        self._matcher.scan(data, self._record)
        if keep > 0:
            self._tail = (self._tail + data[-keep:])[-keep:] if len(data) < keep else data[-keep:]

    def close(self) -> None:
        pass


class Sweeper:
    """A one-pass multi-pattern matcher over bytes for a set of :class:`SweepTarget`.

    ``scan_bytes`` checks a whole buffer; ``stream`` checks a file fed in chunks and finds a
    value that straddles a chunk boundary. Each (file, secret path, encoding) is reported once,
    in the order of the targets (then of :func:`encodings_of`), whichever engine found it.
    The engine is Hyperscan where it imports, else the pure-Python one (:func:`sweep_engine`);
    ``engine`` chooses explicitly. Both find exactly the same hits.
    """

    def __init__(self, targets: Sequence[SweepTarget], *, engine: str | None = None) -> None:
        owners: dict[bytes, list[tuple[str, str]]] = {}
        for target in targets:
            for encoding, pattern in encodings_of(target.value):
                owners.setdefault(pattern, []).append((target.config_path, encoding))
        patterns = list(owners)
        self._owners = [owners[p] for p in patterns]
        # longest first, so that a secret containing another is withheld whole
        self._text_patterns = sorted(
            (p.decode("utf-8", "surrogateescape") for p in patterns), key=len, reverse=True
        )
        self.max_length = max((len(p) for p in patterns), default=0)
        self._matcher: _PythonMatcher | sweep_hyperscan.HyperscanMatcher | None = None
        self.engine = "python"
        if patterns:
            if (engine or sweep_engine()) == "hyperscan":
                self._matcher = sweep_hyperscan.compile_matcher(patterns)
            if self._matcher is None:
                self._matcher = _PythonMatcher(patterns)
            else:
                self.engine = "hyperscan"

    @property
    def empty(self) -> bool:
        """True when there is nothing to look for."""
        return self._matcher is None

    def withhold(self, text: str, marker: str = WITHHELD) -> str:
        """``text`` with every occurrence of every pattern (any secret, any encoding) replaced.

        By exact value over the whole text, so a secret holding a space or a ``/`` is found as
        well as one that is a whole word. For messages and paths, which are short: a message is
        only rewritten when the one-pass matcher finds something in it.
        """
        if not text or self._matcher is None:
            return text
        for _ in range(8):
            if not self.scan_bytes("", _text_bytes(text)):
                return text
            for pattern in self._text_patterns:
                text = text.replace(pattern, marker)
        # overlapping occurrences kept re-forming: say nothing rather than part of a secret
        return marker

    def hits(self, name: str, found: set[int]) -> list[Hit]:
        """The hits of ``name`` for the pattern indexes ``found``, each owner once, in order."""
        owners: dict[tuple[str, str], None] = {}
        for index in sorted(found):
            for owner in self._owners[index]:
                owners[owner] = None
        return [Hit(name, path, encoding) for path, encoding in owners]

    def scan_bytes(self, name: str, data: bytes | bytearray | memoryview) -> list[Hit]:
        """Every secret found in ``data`` (the bytes, or the relative path, of ``name``)."""
        if self._matcher is None:
            return []
        found: set[int] = set()
        self._matcher.scan(data, found.add)
        return self.hits(name, found)

    def stream(self, name: str) -> SweepStream:
        """A scanner for ``name`` fed chunk by chunk; call ``close()`` for the hits."""
        return SweepStream(self, name)


def withholder(targets: Sequence[SweepTarget]) -> Callable[[str], str]:
    """A function withholding every target, in every encoding, from a text (messages, paths)."""
    if not targets:
        return lambda text: text
    return Sweeper(targets).withhold


def _text_bytes(text: str) -> bytes:
    """The bytes a message spells: a name's own bytes (surrogate-escaped by ``os.fsdecode``);
    any other lone surrogate passes through rather than failing the error being made."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


class SweepStream:
    """One file fed to a :class:`Sweeper` chunk by chunk; a value straddling two chunks is
    found (by Hyperscan's streaming mode, or by the pure engine's rescanned boundary window)."""

    def __init__(self, sweeper: Sweeper, name: str) -> None:
        self._sweeper = sweeper
        self._name = name
        self._found: set[int] = set()
        matcher = sweeper._matcher
        self._stream = None if matcher is None else matcher.stream(self._found.add)

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        """Scan the next ``chunk`` of the file."""
        if self._stream is not None and chunk:
            self._stream.feed(chunk)

    def close(self) -> list[Hit]:
        """The hits of the whole file, each (secret path, encoding) once."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream.close()
        return self._sweeper.hits(self._name, self._found)
