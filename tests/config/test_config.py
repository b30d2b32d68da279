"""01 §1 and §6: install root, loading, overrides, config set and the write protocol."""

from __future__ import annotations

import difflib
import fcntl
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLE_INSTALL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.faultinject import ptrace_unavailable, run_with_fault, trace_calls
from support.installs import MINIMAL_CONFIG, make_install
from support.kit import Terminal, clean_env, cli_command, one_error, run_cli, tree_snapshot

from bundler.config import store as cfg
from bundler.config.file import find_install_root, read_config_snapshot
from bundler.config.memorylock import memory_backend_locked
from bundler.config.write import (
    commit_staged_config,
    config_lock,
    discard_staged_config,
    stage_config_text,
    write_config_text,
)
from bundler.errors import InvalidInput, Refused, UsageError
from bundler.rules.values import effective_value, lookup, parse_value, redact

SECRET = "sk-FAKE-minimal-0123456789abcdef"
CANARY = "sk-FAKE-CANARY-value-Zq81Lm"


def file_state(path: Path) -> tuple[bytes, int, int]:
    info = path.stat()
    return path.read_bytes(), info.st_ino, info.st_mtime_ns


# --- 01 §1: the install root ---------------------------------------------------------------------


def test_install_root_cli_option_wins(tmp_path: Path) -> None:
    env = {"ZEROCLAW_CONFIG_DIR": str(tmp_path / "env"), "HOME": str(tmp_path / "home")}
    assert find_install_root(str(tmp_path / "cli"), env) == tmp_path / "cli"


def test_install_root_environment_then_home(tmp_path: Path) -> None:
    env = {"ZEROCLAW_CONFIG_DIR": str(tmp_path / "env"), "HOME": str(tmp_path / "home")}
    assert find_install_root(None, env) == tmp_path / "env"
    assert find_install_root(None, {"HOME": str(tmp_path / "home")}) == (
        tmp_path / "home" / ".zeroclaw"
    )


def test_install_root_resolution_creates_nothing(tmp_path: Path) -> None:
    find_install_root(None, {"HOME": str(tmp_path)})
    find_install_root(str(tmp_path / "x"), {})
    assert list(tmp_path.iterdir()) == []


LOOKED_AT = (
    " (the install bundler looked at); to use another install, give --install DIR or set "
    "ZEROCLAW_CONFIG_DIR"
)


def test_missing_config_is_refused_naming_the_install(tmp_path: Path) -> None:
    with pytest.raises(Refused) as caught:
        cfg.load_config(tmp_path)
    assert caught.value.message == f"no config.toml in {tmp_path}{LOOKED_AT}"
    assert caught.value.code == 1
    assert list(tmp_path.iterdir()) == []


def test_bad_toml_is_invalid_input_with_line_and_column(tmp_path: Path) -> None:
    root = make_install(tmp_path, f'[agents.a]\nmodel_provider = "x.y"\nbroken = "{CANARY}\n')
    with pytest.raises(InvalidInput) as caught:
        cfg.load_config(root)
    assert "line 3, column" in caught.value.message
    assert CANARY not in caught.value.message
    assert caught.value.code == 3


def test_fifo_config_is_refused_without_hanging(tmp_path: Path) -> None:
    tmp_path.joinpath("install").mkdir()
    os.mkfifo(tmp_path / "install" / "config.toml")
    with pytest.raises(Refused, match="not a regular file"):
        cfg.load_config(tmp_path / "install")


def test_non_utf8_config_is_invalid_input(tmp_path: Path) -> None:
    root = make_install(tmp_path, "", files={"config.toml": b"a = '\xff'\n"})
    with pytest.raises(InvalidInput, match="not UTF-8 at byte 5"):
        cfg.load_config(root)


def test_deeply_nested_toml_is_refused_cleanly(tmp_path: Path) -> None:
    root = make_install(tmp_path, "a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(InvalidInput):
        cfg.load_config(root)


# --- 01 §6: environment overrides ----------------------------------------------------------------


def test_override_applies_and_is_marked(install: Path) -> None:
    env = {"ZEROCLAW_agents__researcher__workspace__path": "/srv/w"}
    loaded = cfg.load_config(install, environ=env)
    assert loaded.data["agents"]["researcher"]["workspace"]["path"] == "/srv/w"
    assert loaded.overridden == {"agents.researcher.workspace.path"}
    assert loaded.override_vars == {
        "agents.researcher.workspace.path": "ZEROCLAW_agents__researcher__workspace__path"
    }
    assert "workspace" not in loaded.file_data["agents"]["researcher"]


def test_override_values_parsed_like_config_set(install: Path) -> None:
    env = {
        "ZEROCLAW_providers__models__anthropic__main__temperature": "0.25",
        "ZEROCLAW_agents__researcher__enabled": "false",
        "ZEROCLAW_agents__researcher__summary_provider": "true",  # a string field: verbatim
    }
    agent = cfg.load_config(install, environ=env).data["agents"]["researcher"]
    assert agent["enabled"] is False and agent["summary_provider"] == "true"


def test_variables_without_double_underscore_are_not_overrides(install: Path) -> None:
    env = {"ZEROCLAW_CONFIG_DIR": "/elsewhere", "ZEROCLAW_DEBUG": "1", "OTHER__x": "y"}
    loaded = cfg.load_config(install, environ=env)
    assert loaded.overridden == set()
    assert loaded.data == loaded.file_data


def test_override_never_written_back(install: Path) -> None:
    before = file_state(install / "config.toml")
    cfg.load_config(install, environ={"ZEROCLAW_agents__researcher__risk_profile": "other"})
    assert file_state(install / "config.toml") == before


def test_unresolvable_override_is_an_error_naming_the_variable(install: Path) -> None:
    name = "ZEROCLAW_agents__researcher__no_such_field"
    with pytest.raises(InvalidInput) as caught:
        cfg.load_config(install, environ={name: CANARY})
    assert name in caught.value.message and caught.value.path == name
    assert CANARY not in caught.value.message


def test_override_of_wrong_type_names_the_variable_not_the_value(install: Path) -> None:
    name = "ZEROCLAW_providers__models__anthropic__main__max_tokens"
    for value in (CANARY, "-5", '"12"'):
        with pytest.raises(InvalidInput) as caught:
            cfg.load_config(install, environ={name: value})
        assert name in caught.value.message
        assert CANARY not in caught.value.message


def test_override_that_is_not_utf8_is_refused_naming_the_variable_not_the_value(
    install: Path,
) -> None:
    """An environment variable's bytes that are not UTF-8 reach Python as lone surrogates: an
    export wrote the config with them and ended in a traceback."""
    name = "ZEROCLAW_providers__models__anthropic__main__api_key"
    exported = run_cli(
        ["--install", str(install), "agents", "export", "researcher", "--out", "out"],
        env={name: "sk-\udcff-" + CANARY},
        cwd=install.parent,
    )
    assert exported.returncode == 3 and one_error(exported.stderr), exported.stderr
    assert name in exported.stderr and "not UTF-8" in exported.stderr
    assert CANARY not in exported.stdout + exported.stderr
    assert not (install.parent / "out").exists()


def test_override_with_empty_segment_is_an_error(install: Path) -> None:
    with pytest.raises(InvalidInput, match="ZEROCLAW_agents____x"):
        cfg.load_config(install, environ={"ZEROCLAW_agents____x": "1"})


def test_override_may_not_turn_unrestricted_filesystem_on(install: Path) -> None:
    name = "ZEROCLAW_agents__researcher__workspace__unrestricted_filesystem"
    with pytest.raises(Refused, match=name):
        cfg.load_config(install, environ={name: "true"})
    # turning it off (or leaving it off) is allowed
    assert cfg.load_config(install, environ={name: "false"}).overridden


def test_override_may_not_change_locked_memory_backend(install: Path) -> None:
    name = "ZEROCLAW_agents__researcher__memory__backend"
    memory = install / "agents" / "researcher" / "workspace" / "memory"
    memory.mkdir(parents=True)
    (memory / "brain.db").write_bytes(b"")  # empty: not yet written
    assert cfg.load_config(install, environ={name: "markdown"}).overridden
    (memory / "brain.db").write_bytes(b"SQLite format 3\0")
    with pytest.raises(Refused, match="memory backend is locked"):
        cfg.load_config(install, environ={name: "markdown"})
    assert cfg.load_config(install, environ={name: "sqlite"}).overridden  # no change


def test_override_addresses_mcp_server_by_name(tmp_path: Path) -> None:
    root = make_install(
        tmp_path,
        MINIMAL_CONFIG + '\n[[mcp.servers]]\nname = "gh"\ncommand = "gh"\n'
        '\n[[mcp.servers]]\nname = "web"\ntransport = "http"\nurl = "https://a.example"\n',
    )
    env = {"ZEROCLAW_mcp__servers__web__url": "https://b.example"}
    servers = cfg.load_config(root, environ=env).data["mcp"]["servers"]
    assert [s.get("url") for s in servers] == [None, "https://b.example"]
    with pytest.raises(InvalidInput, match="no entry mcp.servers.nope"):
        cfg.load_config(root, environ={"ZEROCLAW_mcp__servers__nope__url": "https://x.example"})


# --- pure helpers --------------------------------------------------------------------------------


def test_parse_value_strings_verbatim_others_toml() -> None:
    string_node = {"type": "string"}
    assert parse_value('"quoted" # not a comment', string_node, "p") == '"quoted" # not a comment'
    assert parse_value("[1, 2]", {"type": "array"}, "p") == [1, 2]
    assert parse_value("{ a = 1 }", {"type": "object"}, "p") == {"a": 1}
    assert parse_value("markdown", {"enum": ["sqlite", "markdown"]}, "p") == "markdown"


def test_parse_value_refuses_a_smuggled_second_key() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_value(f'1\nx = "{CANARY}"', {"type": "integer"}, "agents.a.x")
    assert CANARY not in caught.value.message and "agents.a.x" in caught.value.message


def test_redact_masks_nested_secrets_only() -> None:
    server = {"name": "gh", "command": "gh", "env": {"T": "v", "E": ""}, "headers": {"A": "b"}}
    assert redact([server], ["mcp", "servers"]) == [
        {"name": "gh", "command": "gh", "env": {"T": "***", "E": ""}, "headers": {"A": "***"}}
    ]
    assert redact("k", ["providers", "models", "openai", "m", "api_key"]) == "***"
    assert redact("gpt", ["providers", "models", "openai", "m", "model"]) == "gpt"


def test_redact_masks_values_the_schema_does_not_describe_under_secret_looking_keys() -> None:
    """The sweep's rule for opaque tables and unknown keys (02 §5.3), where output is made: a
    channel's key the schema does not know (``signingSecret``); other unknown values stay
    shown. A channel's ``bot_token`` is marked ``#[secret]`` by the schema itself."""
    channel = {"bot_token": "xoxb-1", "signingSecret": "s", "workspace": "team", "tokens": ["a"]}
    assert redact({"slack": {"team": channel}}, ["channels"]) == {
        "slack": {
            "team": {
                "bot_token": "***",
                "signingSecret": "***",
                "workspace": "team",
                "tokens": ["***"],
            }
        }
    }
    workspace = {"api_key": "k", "access": {"w": "read"}}
    assert redact(workspace, ["agents", "a", "workspace"]) == {
        "api_key": "***",
        "access": {"w": "read"},
    }
    # a #[secret] field no key rule would catch: the schema marks it
    assert redact("enc-key-1", ["channels", "lark", "team", "encrypt_key"]) == "***"
    # a schema field is judged by the schema alone, whatever its name looks like
    assert redact(8192, ["providers", "models", "anthropic", "m", "max_tokens"]) == 8192


def test_redact_masks_a_secret_value_copied_where_no_rule_marks_it() -> None:
    """The sweep test found a header's ``Bearer …`` value copied under a risk profile: a
    string holding one of the install's secret values is masked wherever it stands."""
    profile = {"Authorization": "Bearer sk-FAKE-1234567890", "workspace_only": True}
    held = {"Bearer sk-FAKE-1234567890"}
    assert redact(profile, ["risk_profiles", "careful"], secret_values=held) == {
        "Authorization": "***",
        "workspace_only": True,
    }
    assert redact(profile, ["risk_profiles", "careful"]) == profile  # no rule marks it


def test_lookup_by_name_and_index() -> None:
    data = {"mcp": {"servers": [{"name": "a", "args": ["x", "y"]}, {"name": "a", "args": []}]}}
    assert lookup(data, ["mcp", "servers", "a", "args", "1"]) == (True, "y")
    assert lookup(data, ["mcp", "servers", "b"]) == (False, None)


# --- config set ----------------------------------------------------------------------------------


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A private copy of examples/install (the commented, realistic config)."""
    root = tmp_path / "example"
    shutil.copytree(EXAMPLE_INSTALL, root, symlinks=True)
    return root


def changed_lines(before: str, after: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_config_set_changes_only_the_edited_value_bytes(example: Path) -> None:
    path = example / "config.toml"
    before = path.read_text()
    cfg.set_config_value(example, "providers.models.openai.backup.timeout-secs", "90", via="test")
    after = path.read_text()
    assert after == before.replace("timeout_secs = 60\n", "timeout_secs = 90\n", 1)
    # a value with a trailing comment keeps the comment and the spacing before it
    cfg.set_config_value(example, "agents.researcher.model_provider", "groq.fast", via="test")
    assert changed_lines(after, path.read_text()) == [
        '-model_provider = "anthropic.main"        # falls back to openai.backup, then groq.fast',
        '+model_provider = "groq.fast"        # falls back to openai.backup, then groq.fast',
    ]


def test_config_set_new_key_lands_in_its_table(example: Path) -> None:
    path = example / "config.toml"
    before = path.read_text()
    cfg.set_config_value(example, "agents.writer.workspace.path", "/srv/writer", via="test")
    after = path.read_text()
    assert changed_lines(before, after) == ['+path = "/srv/writer"']
    loaded = cfg.load_config(example, environ={})
    assert loaded.data["agents"]["writer"]["workspace"]["path"] == "/srv/writer"
    cfg.set_config_value(example, "agents.ops.workspace.path", "ops-space", via="test")
    assert cfg.load_config(example, environ={}).data["agents"]["ops"]["workspace"] == {
        "path": "ops-space"
    }


def test_config_set_in_array_of_tables_entry_by_name(example: Path) -> None:
    cfg.set_config_value(example, "mcp.servers.search.headers.X-Trace", "on", via="test")
    cfg.set_config_value(example, "mcp.servers.docs.tool_timeout_secs", "15", via="test")
    cfg.set_config_value(example, "mcp.servers.filesystem.env.ROOT", "/srv", via="test")
    servers = {s["name"]: s for s in cfg.load_config(example, environ={}).data["mcp"]["servers"]}
    assert servers["search"]["headers"]["X-Trace"] == "on"
    assert servers["docs"]["tool_timeout_secs"] == 15
    assert servers["filesystem"]["env"] == {"ROOT": "/srv"}
    assert servers["github"].get("tool_timeout_secs") is None  # no other entry touched
    with pytest.raises(Refused, match="no entry mcp.servers.nope"):
        cfg.set_config_value(example, "mcp.servers.nope.command", "x", via="test")


def test_invalid_config_set_leaves_file_byte_identical(example: Path) -> None:
    path = example / "config.toml"
    before = file_state(path)
    attempts = [
        ("providers.models.anthropic.main.temperature", "9"),
        ("agents.researcher.risk_profile", "nope"),
        ("agents.researcher.enabled", CANARY),
        ("mcp.servers.search.url", "ftp://" + CANARY),
        ("agents.writer.identity.format", "xml"),
    ]
    for config_path, value in attempts:
        with pytest.raises(InvalidInput) as caught:
            cfg.set_config_value(example, config_path, value, via="test")
        assert CANARY not in caught.value.message
        assert file_state(path) == before
    assert not [p for p in example.iterdir() if p.name.startswith(".config.toml.tmp")]


def test_config_set_unknown_path_is_a_usage_error(example: Path) -> None:
    with pytest.raises(UsageError):
        cfg.set_config_value(example, "agents.researcher.no_such_thing", "1", via="test")


def test_config_set_refuses_changing_locked_memory_backend(example: Path) -> None:
    path = example / "config.toml"
    before = file_state(path)
    with pytest.raises(Refused, match="memory backend is locked"):
        cfg.set_config_value(example, "agents.researcher.memory.backend", "markdown", via="test")
    assert file_state(path) == before
    # setting the same backend again is no change, so no refusal
    cfg.set_config_value(example, "agents.researcher.memory.backend", "sqlite", via="test")


def test_memory_backend_unlocked_while_memory_holds_no_data(install: Path) -> None:
    memory = install / "agents" / "researcher" / "workspace" / "memory"
    (memory / "archive").mkdir(parents=True)
    (memory / "brain.db").touch()
    (memory / "archive" / "old.md").touch()
    cfg.set_config_value(install, "agents.researcher.memory.backend", "markdown", via="test")
    assert "markdown" in (install / "config.toml").read_text()


def test_memory_lock_sees_data_in_subfolders_and_not_through_symlinks(install: Path) -> None:
    workspace = install / "agents" / "researcher" / "workspace"
    outside = install / "elsewhere"
    outside.mkdir()
    (outside / "big").write_bytes(b"x")
    (workspace / "memory").mkdir(parents=True)
    (workspace / "memory" / "link").symlink_to(outside / "big")
    data = cfg.load_config(install).data
    assert not memory_backend_locked(data, "researcher", install)
    (workspace / "memory" / "archive").mkdir()
    (workspace / "memory" / "archive" / "2025.md").write_text("old")
    assert memory_backend_locked(data, "researcher", install)


def test_guard_rule_is_pure_and_the_memory_scan_lives_apart(tmp_path: Path) -> None:
    # configguards decides which changes are guarded from two configs alone; asking the disk
    # whether a memory backend is locked is memorylock's job
    import ast

    from bundler.config import guards as configguards

    tree = ast.parse(Path(configguards.__file__).read_text(encoding="utf-8"))
    nodes = list(ast.walk(tree))
    imported = {a.name for node in nodes if isinstance(node, ast.Import) for a in node.names}
    imported |= {node.module or "" for node in nodes if isinstance(node, ast.ImportFrom)}
    assert not imported & {"os", "stat", "pathlib", "bundler.fs.durable", "bundler.rules.layout"}
    before = {"agents": {"a": {"memory": {"backend": "sqlite"}}}}
    after = {"agents": {"a": {"memory": {"backend": "markdown"}}}}
    (change,) = configguards.guarded_changes(before, after)
    assert (change.path, change.old, change.new) == (
        "agents.a.memory.backend",
        "sqlite",
        "markdown",
    )
    assert list(tmp_path.iterdir()) == []


def test_unrestricted_filesystem_change_is_audited(install: Path) -> None:
    config_path = "agents.researcher.workspace.unrestricted_filesystem"
    cfg.set_config_value(install, config_path, "true", via="config set")
    cfg.set_config_value(install, config_path, "true", via="config set")  # no change: no line
    cfg.set_config_value(install, config_path.replace("_f", "-f"), "false", via="config set")
    audit = install / "data" / "state" / "config-audit.jsonl"
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(r["path"], r["old"], r["new"], r["via"]) for r in lines] == [
        (config_path, False, True, "config set"),
        (config_path, True, False, "config set"),
    ]
    assert all(r["time"].endswith("Z") and r["user"] for r in lines)
    assert stat.S_IMODE(audit.stat().st_mode) == 0o600


def test_other_changes_are_not_audited(install: Path) -> None:
    cfg.set_config_value(install, "agents.researcher.enabled", "false", via="config set")
    assert not (install / "data").exists()


# --- the write protocol --------------------------------------------------------------------------


def test_write_keeps_mode_without_a_secret_and_replaces_atomically(tmp_path: Path) -> None:
    install = make_install(
        tmp_path, MINIMAL_CONFIG.replace('"sk-FAKE-minimal-0123456789abcdef"', '""')
    )
    path = install / "config.toml"
    path.chmod(0o640)
    inode = path.stat().st_ino
    cfg.set_config_value(install, "agents.researcher.enabled", "false", via="test")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.stat().st_ino != inode  # a new file renamed over the old one
    assert sorted(p.name for p in install.iterdir()) == [".config.lock", "config.toml"]


def test_write_of_a_file_holding_a_secret_leaves_it_0600(install: Path) -> None:
    """ZeroClaw leaves config.toml 0600 on every save; a file holding a key is never left wider."""
    path = install / "config.toml"
    path.chmod(0o640)
    cfg.set_config_value(install, "agents.researcher.enabled", "false", via="test")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_write_through_symlinked_config_replaces_the_target(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "main.toml").write_text(MINIMAL_CONFIG)
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").symlink_to(real / "main.toml")
    cfg.set_config_value(install, "agents.researcher.enabled", "false", via="test")
    assert (install / "config.toml").is_symlink()
    assert "enabled = false" in (real / "main.toml").read_text()
    assert sorted(p.name for p in real.iterdir()) == ["main.toml"]


def test_write_refused_when_config_changed_since_read(install: Path) -> None:
    with config_lock(install):
        text, identity = read_config_snapshot(install)
        (install / "config.toml").write_text(text + "\n# edited meanwhile\n")
        with pytest.raises(Refused, match="changed since it was read"):
            write_config_text(install, text.replace("supervised", "full"), identity)
    assert (install / "config.toml").read_text().endswith("# edited meanwhile\n")
    assert sorted(p.name for p in install.iterdir()) == [".config.lock", "config.toml"]


def test_staged_config_is_invisible_until_committed(install: Path) -> None:
    with config_lock(install):
        text, identity = read_config_snapshot(install)
        (install / "config.toml").chmod(0o604)
        staged = stage_config_text(install, text + "# new\n")
        # it holds a key: 0600 from birth, whatever the original's mode
        assert stat.S_IMODE((install / staged.temp_name).stat().st_mode) == 0o600
        assert read_config_snapshot(install)[0] == text
        commit_staged_config(install, staged, identity)
    assert read_config_snapshot(install)[0].endswith("# new\n")
    staged = stage_config_text(install, "x = 1\n")
    discard_staged_config(staged)
    assert sorted(p.name for p in install.iterdir()) == [".config.lock", "config.toml"]


def test_write_creates_missing_config_only_when_still_missing(tmp_path: Path) -> None:
    text, identity = read_config_snapshot(tmp_path, missing_ok=True)
    assert (text, identity) == ("", None)
    write_config_text(tmp_path, MINIMAL_CONFIG, None)
    assert (tmp_path / "config.toml").read_text() == MINIMAL_CONFIG
    with pytest.raises(Refused, match="changed since it was read"):
        write_config_text(tmp_path, "", None)


def test_config_lock_is_exclusive(install: Path) -> None:
    with config_lock(install):
        fd = os.open(install / ".config.lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    fd = os.open(install / ".config.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released on exit
    finally:
        os.close(fd)


def test_config_lock_refuses_a_symlinked_lock_file(install: Path) -> None:
    (install / ".config.lock").symlink_to(install / "elsewhere")
    with pytest.raises(Refused), config_lock(install):
        pass
    assert not (install / "elsewhere").exists()


# --- config get / set through the CLI ------------------------------------------------------------


def test_config_get_masks_secrets_unless_revealed(install: Path) -> None:
    key = "providers.models.anthropic.main.api_key"
    masked = run_cli(["--install", str(install), "config", "get", key])
    assert (masked.returncode, masked.stdout) == (0, "***\n")
    table = run_cli(["--install", str(install), "config", "get", "providers.models.anthropic.main"])
    assert SECRET not in table.stdout and "***" in table.stdout
    revealed = run_cli(["--install", str(install), "config", "get", key, "--reveal"])
    assert revealed.stdout == SECRET + "\n"


def test_config_get_default_and_missing(install: Path) -> None:
    got = run_cli(
        ["--install", str(install), "--json", "config", "get", "agents.researcher.memory.backend"]
    )
    assert json.loads(got.stdout) == {
        "ok": True,
        "path": "agents.researcher.memory.backend",
        "value": "sqlite",
        "secret": False,
        "default": True,
        "overridden_by": None,
    }
    missing = run_cli(["--install", str(install), "config", "get", "agents.nobody.model_provider"])
    assert missing.returncode == 1 and missing.stderr.startswith("error: agents.nobody")


def test_config_get_marks_overridden_values(install: Path) -> None:
    name = "ZEROCLAW_agents__researcher__workspace__path"
    got = run_cli(
        ["--install", str(install), "config", "get", "agents.researcher.workspace.path"],
        env={name: "/srv/w"},
    )
    assert got.stdout == "/srv/w\n"
    assert name in got.stderr


def test_config_set_reads_stdin_and_drops_one_newline(install: Path) -> None:
    key = "providers.models.anthropic.main.api_key"
    new_secret = "sk-FAKE-from-stdin-0000111122223333"
    result = run_cli(
        ["--install", str(install), "config", "set", key], input_text=new_secret + "\n"
    )
    assert result.returncode == 0, result.stderr
    assert new_secret not in result.stdout + result.stderr
    revealed = run_cli(["--install", str(install), "config", "get", key, "--reveal"])
    assert revealed.stdout == new_secret + "\n"
    run_cli(["--install", str(install), "config", "set", key], input_text="two\n\n")
    revealed = run_cli(["--install", str(install), "config", "get", key, "--reveal", "--json"])
    assert json.loads(revealed.stdout)["value"] == "two\n"  # only one newline was dropped


def test_config_set_invalid_value_never_echoes_it(install: Path) -> None:
    before = file_state(install / "config.toml")
    result = run_cli(
        ["--install", str(install), "config", "set", "agents.researcher.enabled", CANARY]
    )
    assert result.returncode == 3
    assert CANARY not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert file_state(install / "config.toml") == before


def test_config_set_locked_backend_exits_1(example: Path) -> None:
    result = run_cli(
        ["--install", str(example), "config", "set", "agents.ops.memory.backend", "none"]
    )
    assert result.returncode == 1
    assert "memory backend is locked" in result.stderr


def test_guarded_fields_cannot_be_changed_through_a_parent_table(example: Path) -> None:
    path = example / "config.toml"
    before = file_state(path)
    with pytest.raises(Refused, match="memory backend is locked"):
        cfg.set_config_value(example, "agents.ops.memory", '{ backend = "none" }', via="test")
    assert file_state(path) == before
    cfg.set_config_value(
        example, "agents.writer.workspace", "{ unrestricted_filesystem = true }", via="config set"
    )
    [record] = [
        json.loads(line)
        for line in (example / "data/state/config-audit.jsonl").read_text().splitlines()
    ]
    assert record["path"] == "agents.writer.workspace.unrestricted_filesystem"
    assert (record["old"], record["new"]) == (False, True)


def test_override_of_parent_table_cannot_open_the_escape_hatch(install: Path) -> None:
    name = "ZEROCLAW_agents__researcher__workspace"
    with pytest.raises(Refused, match=name):
        cfg.load_config(install, environ={name: "{ unrestricted_filesystem = true }"})


def test_override_cannot_dodge_the_lock_by_moving_the_workspace(install: Path) -> None:
    memory = install / "agents" / "researcher" / "workspace" / "memory"
    memory.mkdir(parents=True)
    (memory / "brain.db").write_bytes(b"SQLite format 3\0")
    env = {
        "ZEROCLAW_agents__researcher__workspace__path": str(install / "empty-elsewhere"),
        "ZEROCLAW_agents__researcher__memory__backend": "markdown",
    }
    with pytest.raises(Refused, match="memory backend is locked"):
        cfg.load_config(install, environ=env)


def test_config_set_without_config_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(Refused, match="no config.toml in"):
        cfg.set_config_value(tmp_path, "agents.a.enabled", "false", via="test")
    assert list(tmp_path.iterdir()) == []


# --- unprivileged reads and writes ---------------------------------------------------------------


@pytest.fixture
def open_install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An install that user 65534 can reach (pytest's tmp_path is 0700 root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop privileges to uid 65534 in a child")
    parent = Path(tempfile.mkdtemp(prefix="bundler-h1-", dir="/tmp"))
    parent.chmod(0o755)
    root = make_install(parent, MINIMAL_CONFIG)
    root.chmod(0o755)
    yield root
    shutil.rmtree(parent)


def _run_as_nobody(args: list[str]) -> subprocess.CompletedProcess[str]:
    return run_cli(args, cwd="/", timeout=60, as_nobody=True)


def test_unreadable_config_is_a_one_line_refusal(open_install: Path) -> None:
    (open_install / "config.toml").chmod(0o600)
    result = _run_as_nobody(["--install", str(open_install), "config", "validate"])
    assert result.returncode == 1
    assert (
        result.stderr == f"error: cannot open {open_install / 'config.toml'}: Permission denied\n"
    )


def test_config_set_in_unwritable_install_changes_nothing(open_install: Path) -> None:
    (open_install / "config.toml").chmod(0o644)
    before = file_state(open_install / "config.toml")
    result = _run_as_nobody(
        ["--install", str(open_install), "config", "set", "agents.researcher.enabled", "false"]
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: cannot open the config lock")
    assert "Traceback" not in result.stderr
    assert file_state(open_install / "config.toml") == before
    assert sorted(p.name for p in open_install.iterdir()) == ["config.toml"]


def test_concurrent_config_sets_lose_no_update(tmp_path: Path) -> None:
    profiles = "".join(f'\n[risk_profiles.r{i}]\nlevel = "readonly"\n' for i in range(8))
    root = make_install(tmp_path, MINIMAL_CONFIG + profiles)
    env = clean_env()
    runs = [
        subprocess.Popen(
            [
                *cli_command(),
                "--install",
                str(root),
                "config",
                "set",
                f"risk_profiles.r{i}.level",
                "full",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for i in range(8)
    ]
    assert [run.wait(timeout=120) for run in runs] == [0] * 8
    data = cfg.load_config(root, environ={}).data
    assert [data["risk_profiles"][f"r{i}"]["level"] for i in range(8)] == ["full"] * 8


def test_replacing_a_whole_table_keeps_the_comments_around_it(example: Path) -> None:
    path = example / "config.toml"
    before = path.read_text()
    cfg.set_config_value(
        example,
        "mcp.servers.docs",
        '{ name = "docs", transport = "sse", url = "https://docs2.example.com/sse" }',
        via="test",
    )
    assert changed_lines(before, path.read_text()) == [
        '-url = "https://docs.example.com/sse"',
        '+url = "https://docs2.example.com/sse"',
    ]
    middle = path.read_text()
    cfg.set_config_value(example, "risk_profiles.permissive", '{ level = "full" }', via="test")
    assert "# the ops agent may run anything below" in path.read_text()
    assert set(changed_lines(middle, path.read_text())) == {
        "-workspace_only = false",
        '-allowed_commands = ["git", "make", "systemctl", "docker"]',
        '-allowed_roots = ["/srv", "/var/log"]',
        "-require_approval_for_medium_risk = false",
        "-block_high_risk_commands = false",
        '-delegation_policy = { mode = "allow" }',
    }


def test_secret_on_the_command_line_gets_a_warning(install: Path) -> None:
    key = "providers.models.anthropic.main.api_key"
    result = run_cli(["--install", str(install), "config", "set", key, CANARY])
    assert result.returncode == 0
    assert result.stderr.startswith(f"warning: the value of secret {key}")
    assert CANARY not in result.stdout + result.stderr


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=st.text(max_size=40))
def test_config_set_string_round_trips_any_text(install: Path, value: str) -> None:
    cfg.set_config_value(install, "agents.researcher.workspace.path", value, via="test")
    data = cfg.load_config(install, environ={}).data
    assert data["agents"]["researcher"]["workspace"]["path"] == value


def test_config_validate_reports_bad_override_naming_the_variable(install: Path) -> None:
    name = "ZEROCLAW_agents__researcher__bogus"
    result = run_cli(["--install", str(install), "config", "validate"], env={name: CANARY})
    assert result.returncode == 3
    assert result.stderr == (
        f"error: environment variable {name}: agents.researcher.bogus is not a config field\n"
    )


def test_config_validate_marks_findings_on_overridden_values(install: Path) -> None:
    name = "ZEROCLAW_agents__researcher__risk_profile"
    result = run_cli(["--install", str(install), "config", "validate"], env={name: "ghost"})
    assert result.returncode == 3
    assert result.stdout == (
        "dangling_reference agents.researcher.risk_profile: names no existing risk_profiles entry"
        f" (value from environment variable {name})\n"
    )


def test_effective_value_defaults_only_for_fields_of_existing_entries() -> None:
    data = {"agents": {"a": {"model_provider": "x.y"}}}
    assert effective_value(data, ["agents", "a", "model_provider"]) == ("set", "x.y")
    assert effective_value(data, ["agents", "a", "memory", "backend"]) == ("default", "sqlite")
    assert effective_value(data, ["agents", "b", "memory", "backend"]) == ("absent", None)
    assert effective_value(data, ["agents", "a", "classifier_provider"]) == ("default", "")
    assert effective_value(data, ["mcp", "enabled"]) == ("default", True)


def test_config_set_from_a_terminal_does_not_echo(install: Path) -> None:
    key = "providers.models.anthropic.main.api_key"
    typed = "sk-FAKE-typed-at-a-terminal-0042"
    with Terminal(["--install", str(install), "config", "set", key]) as tty:
        tty.answer(b"not echoed", typed.encode() + b"\n")
        status, out, err = tty.finish()
    assert status == 0, err
    assert typed.encode() not in tty.screen + out + err
    revealed = run_cli(["--install", str(install), "config", "get", key, "--reveal"])
    assert revealed.stdout == typed + "\n"


@pytest.mark.parametrize(
    ("typed", "said"),
    [(b"\x04", "end of input"), (b"sk-\xff\xfe-Secret77\n", "not UTF-8")],
    ids=["ctrl_d", "not_utf8"],
)
def test_config_set_from_a_terminal_without_a_usable_answer_is_one_line(
    install: Path, typed: bytes, said: str
) -> None:
    """Both ended in a getpass traceback (EOFError, UnicodeDecodeError)."""
    key = "providers.models.anthropic.main.api_key"
    before = file_state(install / "config.toml")
    with Terminal(["--install", str(install), "config", "set", key]) as tty:
        tty.answer(b"not echoed", typed)
        status, out, err = tty.finish()
    text = err.decode("utf-8", "replace")
    assert status == (2 if typed == b"\x04" else 3) and one_error(text), text
    assert said in text and key in text
    assert b"Secret77" not in tty.screen + out + err
    assert file_state(install / "config.toml") == before


@pytest.mark.parametrize(
    "key", ["providers.models.anthropic.main.api_key", "providers.models.anthropic.main.model"]
)
def test_config_set_refuses_a_value_that_is_not_utf8_unshown(install: Path, key: str) -> None:
    """An argument's bytes that are not UTF-8 reach Python as lone surrogates, and standard
    input's raise as they are decoded: both ended in a traceback."""
    before = file_state(install / "config.toml")
    by_argument = run_cli(["--install", str(install), "config", "set", key, "v-\udcff-Secret77"])
    by_stdin = subprocess.run(
        [*cli_command(), "--install", str(install), "config", "set", key],
        input=b"v-\xff-Secret77\n",
        capture_output=True,
        env=clean_env(),
        timeout=60,
    )
    stdin_err = by_stdin.stderr.decode("utf-8", "replace")
    for status, text in [
        (by_argument.returncode, by_argument.stderr),
        (by_stdin.returncode, stdin_err),
    ]:
        assert status == 3 and one_error(text), text
        assert "not UTF-8" in text and key in text and "Secret77" not in text
    assert b"Secret77" not in by_stdin.stdout
    assert file_state(install / "config.toml") == before


DATED_CONFIG = MINIMAL_CONFIG + "\n[cron.daily]\nstart = 2024-01-01T08:00:00Z\nday = 2024-01-01\n"


def test_toml_dates_survive_overrides_and_json_output(tmp_path: Path) -> None:
    root = make_install(tmp_path, DATED_CONFIG)
    env = {"ZEROCLAW_agents__researcher__enabled": "true"}
    assert cfg.load_config(root, environ=env).data["cron"]["daily"]["day"].year == 2024
    got = run_cli(["--install", str(root), "--json", "config", "get", "cron.daily"], env=env)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["value"] == {
        "start": "2024-01-01T08:00:00+00:00",
        "day": "2024-01-01",
    }


def test_agents_list_json_with_a_date_where_a_string_belongs(tmp_path: Path) -> None:
    root = make_install(tmp_path, MINIMAL_CONFIG.replace('"anthropic.main"', "2024-01-01", 1))
    listed = run_cli(["--install", str(root), "agents", "list", "--json"])
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["agents"][0]["model_provider"] == "2024-01-01"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("providers.models.anthropic.main.max_tokens", "99999999999999999999999999"),
        ("providers.models.anthropic.main.max_tokens", "-9223372036854775809"),
        ("providers.models.anthropic.main.temperature", "nan"),
    ],
)
def test_config_set_refuses_numbers_toml_cannot_mean(install: Path, key: str, value: str) -> None:
    """A 90-bit integer was written (the runtime's TOML parser refuses the file), and NaN
    passed the field's bounds, as every comparison with it is false."""
    before = file_state(install / "config.toml")
    result = run_cli(["--install", str(install), "config", "set", key, value])
    assert result.returncode == 3 and one_error(result.stderr), result.stderr
    assert file_state(install / "config.toml") == before


def test_a_bundle_folder_named_as_the_install_is_refused_and_left_as_it_is(
    example: Path, tmp_path: Path
) -> None:
    """'--install BUNDLE config unset …' edited the bundle's config.toml (its checksums no longer
    matched) and left a .config.lock in it."""
    bundle = tmp_path / "bundle"
    exported = run_cli(
        ["--install", str(example), "agents", "export", "researcher", "--out", str(bundle)]
    )
    assert exported.returncode == 0, exported.stderr
    before = tree_snapshot(bundle)
    key = "providers.models.anthropic.main.model"
    for args, env in (
        (["--install", str(bundle), "config", "unset", key], {}),
        (["config", "set", key, "x"], {"ZEROCLAW_CONFIG_DIR": str(bundle)}),
        (["--install", str(bundle), "agents", "list"], {}),
    ):
        done = run_cli(args, env=env)
        assert done.returncode == 2 and one_error(done.stderr), done.stderr
        assert "is a bundle, not an install" in done.stderr
    assert tree_snapshot(bundle) == before
    assert run_cli(["bundle", "verify", str(bundle)]).returncode == 0


# --- failures after the commit point -------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "saved"),
    [
        (["set", "agents.researcher.model_provider", "groq.fast"], 'model_provider = "groq.fast"'),
        (["unset", "providers.models.anthropic.main.temperature"], None),
        # audited: the audit record is appended after the commit, so its failures are late too
        (["set", "agents.researcher.workspace.unrestricted_filesystem", "true"], None),
    ],
)
def test_a_config_edit_whose_flush_fails_after_the_commit_stands_with_a_warning(
    tmp_path: Path, args: list[str], saved: str | None
) -> None:
    """An fsync's EIO at each fsync of ``config set``/``unset``: before the rename, a one-line
    error and the file unchanged; after it (the folder's fsync, the audit's), the new value
    stands, exit 0 with a warning. It was a traceback and exit 1 with the value saved."""
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    pristine = tmp_path / "pristine"
    shutil.copytree(EXAMPLE_INSTALL, pristine, symlinks=True)
    install = tmp_path / "install"
    cmd = [*cli_command(), "--install", str(install), "config", *args]
    env = clean_env({"PYTHONDONTWRITEBYTECODE": "1", "SOURCE_DATE_EPOCH": "1700000000"})

    def reset() -> None:
        shutil.rmtree(install, ignore_errors=True)
        shutil.copytree(pristine, install, symlinks=True)

    reset()
    before = (install / "config.toml").read_bytes()
    done, calls = trace_calls(cmd, ["fsync"], env=env)
    assert done.returncode == 0, done.stderr
    after = (install / "config.toml").read_bytes()
    assert after != before and (saved is None or saved in after.decode())
    late = 0
    for call in calls:
        reset()
        run = run_with_fault(cmd, "fsync", call.index, "EIO", env=env)
        assert run.fired, call
        assert "Traceback" not in run.stderr, (call, run.stderr)
        now = (install / "config.toml").read_bytes()
        if run.returncode == 1:
            assert one_error(run.stderr) and now == before, (call, run.stderr)
        else:
            assert run.returncode == 0 and now == after, (call, run.returncode, run.stderr)
            assert run.stderr.startswith("warning: ") and "saved" in run.stderr, run.stderr
            late += 1
    assert late, "no fsync after the commit point was failed"
