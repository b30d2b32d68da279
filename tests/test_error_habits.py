"""No code decides anything by reading an error's words: what went wrong is the exception's
class (its concept, see ``bundler.errors``) or a field it carries (``path``, ``cause``,
``too_large``), and a message is for a person, free to change its words. A handler that tells
two errors apart by their text breaks the day the text is reworded, and silently.

The check walks every ``except … as NAME`` of the package that can catch one of bundler's errors
(or any exception) and refuses, inside it, the caught error's text (``NAME.message``,
``NAME.args``, ``str(NAME)``, ``repr(NAME)``, ``f"{NAME}"``) where code decides: a condition,
a comparison, a ``match``, a method called on the text (``.startswith``…), a regular
expression run over it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bundler import errors

ROOT = Path(__file__).resolve().parents[1]


def _error_names() -> set[str]:
    names = {"Exception", "BaseException", "Interrupted"}
    pending: list[type[BaseException]] = [errors.BundlerError]
    while pending:
        cls = pending.pop()
        names.add(cls.__name__)
        pending += cls.__subclasses__()
    return names


OURS = _error_names()
# what a string answers of itself: where it is, whether it holds, what it splits into (a
# replace() or removeprefix() rewords for a person, and decides nothing)
_TESTS = frozenset(
    {
        "startswith",
        "endswith",
        "find",
        "rfind",
        "index",
        "rindex",
        "count",
        "split",
        "rsplit",
        "partition",
        "rpartition",
        "splitlines",
        "__contains__",
        "__eq__",
    }
)


def _catches_ours(node: ast.expr | None) -> bool:
    if node is None:  # a bare except catches everything
        return True
    if isinstance(node, ast.Tuple):
        return any(_catches_ours(item) for item in node.elts)
    if isinstance(node, ast.Name):
        return node.id in OURS
    if isinstance(node, ast.Attribute):
        return node.attr in OURS
    return False


def _is_text(node: ast.AST, name: str) -> bool:
    """Whether ``node`` is the caught error's text (or part of it)."""
    if isinstance(node, ast.Subscript):
        return _is_text(node.value, name)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id == name and node.attr in ("message", "args")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in ("str", "repr", "format") and any(
            isinstance(arg, ast.Name) and arg.id == name for arg in node.args
        )
    if isinstance(node, ast.JoinedStr):
        return any(
            isinstance(part, ast.FormattedValue)
            and isinstance(part.value, ast.Name)
            and part.value.id == name
            for part in node.values
        )
    return False


def _holds_text(node: ast.AST | None, name: str) -> bool:
    return node is not None and any(_is_text(inner, name) for inner in ast.walk(node))


def _decisions(handler: ast.ExceptHandler) -> list[int]:
    """The lines of ``handler`` where its error's text decides something."""
    name = handler.name
    assert name is not None
    lines: list[int] = []
    for node in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
        decided: list[ast.AST | None] = []
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            decided.append(node.test)
        elif isinstance(node, ast.comprehension):
            decided += node.ifs
        elif isinstance(node, ast.Compare):
            decided += [node.left, *node.comparators]
        elif isinstance(node, ast.Match):
            decided.append(node.subject)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            if node.func.attr in _TESTS and _is_text(receiver, name):
                decided.append(receiver)  # err.message.startswith(...), str(err).split(...)
            elif isinstance(receiver, ast.Name) and receiver.id == "re":
                decided += node.args
        if any(_holds_text(expr, name) for expr in decided):
            lines.append(node.lineno)  # type: ignore[attr-defined]
    return sorted(set(lines))


def _readers(source: str) -> list[int]:
    return [
        line
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ExceptHandler) and node.name and _catches_ours(node.type)
        for line in _decisions(node)
    ]


def test_no_code_decides_by_an_error_s_words() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "bundler").rglob("*.py"))
        for line in _readers(path.read_text(encoding="utf-8"))
    ]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        # the habit the check was written against: a rewrap that looks at the words first
        "try:\n    f()\nexcept InvalidInput as exc:\n"
        "    if exc.message.startswith(prefix):\n        raise\n",
        "try:\n    f()\nexcept Refused as err:\n    if 'not empty' in str(err):\n        g()\n",
        "try:\n    f()\nexcept (OSError, BundlerError) as err:\n"
        "    kind = 'a' if err.args[0] == 'x' else 'b'\n",
        "try:\n    f()\nexcept errors.NotFound as err:\n    assert f'{err}'.endswith('x')\n",
        "try:\n    f()\nexcept Exception as err:\n    if re.search('refused', repr(err)):\n"
        "        g()\n",
        "try:\n    f()\nexcept Refused as err:\n    match err.message:\n        case _:\n"
        "            g()\n",
    ],
)
def test_the_check_sees_each_way_of_reading_the_words(source: str) -> None:
    assert len(_readers(source)) == 1


@pytest.mark.parametrize(
    "source",
    [
        # saying more of it, for a person: the words are repeated, not read
        "try:\n    f()\nexcept InvalidInput as exc:\n"
        "    raise exc.restated(f'{path}: {exc.message}') from None\n",
        "try:\n    f()\nexcept InvalidInput as exc:\n"
        "    raise exc.restated(exc.message.replace(scratch, shown)) from None\n",
        # deciding by the class or by a field the error carries
        "try:\n    f()\nexcept Refused as err:\n    if isinstance(err, NotFound):\n        g()\n",
        "try:\n    f()\nexcept RegistryUnreachable as err:\n    if err.cause == RESET:\n"
        "        g()\n",
        # a system error's number is data, not words
        "try:\n    f()\nexcept OSError as err:\n    if str(err.errno) == '2':\n        g()\n",
    ],
)
def test_the_check_lets_the_words_be_repeated_and_the_class_decide(source: str) -> None:
    assert _readers(source) == []
