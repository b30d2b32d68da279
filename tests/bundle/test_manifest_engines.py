"""The manifest is checked by the compiled schema checker, with jsonschema's exact verdicts.

``bundle verify`` must not pay jsonschema's import (06 §1: start-up <= 120 ms), so the manifest
schema is checked by the compiled checker of ``rules.schemacheck``; jsonschema stays the
reference, and these tests keep the first error (its path and its message) identical.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.documents import changed, value_paths

from bundler.bundle.manifest import manifest_schema_error
from bundler.rules import schema, schemacheck

BASE: dict[str, Any] = {
    "format_version": 1,
    "root_agent": "researcher",
    "required_secrets": ["providers.models.anthropic.main.api_key", "mcp.servers.s.headers.A"],
    "skill_bundles": ["research_tools"],
    "provenance": {"exporter": "bundler 0.3.0", "exported_at": "2026-12-02T11:23:58Z"},
    "contents": {
        "files": 10,
        "bytes": 3439,
        "checksums": "checksums.xxh3",
        "checksums_xxh3_128": "8ad2a31115d9469b7ce338ea5bf84973",
    },
    "memory": {
        "backend": "sqlite",
        "store": "memory/brain.db",
        "snapshot_at": "2026-12-02T11:23:58Z",
    },
    "dropped": [{"path": "agents.researcher.channels", "reason": "host_specific", "detail": "x"}],
    "risk_flags": [{"kind": "host_path", "path": "knowledge_bundles.papers", "detail": "y"}],
}

# values of every type TOML can hold and a few it cannot, with the bool-vs-int traps
junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 3)
    | st.floats(-1, 2, allow_nan=False)
    | st.datetimes()
    | st.sampled_from(["", "x", "sqlite", "checksums.xxh3", "host_specific", "a_b", "2026-12-02"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["path", "reason", "detail", "0", "exporter"]), inner)
    ),
    max_leaves=6,
)


BASE_PATHS = [path for path in value_paths(BASE)[1:] if path != ("format_version",)]


def test_the_manifest_schema_needs_no_jsonschema() -> None:
    node = schema.load("bundle-manifest.schema.json")
    assert schemacheck.unsupported_keyword(node) is None
    assert manifest_schema_error(BASE) is None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(BASE_PATHS), junk, st.booleans())
def test_engines_agree_on_the_first_manifest_error(
    path: tuple[Any, ...], value: Any, remove: bool
) -> None:
    table = changed(BASE, path, value, remove=remove)
    assert manifest_schema_error(table) == manifest_schema_error(table, reference=True)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"required_secrets": ["a", "a"]}, ("required_secrets", "has repeated items")),
        ({"skill_bundles": [1, True]}, ("skill_bundles[0]", "must be of type string")),
        ({"provenance": {}}, ("provenance", "missing exported_at")),
        ({"dropped": [{"path": "p"}]}, ("dropped[0]", "missing reason, detail")),
        ({"root_agent": "x" * 256}, ("root_agent", "violates maxLength 255")),
        (
            {"contents": {**BASE["contents"], "checksums": "x"}},
            ("contents.checksums", "is not one of the allowed values"),
        ),
    ],
)
def test_manifest_errors_name_the_rule_never_the_value(
    change: dict[str, Any], expected: tuple[str, str]
) -> None:
    table = {**copy.deepcopy(BASE), **change}
    assert manifest_schema_error(table) == expected
    assert manifest_schema_error(table, reference=True) == expected


def test_repeated_items_are_found_in_one_pass_and_true_is_not_one() -> None:
    many = [f"s{index}" for index in range(200_000)]
    assert manifest_schema_error({**BASE, "required_secrets": [*many, "s7"]}) == (
        "required_secrets",
        "has repeated items",
    )
    # [true, 1] has no repeated item in JSON Schema, though Python's set would merge them
    mixed = {**BASE, "required_secrets": [True, 1]}
    assert manifest_schema_error(mixed) == ("required_secrets[0]", "must be of type string")
    assert manifest_schema_error(mixed, reference=True) == manifest_schema_error(mixed)
