"""The config schema is ZeroClaw's: generated from its Rust source on master (01 §3).

``manifests/config.schema.json`` is the output of ``tools/zeroclaw_schema.py`` run on
``../shared/interop/zeroclaw/upstream-master`` with ``manifests/config.schema.overlay.json``;
these tests regenerate it and compare byte for byte, so neither a hand edit of the generated file
nor a stale one goes unnoticed. The tests that read the Rust source skip where ``../shared`` is
absent; the ones that read the checked-in schema run everywhere.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from support.zeroclaw_golden import UPSTREAM_MASTER, UPSTREAM_PR

from bundler.rules import schema

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = UPSTREAM_MASTER.resolve()
GENERATOR = REPO / "tools" / "zeroclaw_schema.py"

needs_upstream = pytest.mark.skipif(
    not (UPSTREAM / "crates" / "zeroclaw-config" / "src" / "schema.rs").is_file()
    or not (UPSTREAM_PR / "crates" / "zeroclaw-config" / "src" / "schema.rs").is_file(),
    reason=f"ZeroClaw's source is not at {UPSTREAM} (../shared is absent)",
)


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("zeroclaw_schema", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


FACTS_PATH = REPO / "tests" / "fixtures" / "zeroclaw" / "config-facts.json"
# ZeroClaw's family lists and defaults as data the generator extracted from the same source
FACTS = json.loads(FACTS_PATH.read_text(encoding="utf-8"))


@needs_upstream
def test_checked_in_schema_is_exactly_what_the_generator_writes() -> None:
    produced = generator().generate(UPSTREAM)
    checked_in = (REPO / "manifests" / "config.schema.json").read_text(encoding="utf-8")
    assert produced == checked_in, "run tools/zeroclaw_schema.py and commit the result"


@needs_upstream
def test_generator_cli_check_mode_agrees() -> None:
    done = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


@needs_upstream
def test_the_facts_the_tests_read_are_what_the_generator_extracts() -> None:
    assert generator().facts(UPSTREAM) == FACTS_PATH.read_text(encoding="utf-8")


def test_every_family_of_every_category_is_zeroclaws() -> None:
    providers = schema.config_schema()["properties"]["providers"]["properties"]
    models = providers["models"]
    assert list(models["properties"]) == FACTS["families"]["models"]
    assert len(models["properties"]) == 76
    assert "grok_cli" in models["properties"]
    assert models["propertyNames"]["enum"] == list(models["properties"])
    assert "openai_codex" not in models["properties"]
    assert {"qwen", "moonshot", "glm"} <= set(models["properties"])
    for category in ("tts", "transcription"):
        assert list(providers[category]["properties"]) == FACTS["families"][category]
    assert FACTS["families"]["tts"] == ["openai", "elevenlabs", "google", "edge", "piper"]
    assert schema.config_schema()["x-zeroclaw-revision"] == FACTS["revision"]


def test_secret_marks_come_from_hash_secret_on_every_family() -> None:
    models = schema.config_schema()["properties"]["providers"]["properties"]["models"]
    for family in models["properties"]:
        for name in ("api_key", "extra_headers"):
            assert schema.is_secret(["providers", "models", family, "a", name]), (family, name)
        assert not schema.is_secret(["providers", "models", family, "a", "model"]), family
    # ``#[secret(category = ...)]`` counts as well as a bare ``#[secret]``
    assert schema.is_secret(["providers", "models", "qwen", "a", "oauth_refresh_token"])
    assert schema.is_secret(["providers", "models", "gemini", "a", "oauth_client_secret"])
    assert schema.is_secret(["mcp", "servers", "s", "env", "TOKEN"])


def test_reference_newtypes_become_the_x_ref_vocabulary_bundler_reads() -> None:
    def ref(*segments: str) -> object:
        node = schema.resolve(segments)[1]
        assert node is not None, segments
        return node.get("x-ref")

    assert ref("agents", "a", "model_provider") == "providers.models"
    assert ref("agents", "a", "tts_provider") == "providers.tts"
    assert ref("agents", "a", "transcription_provider") == "providers.transcription"
    assert ref("agents", "a", "risk_profile") == "risk_profiles"
    assert ref("agents", "a", "runtime_profile") == "runtime_profiles"
    assert ref("agents", "a", "channels") == "channels"
    assert ref("providers", "models", "qwen", "a", "fallback") == "providers.models"
    assert ref("runtime_profiles", "r", "context_compression", "summary_provider") == (
        "providers.models"
    )
    # plain strings upstream, marked by the overlay
    assert ref("agents", "a", "skill_bundles") == "skill_bundles"
    assert ref("agents", "a", "cron_jobs") == "cron"


def test_zeroclaw_keys_bundler_lacked_are_described() -> None:
    for segments in (
        ("runtime_profiles", "r", "agentic"),
        ("runtime_profiles", "r", "max_context_tokens"),
        ("runtime_profiles", "r", "thinking", "default_level"),
        ("providers", "models", "openai", "a", "pricing"),
        ("providers", "models", "groq", "a", "native_tools"),
        ("providers", "models", "ollama", "a", "num_ctx"),
        ("agents", "a", "acp_enable_mcp"),
        ("agents", "a", "precheck", "enabled"),
    ):
        assert schema.resolve(segments)[1] is not None, segments


def test_generated_schema_keeps_only_keywords_bundler_checks() -> None:
    """The compiled checker must still compile it (it falls back to jsonschema otherwise)."""
    from bundler.rules import schemacheck

    assert schemacheck.unsupported_keyword(schema.config_schema()) is None


@needs_upstream
def test_overlay_path_naming_nothing_refuses_to_generate(tmp_path: Path) -> None:
    module = generator()
    overlay = json.loads((REPO / "manifests" / "config.schema.overlay.json").read_text())
    overlay["paths"]["agents.*.no_such_field"] = {"minimum": 1}
    bogus = tmp_path / "overlay.json"
    bogus.write_text(json.dumps(overlay))
    with pytest.raises(module.SourceError, match="no_such_field"):
        module.generate(UPSTREAM, bogus)


@needs_upstream
def test_every_key_the_pull_requests_crate_has_master_has_too() -> None:
    """Master wins where the two crates differ; a key only the pull request had would have to
    stay accepted, so the schema generated from master must describe each of the PR's keys."""

    def paths(node: object, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
        if not isinstance(node, dict):
            return
        yield prefix
        for name, sub in node.get("properties", {}).items():
            yield from paths(sub, (*prefix, name))
        for key in ("additionalProperties", "items"):
            yield from paths(node.get(key), (*prefix, "*"))

    module = generator()
    pr = set(paths(module.generate_tree(UPSTREAM_PR.resolve())))
    master = set(paths(module.generate_tree(UPSTREAM)))
    assert pr <= master, sorted(pr - master)[:10]
    assert ("providers", "models", "grok_cli", "*", "working_directory") in master - pr
    assert ("mcp", "servers", "*", "tls_ca_cert_path") in master - pr


def _secret_paths(node: object, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if not isinstance(node, dict):
        return
    if node.get("x-secret"):
        yield prefix
    for name, sub in node.get("properties", {}).items():
        yield from _secret_paths(sub, (*prefix, name))
    for key in ("additionalProperties", "items"):
        yield from _secret_paths(node.get(key), (*prefix, "*"))


CLOSURE_TABLES = {
    "agents",
    "providers",
    "risk_profiles",
    "runtime_profiles",
    "skill_bundles",
    "knowledge_bundles",
    "mcp_bundles",
    "mcp",
}


def test_every_secret_of_every_table_is_marked_not_only_the_closures() -> None:
    """``#[secret]`` holds in all of ZeroClaw: channels, gateway, memory... are marked too, so
    ``config set channels.telegram.main.bot_token`` knows the value is a secret."""
    found = list(_secret_paths(schema.config_schema()))
    closure = [p for p in found if p[0] in CLOSURE_TABLES]
    assert len(closure) == 169
    elsewhere = {".".join(p) for p in found if p[0] not in CLOSURE_TABLES}
    assert {
        "channels.telegram.*.bot_token",
        "channels.slack.*.app_token",
        "gateway.paired_tokens",
        "memory.embedding_api_key",
        "tunnel.ngrok.auth_token",
        "model_routes.*.api_key",
    } <= elsewhere
    assert schema.is_secret(["channels", "telegram", "main", "bot_token"])
    assert schema.is_secret(["model_routes", "0", "api_key"])
    assert not schema.is_secret(["channels", "telegram", "main", "allowed_users"])


@needs_upstream
def test_each_hash_secret_field_of_the_crate_is_marked_somewhere() -> None:
    """Every ``#[secret]`` field declared in master's crate (94) reaches the schema."""
    module = generator()
    source = module.Source(UPSTREAM)
    declared = {
        (s.name, f.name)
        for s in source.structs.values()
        for f in s.fields
        if module.is_secret_field(f)
    }
    assert len(declared) == FACTS["secret_fields"] == 94
    marked = {p[-1] for p in _secret_paths(schema.config_schema())}
    wire = {field for _struct, field in declared}
    assert wire <= marked, sorted(wire - marked)
