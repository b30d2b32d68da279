"""Config paths (01 §6): dot-separated segments, odd segments written as TOML basic strings.

``providers.models.openai.main.extra_headers."X-Org.Id"`` is five plain segments and one quoted.
Pure: parse and format only. Mapping ``-`` to ``_`` in schema field names is the schema's job
(:func:`bundler.rules.schema.resolve`), because only the schema knows which segments are field
names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bundler.errors import UsageError

_BARE_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '"', "\\": "\\", "b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r"}
_ESCAPE_OUT = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def format_segment(segment: str) -> str:
    """One segment as it is written in a config path: bare when it can be, else quoted."""
    if _BARE_SEGMENT.fullmatch(segment):
        return segment
    out = ['"']
    for ch in segment:
        if ch in _ESCAPE_OUT:
            out.append(_ESCAPE_OUT[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def format_path(segments: Sequence[str]) -> str:
    """The config path naming ``segments``; :func:`parse_path` reverses it exactly."""
    return ".".join(format_segment(segment) for segment in segments)


def parse_path(path: str) -> list[str]:
    """Split a config path into its segments, unquoting TOML basic-string segments.

    Raises :class:`UsageError` naming the path when it is malformed.
    """
    segments: list[str] = []
    i, n = 0, len(path)
    while True:
        if i < n and path[i] == '"':
            segment, i = _parse_quoted(path, i)
        else:
            match = _BARE_SEGMENT.match(path, i)
            if match is None:
                raise UsageError(f"bad config path {format_segment(path)}: expected a name at {i}")
            segment, i = match.group(), match.end()
        segments.append(segment)
        if i == n:
            return segments
        if path[i] != ".":
            raise UsageError(f"bad config path {format_segment(path)}: expected . at {i}")
        i += 1


def _parse_quoted(path: str, start: int) -> tuple[str, int]:
    out: list[str] = []
    i = start + 1
    while i < len(path):
        ch = path[i]
        if ch == '"':
            return "".join(out), i + 1
        if ch == "\\":
            code = path[i + 1 : i + 2]
            if code in _ESCAPES:
                out.append(_ESCAPES[code])
                i += 2
                continue
            width = {"u": 4, "U": 8}.get(code)
            digits = path[i + 2 : i + 2 + width] if width else ""
            if (
                width
                and len(digits) == width
                and all(c in "0123456789abcdefABCDEF" for c in digits)
            ):
                try:
                    out.append(chr(int(digits, 16)))
                except ValueError:
                    pass
                else:
                    i += 2 + width
                    continue
            raise UsageError(f"bad config path: bad escape in quoted segment at {i}")
        out.append(ch)
        i += 1
    raise UsageError("bad config path: unterminated quoted segment")
