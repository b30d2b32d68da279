"""01 §6 "no message ever contains a secret", for the config commands, on random configs."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from typing import Any

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile_configs import base_config

from bundler.cli import main

# an alphabet no other part of the config, path or message uses, so any hit is a leak
secret_text = st.text(alphabet="ΩЖΨЯ", min_size=16, max_size=24)

SECRET_PATHS = [
    ("providers", "models", "anthropic", "main", "api_key"),
    ("providers", "models", "openai", "backup", "api_key"),
    ("providers", "transcription", "local_whisper", "desk", "bearer_token"),
]


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue() + err.getvalue()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    secrets=st.lists(secret_text, min_size=6, max_size=6, unique=True),
    break_refs=st.booleans(),
    wrong_types=st.booleans(),
)
def test_config_commands_never_print_a_secret(
    tmp_path_factory: Any, secrets: list[str], break_refs: bool, wrong_types: bool
) -> None:
    config: dict[str, Any] = copy.deepcopy(base_config())
    for path, secret in zip(SECRET_PATHS, secrets, strict=False):
        target = config
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = secret
    config["mcp"]["servers"][0]["env"]["GITHUB_TOKEN"] = secrets[3]
    config["mcp"]["servers"][1]["headers"]["Authorization"] = secrets[4]
    config["providers"]["models"]["openai"]["backup"]["extra_headers"] = {"X-Key": secrets[5]}
    if break_refs:
        config["agents"]["researcher"].update(model_provider="openai.gone", risk_profile="")
    if wrong_types:
        config["mcp"]["servers"][1]["url"] = "ftp://x"
        config["agents"]["writer"]["enabled"] = "maybe"
    root = tmp_path_factory.mktemp("install")
    (root / "config.toml").write_text(tomli_w.dumps(config), encoding="utf-8")
    install = ["--install", str(root)]
    outputs = []
    for argv in (
        ["config", "validate"],
        ["config", "validate", "--json"],
        ["agents", "list", "--json"],
        ["config", "get", "providers"],
        ["config", "get", "mcp.servers", "--json"],
        ["config", "get", "mcp.servers.gh.env.GITHUB_TOKEN"],
        ["config", "get", 'providers.models.openai.backup.extra_headers."X-Key"'],
        *(["config", "get", ".".join(path)] for path in SECRET_PATHS),
        ["config", "set", "mcp.servers.gh.env.GITHUB_TOKEN", secrets[0] + "\n[x]"],
        ["config", "set", "agents.researcher.enabled", secrets[1]],
    ):
        code, text = _run([*install, *argv])
        outputs.append(text)
        if "--json" in argv:
            json.loads(text.splitlines()[0])  # exactly one JSON document
        assert code in (0, 1, 3)
    joined = "\n".join(outputs)
    assert not any(secret in joined for secret in secrets)
    assert not any(ch in joined for ch in "ΩЖΨЯ")
