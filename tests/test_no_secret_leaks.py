"""Leak hunts through the real CLI (01 §6, 02 §5, 03 §3.1.6, 05 §3): "no message ever contains
a secret". Each test plants a value, drives one command that handles it, and searches every
stream, ``--json`` document and file the command could write for the value's bytes (raw, and
base64 / URL-encoded / JSON-escaped where a file could carry them).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.e2e_helpers import (
    FIXED_EPOCH,
    bundler_cli,
    leaks_in,
    tree_leaks,
    write_config,
    write_secrets_file,
)
from support.faultinject import (
    Call,
    FaultRun,
    kill_at_each,
    ptrace_unavailable,
    sample,
    slow_sample_count,
    trace_calls,
)
from support.installs import copy_example, opened_config
from support.kit import clean_env, cli_command
from support.race_helpers import run_as_nobody
from support.strategies import installs

from bundler.bundle.export import export_agent
from bundler.errors import BundlerError
from bundler.rules import tomlcompat
from bundler.rules.validate import validate

# special characters make the URL-encoded and JSON-escaped forms differ from the raw one
LEAK = 'sk-LEAK/+"\u00e9&=?%0123456789abcdefXYZ'
LEAK_TOML = json.dumps(LEAK)
NOBODY = 65534
LEAK_URL = urllib.parse.quote(LEAK, safe="")
PLAIN = "sk-PLAINLEAK0123456789abcdefXYZ"  # a JSON string is a valid TOML basic string
ANTHROPIC_KEY = "sk-FAKE-anthropic-0000000000000000"  # examples/install, researcher's provider
EXAMPLE_SECRETS = {
    "providers.models.anthropic.main.api_key": ANTHROPIC_KEY,
    "providers.models.openai.backup.api_key": "sk-FAKE-openai-backup-111111111111",
    "providers.models.openai.backup.extra_headers.OpenAI-Organization": "org-FAKE-2222222222222222",
    "providers.models.openai.summariser.api_key": "sk-FAKE-openai-summary-3333333333",
    "providers.models.groq.fast.api_key": "sk-FAKE-groq-444444444444444444",
    "providers.tts.elevenlabs.narrator.api_key": "sk-FAKE-elevenlabs-55555555555555",
    "providers.transcription.deepgram.notes.api_key": "sk-FAKE-deepgram-6666666666666666",
    "providers.transcription.local_whisper.desk.bearer_token": "sk-FAKE-whisper-77777777777777777",
    "mcp.servers.github.env.GITHUB_TOKEN": "ghp_FAKE888888888888888888",
    "mcp.servers.search.headers.Authorization": "Bearer sk-FAKE-search-999999999999",
}
# tables holding those secrets: asking for a whole table must mask what is inside
SECRET_TABLES = ["providers.models.openai.backup", "mcp.servers.github", "providers"]
CLOSURE_OF_RESEARCHER = "providers.models.anthropic.main.api_key"


def _no_leak(result: Any, secrets: list[str] | set[str] | tuple[str, ...]) -> None:
    """Neither stream holds any secret; no traceback reached the user."""
    assert leaks_in(result.stdout, secrets) == []
    assert leaks_in(result.stderr, secrets) == []
    assert "Traceback" not in result.stderr


def _both(args: list[str], **kwargs: Any) -> tuple[Any, Any]:
    """The command run twice: human output and ``--json``."""
    return bundler_cli(args, **kwargs), bundler_cli([*args, "--json"], **kwargs)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One private copy of ``examples/install`` for the read-only tests of this module."""
    return copy_example(tmp_path_factory.mktemp("leaks"))


def _example_with_leak(tmp_path: Path) -> Path:
    """A copy of the example whose researcher's API key is :data:`LEAK`."""
    root = copy_example(tmp_path)
    config = root / "config.toml"
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace(json.dumps(ANTHROPIC_KEY), LEAK_TOML, 1), encoding="utf-8")
    return root


# --- config get -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [*EXAMPLE_SECRETS, *SECRET_TABLES])
def test_config_get_without_reveal_masks_every_secret_path(example: Path, path: str) -> None:
    args = ["--install", str(example), "config", "get", path]
    # --json for the tables and two leaves: the rest differ from those only by their path
    runs = _both(args) if path in SECRET_TABLES[:2] or "OpenAI" in path else [bundler_cli(args)]
    for result in runs:
        assert result.returncode == 0, result.stderr
        _no_leak(result, list(EXAMPLE_SECRETS.values()))
    assert "***" in runs[0].stdout


CHANNEL_TOKEN = "xoxb-FAKE-channel-token-4711"
MISPLACED_KEY = "sk-FAKE-misplaced-under-workspace-0815"


def test_config_get_masks_tokens_of_opaque_tables_and_unknown_keys(tmp_path: Path) -> None:
    """A channel's ``bot_token`` and an ``api_key`` put where the schema has no such field (a
    fuzzer moved one there) are secrets by the sweep's rule (02 §5.3); ``config get`` of the
    tables holding them printed them in the clear."""
    root = copy_example(tmp_path)
    config = root / "config.toml"
    text = config.read_text(encoding="utf-8")
    text = text.replace(
        "[channels.slack.team]\n", f'[channels.slack.team]\nbot_token = "{CHANNEL_TOKEN}"\n', 1
    )
    text = text.replace(
        "[agents.researcher.workspace]\n",
        f'[agents.researcher.workspace]\napi_key = "{MISPLACED_KEY}"\n',
        1,
    )
    config.write_text(text, encoding="utf-8")
    for path in ("channels", "channels.slack.team.bot_token", "agents.researcher.workspace"):
        for result in _both(["--install", str(root), "config", "get", path]):
            assert result.returncode == 0, result.stderr
            _no_leak(result, [CHANNEL_TOKEN, MISPLACED_KEY])
            assert "***" in result.stdout
    revealed = bundler_cli(
        ["--install", str(root), "config", "get", "channels.slack.team.bot_token", "--reveal"]
    )
    assert revealed.returncode == 0 and CHANNEL_TOKEN in revealed.stdout  # not vacuous


def test_config_get_reveal_prints_the_value_so_the_oracle_can_see_it(example: Path) -> None:
    revealed = bundler_cli(
        ["--install", str(example), "config", "get", CLOSURE_OF_RESEARCHER, "--reveal"]
    )
    assert revealed.returncode == 0
    assert leaks_in(revealed.stdout, [ANTHROPIC_KEY]) != []


# --- config set -------------------------------------------------------------------------------


@pytest.mark.parametrize("via", ["argument", "stdin"])
def test_config_set_secret_refused_by_an_invalid_sibling_does_not_echo_it(
    tmp_path: Path, via: str
) -> None:
    root = copy_example(tmp_path)
    config = root / "config.toml"
    text = config.read_text(encoding="utf-8")
    # an invalid sibling makes every edit of this file fail validation
    config.write_text(text.replace("temperature = 0.7", 'temperature = "hot"', 1))
    before = config.read_bytes()
    args = ["--install", str(root), "config", "set", CLOSURE_OF_RESEARCHER]
    for json_flag in ([], ["--json"]):
        if via == "argument":
            result = bundler_cli([*args, LEAK, *json_flag])
        else:
            result = bundler_cli([*args, *json_flag], input_text=LEAK + "\n")
        assert result.returncode == 3, result.stderr
        _no_leak(result, [LEAK])
    assert config.read_bytes() == before
    assert tree_leaks(root, [LEAK]) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        # a secret map given something that is not a TOML table
        ("mcp.servers.github.env", "{GITHUB_TOKEN = " + LEAK),
        ("mcp.servers.github.env", LEAK),
        # a non-secret field given a value of the wrong type: still a value given to config set
        ("providers.models.anthropic.main.max_tokens", LEAK),
        ("providers.models.anthropic.main.temperature", f"[{LEAK_TOML}]"),
        # a path that does not exist
        ("providers.models.anthropic.main.api_kee", LEAK),
    ],
)
def test_config_set_bad_value_is_refused_without_echoing_it(
    tmp_path: Path, path: str, value: str
) -> None:
    root = copy_example(tmp_path)
    before = (root / "config.toml").read_bytes()
    human, machine = _both(["--install", str(root), "config", "set", path, value])
    for result in (human, machine):
        assert result.returncode in (1, 2, 3), result.stderr
        _no_leak(result, [LEAK])
    assert (root / "config.toml").read_bytes() == before


# --- config validate --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "bad_value"),
    [
        ("providers.models.anthropic.main.api_key", "12345678901234567890123"),  # not a string
        ("providers.models.anthropic.main.api_key", f"[{LEAK_TOML}]"),  # an array holding it
        ("providers.models.anthropic.main.api_key", f"{{ nested = {LEAK_TOML} }}"),
        ("providers.models.openai.backup.extra_headers", f"[{LEAK_TOML}]"),
        ("providers.models.openai.backup.extra_headers", f"{{ x = [{LEAK_TOML}] }}"),
        ("mcp.servers.github.env", f"{{ nested = {{ deeper = {LEAK_TOML} }} }}"),
        ("mcp.servers.github.env", LEAK_TOML),  # a string where a map belongs
    ],
)
def test_config_validate_of_a_wrongly_typed_secret_names_the_path_only(
    tmp_path: Path, field: str, bad_value: str
) -> None:
    root = copy_example(tmp_path)
    config = tomlcompat.loads((root / "config.toml").read_text(encoding="utf-8"))
    value = tomlcompat.loads(f"v = {bad_value}")["v"]
    if field.startswith("mcp"):
        config["mcp"]["servers"][0]["env"] = value
    elif field.endswith("extra_headers"):
        config["providers"]["models"]["openai"]["backup"]["extra_headers"] = value
    else:
        config["providers"]["models"]["anthropic"]["main"]["api_key"] = value
    (root / "config.toml").write_text(tomli_w.dumps(config), encoding="utf-8")
    planted = [v for v in (LEAK, LEAK[3:], "12345678901234567890123") if v in bad_value]
    human, machine = _both(["--install", str(root), "config", "validate"])
    assert human.returncode == 3, human.stdout + human.stderr
    assert field in human.stdout + human.stderr
    runs = [human, machine]
    if "[" in bad_value and "extra_headers" not in field:  # doctor reads the same findings
        runs.append(bundler_cli(["--install", str(root), "doctor", "--json"]))
        assert runs[-1].returncode == 3, runs[-1].stdout + runs[-1].stderr
    for result in runs:
        _no_leak(result, planted)
    json.loads(machine.stdout)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ZEROCLAW_providers__models__anthropic__main__api_kee", LEAK),  # no such field
        ("ZEROCLAW_providers__models__anthropic__main__max_tokens", LEAK),  # wrong type
        ("ZEROCLAW_mcp__servers__github__env", LEAK),  # not a TOML table
        ("ZEROCLAW_mcp__servers__github__env", "{GITHUB_TOKEN = [" + LEAK_TOML + "]}"),
        ("ZEROCLAW_providers__models__anthropic__main__api_key", LEAK),  # valid: must be masked
        ("ZEROCLAW_channels__slack__team__bot_token", LEAK),  # an opaque table: not a field
    ],
)
def test_env_override_holding_a_secret_is_never_echoed(
    example: Path, tmp_path: Path, variable: str, value: str
) -> None:
    out = tmp_path / "bundle"
    table = "mcp.servers.github" if "mcp" in variable else "providers.models.anthropic.main"
    base = ["--install", str(example)]
    env = {variable: value}
    runs = [
        bundler_cli([*base, "config", "validate"], env=env),
        bundler_cli([*base, "config", "validate", "--json"], env=env),
        bundler_cli(
            [*base, "agents", "export", "researcher", "--out", str(out), "--json"], env=env
        ),
    ]
    if variable.endswith("__api_key"):  # a valid override: config get must mask it
        runs.append(bundler_cli([*base, "config", "get", table], env=env))
    for result in runs:
        _no_leak(result, [LEAK])
    json.loads(runs[1].stdout)
    json.loads(runs[2].stdout)
    assert tree_leaks(out, [LEAK]) == []


# --- agents import: --secret and --secrets-file ---------------------------------------------


@pytest.fixture(scope="module")
def researcher_bundle(example: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's researcher exported once (read-only for the import tests)."""
    out = tmp_path_factory.mktemp("bundle") / "researcher"
    done = bundler_cli(
        ["--install", str(example), "agents", "export", "researcher", "--out", str(out)]
    )
    assert done.returncode == 0, done.stderr
    return out


def _import(target: Path, bundle: Path, *extra: str) -> tuple[Any, Any]:
    base = ["--install", str(target), "agents", "import", str(bundle), "--accept-risks", *extra]
    return bundler_cli(base), bundler_cli([*base, "--json"])


def _state_leaks(target: Path, secrets: list[str]) -> list[str]:
    """Leaks anywhere in the target install except the one intended place, config.toml."""
    return [leak for leak in tree_leaks(target, secrets) if not leak.startswith("config.toml:")]


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        (f"providers.models.nobody.main.api_key={LEAK}", LEAK),  # not a required path
        (f"not a path={LEAK}", LEAK),  # not a config path at all
        # without "=" or '"' in the value, so that where it is split is not in doubt
        (f'"unterminated={PLAIN}', PLAIN),  # a quoted segment that never closes
        (PLAIN, PLAIN),  # the value alone, PATH= forgotten
    ],
    ids=["unknown-path", "bad-path", "unterminated-quote", "no-equals"],
)
def test_import_secret_with_a_bad_path_never_echoes_the_value(
    tmp_path: Path, researcher_bundle: Path, argument: str, value: str
) -> None:
    target = tmp_path / "target"
    human, machine = _import(target, researcher_bundle, "--secret", argument)
    for result in (human, machine):
        _no_leak(result, [value])
    json.loads(machine.stdout)
    # the value was for no required path: it belongs nowhere, not even in config.toml
    assert tree_leaks(target, [value]) == []


def test_import_secret_with_a_good_path_lands_only_in_config_toml(
    tmp_path: Path, researcher_bundle: Path
) -> None:
    manifest = tomlcompat.loads((researcher_bundle / "zeroclaw-agent.toml").read_text())
    assert CLOSURE_OF_RESEARCHER in manifest["required_secrets"]
    target = tmp_path / "target"
    human = bundler_cli(
        [
            "--install", str(target), "agents", "import", str(researcher_bundle),
            "--accept-risks", "--secret", f"{CLOSURE_OF_RESEARCHER}={LEAK}",
        ]
    )  # fmt: skip
    assert human.returncode == 0, human.stderr
    _no_leak(human, [LEAK])
    assert "visible" in human.stderr  # command lines are visible to others (03 §3.1.6)
    # stored sealed under the install's key (ZeroClaw's default): the plain value is in no file
    imported = opened_config(target)
    assert imported["providers"]["models"]["anthropic"]["main"]["api_key"] == LEAK
    assert LEAK not in (target / "config.toml").read_text(encoding="utf-8")
    assert _state_leaks(target, [LEAK]) == []
    assert not [p for p in target.iterdir() if p.name.startswith(".bundler-import-")]

    again = tmp_path / "again"
    machine = bundler_cli(
        [
            "--install", str(tmp_path / "target2"), "agents", "import", str(researcher_bundle),
            "--accept-risks", "--secret", f"{CLOSURE_OF_RESEARCHER}={LEAK}", "--json",
        ]
    )  # fmt: skip
    assert machine.returncode == 0, machine.stderr
    _no_leak(machine, [LEAK])
    assert _state_leaks(tmp_path / "target2", [LEAK]) == []
    # re-export of the imported agent: the value is scrubbed again and swept for
    exported = bundler_cli(
        ["--install", str(target), "agents", "export", "researcher", "--out", str(again), "--json"]
    )
    assert exported.returncode == 0, exported.stderr
    _no_leak(exported, [LEAK])
    assert tree_leaks(again, [LEAK]) == []


def test_import_secret_into_a_failing_import_leaves_no_trace(
    tmp_path: Path, researcher_bundle: Path
) -> None:
    # the target already has an agent named researcher: the import is refused after the
    # secrets were read; nothing (journal, staging, receipt) may keep the value
    target = copy_example(tmp_path)
    before = (target / "config.toml").read_bytes()
    human, machine = _import(
        target, researcher_bundle, "--secret", f"{CLOSURE_OF_RESEARCHER}={LEAK}"
    )
    for result in (human, machine):
        assert result.returncode == 1, result.stderr
        _no_leak(result, [LEAK])
    assert (target / "config.toml").read_bytes() == before
    assert tree_leaks(target, [LEAK]) == []


@pytest.mark.parametrize("mode", [0o640, 0o604])
def test_group_or_world_readable_secrets_file_is_refused_without_echoing_values(
    tmp_path: Path, researcher_bundle: Path, mode: int
) -> None:
    secrets_file = write_secrets_file(tmp_path / "s.toml", {CLOSURE_OF_RESEARCHER: LEAK}, mode)
    target = tmp_path / "target"
    human, machine = _import(target, researcher_bundle, "--secrets-file", str(secrets_file))
    for result in (human, machine):
        assert result.returncode == 1, result.stderr
        _no_leak(result, [LEAK])
    assert "secrets" in human.stderr
    assert tree_leaks(target, [LEAK]) == []


@pytest.mark.parametrize(
    "text",
    [
        f"{json.dumps(CLOSURE_OF_RESEARCHER)} = {LEAK}\n",  # unquoted: not TOML
        f"{json.dumps(CLOSURE_OF_RESEARCHER)} = [{LEAK_TOML}]\n",  # not a string
        f"{json.dumps(CLOSURE_OF_RESEARCHER)} = {{ x = {LEAK_TOML} }}\n",  # a table
    ],
    ids=["not-toml", "array", "table"],
)
def test_malformed_secrets_file_is_refused_without_echoing_values(
    tmp_path: Path, researcher_bundle: Path, text: str
) -> None:
    secrets_file = tmp_path / "s.toml"
    secrets_file.write_text(text, encoding="utf-8")
    os.chmod(secrets_file, 0o600)
    target = tmp_path / "target"
    human, machine = _import(target, researcher_bundle, "--secrets-file", str(secrets_file))
    for result in (human, machine):
        _no_leak(result, [LEAK])
    json.loads(machine.stdout)
    assert _state_leaks(target, [LEAK]) == []


# --- agents export --scan-secrets refuse ----------------------------------------------------


def _leak_files() -> dict[str, tuple[str, bytes]]:
    raw = LEAK.encode()
    return {
        "raw": ("notes/raw.txt", b"key: " + raw + b"\n"),
        "base64-0": ("notes/b0.txt", base64.b64encode(raw)),
        "base64-1": ("notes/b1.txt", base64.b64encode(b"x" + raw)),
        "base64-2": ("notes/b2.txt", base64.b64encode(b"xy" + raw + b"tail")),
        "url-encoded": ("notes/url.txt", b"?key=" + urllib.parse.quote(LEAK, safe="").encode()),
        "url-plus": ("notes/url2.txt", urllib.parse.quote_plus(LEAK).encode()),
        "json-escaped": ("notes/cfg.json", json.dumps({"key": LEAK}).encode()),
        "json-utf8": ("notes/cfg8.json", json.dumps({"key": LEAK}, ensure_ascii=False).encode()),
    }


@pytest.mark.usefixtures("each_sweep_engine")
@pytest.mark.parametrize("form", list(_leak_files()))
def test_export_refuses_a_workspace_file_holding_the_key_and_never_prints_it(
    tmp_path: Path, form: str
) -> None:
    root = _example_with_leak(tmp_path)
    rel, data = _leak_files()[form]
    target = root / "agents" / "researcher" / "workspace" / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    out = tmp_path / "bundle"
    args = ["--install", str(root), "agents", "export", "researcher", "--out", str(out)]
    # --json for three forms: its message is the human one, its path checked here
    runs = _both(args) if form in ("raw", "base64-1", "json-escaped") else [bundler_cli(args)]
    for result in runs:
        assert result.returncode == 1, result.stdout + result.stderr
        _no_leak(result, [LEAK])
    assert rel in runs[0].stderr and CLOSURE_OF_RESEARCHER in runs[0].stderr
    if len(runs) == 2:
        assert json.loads(runs[1].stdout)["error"]["path"] == f"workspace/{rel}"
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".zeroclaw-export-")]


@pytest.mark.usefixtures("each_sweep_engine")
@pytest.mark.parametrize(
    ("scan", "where"), [("refuse", "file"), ("refuse", "folder"), ("warn", "file"), ("off", "file")]
)
def test_export_with_the_key_in_a_file_name_never_prints_the_name(
    tmp_path: Path, scan: str, where: str
) -> None:
    root = copy_example(tmp_path)
    workspace = root / "agents" / "researcher" / "workspace"
    if where == "file":
        (workspace / f"{ANTHROPIC_KEY}.txt").write_text("harmless\n")
    else:
        (workspace / "keys" / ANTHROPIC_KEY).mkdir(parents=True)
        (workspace / "keys" / ANTHROPIC_KEY / "readme.md").write_text("harmless\n")
    out = tmp_path / "bundle"
    args = ["--install", str(root), "agents", "export", "researcher", "--out", str(out)]
    human = bundler_cli([*args, "--scan-secrets", scan])
    _no_leak(human, [ANTHROPIC_KEY])
    machine = bundler_cli([*args, "--scan-secrets", scan, "--json", "--force"])
    _no_leak(machine, [ANTHROPIC_KEY])
    document = json.loads(machine.stdout)
    if scan == "refuse":
        assert human.returncode == 1 and document["ok"] is False
        assert not out.exists()
    else:
        assert human.returncode == 0, human.stderr
        if scan == "warn":
            assert document["secret_hits"], document


# --- bundle verify / inspect / import of a smuggled secret ----------------------------------


def _rehash(bundle: Path) -> None:
    """Recompute checksums and the manifest's digests so only the fragment rules can object."""
    lines = []
    total = 0
    for line in (bundle / "checksums.xxh3").read_text().splitlines():
        _digest, rel = line.split("  ", 1)
        data = (bundle / rel).read_bytes()
        total += len(data)
        lines.append(f"{xxhash.xxh3_128_hexdigest(data)}  {rel}")
    checksums = ("\n".join(lines) + "\n").encode()
    (bundle / "checksums.xxh3").write_bytes(checksums)
    manifest = tomlcompat.loads((bundle / "zeroclaw-agent.toml").read_text())
    manifest["contents"]["bytes"] = total
    manifest["contents"]["checksums_xxh3_128"] = xxhash.xxh3_128_hexdigest(checksums)
    (bundle / "zeroclaw-agent.toml").write_text(tomli_w.dumps(manifest))


@pytest.mark.parametrize(
    ("needle", "replacement", "field"),
    [
        ('api_key = ""', f"api_key = {LEAK_TOML}", "api_key"),
        ('GITHUB_TOKEN = ""', f"GITHUB_TOKEN = {LEAK_TOML}", "GITHUB_TOKEN"),
        ('api_key = ""', f"api_key = [{LEAK_TOML}]", "api_key"),
        ('api_key = ""', "api_key = " + json.dumps("enc2:" + LEAK[3:]), "api_key"),
        # a key the schema does not know: verify refuses it by path, never by value
        ('api_key = ""', f'api_key = ""\nvendor_token = {LEAK_TOML}', "vendor_token"),
    ],
    ids=["api-key", "mcp-env", "api-key-array", "ciphertext", "unknown-key"],
)
def test_bundle_smuggling_a_secret_value_is_refused_and_the_value_never_printed(
    tmp_path: Path,
    example: Path,
    researcher_bundle: Path,
    needle: str,
    replacement: str,
    field: str,
) -> None:
    bundle = tmp_path / "bundle"
    agent = "researcher" if field == "api_key" else "writer"
    if agent == "researcher":
        shutil.copytree(researcher_bundle, bundle)
    else:
        made = bundler_cli(
            ["--install", str(example), "agents", "export", agent, "--out", str(bundle)]
        )
        assert made.returncode == 0, made.stderr
    config = bundle / "config.toml"
    text = config.read_text(encoding="utf-8")
    assert needle in text
    config.write_text(text.replace(needle, replacement, 1), encoding="utf-8")
    _rehash(bundle)
    planted = [LEAK, LEAK[3:]]
    human, machine = _both(["bundle", "verify", str(bundle)])
    inspected = bundler_cli(["bundle", "inspect", str(bundle), "--json"])
    for result in (human, machine, inspected):
        assert result.returncode == 3, result.stdout + result.stderr
        _no_leak(result, planted)
    assert json.loads(machine.stdout)["ok"] is False
    assert json.loads(inspected.stdout)["ok"] is False
    assert field in human.stdout + human.stderr
    assert "checksum" not in json.dumps(json.loads(machine.stdout)["errors"])
    if field == "api_key" and "[" not in replacement and "enc2" not in replacement:
        # import runs the same verification first: one case shows it refuses and prints none
        target = tmp_path / "target"
        imported = bundler_cli(
            ["--install", str(target), "agents", "import", str(bundle), "--accept-risks", "--json"]
        )
        assert imported.returncode == 3, imported.stderr
        _no_leak(imported, planted)
        assert not target.exists() or tree_leaks(target, planted) == []


# --- a crashed import: journal, staging, temporary config, recovery -------------------------


def _holders(root: Path, secrets: list[str]) -> set[str]:
    """The entries under ``root`` that hold a secret (by name or content)."""
    return {leak.split(":", 1)[0] for leak in tree_leaks(root, secrets)}


@pytest.mark.parametrize(
    "calls", [3, pytest.param(None, marks=pytest.mark.slow)], ids=["sample", "all"]
)
def test_import_killed_at_any_step_keeps_the_secret_only_in_config_files(
    tmp_path: Path, researcher_bundle: Path, calls: int | None
) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    secrets_file = write_secrets_file(tmp_path / "s.toml", {CLOSURE_OF_RESEARCHER: LEAK})
    target = tmp_path / "target"
    cmd = [
        *cli_command(), "--install", str(target), "agents", "import",
        str(researcher_bundle), "--accept-risks", "--secrets-file", str(secrets_file),
    ]  # fmt: skip
    env = clean_env({"SOURCE_DATE_EPOCH": FIXED_EPOCH, "PYTHONDONTWRITEBYTECODE": "1"})
    target.mkdir()
    clean, traced = trace_calls(cmd, ["fsync", "rename", "renameat2"], env=env, relevant="target")
    assert clean.returncode == 0, clean.stderr
    chosen = sample(traced, calls if calls is not None else slow_sample_count())
    assert chosen

    def fresh_target() -> None:
        shutil.rmtree(target)
        target.mkdir()

    def check(call: Call, run: FaultRun) -> None:
        _no_leak(run, [LEAK])
        # the merged config (committed or its temporary twin) is the one intended holder
        holders = _holders(target, [LEAK])
        assert all(h == "config.toml" or h.startswith(".config.toml.bundler-") for h in holders), (
            call,
            holders,
        )
        recovered = bundler_cli(["recover", "--install", str(target), "--json"])
        assert recovered.returncode == 0, recovered.stdout + recovered.stderr
        _no_leak(recovered, [LEAK])
        assert _holders(target, [LEAK]) <= {"config.toml"}, call

    kill_at_each(cmd, chosen, check, reset=fresh_target, env=env, every_kill_lands=True)


def test_import_dry_run_plan_never_prints_given_secrets(
    tmp_path: Path, researcher_bundle: Path
) -> None:
    secrets_file = write_secrets_file(tmp_path / "s.toml", {CLOSURE_OF_RESEARCHER: LEAK})
    target = tmp_path / "target"
    target.mkdir()
    args = ["--install", str(target), "agents", "import", str(researcher_bundle), "--dry-run"]
    runs = [
        *_both([*args, "--secrets-file", str(secrets_file)]),
        bundler_cli([*args, "--secret", f"{CLOSURE_OF_RESEARCHER}={PLAIN}"]),
    ]
    for result in runs:
        assert result.returncode == 0, result.stderr
        _no_leak(result, [LEAK, PLAIN])
    assert list(target.iterdir()) == []


@pytest.mark.parametrize(
    ("broken", "command"),
    [
        (f"api_key = {LEAK_TOML[:-1]}\n", ["config", "validate"]),  # unterminated string
        (f"api_key = {LEAK_TOML} {LEAK_TOML}\n", ["config", "validate"]),  # two values
        (f"api_key = {LEAK_TOML}\napi_key = {LEAK_TOML}\n", ["config", "validate"]),  # twice
        (f"api_key = {LEAK_TOML[:-1]}\n", ["config", "get", "agents"]),
        (f"api_key = {LEAK_TOML[:-1]}\n", ["agents", "export", "researcher"]),
    ],
    ids=["unterminated", "two-values", "duplicate", "get", "export"],
)
def test_unparseable_config_error_never_quotes_the_line_holding_a_secret(
    tmp_path: Path, broken: str, command: list[str]
) -> None:
    root = copy_example(tmp_path)
    config = root / "config.toml"
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace(f"api_key = {json.dumps(ANTHROPIC_KEY)}\n", broken, 1))
    args = ["--install", str(root), *command]
    if command[0] == "agents":
        args += ["--out", str(tmp_path / "bundle")]
    human = bundler_cli(args)
    assert human.returncode == 3, human.stdout + human.stderr
    _no_leak(human, [LEAK, LEAK[:-1]])
    machine = bundler_cli([*args, "--json"])
    _no_leak(machine, [LEAK, LEAK[:-1]])
    assert json.loads(machine.stdout)["ok"] is False


@pytest.mark.parametrize(
    ("agent", "old", "new"),
    [
        # the key copied into fields that travel as they are (02 §5.4): the rendered
        # config.toml is swept too (02 §5.3), so the export must refuse
        ("writer", 'args = ["stdio"]', f'args = ["stdio", "--token", {LEAK_TOML}]'),
        ("researcher", 'model = "claude-sonnet"', f"model = {LEAK_TOML}"),
        (
            "researcher",
            'model = "claude-sonnet"',
            f'model = "claude-sonnet"\nuri = "https://me:{LEAK_URL}@x.example/v1"',
        ),
        (
            "researcher",
            '"notes/papers"]',
            f'"notes/papers", {json.dumps("https://x.example/?key=" + LEAK)}]',
        ),
    ],
    ids=["mcp-args", "model", "uri-userinfo", "knowledge-source"],
)
def test_export_refuses_a_secret_copied_into_a_field_that_is_not_scrubbed(
    tmp_path: Path, agent: str, old: str, new: str
) -> None:
    root = _example_with_leak(tmp_path)
    config = root / "config.toml"
    text = config.read_text(encoding="utf-8")
    assert old in text
    config.write_text(text.replace(old, new, 1), encoding="utf-8")
    out = tmp_path / "bundle"
    args = ["--install", str(root), "agents", "export", agent, "--out", str(out)]
    runs = _both(args) if agent == "writer" else [bundler_cli(args)]
    for result in runs:
        assert result.returncode == 1, result.stdout + result.stderr
        _no_leak(result, [LEAK])
    assert "config.toml" in runs[0].stderr and CLOSURE_OF_RESEARCHER in runs[0].stderr
    assert not out.exists()


def test_export_refusing_a_too_deep_tree_withholds_a_folder_name_holding_a_secret(
    tmp_path: Path,
) -> None:
    root = copy_example(tmp_path)
    top = root / "agents" / "researcher" / "workspace" / ANTHROPIC_KEY
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(260):  # deeper than the 256 levels an export accepts (02 §7.2)
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    args = ["--install", str(root), "agents", "export", "researcher"]
    human = bundler_cli([*args, "--out", str(tmp_path / "b1"), "--scan-secrets", "off"])
    machine = bundler_cli([*args, "--out", str(tmp_path / "b2"), "--json"])
    for result in (human, machine):
        assert result.returncode == 1, result.stdout + result.stderr
        _no_leak(result, [ANTHROPIC_KEY])
    assert "256" in human.stderr


def _export_as_nobody(install: Path, out: Path, scan: str) -> dict[str, Any]:
    """``export_agent`` run as uid 65534 in a forked child, so permissions bite.

    The interpreter lives under /root, which nobody cannot reach, so the CLI cannot be started
    as nobody; :func:`race_helpers.run_as_nobody` forks, keeping the imported library.
    """

    def export() -> dict[str, Any]:
        try:
            export_agent(install, "researcher", out, scan_secrets=scan, environ={})
        except BundlerError as err:
            return {"ok": False, "code": err.code, "message": err.message, "path": err.path}
        return {"ok": True}

    result: dict[str, Any] = run_as_nobody(export)
    return result


@pytest.mark.parametrize(
    ("name", "scan"),
    [(f"{ANTHROPIC_KEY}.txt", "refuse"), (f"{ANTHROPIC_KEY}.txt", "off"), ("plain.txt", "refuse")],
    ids=["secret-name", "secret-name-scan-off", "control"],
)
def test_export_refusing_an_unreadable_file_withholds_a_name_holding_a_secret(
    name: str, scan: str
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to hand the install to another user")
    base = Path(tempfile.mkdtemp(prefix="h9-nobody-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        install = copy_example(base)
        unreadable = install / "agents" / "researcher" / "workspace" / name
        unreadable.write_text("harmless\n")
        for folder, dirs, files in os.walk(base):
            for entry in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.chown(entry, NOBODY, NOBODY, follow_symlinks=False)
        os.chmod(unreadable, 0)
        outcome = _export_as_nobody(install, base / "bundle", scan)
    finally:
        shutil.rmtree(base)
    assert outcome["ok"] is False and outcome["code"] == 1, outcome
    assert "read" in outcome["message"]
    if name == "plain.txt":
        assert name in outcome["message"]  # the control: an ordinary name is named
    assert leaks_in(outcome["message"] + outcome["path"], [ANTHROPIC_KEY]) == []


# --- property: a secret in a wrongly typed place is never quoted -----------------------------


def _secret_slots(node: Any, secrets: set[str]) -> list[tuple[Any, Any]]:
    """(container, key) of every string leaf of ``node`` that is a drawn secret value."""
    slots: list[tuple[Any, Any]] = []
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else []
    )
    for key, value in items:
        if isinstance(value, str) and value in secrets:
            slots.append((node, key))
        else:
            slots.extend(_secret_slots(value, secrets))
    return slots


WRAPPERS = [
    lambda v: [v],
    lambda v: {"nested": v},
    lambda v: {"nested": [v]},
    lambda v: [[v], 1],
    lambda v: {"a": {"b": {"c": v}}},
]


@st.composite
def wrongly_typed_secrets(draw: st.DrawFn) -> tuple[dict[str, Any], set[str]]:
    """An install where a few secret values sit inside a list or table of the wrong type."""
    install = draw(installs(max_agents=3))
    slots = _secret_slots(install.config, install.secrets)
    if slots:
        for index in draw(st.sets(st.integers(0, len(slots) - 1), min_size=1, max_size=3)):
            container, key = slots[index]
            container[key] = draw(st.sampled_from(WRAPPERS))(container[key])
    return install.config, install.secrets


def _check_typed(drawn: tuple[dict[str, Any], set[str]], tmp: Path) -> None:
    """Validation findings, export refusals and bundles hold none of the secrets."""
    config, secrets = drawn
    root = write_config(tmp / "install", config)
    errors, warnings = validate(config, root)
    for finding in [*errors, *warnings]:
        assert leaks_in(finding.line(), secrets) == [], finding.path
    for alias in config["agents"]:
        out = tmp / f"bundle-{alias}"
        try:
            export_agent(root, alias, out, environ={})
        except BundlerError as err:
            assert err.path
            assert leaks_in(err.message + err.path, secrets) == [], err.path
            continue
        assert tree_leaks(out, secrets) == []


_QUIET = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]


@settings(max_examples=20, deadline=None, suppress_health_check=_QUIET)
@given(drawn=wrongly_typed_secrets())
def test_findings_and_refusals_never_quote_a_wrongly_typed_secret(
    drawn: tuple[dict[str, Any], set[str]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    _check_typed(drawn, tmp_path_factory.mktemp("typed"))


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("BUNDLER_SLOW_SAMPLE", "500")),
    deadline=None,
    suppress_health_check=_QUIET,
)
@given(drawn=wrongly_typed_secrets())
def test_findings_and_refusals_never_quote_a_wrongly_typed_secret_at_scale(
    drawn: tuple[dict[str, Any], set[str]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    _check_typed(drawn, tmp_path_factory.mktemp("typed"))


def test_import_undo_after_filling_a_secret_prints_none_of_it(
    tmp_path: Path, researcher_bundle: Path
) -> None:
    target = tmp_path / "target"
    secrets_file = write_secrets_file(tmp_path / "s.toml", {CLOSURE_OF_RESEARCHER: LEAK})
    imported = bundler_cli(
        [
            "--install", str(target), "agents", "import", str(researcher_bundle),
            "--accept-risks", "--secrets-file", str(secrets_file), "--json",
        ]
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    receipt = json.loads(imported.stdout)["receipt"]
    # filling in a secret after an import is expected and does not block the undo (03 §4)
    filled = bundler_cli(
        ["--install", str(target), "config", "set", "providers.models.openai.backup.api_key"],
        input_text=PLAIN + "\n",
    )
    assert filled.returncode == 0, filled.stderr
    _no_leak(filled, [LEAK, PLAIN])
    undone = bundler_cli(
        ["--install", str(target), "agents", "import", "--undo", receipt, "--json"]
    )
    assert undone.returncode == 0, undone.stdout + undone.stderr
    _no_leak(undone, [LEAK, PLAIN])
    assert tree_leaks(target, [LEAK, PLAIN]) == []


@pytest.mark.parametrize("via", ["argument", "stdin"])
def test_config_set_of_a_secret_prints_only_its_path(tmp_path: Path, via: str) -> None:
    root = copy_example(tmp_path)
    args = ["--install", str(root), "config", "set", CLOSURE_OF_RESEARCHER]
    for value, json_flag in ((LEAK, []), (PLAIN, ["--json"])):
        if via == "argument":
            result = bundler_cli([*args, value, *json_flag])
        else:
            result = bundler_cli([*args, *json_flag], input_text=value + "\n")
        assert result.returncode == 0, result.stderr
        _no_leak(result, [LEAK, PLAIN])
        written = opened_config(root)
        assert written["providers"]["models"]["anthropic"]["main"]["api_key"] == value
        assert value not in (root / "config.toml").read_text(encoding="utf-8")
    assert _state_leaks(root, [LEAK, PLAIN]) == []


@pytest.mark.usefixtures("each_sweep_engine")
def test_export_scan_warn_reports_the_hit_by_path_never_by_value(tmp_path: Path) -> None:
    root = _example_with_leak(tmp_path)
    rel, data = _leak_files()["json-escaped"]
    target = root / "agents" / "researcher" / "workspace" / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    args = ["--install", str(root), "agents", "export", "researcher", "--scan-secrets", "warn"]
    human = bundler_cli([*args, "--out", str(tmp_path / "b1")])
    machine = bundler_cli([*args, "--out", str(tmp_path / "b2"), "--json"])
    for result in (human, machine):
        assert result.returncode == 0, result.stderr
        _no_leak(result, [LEAK])
    hits = json.loads(machine.stdout)["secret_hits"]
    assert {"file": f"workspace/{rel}", "secret_path": CLOSURE_OF_RESEARCHER} == {
        key: hits[0][key] for key in ("file", "secret_path")
    }
    # the carried file is the user's choice under warn; config.toml and the manifest hold none
    for name in ("config.toml", "zeroclaw-agent.toml", "checksums.xxh3"):
        assert leaks_in((tmp_path / "b2" / name).read_bytes(), [LEAK]) == []


@pytest.mark.parametrize("json_mode", [False, True])
def test_config_set_of_a_value_starting_with_a_dash_never_echoes_it(
    tmp_path: Path, json_mode: bool
) -> None:
    """argparse takes a word starting with '-' for an option; the refusal must not quote it
    as one (a base64url token can start with '-'), and says how to pass such a value."""
    token = "-LEAKCANARY_r1_9f8e7d6c5b4a3210"
    root = copy_example(tmp_path)
    path = CLOSURE_OF_RESEARCHER
    args = ["--install", str(root), "config", "set", path, token]
    result = bundler_cli([*(["--json"] if json_mode else []), *args])
    assert result.returncode == 2
    _no_leak(result, [token])
    assert "goes after '--'" in result.stdout + result.stderr
    given = bundler_cli(["--install", str(root), "config", "set", path, "--", token])
    assert given.returncode == 0, given.stderr
    _no_leak(given, [token])
    shown = bundler_cli(["--install", str(root), "config", "get", path, "--reveal"])
    assert shown.stdout.strip() == token
