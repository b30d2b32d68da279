"""The closure (02 §2), drops (02 §3) and pruning (02 §4): one test per rule and per table row."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from bundler.bundle.closure import ExportPlan, finish_plan, plan_closure, prove_closure
from bundler.bundle.fragment import check_form
from bundler.bundle.manifest import Dropped, render_config
from bundler.errors import InvalidInput, Refused
from bundler.rules import schema
from bundler.rules.paths import parse_path
from bundler.rules.tomlcompat import loads

ROOT = Path("/srv/install")
KEY = "sk-ant-SECRETVALUE-000111222333"


def base() -> dict[str, Any]:
    """A valid install with one agent, ``researcher``, and a few unrelated entries."""
    return {
        "agents": {
            "researcher": {
                "model_provider": "anthropic.main",
                "risk_profile": "guarded",
                "runtime_profile": "fast",
            },
            "other": {"model_provider": "openai.other", "risk_profile": "loose"},
        },
        "providers": {
            "models": {
                "anthropic": {"main": {"api_key": KEY, "model": "claude"}},
                "openai": {"other": {"api_key": "sk-other-UNRELATED-99999999"}},
            }
        },
        "risk_profiles": {"guarded": {"level": "supervised"}, "loose": {"level": "full"}},
        "runtime_profiles": {"fast": {"max_tool_iterations": 12}, "slow": {}},
        "channels": {"telegram": {"main": {"bot_token": "123456:telegram-token"}}},
        "cron": {"nightly": {"schedule": "0 3 * * *"}},
        "mcp": {"enabled": True, "deferred_loading": True, "servers": []},
    }


def plan(config: dict[str, Any], alias: str = "researcher") -> ExportPlan:
    return plan_closure(config, alias, ROOT)


def agent(p: ExportPlan, alias: str = "researcher") -> dict[str, Any]:
    entry: dict[str, Any] = p.fragment["agents"][alias]
    return entry


def rows(p: ExportPlan) -> dict[str, Dropped]:
    return {row.path: row for row in p.dropped}


def rendered(p: ExportPlan) -> str:
    return render_config(p.fragment).decode("utf-8")


def assert_export_form(p: ExportPlan) -> None:
    """The planned fragment proves alone and passes the bundle verifier's form check."""
    prove_closure(render_config(p.fragment))
    parsed = loads(rendered(p))
    assert check_form(parsed, p.alias) == []


# --- 02 §2: what the closure carries ----------------------------------------------------------


def test_unknown_alias_refused_exit_1() -> None:
    with pytest.raises(Refused, match="unknown agent") as caught:
        plan(base(), "ghost")
    assert caught.value.code == 1
    assert caught.value.path == "agents.ghost"


def test_agent_entry_and_profiles_carried_nothing_else() -> None:
    p = plan(base())
    assert set(p.fragment) == {"agents", "risk_profiles", "runtime_profiles", "providers"}
    assert list(p.fragment["agents"]) == ["researcher"]
    assert list(p.fragment["risk_profiles"]) == ["guarded"]
    assert list(p.fragment["runtime_profiles"]) == ["fast"]
    assert p.fragment["providers"] == {
        "models": {"anthropic": {"main": {"api_key": "", "model": "claude"}}}
    }
    text = rendered(p)
    for absent in (
        "other",
        "loose",
        "slow",
        "telegram",
        "nightly",
        "deferred_loading",
        "cron",
        "channels",
    ):
        assert absent not in text
    assert_export_form(p)


def test_bundle_lists_trimmed_deduplicated_non_empty() -> None:
    config = base()
    config["agents"]["researcher"]["knowledge_bundles"] = [" docs ", "docs", "", "  ", "papers"]
    config["knowledge_bundles"] = {"docs": {"tags": ["a"]}, "papers": {"tags": ["b"]}}
    p = plan(config)
    assert agent(p)["knowledge_bundles"] == ["docs", "papers"]
    assert set(p.fragment["knowledge_bundles"]) == {"docs", "papers"}
    assert_export_form(p)


def test_each_named_bundle_carried_and_unreferenced_bundles_absent() -> None:
    config = base()
    config["agents"]["researcher"].update(
        skill_bundles=["tools"], knowledge_bundles=["docs"], mcp_bundles=["dev"]
    )
    config["skill_bundles"] = {"tools": {"include": ["a"]}, "unused": {}}
    config["knowledge_bundles"] = {"docs": {"sources": ["https://example.org/x"]}, "stale": {}}
    config["mcp_bundles"] = {"dev": {"servers": []}, "prod": {"servers": ["db"]}}
    p = plan(config)
    assert list(p.fragment["skill_bundles"]) == ["tools"]
    assert list(p.fragment["knowledge_bundles"]) == ["docs"]
    assert list(p.fragment["mcp_bundles"]) == ["dev"]
    assert_export_form(p)


def _mcp_config() -> dict[str, Any]:
    config = base()
    config["agents"]["researcher"]["mcp_bundles"] = ["dev", "ops"]
    config["mcp_bundles"] = {
        "dev": {"servers": ["github", "shell", "browser"]},
        "ops": {"servers": ["shell", "db"], "exclude": ["shell"]},
        "unused": {"servers": ["unreferenced"]},
    }
    config["mcp"]["servers"] = [
        {
            "name": "github",
            "command": "npx",
            "args": ["-y", "gh"],
            "env": {"GITHUB_TOKEN": "ghp_FIRSTGITHUBTOKEN000000"},
        },
        {"name": "shell", "command": "sh"},
        {"name": "browser", "transport": "http", "url": "https://browser.example/mcp"},
        {"name": "db", "command": "dbmcp"},
        {"name": "unreferenced", "command": "nope"},
        {
            "name": "github",
            "command": "impostor-binary",
            "env": {"GITHUB_TOKEN": "ghp_IMPOSTORTOKEN1111111"},
        },
    ]
    return config


def test_exclude_wins_across_bundles() -> None:
    p = plan(_mcp_config())
    names = [server["name"] for server in p.fragment["mcp"]["servers"]]
    assert names == ["github", "browser", "db"]
    assert "shell" not in [s["name"] for s in p.fragment["mcp"]["servers"]]
    # the excluded name stays in the bundle lists (it grants nothing) and is not reported
    assert "shell" in p.fragment["mcp_bundles"]["dev"]["servers"]
    assert not any("servers[" in row.path for row in p.dropped)
    assert_export_form(p)


def test_duplicated_server_name_carries_first_entry_only() -> None:
    p = plan(_mcp_config())
    github = [s for s in p.fragment["mcp"]["servers"] if s["name"] == "github"]
    assert len(github) == 1 and github[0]["command"] == "npx"
    finished = finish_plan(p, [], True, [], 1)
    text = render_config(finished.fragment).decode()
    assert "impostor-binary" not in text and "IMPOSTOR" not in text and "FIRSTGITHUB" not in text
    assert all("impostor" not in flag.detail for flag in finished.risk_flags)
    assert p.required_secrets.count("mcp.servers.github.env.GITHUB_TOKEN") == 1


def test_unreferenced_server_and_provider_absent() -> None:
    p = plan(_mcp_config())
    text = rendered(p)
    assert "unreferenced" not in text and "nope" not in text
    assert "openai" not in p.fragment["providers"]["models"]


def test_server_name_naming_no_server_is_removed_and_reported() -> None:
    config = _mcp_config()
    config["mcp_bundles"]["dev"]["servers"] = ["github", "ghost", "shell", "ghost2"]
    p = plan(config)
    assert p.fragment["mcp_bundles"]["dev"]["servers"] == ["github", "shell"]
    got = rows(p)
    assert got["mcp_bundles.dev.servers[1]"].reason == "source_missing"
    assert got["mcp_bundles.dev.servers[3]"].reason == "source_missing"
    assert_export_form(p)


def test_excluded_name_naming_no_server_is_kept_and_not_reported() -> None:
    config = _mcp_config()
    config["mcp_bundles"]["dev"]["servers"] = ["github", "phantom"]
    config["mcp_bundles"]["ops"]["exclude"] = ["phantom"]
    p = plan(config)
    assert p.fragment["mcp_bundles"]["dev"]["servers"] == ["github", "phantom"]
    assert not any(row.path.startswith("mcp_bundles.dev") for row in p.dropped)
    assert_export_form(p)


def test_every_agent_provider_reference_carried_keyless() -> None:
    config = base()
    config["agents"]["researcher"].update(
        classifier_provider="groq.fast",
        summary_provider="openai.summ",
        tts_provider="elevenlabs.voice",
        transcription_provider="local_whisper.w",
    )
    config["providers"]["models"]["groq"] = {"fast": {"api_key": "gsk_CLASSIFIER000000"}}
    config["providers"]["models"]["openai"]["summ"] = {"api_key": "sk-SUMMARY-0000000"}
    config["providers"]["tts"] = {"elevenlabs": {"voice": {"api_key": "el-TTS-SECRET-0000"}}}
    config["providers"]["transcription"] = {
        # ZeroClaw has no default for a local whisper's uri: without one the closure is invalid
        "local_whisper": {
            "w": {"uri": "http://127.0.0.1:9000", "bearer_token": "bearer-SECRET-0000"}
        }
    }
    p = plan(config)
    providers = p.fragment["providers"]
    assert providers["models"]["groq"]["fast"]["api_key"] == ""
    assert providers["models"]["openai"]["summ"]["api_key"] == ""
    assert providers["tts"]["elevenlabs"]["voice"]["api_key"] == ""
    assert providers["transcription"]["local_whisper"]["w"]["bearer_token"] == ""
    assert "other" not in providers["models"]["openai"]
    assert p.required_secrets == sorted(
        [
            "providers.models.anthropic.main.api_key",
            "providers.models.groq.fast.api_key",
            "providers.models.openai.summ.api_key",
            "providers.transcription.local_whisper.w.bearer_token",
            "providers.tts.elevenlabs.voice.api_key",
        ]
    )
    assert_export_form(p)


def test_runtime_profile_summary_provider_carried() -> None:
    config = base()
    config["runtime_profiles"]["fast"]["context_compression"] = {
        "summary_provider": "mistral.small"
    }
    config["providers"]["models"]["mistral"] = {"small": {"api_key": "mistral-SECRET-0000"}}
    p = plan(config)
    assert p.fragment["providers"]["models"]["mistral"]["small"] == {"api_key": ""}
    assert "providers.models.mistral.small.api_key" in p.required_secrets
    assert_export_form(p)


def _chain(length: int) -> dict[str, Any]:
    """anthropic.main -> openai.p1 -> ... -> openai.p<length>."""
    config = base()
    models = config["providers"]["models"]
    models["anthropic"]["main"]["fallback"] = ["openai.p1"]
    for i in range(1, length + 1):
        models["openai"][f"p{i}"] = {
            "model": f"m{i}",
            "fallback": [f"openai.p{i + 1}"] if i < length else [],
        }
    return config


def test_fallback_chain_of_depth_4_carries_3_levels_and_reports_cut_edge() -> None:
    p = plan(_chain(4))
    carried = p.fragment["providers"]["models"]["openai"]
    assert sorted(carried) == ["p1", "p2", "p3"]
    assert "fallback" not in carried["p3"]  # emptied: dropped, as ZeroClaw drops the key
    row = rows(p)["providers.models.openai.p3.fallback[0]"]
    assert row.reason == "source_missing" and "MAX_FALLBACK_DEPTH" in row.detail
    assert_export_form(p)


def test_fallback_cycle_carried_once() -> None:
    config = _chain(2)
    config["providers"]["models"]["openai"]["p2"]["fallback"] = ["anthropic.main", "openai.p1"]
    p = plan(config)
    models = p.fragment["providers"]["models"]
    assert sorted(models["openai"]) == ["p1", "p2"] and list(models["anthropic"]) == ["main"]
    # usable edges closing the cycle are kept
    assert models["openai"]["p2"]["fallback"] == ["anthropic.main", "openai.p1"]
    assert not any("fallback" in row.path for row in p.dropped)
    assert rendered(p).count("[providers.models.anthropic.main]") == 1
    assert_export_form(p)


def test_unresolvable_fallback_edge_removed_and_reported() -> None:
    config = _chain(1)
    config["providers"]["models"]["openai"]["p1"]["fallback"] = [
        "openai.gone",
        "openai.p1",
        "nofamily.x",
        "bare",
    ]
    p = plan(config)
    assert p.fragment["providers"]["models"]["openai"]["p1"]["fallback"] == ["openai.p1"]
    got = rows(p)
    for i in (0, 2, 3):
        row = got[f"providers.models.openai.p1.fallback[{i}]"]
        assert row.reason == "source_missing" and "target missing" in row.detail
    assert_export_form(p)


def test_fallback_uses_shortest_distance_from_any_root() -> None:
    # p3 is 3 hops from main but 1 hop from the summary provider: its edge stays usable
    config = _chain(4)
    config["runtime_profiles"]["fast"]["context_compression"] = {"summary_provider": "openai.p2"}
    p = plan(config)
    carried = p.fragment["providers"]["models"]["openai"]
    assert sorted(carried) == ["p1", "p2", "p3", "p4"]
    assert carried["p3"]["fallback"] == ["openai.p4"]
    assert_export_form(p)


def test_edge_from_distance_3_removed_even_when_target_is_carried() -> None:
    config = _chain(3)
    config["providers"]["models"]["openai"]["p3"]["fallback"] = ["anthropic.main"]
    p = plan(config)
    assert "fallback" not in p.fragment["providers"]["models"]["openai"]["p3"]
    assert "MAX_FALLBACK_DEPTH" in rows(p)["providers.models.openai.p3.fallback[0]"].detail


def test_empty_fallback_is_dropped_like_zeroclaw_drops_the_key() -> None:
    """ZeroClaw skips an empty ``fallback`` when it serializes: a bundle never says ``[]``."""
    p = plan(_chain(2))  # p2 has fallback = [] in the source
    assert "fallback" not in p.fragment["providers"]["models"]["openai"]["p2"]
    assert "fallback = []" not in rendered(p)
    assert_export_form(p)
    config = _chain(1)  # every edge of p1 is cut: the list empties
    config["providers"]["models"]["openai"]["p1"]["fallback"] = ["openai.gone"]
    p = plan(config)
    assert "fallback" not in p.fragment["providers"]["models"]["openai"]["p1"]
    assert rows(p)["providers.models.openai.p1.fallback[0]"].reason == "source_missing"
    assert_export_form(p)


def test_unknown_schema_keys_removed_and_reported_not_yet_portable() -> None:
    config = _mcp_config()
    config["agents"]["researcher"]["mood"] = "sunny"
    config["agents"]["researcher"]["identity"] = {"colour": "blue"}
    config["providers"]["models"]["anthropic"]["main"]["vendor_secret_thing"] = "xyz"
    config["risk_profiles"]["guarded"]["extra_policy"] = {"a": 1}
    config["mcp"]["servers"][0]["cwd"] = "/home/me"
    config["agents"]["researcher"]["empty_unknown"] = ""
    p = plan(config)
    got = rows(p)
    for path in (
        "agents.researcher.mood",
        "agents.researcher.identity.colour",
        "providers.models.anthropic.main.vendor_secret_thing",
        "risk_profiles.guarded.extra_policy",
        "mcp.servers.github.cwd",
    ):
        assert got[path].reason == "not_yet_portable"
        # a key ZeroClaw added after the schema's revision: the row names that revision
        assert "ZeroClaw master 15d28660ff (2026-08-22)" in got[path].detail, got[path].detail
    assert "agents.researcher.empty_unknown" not in got
    text = rendered(p)
    assert (
        "sunny" not in text
        and "xyz" not in text
        and "/home/me" not in text
        and "colour" not in text
    )
    assert_export_form(p)


def test_unknown_provider_family_refuses_exit_3_naming_the_reference() -> None:
    config = base()
    config["agents"]["researcher"]["model_provider"] = "skynet.main"
    with pytest.raises(InvalidInput) as caught:
        plan(config)
    assert caught.value.code == 3
    assert caught.value.path == "agents.researcher.model_provider"
    assert "skynet" in caught.value.message


def test_unknown_family_of_runtime_summary_provider_refuses() -> None:
    config = base()
    config["runtime_profiles"]["fast"]["context_compression"] = {"summary_provider": "skynet.x"}
    with pytest.raises(InvalidInput) as caught:
        plan(config)
    assert caught.value.path == "runtime_profiles.fast.context_compression.summary_provider"


def test_dangling_reference_needed_by_closure_refuses_naming_the_field() -> None:
    config = base()
    config["agents"]["researcher"]["runtime_profile"] = "missing"
    p = plan(config)
    with pytest.raises(
        InvalidInput, match=r"^closure invalid: agents\.researcher\.runtime_profile: "
    ) as caught:
        finish_plan(p, [], True, [], 1)
    assert caught.value.code == 3


def test_errors_outside_the_closure_do_not_block() -> None:
    config = base()
    config["agents"]["other"]["risk_profile"] = "does-not-exist"
    config["providers"]["models"]["openai"]["other"]["temperature"] = "hot"
    config["mcp"]["servers"] = [{"name": "broken", "transport": "http"}]
    finish_plan(plan(config), [], True, [], 1)


def test_wrong_type_in_closure_refuses_naming_the_field() -> None:
    config = base()
    config["runtime_profiles"]["fast"]["max_tool_iterations"] = "many"
    with pytest.raises(InvalidInput, match=r"runtime_profiles\.fast\.max_tool_iterations"):
        finish_plan(plan(config), [], True, [], 1)


def test_planning_does_not_change_the_config() -> None:
    config = _mcp_config()
    before = copy.deepcopy(config)
    plan(config)
    assert config == before


# --- 02 §3: every drop row --------------------------------------------------------------------


def test_channels_removed_host_specific() -> None:
    config = base()
    config["agents"]["researcher"]["channels"] = ["telegram.main"]
    p = plan(config)
    assert "channels" not in agent(p)
    assert rows(p)["agents.researcher.channels"].reason == "host_specific"


def test_delegates_removed_relational() -> None:
    config = base()
    config["agents"]["researcher"]["delegates"] = ["other", {"agent": "other", "mode": "x"}]
    p = plan(config)
    assert "delegates" not in agent(p)
    assert rows(p)["agents.researcher.delegates"].reason == "relational"


def test_cron_jobs_removed_not_yet_portable() -> None:
    config = base()
    config["agents"]["researcher"]["cron_jobs"] = ["nightly"]
    p = plan(config)
    assert "cron_jobs" not in agent(p)
    assert rows(p)["agents.researcher.cron_jobs"].reason == "not_yet_portable"


@pytest.mark.parametrize("a2a", [{"published": True}, {"exposed_skills": ["search"]}])
def test_a2a_removed_default_closed_when_published_or_exposed(a2a: dict[str, Any]) -> None:
    config = base()
    config["agents"]["researcher"]["a2a"] = a2a
    p = plan(config)
    assert "a2a" not in agent(p)
    assert rows(p)["agents.researcher.a2a"].reason == "default_closed"


def test_unpopulated_fields_are_removed_without_a_row() -> None:
    config = base()
    config["agents"]["researcher"].update(
        channels=[],
        delegates=[],
        cron_jobs=[],
        a2a={"published": False, "exposed_skills": []},
        delegate_same_risk_profile=False,
    )
    config["agents"]["researcher"]["workspace"] = {"path": "", "access": {}, "read_memory_from": []}
    config["risk_profiles"]["guarded"]["approval_route"] = {}
    p = plan(config)
    assert p.dropped == []
    assert "a2a" not in agent(p)
    assert "approval_route" not in p.fragment["risk_profiles"]["guarded"]


@pytest.mark.parametrize("value", [True, None])
def test_delegate_same_risk_profile_forced_false(value: bool | None) -> None:
    config = base()
    if value is not None:
        config["agents"]["researcher"]["delegate_same_risk_profile"] = value
    p = plan(config)
    assert agent(p)["delegate_same_risk_profile"] is False
    assert rows(p)["agents.researcher.delegate_same_risk_profile"].reason == "relational"
    assert "delegate_same_risk_profile = false" in rendered(p)


def test_delegate_same_risk_profile_already_false_not_reported() -> None:
    config = base()
    config["agents"]["researcher"]["delegate_same_risk_profile"] = False
    p = plan(config)
    assert agent(p)["delegate_same_risk_profile"] is False
    assert "agents.researcher.delegate_same_risk_profile" not in rows(p)


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("path", "/srv/elsewhere", "host_specific"),
        ("access", {"other": "read"}, "relational"),
        ("read_memory_from", ["other"], "relational"),
    ],
)
def test_workspace_fields_removed(key: str, value: Any, reason: str) -> None:
    config = base()
    config["agents"]["researcher"]["workspace"] = {key: value, "unrestricted_filesystem": True}
    p = plan(config)
    assert agent(p)["workspace"] == {"unrestricted_filesystem": True}
    assert rows(p)[f"agents.researcher.workspace.{key}"].reason == reason


def test_configured_workspace_path_is_the_copy_source() -> None:
    config = base()
    config["agents"]["researcher"]["workspace"] = {"path": "elsewhere/ws"}
    p = plan(config)
    assert p.workspace == ROOT / "elsewhere/ws" and not p.workspace_is_default
    default = plan(base())
    assert (
        default.workspace == ROOT / "agents/researcher/workspace" and default.workspace_is_default
    )


@pytest.mark.parametrize(
    "bad",
    [
        "/etc/passwd",
        "../outside/aieos.json",
        "persona/../../x.json",
        "memory/aieos.json",
        "./memory/x.json",
        "persona/CON.json",
        "persona\\a.json",
        "memory",
    ],
)
def test_unsafe_identity_path_dropped_host_specific(bad: str) -> None:
    config = base()
    config["agents"]["researcher"]["identity"] = {"format": "aieos", "aieos_path": bad}
    p = plan(config)
    assert "aieos_path" not in agent(p).get("identity", {})
    assert p.identity_path is None
    assert rows(p)["agents.researcher.identity.aieos_path"].reason == "host_specific"


def test_safe_identity_path_travels_normalised() -> None:
    config = base()
    config["agents"]["researcher"]["identity"] = {
        "format": "aieos",
        "aieos_path": "./persona//aieos.json",
    }
    p = plan(config)
    assert agent(p)["identity"] == {"format": "aieos", "aieos_path": "persona/aieos.json"}
    assert p.identity_path == "persona/aieos.json"
    finished = finish_plan(p, [], True, [], 1)
    assert (
        finished.fragment["agents"]["researcher"]["identity"]["aieos_path"] == "persona/aieos.json"
    )


def test_identity_missing_after_copy_dropped_source_missing() -> None:
    config = base()
    config["agents"]["researcher"]["identity"] = {"aieos_path": "persona/aieos.json"}
    finished = finish_plan(plan(config), [], False, [], 1)
    assert "identity" not in finished.fragment["agents"]["researcher"]
    row = {r.path: r for r in finished.dropped}["agents.researcher.identity.aieos_path"]
    assert row.reason == "source_missing"


def test_approval_route_removed_host_specific() -> None:
    config = base()
    config["risk_profiles"]["guarded"]["approval_route"] = {
        "approver_channel": "telegram.main",
        "timeout_secs": 30,
    }
    p = plan(config)
    assert "approval_route" not in p.fragment["risk_profiles"]["guarded"]
    assert rows(p)["risk_profiles.guarded.approval_route"].reason == "host_specific"
    assert "telegram" not in rendered(p)
    assert_export_form(p)


def _skills(directory: str | None, alias: str = "tools") -> dict[str, Any]:
    config = base()
    config["agents"]["researcher"]["skill_bundles"] = [alias]
    config["skill_bundles"] = {alias: {} if directory is None else {"directory": directory}}
    return config


def test_skill_bundle_in_shared_is_copied_with_its_filter() -> None:
    config = _skills("shared/custom/tools")
    config["skill_bundles"]["tools"].update(include=["a", "b"], exclude=["b"])
    p = plan(config)
    assert p.skill_sources[0].directory == ROOT / "shared/custom/tools"
    assert (
        p.skill_sources[0].wants("a")
        and not p.skill_sources[0].wants("b")
        and not p.skill_sources[0].wants("c")
    )
    # only shared/skills/<name> travels (bundler.rules.skillfolder): the content does, the
    # folder not
    assert "directory" not in p.fragment["skill_bundles"]["tools"]
    assert rows(p)["skill_bundles.tools.directory"].reason == "host_specific"
    assert "skills/tools" not in rows(p)


def test_skill_directory_under_the_skills_root_travels() -> None:
    p = plan(_skills("shared/skills/toolbox"))
    assert p.fragment["skill_bundles"]["tools"]["directory"] == "shared/skills/toolbox"
    assert "skill_bundles.tools.directory" not in rows(p)


def test_default_skill_bundle_folder_is_under_shared_skills() -> None:
    p = plan(_skills(None))
    assert [(s.alias, s.directory) for s in p.skill_sources] == [
        ("tools", ROOT / "shared/skills/tools")
    ]


def test_absolute_skill_directory_inside_shared_removed_content_copied() -> None:
    p = plan(_skills(str(ROOT / "shared/skills/tools")))
    assert "directory" not in p.fragment["skill_bundles"]["tools"]
    assert rows(p)["skill_bundles.tools.directory"].reason == "host_specific"
    assert [s.alias for s in p.skill_sources] == ["tools"]


@pytest.mark.parametrize(
    "directory", ["/opt/skills/tools", "../elsewhere/tools", "shared/../tools", "~/skills"]
)
def test_skill_directory_outside_shared_removed_and_content_not_copied(directory: str) -> None:
    p = plan(_skills(directory))
    assert "directory" not in p.fragment["skill_bundles"]["tools"]
    got = rows(p)
    assert got["skill_bundles.tools.directory"].reason == "host_specific"
    assert got["skills/tools"].reason == "host_specific"
    assert p.skill_sources == []
    assert_export_form(p)


def test_skill_bundle_alias_con_not_planned_for_copy() -> None:
    p = plan(_skills(None, alias="con"))
    assert "con" in p.fragment["skill_bundles"]
    assert rows(p)["skill_bundles.con"].reason == "host_specific"
    assert p.skill_sources == []


def test_skill_bundle_rows_from_the_copier_are_merged_and_sorted() -> None:
    p = plan(_skills(None))
    extra = [
        Dropped("skills/tools/loose.txt", "not_yet_portable", "not a skill"),
        Dropped("workspace/db.sqlite", "not_yet_portable", "live store"),
    ]
    finished = finish_plan(p, ["tools"], True, extra, 1)
    paths = [(row.path, row.reason) for row in finished.dropped]
    assert paths == sorted(paths)
    assert ("skills/tools/loose.txt", "not_yet_portable") in paths
    assert ("workspace/memory", "not_yet_portable") in paths
    assert ("workspace/MEMORY_SNAPSHOT.md", "private_data") in paths


def test_format_2_has_no_memory_rows() -> None:
    finished = finish_plan(plan(base()), [], True, [], 2)
    assert not any(row.path.startswith("workspace/") for row in finished.dropped)


def test_dropped_sorted_by_path_then_reason() -> None:
    config = _mcp_config()
    config["agents"]["researcher"].update(
        channels=["telegram.main"], delegates=["other"], cron_jobs=["nightly"], zzz=1
    )
    config["mcp_bundles"]["dev"]["servers"].append("ghost")
    p = plan(config)
    keys = [(row.path, row.reason) for row in p.dropped]
    assert keys == sorted(keys) and len(keys) >= 5


# --- 02 §4: default pruning -------------------------------------------------------------------


def test_agent_runtime_bundle_and_server_defaults_pruned() -> None:
    config = _mcp_config()
    config["agents"]["researcher"].update(
        enabled=True,
        classifier_provider="",
        memory={"backend": "sqlite"},
        workspace={"unrestricted_filesystem": False},
    )
    config["runtime_profiles"]["fast"].update(
        max_actions_per_hour=20,
        # an Option upstream: no default, so a set value travels even when it says "off"
        parallel_tools=False,
        # ZeroClaw's ContextCompressionConfig defaults
        context_compression={"enabled": False, "threshold_ratio": 0.5},
    )
    config["mcp"]["servers"][1].update(transport="stdio", args=[], tool_timeout_secs=30)
    config["mcp_bundles"]["ops"]["exclude"] = ["shell"]
    p = plan(config)
    researcher = agent(p)
    for key in ("enabled", "classifier_provider", "memory", "workspace"):
        assert key not in researcher
    assert p.fragment["runtime_profiles"]["fast"] == {
        "max_tool_iterations": 12,
        "parallel_tools": False,
    }
    shell_server = next(s for s in _mcp_config()["mcp"]["servers"] if s["name"] == "db")
    carried_db = next(s for s in p.fragment["mcp"]["servers"] if s["name"] == "db")
    assert carried_db == {"name": "db", "command": shell_server["command"]}
    assert_export_form(p)


def test_value_of_other_type_than_default_not_pruned() -> None:
    config = base()
    config["runtime_profiles"]["fast"]["threshold_ratio_unknown"] = 1
    # the default is the integer 3: the float 3.0 is another value for pruning
    config["runtime_profiles"]["fast"]["context_compression"] = {"max_passes": 3.0}
    p = plan(config)
    assert p.fragment["runtime_profiles"]["fast"]["context_compression"] == {"max_passes": 3.0}


def test_providers_and_risk_profiles_never_pruned() -> None:
    config = base()
    config["providers"]["models"]["anthropic"]["main"].update(
        requires_openai_auth=False, fallback=[], fallback_models=[]
    )
    config["risk_profiles"]["guarded"] = {
        "level": "supervised",
        "workspace_only": True,
        "allowed_commands": [],
    }
    p = plan(config)
    main = p.fragment["providers"]["models"]["anthropic"]["main"]
    assert (
        main["requires_openai_auth"] is False
        and main["fallback_models"] == []
        and main["api_key"] == ""
    )
    assert p.fragment["risk_profiles"]["guarded"] == {
        "level": "supervised",
        "workspace_only": True,
        "allowed_commands": [],
    }


def test_carried_top_level_entry_always_present() -> None:
    config = base()
    config["runtime_profiles"]["fast"] = {"max_tool_iterations": 0}  # ZeroClaw's default
    config["agents"]["researcher"]["knowledge_bundles"] = ["empty"]
    config["knowledge_bundles"] = {"empty": {"sources": [], "tags": []}}
    p = plan(config)
    assert p.fragment["runtime_profiles"]["fast"] == {}
    assert p.fragment["knowledge_bundles"]["empty"] == {}
    text = rendered(p)
    assert "[runtime_profiles.fast]" in text and "[knowledge_bundles.empty]" in text
    assert_export_form(p)


# --- 02 §5.1-5.2: scrubbing inside the planner ------------------------------------------------


def test_dotted_map_key_gives_required_secret_path_in_zeroclaw_raw_form() -> None:
    config = base()
    config["providers"]["models"]["anthropic"]["main"]["extra_headers"] = {
        "X-Org.Id": "org-secret-value-0000",
        "Plain": "",
    }
    p = plan(config)
    path = "providers.models.anthropic.main.extra_headers.X-Org.Id"
    assert path in p.required_secrets
    assert parse_path(path) == [
        "providers",
        "models",
        "anthropic",
        "main",
        "extra_headers",
        "X-Org.Id",
    ]
    assert "providers.models.anthropic.main.extra_headers.Plain" not in p.required_secrets
    assert p.fragment["providers"]["models"]["anthropic"]["main"]["extra_headers"] == {
        "X-Org.Id": "",
        "Plain": "",
    }


def test_server_secret_maps_scrubbed_by_server_name() -> None:
    config = _mcp_config()
    config["mcp"]["servers"][2]["headers"] = {"Authorization": "Bearer browser-secret-0000"}
    p = plan(config)
    assert "mcp.servers.browser.headers.Authorization" in p.required_secrets
    assert "mcp.servers.github.env.GITHUB_TOKEN" in p.required_secrets
    assert "browser-secret" not in rendered(p)


def test_required_secrets_sorted_and_unique() -> None:
    config = _mcp_config()
    config["runtime_profiles"]["fast"]["context_compression"] = {
        "summary_provider": "anthropic.main"
    }
    p = plan(config)
    assert p.required_secrets == sorted(set(p.required_secrets))
    assert p.required_secrets.count("providers.models.anthropic.main.api_key") == 1


def test_empty_secret_not_required() -> None:
    config = base()
    config["providers"]["models"]["anthropic"]["main"]["api_key"] = ""
    assert plan(config).required_secrets == []


def test_ciphertext_in_secret_field_is_scrubbed_like_any_secret() -> None:
    config = base()
    config["providers"]["models"]["anthropic"]["main"]["api_key"] = "enc2:AAAABBBBCCCC"
    p = plan(config)
    assert p.required_secrets == ["providers.models.anthropic.main.api_key"]
    assert "enc2:" not in rendered(p)


@pytest.mark.parametrize(
    ("where", "path"),
    [
        (
            ("providers", "models", "anthropic", "main", "model"),
            "providers.models.anthropic.main.model",
        ),
        (
            ("agents", "researcher", "identity", "aieos_inline"),
            "agents.researcher.identity.aieos_inline",
        ),
    ],
)
def test_ciphertext_outside_secret_field_aborts_naming_the_path(
    where: tuple[str, ...], path: str
) -> None:
    config = base()
    node = config
    for segment in where[:-1]:
        node = node.setdefault(segment, {})
    node[where[-1]] = "enc2:deadbeefcafe"
    with pytest.raises(Refused) as caught:
        plan(config)
    assert caught.value.code == 1
    assert caught.value.path == path
    assert "deadbeef" not in caught.value.message


def test_ciphertext_in_list_item_aborts_naming_the_index() -> None:
    config = base()
    config["risk_profiles"]["guarded"]["allowed_commands"] = ["ls", "enc:xyz"]
    with pytest.raises(Refused) as caught:
        plan(config)
    assert caught.value.path == "risk_profiles.guarded.allowed_commands[1]"


def test_ciphertext_outside_the_closure_does_not_abort() -> None:
    config = base()
    config["providers"]["models"]["openai"]["other"]["model"] = "enc:outside"
    plan(config)


def test_non_portable_agent_alias_is_reported_as_warning() -> None:
    config = base()
    config["agents"]["con"] = config["agents"].pop("researcher")
    p = plan(config, "con")
    assert any("portable" in warning for warning in p.warnings)


def test_raw_required_secret_path_is_accepted_by_config_set(tmp_path: Path) -> None:
    from support.installs import MINIMAL_CONFIG, make_install, opened_config, run_cli

    text = (
        MINIMAL_CONFIG
        + "\n[providers.models.anthropic.main.extra_headers]\n"
        + '"X-Org.Id" = "org-secret-0000000000"\n'
    )
    root = make_install(tmp_path, text)
    config = loads(text)
    p = plan_closure(config, "researcher", root)
    path = "providers.models.anthropic.main.extra_headers.X-Org.Id"
    assert path in p.required_secrets
    done = run_cli(["--install", str(root), "config", "set", path, "new-org-value"])
    assert done.returncode == 0, done.stderr
    opened = opened_config(root)  # stored sealed: opened as ZeroClaw reads it
    assert opened["providers"]["models"]["anthropic"]["main"]["extra_headers"] == {
        "X-Org.Id": "new-org-value"
    }


def test_server_entries_that_are_not_tables_grant_nothing_and_do_not_hide_others() -> None:
    config = _mcp_config()
    config["mcp"]["servers"][0:0] = ["junk", {"name": ["github"], "command": "list-name"}, 7]
    p = plan(config)
    names = [server["name"] for server in p.fragment["mcp"]["servers"]]
    assert names == ["github", "browser", "db"]
    assert p.fragment["mcp"]["servers"][0]["command"] == "npx"


def test_bench_planner_builds_both_configs_and_reports_a_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_planner", Path(__file__).resolve().parents[2] / "tools" / "bench_planner.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    big = bench.build_config(5000, 5000, 2000)
    assert len(big["agents"]) == 5000 and len(big["mcp"]["servers"]) == 2000
    assert sum(len(v) for v in big["providers"]["models"].values()) >= 5000
    small_plan = plan_closure(bench.build_config(50, 50, 20), bench.AGENT, ROOT)
    big_plan = plan_closure(big, bench.AGENT, ROOT)
    assert render_config(small_plan.fragment) == render_config(big_plan.fragment)  # same closure
    assert bench.main(["--repeat", "1", "--inner", "1"]) in (0, 1)
    assert "ratio" in capsys.readouterr().out


def test_planning_one_agent_does_not_grow_with_the_install() -> None:
    """P5 (06 §1): planning one agent of a 5,000-agent install costs about what it costs in a
    50-agent one (bar 3x). A per-plan walk over every agent (a skill-folder check gathering
    every workspace) once made it 55x; the bound here is loose enough for a loaded machine."""
    import importlib.util
    import statistics
    import time

    spec = importlib.util.spec_from_file_location(
        "bench_planner", Path(__file__).resolve().parents[2] / "tools" / "bench_planner.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    big = bench.build_config(5000, 5000, 2000)
    small = bench.build_config(50, 50, 20)

    def per_plan(config: dict[str, Any]) -> float:
        start = time.perf_counter()
        for _ in range(20):
            plan_closure(config, bench.AGENT, ROOT)
        return (time.perf_counter() - start) / 20

    per_plan(big), per_plan(small)  # warm the schema caches
    ratios = [per_plan(big) / per_plan(small) for _ in range(5)]
    assert statistics.median(ratios) < 6, ratios


def test_unknown_key_inside_approval_route_is_not_reported_twice() -> None:
    config = base()
    config["risk_profiles"]["guarded"]["approval_route"] = {
        "approver_channel": "telegram.main",
        "odd": 1,
    }
    p = plan(config)
    assert [row.path for row in p.dropped if "approval_route" in row.path] == [
        "risk_profiles.guarded.approval_route"
    ]


def test_serde_alias_key_travels_under_its_field_name() -> None:
    """ZeroClaw reads ``allowed_paths`` as ``allowed_roots`` and writes it back under that name."""
    config = base()
    config["risk_profiles"]["guarded"]["allowed_paths"] = ["/srv/data"]
    config["providers"]["models"]["azure"] = {"a": {"azure_openai_resource": "contoso"}}
    config["agents"]["researcher"]["classifier_provider"] = "azure.a"
    p = plan(config)
    profile = p.fragment["risk_profiles"]["guarded"]
    assert profile["allowed_roots"] == ["/srv/data"] and "allowed_paths" not in profile
    assert p.fragment["providers"]["models"]["azure"]["a"] == {"resource": "contoso"}
    assert not [row for row in p.dropped if row.reason == "not_yet_portable"]
    assert_export_form(p)


def test_serde_alias_beside_its_field_is_dropped_not_merged() -> None:
    """Both spellings at once is a duplicate field to ZeroClaw: the field's own name wins."""
    config = base()
    config["risk_profiles"]["guarded"].update(allowed_roots=["/a"], allowed_path=["/b"])
    p = plan(config)
    assert p.fragment["risk_profiles"]["guarded"]["allowed_roots"] == ["/a"]
    assert "allowed_path" not in p.fragment["risk_profiles"]["guarded"]
    assert rows(p)["risk_profiles.guarded.allowed_path"].reason == "not_yet_portable"


def test_secrets_of_tables_outside_the_closure_are_never_required_secrets() -> None:
    """Every #[secret] of ZeroClaw is marked, channels and gateway too; only the closure's
    tables travel, so only their secrets are a bundle's required_secrets."""
    config = _mcp_config()
    config["channels"] = {"telegram": {"main": {"bot_token": "123456:telegram-token-value"}}}
    config["gateway"] = {"paired_tokens": ["paired-token-0123456789"]}
    config["memory"] = {"embedding_api_key": "emb-key-0123456789abcdef"}
    assert schema.is_secret(["channels", "telegram", "main", "bot_token"])
    p = plan(config)
    assert not [s for s in p.required_secrets if s.startswith(("channels", "gateway", "memory"))]
    assert p.required_secrets == plan(_mcp_config()).required_secrets
    assert "telegram-token-value" not in rendered(p)
