"""TOML parsing shim: ``tomllib`` on Python >= 3.11, ``tomli`` before that.

Every module that parses TOML imports from here so the version switch lives in
one place.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

try:
    import tomllib as _toml  # type: ignore[import-not-found,unused-ignore]
except ModuleNotFoundError:  # pragma: no cover - Python 3.10 only
    import tomli as _toml  # type: ignore[no-redef,import-not-found,unused-ignore]

TOMLDecodeError: type[ValueError] = _toml.TOMLDecodeError

__all__ = ["TOMLDecodeError", "decode_utf8", "loads", "same_data", "toml_error_reason"]


def loads(text: str) -> dict[str, Any]:
    """Parse TOML ``text`` into plain dicts/lists; raise ``TOMLDecodeError`` on bad input."""
    try:
        result: dict[str, Any] = _toml.loads(text)
    except _toml.TOMLDecodeError:
        raise
    except ValueError:
        # int() refuses an integer of more than 4300 digits with a plain ValueError, which
        # every caller would let through as a traceback; TOML integers have 64 bits anyway
        raise _toml.TOMLDecodeError("an integer with more digits than TOML allows") from None
    except RecursionError:
        # arrays or inline tables nested thousands deep: the parser recurses once per level
        raise _toml.TOMLDecodeError("values nested deeper than the parser can follow") from None
    return result


def decode_utf8(raw: bytes) -> str | None:
    """The UTF-8 text of a TOML document's bytes, or None when they are not UTF-8.

    Returns instead of raising: a ``UnicodeDecodeError`` holds the whole input in its ``args``,
    and a file that may hold secrets must not end up chained to the error that reports it.
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")
_TOML_PUNCTUATION = frozenset("=[]{},.#\"'")


def toml_error_reason(err: BaseException) -> str:
    """The parser's message for ``err`` without any text it quotes from the file.

    tomllib quotes what it found (a key declared twice, say), and a key or value may be a
    secret; only quoted TOML punctuation is kept, so the message still says what was expected.
    """

    def keep_punctuation(match: re.Match[str]) -> str:
        quoted = match.group(1)
        return match.group(0) if quoted and set(quoted) <= _TOML_PUNCTUATION else ""

    return " ".join(_QUOTED.sub(keep_punctuation, str(err)).split())


def same_data(left: Any, right: Any) -> bool:
    """Whether two parsed TOML documents (or values) hold the same data.

    ``==`` with one difference: ``nan`` equals ``nan``. TOML's nan is a value a file may hold,
    while Python's is unequal even to itself, so comparing a file with its own reparsing would
    find them different wherever one stands.
    """
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left):
        return math.isnan(right)
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return left.keys() == right.keys() and all(same_data(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(same_data, left, right))
    return bool(left == right)
