"""The config schema is the single source of secret marks and defaults (01 §3)."""

from __future__ import annotations

import json

import jsonschema

from bundler.rules import schema


def test_config_schema_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(schema.config_schema())


def test_secret_fields_are_marked() -> None:
    assert schema.is_secret(["providers", "models", "anthropic", "main", "api_key"])
    assert schema.is_secret(["providers", "tts", "elevenlabs", "voice1", "api_key"])
    assert schema.is_secret(["providers", "transcription", "local_whisper", "w", "bearer_token"])


def test_every_value_of_a_secret_map_is_secret() -> None:
    assert schema.is_secret(["mcp", "servers", "github", "env", "GITHUB_TOKEN"])
    assert schema.is_secret(["mcp", "servers", "remote", "headers", "Authorization"])
    assert schema.is_secret(["providers", "models", "openai", "o", "extra_headers", "X-Org.Id"])


def test_non_secret_fields_are_not_secret() -> None:
    assert not schema.is_secret(["providers", "models", "anthropic", "main", "uri"])
    assert not schema.is_secret(["mcp", "servers", "github", "command"])
    assert not schema.is_secret(["agents", "a", "model_provider"])


def test_bearer_token_exists_only_for_local_whisper() -> None:
    assert schema.resolve(["providers", "transcription", "openai", "t", "bearer_token"])[1] is None


def test_field_names_accept_dashes_for_underscores_but_aliases_are_exact() -> None:
    canonical, node, secret = schema.resolve(
        ["providers", "models", "anthropic", "my-main", "api-key"]
    )
    assert canonical == ["providers", "models", "anthropic", "my-main", "api_key"]
    assert secret and node is not None


def test_unknown_keys_and_families_are_not_described() -> None:
    assert schema.resolve(["agents", "a", "no_such_key"])[1] is None
    models = schema.child(schema.child(schema.config_schema(), "providers"), "models")
    assert models is not None and "nosuchfamily" not in models["properties"]


def test_defaults_come_from_the_schema() -> None:
    agent = schema.resolve(["agents", "a"])[1]
    assert schema.default_of(schema.child(agent, "delegate_same_risk_profile")) is True
    assert schema.default_of(schema.resolve(["agents", "a", "memory", "backend"])[1]) == "sqlite"
    # ZeroClaw's own defaults (RuntimeProfileConfig's impl Default), not the spec's summary
    assert (
        schema.default_of(schema.resolve(["runtime_profiles", "r", "max_tool_iterations"])[1]) == 0
    )
    shell = schema.resolve(["runtime_profiles", "r", "shell_timeout_secs"])[1]
    assert schema.default_of(shell) == 60
    # an Option<T> field has no default: absent is None, so a set value is never pruned
    provider_key = schema.resolve(["providers", "models", "openai", "o", "api_key"])[1]
    assert provider_key is not None and not schema.has_default(provider_key)


def test_default_of_returns_a_fresh_copy() -> None:
    node = schema.resolve(["agents", "a", "skill_bundles"])[1]
    first = schema.default_of(node)
    first.append("mutated")
    assert schema.default_of(node) == []


def test_schema_ships_as_json_readable_by_the_loader() -> None:
    text = json.dumps(schema.load("config.schema.json"))
    assert '"x-secret": true' in text
