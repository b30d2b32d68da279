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

import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from pathspec import GitIgnoreSpec

from bundler.errors import BundlerError, InvalidInput, Malformed, UsageError

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
        self._spec = _compile([p.text for p in self.patterns])

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
    pattern (a lone ``!``, a trailing backslash, a backwards range ``[z-a]``) raises
    :class:`InvalidInput` naming the file (``shown``, default ``origin``: an error may name the
    host's path where a bundle's row must not) and the line.
    """
    return [
        _checked(text, f"{shown or origin} line {number}", InvalidInput, f"{origin} line {number}")
        for number, text in _pattern_lines(lines)
    ]


def parse_options(values: Iterable[str]) -> list[Pattern]:
    """The patterns given with ``--exclude``; an invalid one is a usage error."""
    return [_checked(value, "--exclude", UsageError) for value in values]


def parse_text(data: bytes, origin: str, *, shown: str = "") -> list[Pattern]:
    """The patterns of a pattern file's bytes (UTF-8, a leading BOM allowed); see parse_lines."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        where = shown or origin
        raise Malformed(
            f"{where} {_not_utf8(err)}: save it as UTF-8 and try again", path=where
        ) from None
    return parse_lines(text.splitlines(), origin, shown=shown)


def text_problems(data: bytes) -> list[str]:
    """Every fault of a pattern file's bytes, one finding a bad line (``line 3: '[z-a]' is not
    a valid gitignore pattern (…)``), or that it is not UTF-8; empty when :func:`parse_text`
    accepts it. For a file that is only looked at (a bundle's), where one refusal would hide
    the rest."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        return [_not_utf8(err)]
    return [
        f"line {number}: {pattern!r} {why}"
        for number, pattern in _pattern_lines(text.splitlines())
        if (why := _problem(pattern)) is not None
    ]


def _pattern_lines(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """Each line that holds a pattern, with its number; comments and blank lines left out."""
    for number, line in enumerate(lines, start=1):
        text = line.rstrip("\r\n")
        if text.strip() and not text.startswith("#"):
            yield number, text


def _not_utf8(err: UnicodeDecodeError) -> str:
    return f"is not UTF-8 text (byte {err.start})"


def _compile(texts: Sequence[str]) -> GitIgnoreSpec:
    """The one place patterns become a matcher. pathspec turns each into a regular expression
    and lets :mod:`re` judge it: a pattern it accepts may still be one ``re`` refuses (a
    backwards range, ``[z-a]``, raises ``re.error``), or one ``re`` only warns about on stderr
    (``[[a]``, a ``FutureWarning``), which is noise to a person and not theirs to act on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return GitIgnoreSpec.from_lines(texts, backend=BACKEND)


def _problem(text: str) -> str | None:
    """Why ``text`` is no pattern (``is not a valid gitignore pattern (…)``), or None."""
    try:
        _compile([text])
    except ValueError:  # pathspec's GitIgnorePatternError: a lone "!", a trailing backslash
        return "is not a valid gitignore pattern"
    except re.error as err:
        return f"is not a valid gitignore pattern ({_re_reason(err)})"
    return None


def _checked(text: str, shown: str, error: type[BundlerError], origin: str = "") -> Pattern:
    """``text`` as a pattern from ``origin`` (default ``shown``), or ``error`` naming ``shown``
    and the pattern when it does not compile."""
    why = _problem(text)
    if why is not None:
        raise error(f"{shown}: {text!r} {why}; fix or remove it and try again", path=shown)
    return Pattern(text, origin or shown)


def _re_reason(err: re.error) -> str:
    """What is wrong, in the pattern's terms: re's own words quote the regular expression
    pathspec made (escapes doubled, a position in it), which the user never wrote."""
    if err.msg.startswith("bad character range"):
        return "a character range in it runs backwards or is not a range"
    return err.msg
