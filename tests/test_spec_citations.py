"""Every spec section the code, tests, tools and docs cite exists in the repository's ``specs/``.

The contract must travel with the code: a citation such as ``(02 §8.5)`` is read as section 8.5
of ``specs/02-*.md``, and a citation of a section that is not there is a promise nobody can
check.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "specs"
CITED_IN = ("bundler", "tests", "tools", "docs", "specs")

# "02 §8.5", "01 §1, §6", "03 §1.1, §3": a document number, then one or more sections
CITATION = re.compile(r"\b(0[1-6]) (§\d+(?:\.\d+)*(?:, §\d+(?:\.\d+)*)*)")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
HEADING = re.compile(r"^#{2,6} (\d+(?:\.\d+)*)\.? ", re.MULTILINE)


def _sections(document: str) -> set[str]:
    (path,) = SPECS.glob(f"{document}-*.md")
    return set(HEADING.findall(path.read_text(encoding="utf-8")))


def _citations() -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    files = [ROOT / "README.md"]
    for top in CITED_IN:
        files += sorted((ROOT / top).rglob("*.py")) + sorted((ROOT / top).rglob("*.md"))
    for path in files:
        text = path.read_text(encoding="utf-8")
        for match in CITATION.finditer(text):
            for section in SECTION.findall(match.group(2)):
                found.append((str(path.relative_to(ROOT)), match.group(1), section))
    return found


def test_every_numbered_spec_document_is_in_the_repository() -> None:
    for number in ("01", "02", "03", "04", "05", "06"):
        assert len(list(SPECS.glob(f"{number}-*.md"))) == 1, number


def test_a_cited_spec_section_exists() -> None:
    citations = _citations()
    assert len(citations) > 100  # the scan reads what it should
    sections = {n: _sections(n) for n in ("01", "02", "03", "04", "05", "06")}
    missing = sorted({f"{f}: {n} §{s}" for f, n, s in citations if s not in sections[n]})
    assert not missing, "cited sections absent from specs/:\n" + "\n".join(missing)


@pytest.mark.parametrize("needle", ["shared/spec", "../shared/seeds"])
def test_the_code_cites_no_document_outside_the_repository(needle: str) -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for top in ("bundler", "docs", "specs")
        for path in (ROOT / top).rglob("*")
        if path.suffix in {".py", ".md"} and needle in path.read_text(encoding="utf-8")
    ]
    assert not offenders
