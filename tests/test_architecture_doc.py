"""docs/architecture.md names every module of the package, each in one short sentence, so that
the next engineer finds where a concept lives without reading the tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "bundler"
DOC = PACKAGE.parent / "docs" / "architecture.md"
ENTRY = re.compile(r"^- `([\w/]+\.py)`: (.+)$", re.M)


def _modules() -> list[str]:
    """Every module's path below ``bundler/``; a package's ``__init__`` only when it holds more
    than its docstring (the package's heading says what it is)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        body = ast.parse(path.read_text(encoding="utf-8")).body
        if path.name == "__init__.py" and path.parent != PACKAGE and len(body) <= 1:
            continue
        found.append(path.relative_to(PACKAGE).as_posix())
    return found


def _entries() -> dict[str, str]:
    return dict(ENTRY.findall(DOC.read_text(encoding="utf-8")))


def test_every_module_is_named_in_the_architecture_doc() -> None:
    entries = _entries()
    assert [module for module in _modules() if module not in entries] == []
    assert [named for named in entries if not (PACKAGE / named).is_file()] == []


def test_each_module_is_said_in_one_short_sentence() -> None:
    long = {name: len(text) for name, text in _entries().items() if len(text) > 110}
    assert long == {}
    several = [name for name, text in _entries().items() if re.search(r"\.\s+[A-Z]", text)]
    assert several == []
