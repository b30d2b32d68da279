"""The one reference graph (bundler.rules.refs): schema marks, the split and grant rules, reach."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from support.strategies import Install, installs

from bundler.bundle.closure import finish_plan, plan_closure
from bundler.bundle.fragment import _present_entries, _reach, check_form
from bundler.bundle.manifest import render_config
from bundler.errors import InvalidInput, Refused
from bundler.rules import refs, schema, schemacheck
from bundler.rules.tomlcompat import loads

ROOT = Path("/srv/install")

# the tables ZeroClaw's reference newtypes and AliasSource name (providers.rs:134-139,
# traits.rs AliasSource::section_path), plus the server names an MCP bundle lists and cron jobs
ZEROCLAW_REF_TABLES = {
    "providers.models",
    "providers.tts",
    "providers.transcription",
    "channels",
    "risk_profiles",
    "runtime_profiles",
    "agents",
    "skill_bundles",
    "knowledge_bundles",
    "mcp_bundles",
    "mcp.servers",
    "cron",
}


def _targets(kind: str, family: str = "") -> dict[tuple[str, ...], str]:
    return {field.segments: field.target for field in refs.ref_fields(kind, family)}


# --- the schema is the single source ------------------------------------------------------------


def test_schema_marks_every_reference_field_of_an_agent() -> None:
    assert _targets("agents") == {
        ("model_provider",): "providers.models",
        ("classifier_provider",): "providers.models",
        ("summary_provider",): "providers.models",
        ("tts_provider",): "providers.tts",
        ("transcription_provider",): "providers.transcription",
        ("risk_profile",): "risk_profiles",
        ("runtime_profile",): "runtime_profiles",
        ("skill_bundles",): "skill_bundles",
        ("knowledge_bundles",): "knowledge_bundles",
        ("mcp_bundles",): "mcp_bundles",
        ("channels",): "channels",
        ("cron_jobs",): "cron",
    }
    required = {f.segments for f in refs.ref_fields("agents") if f.required}
    assert required == {("model_provider",)}
    lists = {f.segments[0] for f in refs.ref_fields("agents") if f.is_list}
    assert lists == {"skill_bundles", "knowledge_bundles", "mcp_bundles", "channels", "cron_jobs"}


def test_schema_marks_profile_bundle_and_fallback_references() -> None:
    assert _targets("runtime_profiles") == {
        ("context_compression", "summary_provider"): "providers.models"
    }
    assert _targets("risk_profiles") == {("approval_route", "approver_channel"): "channels"}
    assert _targets("mcp_bundles") == {("servers",): "mcp.servers"}
    for family in refs.families("models"):
        assert _targets("providers.models", family) == {("fallback",): "providers.models"}
    for kind in ("skill_bundles", "knowledge_bundles", "mcp.servers", "providers.tts"):
        assert _targets(kind, "openai") == {}


def test_every_x_ref_names_a_zeroclaw_reference_table() -> None:
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "x-ref" in node:
                found.add(node["x-ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema.config_schema())
    assert found <= ZEROCLAW_REF_TABLES
    assert "mcp.servers" in found


def test_x_ref_keyword_keeps_the_schema_valid_for_both_engines() -> None:
    Draft202012Validator.check_schema(schema.config_schema())
    assert schemacheck.unsupported_keyword(schema.config_schema()) is None  # no jsonschema
    config = {"mcp_bundles": {"m": {"servers": ["a", 5]}}}
    compiled = schemacheck.schema_findings(config)
    reference = schemacheck.schema_findings(config, reference=True)
    assert compiled == reference
    assert [f.path for f in compiled] == ["mcp_bundles.m.servers[1]"]


# --- one split rule -----------------------------------------------------------------------------


def test_provider_ref_splits_at_its_one_dot() -> None:
    assert refs.split_provider_ref("anthropic.main") == ("anthropic", "main")
    assert refs.split_ref("channels", "telegram.ops") == ("telegram", "ops")


def test_three_part_provider_ref_names_nothing() -> None:
    for bad in ("a.b.c", "anthropic.main.x", ".main", "anthropic.", ".", "main", "", 5, None):
        assert refs.split_provider_ref(bad) is None, bad
        assert refs.split_ref("providers.models", bad) is None, bad


def test_bare_ref_is_its_own_key_and_empty_names_nothing() -> None:
    assert refs.split_ref("risk_profiles", "a.b") == ("a.b",)
    assert refs.split_ref("skill_bundles", "research.tools") == ("research.tools",)
    assert refs.split_ref("risk_profiles", "") is None
    assert refs.split_ref("risk_profiles", ["x"]) is None


no_dot = st.text(min_size=1, max_size=8).filter(lambda s: "." not in s)


@given(no_dot, no_dot)
def test_split_inverts_joining_a_family_and_an_alias(family: str, alias: str) -> None:
    assert refs.split_provider_ref(f"{family}.{alias}") == (family, alias)
    assert refs.entry_segments("providers.models", f"{family}.{alias}") == [
        "providers",
        "models",
        family,
        alias,
    ]


@given(st.text(max_size=12))
def test_split_accepts_exactly_one_inner_dot(text: str) -> None:
    parts = refs.split_provider_ref(text)
    if text.count(".") == 1 and not text.startswith(".") and not text.endswith("."):
        assert parts is not None and ".".join(parts) == text
    else:
        assert parts is None


def test_validation_merge_and_closure_agree_on_a_three_part_ref(tmp_path: Path) -> None:
    from bundler.rules.validate import validate

    config = {
        "agents": {"a": {"model_provider": "openai.main.x", "risk_profile": "r"}},
        "providers": {"models": {"openai": {"main": {}}}},
        "risk_profiles": {"r": {}},
    }
    errors, _ = validate(config, tmp_path)
    assert [(e.path, e.kind) for e in errors] == [("agents.a.model_provider", "invalid_format")]
    plan = plan_closure(config, "a", ROOT)  # carried as is, nothing reached
    assert "providers" not in plan.fragment
    found = refs.reach(config, "a", config["agents"]["a"])
    assert [r.path for r in found.unresolved] == [["agents", "a", "model_provider"]]


# --- references of an entry and of a config ------------------------------------------------------


def test_entry_refs_give_source_path_target_and_key() -> None:
    agent = {
        "model_provider": "anthropic.main",
        "risk_profile": "",
        "skill_bundles": ["tools", 7],
        "enabled": True,
    }
    found = [
        (r.source, r.path, r.target, r.value, r.key, r.is_none)
        for r in refs.entry_refs("agents", "x", agent)
    ]
    assert found == [
        (
            ("agents", "x"),
            ["agents", "x", "model_provider"],
            "providers.models",
            "anthropic.main",
            ("anthropic", "main"),
            False,
        ),
        (("agents", "x"), ["agents", "x", "risk_profile"], "risk_profiles", "", None, True),
        (
            ("agents", "x"),
            ["agents", "x", "skill_bundles", "0"],
            "skill_bundles",
            "tools",
            ("tools",),
            False,
        ),
        (("agents", "x"), ["agents", "x", "skill_bundles", "1"], "skill_bundles", 7, None, False),
    ]


def test_a_list_field_that_is_not_a_list_references_nothing() -> None:
    assert list(refs.entry_refs("agents", "x", {"mcp_bundles": "m0"})) == []


def test_references_of_a_config_cover_providers_profiles_and_bundles() -> None:
    config = {
        "agents": {"a": {"model_provider": "openai.p", "runtime_profile": "rt"}},
        "providers": {"models": {"openai": {"p": {"fallback": ["groq.q"]}, "x.y": {}}}},
        "runtime_profiles": {"rt": {"context_compression": {"summary_provider": "groq.q"}}},
        "mcp_bundles": {"m": {"servers": ["github"], "exclude": ["shell"]}},
    }
    found = {(r.source, tuple(r.path), r.target_key) for r in refs.references(config)}
    assert found == {
        (("agents", "a"), ("agents", "a", "model_provider"), ("providers.models", "openai.p")),
        (("agents", "a"), ("agents", "a", "runtime_profile"), ("runtime_profiles", "rt")),
        (
            ("runtime_profiles", "rt"),
            ("runtime_profiles", "rt", "context_compression", "summary_provider"),
            ("providers.models", "groq.q"),
        ),
        (
            ("providers.models", "openai.p"),
            ("providers", "models", "openai", "p", "fallback", "0"),
            ("providers.models", "groq.q"),
        ),
        (
            ("mcp_bundles", "m"),
            ("mcp_bundles", "m", "servers", "0"),
            ("mcp.servers", "github"),
        ),
    }


def test_a_provider_alias_with_a_dot_is_no_entry() -> None:
    config = {"providers": {"models": {"openai": {"a.b": {}, "c": {}}}}}
    assert [name for name, _ in refs.iter_entries(config, "providers.models")] == ["openai.c"]


# --- one grant rule -----------------------------------------------------------------------------


def test_exclude_wins_across_every_granting_bundle() -> None:
    bundles = {"a": {"servers": ["x", "y"]}, "b": {"servers": ["z", "x"], "exclude": ["y"]}}
    assert refs.granted_servers(bundles, ["a", "b"]) == ["x", "z"]
    assert refs.granted_servers(bundles, ["b", "a"]) == ["z", "x"]
    assert refs.granted_servers(bundles, ["a"]) == ["x", "y"]


def test_unknown_bundles_and_wrong_types_grant_nothing() -> None:
    bundles: dict[str, Any] = {
        "s": {"servers": "xyz"},
        "e": {"servers": ["x"], "exclude": "x"},
        "n": {"servers": [5, None, "ok"]},
        "t": "not a table",
    }
    assert refs.granted_servers(bundles, ["missing", "t", 3]) == []
    assert refs.granted_servers(bundles, ["s"]) == []
    assert refs.granted_servers(bundles, ["e"]) == ["x"]  # an exclude that is no list excludes none
    assert refs.granted_servers(bundles, ["n"]) == ["ok"]


def test_a_server_name_resolves_to_its_first_entry() -> None:
    first, second = {"name": "gh", "command": "a"}, {"name": "gh", "command": "b"}
    config = {"mcp": {"servers": ["junk", first, second, {"name": "GH"}]}}
    assert refs.first_servers(config, {"gh", "none"}) == {"gh": first}
    assert refs.entry_of(config, "mcp.servers", ("gh",)) is first


lists = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4)


bundle_tables = st.fixed_dictionaries({}, optional={"servers": lists, "exclude": lists})


@given(
    st.dictionaries(st.sampled_from(["m", "n", "o"]), bundle_tables, max_size=3),
    st.lists(st.sampled_from(["m", "n", "o", "p"]), max_size=4),
)
def test_grant_rule_properties(bundles: dict[str, Any], names: list[str]) -> None:
    granted = refs.granted_servers(bundles, names)
    listed = [s for n in names for s in bundles.get(n, {}).get("servers", [])]
    excluded = {s for n in names for s in bundles.get(n, {}).get("exclude", [])}
    assert len(granted) == len(set(granted))
    assert not set(granted) & excluded
    assert set(granted) == set(listed) - excluded
    assert granted == [s for s in dict.fromkeys(listed) if s not in excluded]  # first seen


# --- reach ----------------------------------------------------------------------------------------


def _chain(length: int) -> dict[str, Any]:
    models = {f"p{i}": {"fallback": [f"groq.p{i + 1}"]} for i in range(length)}
    models[f"p{length}"] = {}
    return {
        "agents": {"a": {"model_provider": "groq.p0", "tts_provider": "piper.t"}},
        "providers": {"models": {"groq": models}, "tts": {"piper": {"t": {}}}},
    }


def test_fallbacks_are_reached_to_max_depth_and_deeper_edges_do_not_count() -> None:
    config = _chain(5)
    found = refs.reach(config, "a", config["agents"]["a"])
    assert list(found.entries) == [
        ("providers.models", "groq.p0"),
        ("providers.tts", "piper.t"),
        ("providers.models", "groq.p1"),
        ("providers.models", "groq.p2"),
        ("providers.models", "groq.p3"),
    ]
    assert [r.path for r in found.too_deep] == [
        ["providers", "models", "groq", "p3", "fallback", "0"]
    ]
    assert found.unresolved == []


def test_a_root_reached_otherwise_is_at_depth_zero_whatever_the_order() -> None:
    config = _chain(5)
    config["runtime_profiles"] = {"rt": {"context_compression": {"summary_provider": "groq.p2"}}}
    config["agents"]["a"]["runtime_profile"] = "rt"
    found = refs.reach(config, "a", config["agents"]["a"])
    assert ("providers.models", "groq.p5") in found.entries  # p2 is a root: p5 at depth 3
    assert found.too_deep == []


def test_without_a_depth_limit_fallbacks_are_reached_at_any_depth_and_round_cycles() -> None:
    """What verify walks for a ZeroClaw-written bundle: every edge that resolves."""
    config = _chain(5)
    config["providers"]["models"]["groq"]["p5"] = {"fallback": ["groq.p0", "groq.gone"]}
    found = refs.reach(config, "a", config["agents"]["a"], fallback_depth=None)
    assert {name for kind, name in found.entries if kind == "providers.models"} == {
        f"groq.p{i}" for i in range(6)
    }
    assert found.too_deep == []
    assert found.depth[("providers.models", "groq.p5")] == 5
    assert [(r.path, r.is_fallback) for r in found.unresolved] == [
        (["providers", "models", "groq", "p5", "fallback", "1"], True)
    ]


def test_unresolved_references_are_reported_and_channels_never_followed() -> None:
    config: dict[str, Any] = {
        "agents": {
            "a": {
                "model_provider": "skynet.x",
                "risk_profile": "gone",
                "runtime_profile": "",
                "channels": ["telegram.main"],
                "skill_bundles": ["", "s"],
            }
        },
        "providers": {"models": {"skynet": {"x": {}}}},
        "channels": {"telegram": {"main": {}}},
        "skill_bundles": {"s": {}},
    }
    found = refs.reach(config, "a", config["agents"]["a"])
    assert [r.path[-1] for r in found.unresolved] == ["model_provider", "risk_profile", "0"]
    assert list(found.entries) == [("skill_bundles", "s")]


def test_servers_are_reached_by_the_grant_rule_only() -> None:
    config: dict[str, Any] = {
        "agents": {"a": {"mcp_bundles": ["m", "n"]}},
        "mcp_bundles": {"m": {"servers": ["gh", "sh", "ghost"]}, "n": {"exclude": ["sh"]}},
        "mcp": {"servers": [{"name": "gh"}, {"name": "sh"}, {"name": "db"}]},
    }
    found = refs.reach(config, "a", config["agents"]["a"])
    assert found.granted == ["gh", "ghost"]
    assert list(found.servers) == ["gh"]
    assert found.unconfigured == ["ghost"]
    assert set(found.entries) == {("mcp_bundles", "m"), ("mcp_bundles", "n")}


# --- export and verify agree on a closure ---------------------------------------------------------


def _planner_closure(fragment: dict[str, Any]) -> set[tuple[str, ...]]:
    """What the planner put in the fragment: every entry, and each carried server by name."""
    carried = set(_present_entries(fragment))
    servers = fragment.get("mcp", {}).get("servers", [])
    carried.update(("mcp", "servers", server["name"]) for server in servers)
    return carried


def _check_agreement(install: Install) -> None:
    for alias in install.agents:
        try:
            plan = plan_closure(install.config, alias, ROOT)
            carried = [source.alias for source in plan.skill_sources]
            finished = finish_plan(plan, carried, True, [], 1)
        except (InvalidInput, Refused):
            continue
        parsed = loads(render_config(finished.fragment).decode())
        recomputed = _reach(parsed, alias, parsed["agents"][alias])
        assert recomputed.problems == []
        assert recomputed.entries == _planner_closure(parsed)
        assert check_form(parsed, alias) == []


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(installs())
def test_verify_recomputes_exactly_the_planners_closure(install: Install) -> None:
    _check_agreement(install)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(installs(hostile=True))
def test_verify_recomputes_the_planners_closure_of_hostile_installs(install: Install) -> None:
    _check_agreement(install)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(installs())
def test_reach_is_closed_under_references(install: Install) -> None:
    for alias, agent in install.config["agents"].items():
        found = refs.reach(install.config, alias, agent)
        seen = {(r.source, tuple(r.path)) for r in (*found.unresolved, *found.too_deep)}
        for (kind, name), entry in [(("agents", alias), agent), *found.entries.items()]:
            for ref in refs.entry_refs(kind, name, entry):
                if ref.target not in refs.CARRIED_TARGETS or ref.is_none:
                    continue
                assert ref.target_key in found.entries or (ref.source, tuple(ref.path)) in seen, (
                    ref.path
                )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(installs())
def test_the_merge_rewrites_exactly_the_references_the_graph_finds(install: Install) -> None:
    from bundler.install.merge import rewrite_references

    config = install.config
    for kind in ("agents", *refs.ENTRY_KINDS):
        for name, entry in refs.iter_entries(config, kind):
            before = list(refs.entry_refs(kind, name, entry))
            mapping = {
                (r.target, r.value): f"{r.value}-renamed"
                for r in before
                if isinstance(r.value, str) and r.value
            }
            after = list(
                refs.entry_refs(kind, name, rewrite_references(kind, name, entry, mapping))
            )
            assert [(r.path, r.target) for r in after] == [(r.path, r.target) for r in before]
            for old, new in zip(before, after, strict=True):
                renamed = (
                    mapping.get((old.target, old.value)) if isinstance(old.value, str) else None
                )
                assert new.value == (old.value if renamed is None else renamed)
