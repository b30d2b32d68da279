"""The pure merge planner (03 §3.1 points 2-6) and the append-only config.toml edit (point 8)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bundler.errors import Refused, UsageError
from bundler.install.merge import plan_merge, render_config_text
from bundler.rules import tomlcompat

FRAGMENT_TEXT = """
[agents.researcher]
model_provider = "anthropic.main"
summary_provider = "anthropic.main"
risk_profile = "guarded"
runtime_profile = "fast"
skill_bundles = ["tools"]
mcp_bundles = ["dev"]
delegate_same_risk_profile = false

[risk_profiles.guarded]
level = "supervised"
allowed_commands = ["git"]

[runtime_profiles.fast]
max_tool_iterations = 5
context_compression = { summary_provider = "anthropic.backup" }

[providers.models.anthropic.main]
api_key = ""
model = "claude"
fallback = ["anthropic.backup"]

[providers.models.anthropic.backup]
api_key = ""
model = "claude-small"

[skill_bundles.tools]
directory = "shared/skills/tools"

[mcp_bundles.dev]
servers = ["github"]

[[mcp.servers]]
name = "github"
command = "npx"
env = { GITHUB_TOKEN = "" }
"""
REQUIRED = [
    "mcp.servers.github.env.GITHUB_TOKEN",
    "providers.models.anthropic.backup.api_key",
    "providers.models.anthropic.main.api_key",
]


def fragment() -> dict[str, Any]:
    return tomlcompat.loads(FRAGMENT_TEXT)


def imported_once(**secrets: str) -> tuple[str, dict[str, Any]]:
    plan = plan_merge({}, fragment(), REQUIRED, secrets=secrets)
    text, _ = render_config_text("", plan)
    return text, tomlcompat.loads(text)


def test_absent_entries_are_added_under_their_own_alias() -> None:
    plan = plan_merge({}, fragment(), REQUIRED)
    assert plan.agent == "researcher"
    assert plan.renamed == {} and plan.reused == [] and plan.bound == {}
    assert "providers.models.anthropic.main" in plan.added
    assert "mcp.servers.github" in plan.added
    assert plan.added[-1] == "agents.researcher"
    assert plan.secrets_missing == sorted(REQUIRED)
    assert plan.merged["agents"]["researcher"]["model_provider"] == "anthropic.main"


def test_identical_entries_are_reused_and_agent_needs_as() -> None:
    _, target = imported_once()
    with pytest.raises(Refused, match="taken.*--as"):
        plan_merge(target, fragment(), REQUIRED)
    plan = plan_merge(target, fragment(), REQUIRED, as_alias="second")
    assert plan.added == ["agents.second"]
    assert plan.renamed == {}
    assert len(plan.reused) == 7
    assert plan.secrets_missing == []
    assert plan.merged["agents"]["second"]["model_provider"] == "anthropic.main"


def test_defaults_filled_in_on_both_sides_before_comparing() -> None:
    _, target = imported_once()
    # the target spells out defaults the bundle pruned: still identical
    target["runtime_profiles"]["fast"]["max_actions_per_hour"] = 20
    target["mcp"]["servers"][0]["transport"] = "stdio"
    target["mcp"]["servers"][0]["args"] = []
    plan = plan_merge(target, fragment(), REQUIRED, as_alias="second")
    assert "runtime_profiles.fast" in plan.reused
    assert "mcp.servers.github" in plan.reused


def test_changed_entry_is_namespaced_with_every_reference_rewritten() -> None:
    _, target = imported_once()
    changed = fragment()
    changed["providers"]["models"]["anthropic"]["backup"]["model"] = "claude-other"
    plan = plan_merge(target, changed, REQUIRED, as_alias="second")
    # backup differs; main references it so differs in turn (fixpoint)
    assert plan.renamed == {
        "providers.models.anthropic.backup": "providers.models.anthropic.second-backup",
        "providers.models.anthropic.main": "providers.models.anthropic.second-main",
        # the runtime profile names backup as its summary provider
        "runtime_profiles.fast": "runtime_profiles.second-fast",
    }
    merged = plan.merged
    agent = merged["agents"]["second"]
    assert agent["model_provider"] == "anthropic.second-main"
    assert agent["summary_provider"] == "anthropic.second-main"
    assert agent["runtime_profile"] == "second-fast"
    assert agent["risk_profile"] == "guarded"
    assert merged["providers"]["models"]["anthropic"]["second-main"]["fallback"] == [
        "anthropic.second-backup"
    ]
    compression = merged["runtime_profiles"]["second-fast"]["context_compression"]
    assert compression["summary_provider"] == "anthropic.second-backup"
    assert plan.secrets_missing == [
        "providers.models.anthropic.second-backup.api_key",
        "providers.models.anthropic.second-main.api_key",
    ]
    # the original entries are untouched
    assert (
        merged["providers"]["models"]["anthropic"]["main"]
        == target["providers"]["models"]["anthropic"]["main"]
    )


def test_namespacing_appends_counter_until_free() -> None:
    _, target = imported_once()
    target["risk_profiles"]["second-guarded"] = {"level": "readonly"}
    target["risk_profiles"]["second-guarded-2"] = {"level": "readonly"}
    changed = fragment()
    changed["risk_profiles"]["guarded"]["level"] = "full"
    plan = plan_merge(target, changed, REQUIRED, as_alias="second")
    assert plan.renamed == {"risk_profiles.guarded": "risk_profiles.second-guarded-3"}
    assert plan.merged["agents"]["second"]["risk_profile"] == "second-guarded-3"


def test_mcp_server_namespaced_by_name_and_bundle_server_lists_rewritten() -> None:
    _, target = imported_once()
    changed = fragment()
    changed["mcp"]["servers"][0]["args"] = ["-y", "server-github"]
    plan = plan_merge(target, changed, REQUIRED, as_alias="second")
    assert plan.renamed["mcp.servers.github"] == "mcp.servers.second-github"
    assert plan.renamed["mcp_bundles.dev"] == "mcp_bundles.second-dev"
    merged = plan.merged
    assert merged["mcp_bundles"]["second-dev"]["servers"] == ["second-github"]
    assert [server["name"] for server in merged["mcp"]["servers"]] == ["github", "second-github"]
    assert merged["agents"]["second"]["mcp_bundles"] == ["second-dev"]
    assert "mcp.servers.second-github.env.GITHUB_TOKEN" in plan.secrets_missing


def test_server_name_collision_is_case_insensitive() -> None:
    target = {"mcp": {"servers": [{"name": "GitHub", "command": "other"}]}}
    plan = plan_merge(target, fragment(), REQUIRED)
    assert plan.renamed["mcp.servers.github"] == "mcp.servers.researcher-github"


def test_scrubbed_secret_ignored_unless_given_on_this_import() -> None:
    _, target = imported_once(**{"providers.models.anthropic.main.api_key": "sk-local-key-123456"})
    plan = plan_merge(target, fragment(), REQUIRED, as_alias="second")
    assert "providers.models.anthropic.main" in plan.reused
    assert plan.reused_with_secrets == ["providers.models.anthropic.main"]
    given = {"providers.models.anthropic.main.api_key": "sk-different-key-99999"}
    plan = plan_merge(target, fragment(), REQUIRED, as_alias="third", secrets=given)
    assert (
        plan.renamed["providers.models.anthropic.main"] == "providers.models.anthropic.third-main"
    )
    assert plan.secrets_filled == ["providers.models.anthropic.third-main.api_key"]
    entry = plan.merged["providers"]["models"]["anthropic"]["third-main"]
    assert entry["api_key"] == "sk-different-key-99999"


def test_secret_path_accepts_dash_spelling_and_refuses_unknown() -> None:
    plan = plan_merge(
        {}, fragment(), REQUIRED, secrets={"providers.models.anthropic.main.api-key": "x" * 20}
    )
    assert "providers.models.anthropic.main.api_key" in plan.secrets_filled
    with pytest.raises(UsageError, match="not a required secret"):
        plan_merge(
            {}, fragment(), REQUIRED, secrets={"providers.models.anthropic.other.api_key": "v"}
        )


def test_bind_to_local_profile_and_local_provider() -> None:
    target = {
        "risk_profiles": {"strict": {"level": "readonly"}},
        "providers": {"models": {"anthropic": {"prod": {"api_key": "k" * 20, "model": "m"}}}},
    }
    binds = {"risk_profiles.guarded": "strict", "providers.models.anthropic.main": "anthropic.prod"}
    plan = plan_merge(target, fragment(), REQUIRED, binds=binds)
    assert plan.bound == {
        "risk_profiles.guarded": "risk_profiles.strict",
        "providers.models.anthropic.main": "providers.models.anthropic.prod",
    }
    agent = plan.merged["agents"]["researcher"]
    assert agent["risk_profile"] == "strict" and agent["model_provider"] == "anthropic.prod"
    assert agent["summary_provider"] == "anthropic.prod"
    assert "guarded" not in plan.merged["risk_profiles"]
    assert "main" not in plan.merged["providers"]["models"]["anthropic"]
    # backup is still needed: the runtime profile names it
    assert "providers.models.anthropic.backup" in plan.added
    assert "providers.models.anthropic.main.api_key" not in plan.secrets_missing


def test_bind_leaves_entries_only_the_bound_one_reached_unimported() -> None:
    frag = fragment()
    del frag["runtime_profiles"]["fast"]["context_compression"]
    target = {"providers": {"models": {"openai": {"prod": {"model": "m"}}}}}
    plan = plan_merge(
        target, frag, REQUIRED, binds={"providers.models.anthropic.main": "openai.prod"}
    )
    assert plan.unused == ["providers.models.anthropic.backup"]
    assert "anthropic" not in plan.merged["providers"]["models"]


def test_missing_bind_target_is_refused() -> None:
    with pytest.raises(Refused, match="no risk_profiles entry strict") as caught:
        plan_merge({}, fragment(), REQUIRED, binds={"risk_profiles.guarded": "strict"})
    assert caught.value.code == 1
    with pytest.raises(Refused, match="the bundle has no such entry"):
        plan_merge(
            {"risk_profiles": {"strict": {}}},
            fragment(),
            REQUIRED,
            binds={"risk_profiles.nope": "strict"},
        )
    with pytest.raises(UsageError):
        plan_merge({}, fragment(), REQUIRED, binds={"agents.researcher": "x"})


def test_taken_alias_without_as_is_refused() -> None:
    with pytest.raises(Refused, match="researcher is taken") as caught:
        plan_merge({"agents": {"researcher": {"model_provider": "openai.x"}}}, fragment(), REQUIRED)
    assert caught.value.code == 1


def test_non_portable_as_alias_is_refused() -> None:
    for alias in ("con", "a.b", "-lead", "x" * 65, "bad/alias"):
        with pytest.raises(Refused, match="portable"):
            plan_merge({}, fragment(), REQUIRED, as_alias=alias)


def test_namespaced_skill_bundle_directory_follows_alias() -> None:
    _, target = imported_once()
    changed = fragment()
    changed["skill_bundles"]["tools"]["include"] = ["one"]
    plan = plan_merge(target, changed, REQUIRED, as_alias="second")
    assert plan.renamed["skill_bundles.tools"] == "skill_bundles.second-tools"
    assert plan.merged["skill_bundles"]["second-tools"]["directory"] == "shared/skills/second-tools"
    placements = {(s.source_alias, s.target_alias, s.action) for s in plan.skills}
    assert placements == {("tools", "second-tools", "renamed")}


def test_namespaced_skill_alias_must_stay_portable() -> None:
    _, target = imported_once()
    changed = fragment()
    changed["skill_bundles"]["tools"]["include"] = ["one"]
    with pytest.raises(Refused, match="skill bundle alias"):
        plan_merge(target, changed, REQUIRED, as_alias="a" * 60)


def test_plan_is_pure_inputs_untouched() -> None:
    _, target = imported_once()
    before_target, frag = copy.deepcopy(target), fragment()
    before_frag = copy.deepcopy(frag)
    frag["providers"]["models"]["anthropic"]["backup"]["model"] = "changed"
    before_frag = copy.deepcopy(frag)
    plan_merge(target, frag, REQUIRED, as_alias="second", secrets={REQUIRED[0]: "v" * 16})
    assert target == before_target and frag == before_frag


# --- the text edit ---------------------------------------------------------------------------

USER_TEXT = """# my install, hand-written
[agents.lead]   # the boss
model_provider = "openai.main"
risk_profile = "strict"

[risk_profiles.strict]
level = "readonly"   # careful

[providers.models.openai.main]
api_key = "sk-user-kept-key-000"
model = "gpt"

[mcp]
enabled = true

[[mcp.servers]]
name = "fs"
command = "mcp-fs"
"""


def test_existing_bytes_kept_and_new_entries_appended() -> None:
    target = tomlcompat.loads(USER_TEXT)
    plan = plan_merge(target, fragment(), REQUIRED)
    text, notes = render_config_text(USER_TEXT, plan)
    assert notes == []
    assert text.startswith(USER_TEXT)
    assert tomlcompat.loads(text) == plan.merged
    assert tomlcompat.loads(text)["mcp"]["servers"][1]["name"] == "github"


def test_file_without_trailing_newline_still_appends_cleanly() -> None:
    text_in = USER_TEXT.rstrip("\n")
    plan = plan_merge(tomlcompat.loads(text_in), fragment(), REQUIRED)
    text, _ = render_config_text(text_in, plan)
    assert text.startswith(text_in + "\n")
    assert tomlcompat.loads(text) == plan.merged


def test_inline_table_parent_is_rewritten_and_said() -> None:
    text_in = (
        '# head\nrisk_profiles = { strict = { level = "readonly" } }\n'
        'mcp = { servers = [ { name = "fs", command = "x" } ] }\n'
    )
    plan = plan_merge(tomlcompat.loads(text_in), fragment(), REQUIRED)
    text, notes = render_config_text(text_in, plan)
    assert text.startswith("# head\n")
    assert any(note.startswith("risk_profiles is an inline table") for note in notes)
    assert any(note.startswith("mcp is an inline table") for note in notes)
    assert tomlcompat.loads(text) == plan.merged


def test_static_array_of_servers_is_rewritten_in_place() -> None:
    text_in = '[mcp]\nservers = [ { name = "fs", command = "x" } ]\n# tail comment\n'
    plan = plan_merge(tomlcompat.loads(text_in), fragment(), REQUIRED)
    text, notes = render_config_text(text_in, plan)
    assert notes == [
        "mcp.servers is an inline table or static array in config.toml: that value is rewritten"
    ]
    assert "# tail comment" in text
    assert tomlcompat.loads(text) == plan.merged


def test_dotted_key_parents_accept_new_sub_tables() -> None:
    text_in = 'providers.models.openai.main.model = "gpt"\n'
    plan = plan_merge(tomlcompat.loads(text_in), fragment(), REQUIRED)
    text, notes = render_config_text(text_in, plan)
    assert notes == [] and text.startswith(text_in)
    assert tomlcompat.loads(text) == plan.merged


def test_odd_keys_are_quoted_in_headers() -> None:
    frag = fragment()
    frag["providers"]["models"]["anthropic"]["main"]["extra_headers"] = {"X-Org.Id": ""}
    required = [*REQUIRED, 'providers.models.anthropic.main.extra_headers."X-Org.Id"']
    plan = plan_merge(
        {},
        frag,
        required,
        secrets={'providers.models.anthropic.main.extra_headers."X-Org.Id"': "v" * 16},
    )
    text, _ = render_config_text("", plan)
    assert tomlcompat.loads(text) == plan.merged
