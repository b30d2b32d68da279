"""Comments and docstrings give reasons: never which issue asked for the code, nor what it used
to do. An issue number means nothing to the next reader without the tracker, and the history is
in git; what the code is for belongs in the text itself."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HISTORY = re.compile(r"\bissue \d+|\bit was:", re.I)


def _sources() -> list[Path]:
    return sorted([*(ROOT / "bundler").rglob("*.py"), *(ROOT / "tests").rglob("*.py")])


def _prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a module's source."""
    found = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if docstring is not None:
                first = node.body[0]
                found.append((first.lineno, docstring))
    return found


def _history(path: Path) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line}: {match.group(0)}"
        for line, text in _prose(path.read_text(encoding="utf-8"))
        for match in HISTORY.finditer(text)
    ]


def test_no_comment_or_docstring_cites_an_issue_or_narrates_history() -> None:
    assert [hit for path in _sources() for hit in _history(path)] == []


@pytest.mark.parametrize(
    "source",
    [
        '"""Pack a bundle (issue 16)."""\n',
        "x = 1  # checked twice (Issue 15 item 2)\n",
        'def f() -> None:\n    """Refused. It was: accepted."""\n',
    ],
)
def test_the_check_sees_a_citation_in_each_place(source: str) -> None:
    assert len([m for _, text in _prose(source) for m in HISTORY.finditer(text)]) == 1


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_what_tests_share_lives_in_tests_support_and_no_test_module_imports_another() -> None:
    """A helper two test modules need is in ``tests/support/``: importing one test module from
    another works only while both sit in one folder on ``sys.path``, and hides what the suite
    shares among tests."""
    tests = ROOT / "tests"
    crossing = sorted(
        f"{path.relative_to(ROOT)} imports {module}"
        for path in tests.rglob("test_*.py")
        if "fixtures" not in path.parts
        for module in _imported_modules(path)
        if module.split(".")[-1].startswith("test_")
    )
    assert crossing == []
    helpers_with_tests = sorted(
        str(path.relative_to(ROOT))
        for path in (tests / "support").glob("*.py")
        if re.search(r"^def test_", path.read_text(encoding="utf-8"), re.M)
    )
    assert helpers_with_tests == []
    assert not [p.name for p in (tests / "support").glob("test_*.py")]
