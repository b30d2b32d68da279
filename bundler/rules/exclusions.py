"""Which workspace paths an export leaves behind by the user's choice: gitignore patterns.

The patterns are git's (``pathspec``'s ``GitIgnoreSpec``, the maintained implementation of
``gitignore(5)``), so users can reuse what they know and what they have: ``*``, ``?``,
``[a-z]``, ``**``, a leading ``/`` anchoring a pattern to the workspace root, a trailing ``/``
matching folders only, ``!`` re-including what an earlier pattern excluded, ``#`` comments and
blank lines. The last pattern that matches decides. As in git, nothing inside an excluded
folder can be re-included: the walk never enters it.

Each pattern keeps where it came from (``.bundlerignore line 3``, ``--exclude``), so a dropped
row and an error can name it. Pure: the callers read the files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pathspec import GitIgnoreSpec

from bundler.errors import BundlerError, InvalidInput, UsageError

IGNORE_FILE = ".bundlerignore"
# a pattern file is a short list of lines; a bigger one is a mistake (a binary, a log)
MAX_PATTERN_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class Pattern:
    """One pattern line and where it came from (``--exclude``, ``FILE line N``)."""

    text: str
    origin: str


BACKEND = "simple"
"""pathspec's own regular expressions. Where Hyperscan is installed (our secret sweep's engine)
pathspec would compile with it by default, and Hyperscan refuses a long pattern with an error
of its own ("Pattern length exceeds limit") that no caller expects; a handful of patterns
matched once per path gains nothing from it."""


class Exclusions:
    """A compiled, ordered list of patterns; :meth:`match` answers for one relative path."""

    def __init__(self, patterns: Sequence[Pattern] = ()) -> None:
        self.patterns = list(patterns)
        self._spec = GitIgnoreSpec.from_lines((p.text for p in self.patterns), backend=BACKEND)

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def match(self, rel: str, *, is_dir: bool) -> Pattern | None:
        """The pattern that excludes ``rel`` (``/``-separated, relative to the root), or None.

        None also when the last matching pattern is a negation (``!``): the path travels.
        """
        result = self._spec.check_file(rel + "/" if is_dir else rel)
        if not result.include or result.index is None:
            return None
        return self.patterns[result.index]


def parse_lines(lines: Iterable[str], origin: str, *, shown: str = "") -> list[Pattern]:
    """The patterns of a pattern file's lines; comments and blank lines are dropped.

    ``origin`` names the file; each pattern's origin is ``"<origin> line <n>"``. An invalid
    pattern (a lone ``!``, a trailing backslash) raises :class:`InvalidInput` naming the file
    (``shown``, default ``origin``: an error may name the host's path where a bundle's row must
    not) and the line.
    """
    patterns: list[Pattern] = []
    for number, line in enumerate(lines, start=1):
        text = line.rstrip("\r\n")
        if not text.strip() or text.startswith("#"):
            continue
        _checked(text, f"{shown or origin} line {number}", InvalidInput)
        patterns.append(Pattern(text, f"{origin} line {number}"))
    return patterns


def parse_options(values: Iterable[str]) -> list[Pattern]:
    """The patterns given with ``--exclude``; an invalid one is a usage error."""
    return [_checked(value, "--exclude", UsageError) for value in values]


def parse_text(data: bytes, origin: str, *, shown: str = "") -> list[Pattern]:
    """The patterns of a pattern file's bytes (UTF-8, a leading BOM allowed); see parse_lines."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        where = shown or origin
        raise InvalidInput(
            f"{where} is not UTF-8 text (byte {err.start}): save it as UTF-8 and try again",
            path=where,
        ) from None
    return parse_lines(text.splitlines(), origin, shown=shown)


def _checked(text: str, origin: str, error: type[BundlerError]) -> Pattern:
    try:
        GitIgnoreSpec.from_lines([text], backend=BACKEND)
    except ValueError:  # pathspec's GitIgnorePatternError
        raise error(
            f"{origin}: {text!r} is not a valid gitignore pattern; fix or remove it and try again",
            path=origin,
        ) from None
    return Pattern(text, origin)
