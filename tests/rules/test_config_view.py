"""A config value of the wrong type reads as absent, by one rule written once
(``bundler/rules/config_view.py``), and every reader of a config goes through it."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from hypothesis import given
from hypothesis import strategies as st

from bundler.rules import config_view
from bundler.rules.config_view import (
    EMPTY,
    array,
    array_of_tables,
    boolean,
    integer,
    string,
    strings,
    table,
    table_at,
)
from bundler.rules.layout import default_workspace_dir, workspace_dir
from bundler.rules.tomlcompat import loads

PACKAGE = Path(__file__).resolve().parents[2] / "bundler"

# every value a parsed TOML document may hold (and None, for a key that is not there)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=5),
)
toml_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(toml_values)
def test_a_table_reads_as_itself_and_anything_else_as_the_empty_table(value: Any) -> None:
    read = table(value)
    if isinstance(value, dict):
        assert read is value
    else:
        assert read is EMPTY and dict(read) == {}


@given(toml_values)
def test_an_array_reads_as_itself_and_anything_else_as_no_items(value: Any) -> None:
    read = array(value)
    assert list(read) == (value if isinstance(value, list) else [])


@given(toml_values)
def test_typed_items_of_an_array_keep_their_order_and_drop_the_rest(value: Any) -> None:
    items = value if isinstance(value, list) else []
    assert strings(value) == [item for item in items if isinstance(item, str)]
    assert array_of_tables(value) == [item for item in items if isinstance(item, dict)]


@given(toml_values)
def test_scalars_are_read_only_with_their_own_type(value: Any) -> None:
    assert string(value) == (value if isinstance(value, str) else None)
    assert boolean(value) == (value if isinstance(value, bool) else None)
    # TOML keeps booleans and integers apart; Python's bool is an int, so it must be excluded
    expected = value if isinstance(value, int) and not isinstance(value, bool) else None
    assert integer(value) == expected
    assert integer(True) is None and integer(0) == 0


@given(st.lists(st.text(max_size=3), max_size=4), toml_values)
def test_table_at_is_each_step_read_as_a_table(keys: list[str], value: Any) -> None:
    node: Any = value
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    expected = node if isinstance(node, dict) else {}
    assert dict(table_at(value, *keys)) == expected


def test_the_empty_table_cannot_be_changed_by_a_reader() -> None:
    with pytest.raises(TypeError):
        EMPTY["agents"] = {}  # type: ignore[index]
    assert dict(table("not a table")) == {}


def test_a_tomlkit_table_is_a_table() -> None:
    # config set edits the document with tomlkit: its tables must read as tables, not as absent
    document = tomlkit.parse('[agents.main.workspace]\npath = "/srv/main"\n')
    assert table_at(document, "agents", "main", "workspace")["path"] == "/srv/main"
    assert isinstance(table(document["agents"]), Mapping)


def test_a_config_whose_tables_have_the_wrong_type_reads_as_unset(tmp_path: Path) -> None:
    # a hand-written config may hold anything anywhere: the layout falls back to its default
    for text in (
        'agents = "main"\n',
        "[agents]\nmain = 3\n",
        "[agents.main]\nworkspace = [1, 2]\n",
        "[agents.main.workspace]\npath = 7\n",
    ):
        config = loads(text)
        assert workspace_dir(config, "main", tmp_path) == default_workspace_dir(tmp_path, "main")


# --- the rule is written once --------------------------------------------------------------

_COPIES = {"_table", "_tables", "_list", "_strings", "_mapping"}


def _inlined(node: ast.AST) -> bool:
    """``x if isinstance(x, dict|Mapping) else {}`` or ``x if isinstance(x, list) else []``:
    the config-view rule written out again."""
    if not (
        isinstance(node, ast.IfExp)
        and isinstance(node.test, ast.Call)
        and isinstance(node.test.func, ast.Name)
        and node.test.func.id == "isinstance"
        and len(node.test.args) == 2
    ):
        return False
    kind = ast.unparse(node.test.args[1])
    empty_table = isinstance(node.orelse, ast.Dict) and not node.orelse.keys
    empty_array = isinstance(node.orelse, ast.List) and not node.orelse.elts
    return (kind in ("dict", "Mapping") and empty_table) or (kind == "list" and empty_array)


def _config_readers() -> list[Path]:
    """Every module that reads a parsed TOML document (a config, a fragment, a manifest, a
    receipt). The registry's JSON and the JSON Schemas are other formats with their own rules."""
    skip = {PACKAGE / "rules" / "config_view.py", PACKAGE / "rules" / "schemacheck.py"}
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in skip and "registry" not in path.relative_to(PACKAGE).parts
    ]


def test_no_module_but_the_config_view_defines_the_table_rule() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "config_view.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name in _COPIES
    ]
    assert found == []


def test_no_config_reader_writes_the_table_rule_out_again() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)[:80]}"
        for path in _config_readers()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _inlined(node)
    ]
    assert found == []


def test_the_checks_above_see_a_copy() -> None:
    # the AST patterns must match what they forbid, or the two tests above prove nothing
    copy = ast.parse("def _table(v):\n    return v if isinstance(v, Mapping) else {}\n")
    assert any(isinstance(n, ast.FunctionDef) and n.name in _COPIES for n in ast.walk(copy))
    assert any(_inlined(n) for n in ast.walk(copy))
    assert any(_inlined(n) for n in ast.walk(ast.parse("x if isinstance(x, list) else []")))
    assert config_view.__name__ == "bundler.rules.config_view"
