"""The pure fragment rules of ``bundler.bundle.fragment`` (03 §1 "fragment form"), without files."""

from __future__ import annotations

from typing import Any

import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st
from support import bundlefactory as bf

from bundler.bundle import fragment as rules
from bundler.rules import refs, tomlcompat


def paths(problems: list[rules.Problem]) -> list[str]:
    return [problem.path for problem in problems]


# --------------------------------------------------------------------------- nesting before parsing


def test_nesting_counts_brackets_headers_and_dotted_keys() -> None:
    # containers around the deepest value: the document itself is level 0
    assert rules.nesting_depth("a = 1\n") == 0
    assert rules.nesting_depth("a = [[1]]\n") == 2
    assert rules.nesting_depth("[a.b.c]\nx = 1\n") == 3
    assert rules.nesting_depth("[[a.b]]\nx = {y = {z = 1}}\n") == 5
    assert rules.nesting_depth("a.b.c.d = 1\n") == 3
    assert rules.nesting_depth("x = {a.b.c = 1}\n") == 3


def test_nesting_ignores_brackets_inside_strings_and_comments() -> None:
    text = (
        'a = "[[[[{{{{"\n'
        "b = '[[[['\n"
        'c = """\n[[[[\n{{{{ \\""" still inside\n"""\n'
        "d = '''[[[[ '''\n"
        "# [[[[[[[[[[[[[[[[\n"
        'e = "dotted.key.in.a.string"\n'
        "f = 1.5\n"
    )
    assert tomlcompat.loads(text)  # valid TOML
    assert rules.nesting_depth(text) == 0


def test_nesting_refuses_what_would_exhaust_a_parser() -> None:
    assert rules.nesting_depth("x = " + "[" * 10_000 + "]" * 10_000) > rules.MAX_NESTING
    assert rules.nesting_depth("x = " + "{a = " * 100 + "1" + "}" * 100) > rules.MAX_NESTING
    assert (
        rules.nesting_depth("[" + ".".join("k" * 3 for _ in range(100)) + "]") > rules.MAX_NESTING
    )


def test_nesting_scan_survives_unterminated_input() -> None:
    for text in ('a = "open', "a = '''open", 'a = """open', "[a.b", "x = [[[", "= = ]]] }}"):
        assert rules.nesting_depth(text) >= 0


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


keys = st.text(alphabet="ab.-_ \"'[", min_size=1, max_size=4)
leaves = st.one_of(st.integers(), st.text(alphabet="[]{}.'\"#=,\n x", max_size=6), st.booleans())
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, values, max_size=4))
def test_nesting_bound_is_never_below_the_real_depth(document: dict[str, Any]) -> None:
    text = tomli_w.dumps(document)
    assert rules.nesting_depth(text) >= _depth(document) - 1


# --------------------------------------------------------------------------- export form


def test_the_factory_fragment_is_in_export_form() -> None:
    assert rules.check_form(bf.fragment(), bf.ROOT_AGENT) == []


def test_granted_servers_exclude_wins_across_bundles() -> None:
    bundles = {"a": {"servers": ["x", "y"]}, "b": {"servers": ["z", "x"], "exclude": ["y"]}}
    assert refs.granted_servers(bundles, ["a", "b"]) == ["x", "z"]
    assert refs.granted_servers(bundles, ["a"]) == ["x", "y"]
    assert refs.granted_servers(bundles, ["missing"]) == []


def test_excluded_name_in_a_bundle_grants_nothing_and_is_allowed() -> None:
    data = bf.fragment()
    data["mcp_bundles"]["gh"]["servers"].append("blocked")
    data["mcp_bundles"]["gh"]["exclude"] = ["blocked"]
    assert rules.check_form(data, bf.ROOT_AGENT) == []


def test_fallback_edges_resolving_inside_the_fragment_are_kept_at_any_depth() -> None:
    """ZeroClaw's exporter carries a chain past MAX_FALLBACK_DEPTH and cycles (03 §1.1)."""
    data = bf.fragment()
    models = data["providers"]["models"]
    models["openai"]["backup"]["fallback"] = ["anthropic.main"]  # a cycle: allowed
    assert rules.check_form(data, bf.ROOT_AGENT) == []
    # a chain main -> backup -> c1 -> c2 -> c3: c3 is at distance 4, beyond MAX_FALLBACK_DEPTH
    models["openai"]["backup"]["fallback"] = ["groq.c1"]
    models["groq"] = {"c1": {"fallback": ["groq.c2"]}, "c2": {"fallback": ["groq.c3"]}, "c3": {}}
    assert rules.check_form(data, bf.ROOT_AGENT) == []


def test_dangling_fallback_and_server_name_are_warnings_not_problems() -> None:
    data = bf.fragment()
    data["providers"]["models"]["anthropic"]["main"]["fallback"].append("openai.gone")
    data["mcp_bundles"]["gh"]["servers"].append("ghost")
    assert rules.check_form(data, bf.ROOT_AGENT) == []
    assert paths(rules.fragment_warnings(data, bf.ROOT_AGENT)) == [
        "providers.models.anthropic.main.fallback[1]",
        "mcp_bundles.gh.servers[1]",
    ]


def test_unresolved_names_are_removed_and_an_emptied_fallback_dropped() -> None:
    data = bf.fragment()
    data["providers"]["models"]["anthropic"]["main"]["fallback"] = ["openai.gone"]
    data["mcp_bundles"]["gh"]["servers"].append("ghost")
    cleaned, removed = rules.without_unresolved(data, bf.ROOT_AGENT)
    assert [item.ref for item in removed] == ["openai.gone", "ghost"]
    assert "fallback" not in cleaned["providers"]["models"]["anthropic"]["main"]
    assert cleaned["mcp_bundles"]["gh"]["servers"] == ["github"]
    assert data["mcp_bundles"]["gh"]["servers"] == ["github", "ghost"]  # the input is untouched


def test_summary_provider_of_runtime_profile_must_resolve() -> None:
    data = bf.fragment()
    data["runtime_profiles"]["fast"]["context_compression"] = {"summary_provider": "groq.none"}
    assert "runtime_profiles.fast.context_compression.summary_provider" in paths(
        rules.check_form(data, bf.ROOT_AGENT)
    )


def test_bundle_lists_must_be_trimmed_and_unique() -> None:
    data = bf.fragment()
    data["agents"][bf.ROOT_AGENT]["skill_bundles"] = [bf.SKILL_BUNDLE, bf.SKILL_BUNDLE]
    assert "agents.researcher.skill_bundles[1]" in paths(rules.check_form(data, bf.ROOT_AGENT))


def test_skill_directory_inside_shared_is_kept_outside_is_not() -> None:
    data = bf.fragment()
    data["skill_bundles"][bf.SKILL_BUNDLE]["directory"] = "shared/skills/elsewhere"
    assert rules.check_form(data, bf.ROOT_AGENT) == []
    for bad in ("../outside", "shared/../../etc", "/abs", "~/skills"):
        data["skill_bundles"][bf.SKILL_BUNDLE]["directory"] = bad
        assert paths(rules.check_form(data, bf.ROOT_AGENT)) == [
            "skill_bundles.research_tools.directory"
        ], bad


def test_odd_aliases_are_quoted_and_escaped_in_paths() -> None:
    data = bf.fragment()
    data["agents"]["evil.\x1b[31m"] = {"model_provider": "anthropic.main"}
    found = paths(rules.check_form(data, bf.ROOT_AGENT))
    assert any(path.startswith('agents."evil.') and "\x1b" not in path for path in found)


def test_wrong_types_never_raise() -> None:
    hostile: dict[str, Any] = {
        "agents": {
            bf.ROOT_AGENT: {"model_provider": 5, "skill_bundles": "x", "mcp_bundles": [1, None]}
        },
        "providers": {"models": {"openai": ["not", "a", "table"]}},
        "mcp": {"servers": {"not": "a list"}},
        "mcp_bundles": [],
    }
    assert rules.check_form(hostile, bf.ROOT_AGENT)  # findings, no exception


def test_required_secret_paths() -> None:
    data = bf.fragment()
    assert rules.required_secret_problems(data, bf.REQUIRED_SECRETS) == []
    found = rules.required_secret_problems(
        data,
        [
            "providers.models.anthropic.main.model",  # not secret
            "providers.models.anthropic.nope.api_key",  # not in the fragment
            'bad..path"',  # not a path
            "providers.models.anthropic.main.api-key",  # schema spelling accepted
        ],
    )
    assert [p.path for p in found] == [
        "required_secrets[0]",
        "required_secrets[1]",
        "required_secrets[2]",
    ]


# --------------------------------------------------------------------------- robustness

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=8), st.floats(allow_nan=False)
)
schema_words = st.sampled_from(
    [
        "agents",
        bf.ROOT_AGENT,
        "providers",
        "models",
        "openai",
        "main",
        "fallback",
        "mcp",
        "servers",
        "name",
        "env",
        "mcp_bundles",
        "exclude",
        "skill_bundles",
        "risk_profile",
        "runtime_profile",
        "risk_profiles",
        "runtime_profiles",
        "context_compression",
        "summary_provider",
        "identity",
        "aieos_path",
        "workspace",
        "api_key",
        "directory",
    ]
)
messy = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(schema_words, inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(schema_words, messy, max_size=5))
def test_check_form_never_raises_on_any_shape(data: dict[str, Any]) -> None:
    problems = rules.check_form(data, bf.ROOT_AGENT)
    assert all(isinstance(problem, rules.Problem) for problem in problems)
    rules.required_secret_problems(data, bf.REQUIRED_SECRETS)
    for path in bf.REQUIRED_SECRETS:
        rules.secret_endpoint(data, path.split("."))


def test_three_part_provider_reference_resolves_to_nothing_in_a_fragment() -> None:
    # aliases a reference splits on "." hold no "." (01 §3): "openai.main.x" is malformed, not
    # family "openai" with alias "main.x", whatever entry the fragment holds
    data = bf.fragment()
    data["providers"]["models"]["openai"]["main.x"] = {"api_key": ""}
    data["agents"][bf.ROOT_AGENT]["summary_provider"] = "openai.main.x"
    found = paths(rules.check_form(data, bf.ROOT_AGENT))
    assert "agents.researcher.summary_provider" in found
    assert 'providers.models.openai."main.x"' in found


def test_an_exclude_that_is_not_a_list_excludes_nothing() -> None:
    data = bf.fragment()
    data["mcp"]["servers"][0]["name"] = "g"
    data["mcp_bundles"]["gh"] = {"servers": ["g"], "exclude": "g"}  # the schema reports the type
    # read as a list of characters it would exclude "g", and the carried server be ungranted
    assert rules.check_form(data, bf.ROOT_AGENT) == []
