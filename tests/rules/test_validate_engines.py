"""The compiled schema checker and jsonschema (the reference) give identical findings."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.documents import changed, value_paths
from support.hostile_configs import HostileConfig, base_config, hostile_configs

from bundler.rules import schema, tomlcompat
from bundler.rules.findings import Finding
from bundler.rules.schemacheck import check_value, schema_findings
from bundler.rules.validate import validate

PARSEABLE = [case for case in hostile_configs() if case.kind]

# values of every JSON type, including the ones TOML cannot hold (None) and bool-vs-int traps
junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 700)
    | st.floats(-1, 3, allow_nan=False)
    | st.dates()
    | st.datetimes()
    | st.sampled_from(["", "x", "a.b", "http://h", "/abs", "stdio", "sse", "BAD-NAME", "full"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["name", "a", "k"]), inner, max_size=3)
    ),
    max_leaves=8,
)


BASE_PATHS = value_paths(base_config())[1:]


@pytest.mark.parametrize("case", PARSEABLE, ids=[case.name for case in PARSEABLE])
def test_engines_agree_on_hostile_configs(case: HostileConfig) -> None:
    config = tomlcompat.loads(case.text)
    assert set(schema_findings(config)) == set(schema_findings(config, reference=True))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(BASE_PATHS), junk)
def test_engines_agree_on_random_replacements(path: tuple[Any, ...], value: Any) -> None:
    config = changed(base_config(), path, value)
    compiled = schema_findings(config)
    assert sorted(map(repr, compiled)) == sorted(map(repr, schema_findings(config, reference=True)))


def test_check_value_uses_the_same_messages() -> None:
    segments = ["providers", "models", "openai", "main", "temperature"]
    node = schema.resolve(segments)[1]
    assert node is not None
    [finding] = check_value(node, 7, segments)
    assert (finding.path, finding.message) == (
        "providers.models.openai.main.temperature",
        "must be at most 2.0",
    )
    assert check_value(node, 1.5, segments) == []


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(BASE_PATHS), junk), min_size=1, max_size=4))
def test_validate_never_raises_on_any_value_anywhere(replacements: list[tuple[Any, Any]]) -> None:
    config = copy.deepcopy(base_config())
    for path, value in replacements:
        target: Any = config
        try:
            for step in path[:-1]:
                target = target[step]
            target[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier replacement removed this path
    errors, warnings = validate(config, Path("/srv/install"))
    assert all(isinstance(f, Finding) for f in [*errors, *warnings])
