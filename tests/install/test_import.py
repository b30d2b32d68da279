"""``bundler agents import`` end to end (03 §3): real bundles, real installs, real processes."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import bundlefactory as bf
from support.installs import opened_config, run_cli
from support.kit import Terminal, clean_env, cli_command, one_error

from bundler.config.file import MAX_CONFIG_TOML_BYTES
from bundler.errors import UsageError
from bundler.install.bind_secrets import endpoint_of, split_assignment
from bundler.rules.units import human_size

ANTHROPIC_KEY = "sk-ant-IMPORTED-key-zqxjvwqzqxjvwq"
SECRET_ARGS = ["--secret", f"providers.models.anthropic.main.api_key={ANTHROPIC_KEY}"]


def run_import(
    install: Path, *args: str, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_cli(["--install", str(install), "agents", "import", *args], input_text=input_text)


def snapshot(install: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry of the install; ``.config.lock`` is the lock protocol's own file (01 §6)."""
    if not install.exists():
        return {}
    return {rel: entry for rel, entry in bf.tree_snapshot(install).items() if rel != ".config.lock"}


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return bf.build_bundle(tmp_path / "bundle")


@pytest.fixture
def empty_install(tmp_path: Path) -> Path:
    root = tmp_path / "target"
    root.mkdir()
    return root


def changed_bundle(tmp_path: Path, change: Any, name: str = "changed") -> Path:
    dest = bf.build_bundle(tmp_path / name)
    bf.edit_config(dest, change)
    bf.recompute_flags(dest)
    bf.reseal(dest)
    return dest


def config_of(install: Path) -> dict[str, Any]:
    """The config as ZeroClaw reads it: stored secrets opened under the install's key."""
    return opened_config(install)


# --------------------------------------------------------------------------- the happy path


def test_import_into_empty_install_creates_config_workspace_skills_receipt(
    bundle: Path, empty_install: Path
) -> None:
    result = run_import(empty_install, str(bundle), "--accept-risks", *SECRET_ARGS, "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["ok"] is True and document["agent"] == bf.ROOT_AGENT
    assert "agents.researcher" in document["added"]
    assert document["secrets_missing"] == [
        "mcp.servers.github.env.GITHUB_TOKEN",
        "providers.models.openai.backup.api_key",
    ]
    receipt = Path(document["receipt"])
    assert receipt.parent == empty_install / "data" / "state" / "imports"
    assert receipt.name.endswith(f"-{bf.ROOT_AGENT}.toml")
    workspace = empty_install / "agents" / bf.ROOT_AGENT / "workspace"
    for rel, body in bf.WORKSPACE_FILES.items():
        assert (workspace / rel).read_bytes() == body
    for rel, body in bf.SKILL_FILES.items():
        assert (empty_install / "shared" / "skills" / bf.SKILL_BUNDLE / rel).read_bytes() == body
    assert (
        config_of(empty_install)["providers"]["models"]["anthropic"]["main"]["api_key"]
        == ANTHROPIC_KEY
    )
    assert not [name for name in os.listdir(empty_install) if name.startswith(".bundler-import-")]


def test_modes_folders_0755_no_group_other_write_no_setuid(
    tmp_path: Path, empty_install: Path
) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    risky = bundle / "workspace" / "notes" / "today.md"
    os.chmod(risky, 0o6777)
    os.chmod(bundle / "workspace" / "notes", 0o777)
    bf.reseal(bundle)
    result = run_import(empty_install, str(bundle), "--accept-risks")
    assert result.returncode == 0, result.stderr
    workspace = empty_install / "agents" / bf.ROOT_AGENT / "workspace"
    assert stat.S_IMODE((workspace / "notes" / "today.md").stat().st_mode) == 0o755
    for folder in (
        workspace,
        workspace / "notes",
        empty_install / "agents",
        empty_install / "shared" / "skills" / bf.SKILL_BUNDLE,
    ):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder


def test_existing_config_bytes_kept_and_new_entries_appended(bundle: Path, tmp_path: Path) -> None:
    install = tmp_path / "install"
    install.mkdir()
    original = (
        '# hand-written, keep me\n[agents.lead]  # boss\nmodel_provider = "openai.prod"\n'
        'risk_profile = "strict"\n\n'
        '[providers.models.openai.prod]\napi_key = "sk-local-prod-key-1234567890"\n'
        'model = "gpt"\n\n'
        '[risk_profiles.strict]\nlevel   =   "readonly"\n'
    )
    (install / "config.toml").write_text(original, encoding="utf-8")
    os.chmod(install / "config.toml", 0o640)
    result = run_import(install, str(bundle), "--accept-risks")
    assert result.returncode == 0, result.stderr
    after = (install / "config.toml").read_text(encoding="utf-8")
    assert after.startswith(original)
    assert "[agents.researcher]" in after[len(original) :]
    # it holds a key: 0600, as ZeroClaw leaves it on every save, whatever it was
    assert stat.S_IMODE((install / "config.toml").stat().st_mode) == 0o600


def test_dry_run_prints_plan_changes_nothing_lists_missing_mcp_command(
    tmp_path: Path, empty_install: Path
) -> None:
    def missing_command(data: dict[str, Any]) -> None:
        data["mcp"]["servers"][0]["command"] = "bundler-test-no-such-command"

    bundle = changed_bundle(tmp_path, missing_command)
    before = snapshot(empty_install)
    result = run_import(empty_install, str(bundle), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "would import agent researcher" in result.stdout
    assert "not on PATH: mcp.servers.github.command: bundler-test-no-such-command" in result.stdout
    assert (
        "secret needed: providers.models.anthropic.main.api_key "
        "(sent to https://api.anthropic.com); set it with:\n"
        f"    bundler --install {empty_install} config set "
        "providers.models.anthropic.main.api_key\n" in result.stdout
    )
    assert "risk process_spawn mcp.servers.github.command" in result.stdout
    assert f"workspace: {empty_install}/agents/researcher/workspace" in result.stdout
    assert snapshot(empty_install) == before and not (empty_install / ".config.lock").exists()


def test_consent_needed_without_accept_risks_nothing_changed(
    bundle: Path, empty_install: Path
) -> None:
    result = run_import(empty_install, str(bundle))
    assert result.returncode == 1
    assert "risk flag" in result.stderr and "--accept-risks" in result.stderr
    assert snapshot(empty_install) == {}


def test_format_2_memory_restored_into_workspace_memory(
    tmp_path: Path, empty_install: Path
) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle2", format_version=2)
    result = run_import(empty_install, str(bundle), "--accept-risks")
    assert result.returncode == 0, result.stderr
    memory = empty_install / "agents" / bf.ROOT_AGENT / "workspace" / "memory"
    assert (memory / "brain.db").read_bytes() == (bundle / "memory" / "brain.db").read_bytes()
    assert (memory / "MEMORY_SNAPSHOT.md").read_bytes() == b"# core memory\n"
    assert stat.S_IMODE(memory.stat().st_mode) == 0o755


def test_unrestricted_filesystem_turned_on_and_off_is_audited(
    tmp_path: Path, empty_install: Path
) -> None:
    def unrestricted(data: dict[str, Any]) -> None:
        data["agents"][bf.ROOT_AGENT]["workspace"] = {"unrestricted_filesystem": True}

    bundle = changed_bundle(tmp_path, unrestricted)
    result = run_import(empty_install, str(bundle), "--accept-risks")
    assert result.returncode == 0, result.stderr
    lines = (empty_install / "data" / "state" / "config-audit.jsonl").read_text().splitlines()
    record = json.loads(lines[-1])
    assert record["path"] == "agents.researcher.workspace.unrestricted_filesystem"
    assert (record["old"], record["new"], record["via"]) == (False, True, "agents import")
    receipt = next((empty_install / "data" / "state" / "imports").glob("*.toml"))
    undone = run_cli(["--install", str(empty_install), "agents", "import", "--undo", str(receipt)])
    assert undone.returncode == 0, undone.stderr
    lines = (empty_install / "data" / "state" / "config-audit.jsonl").read_text().splitlines()
    record = json.loads(lines[-1])
    assert (record["old"], record["new"], record["via"]) == (True, False, "agents import --undo")


# --------------------------------------------------------------------------- collisions


def test_same_bundle_twice_reuses_identical_and_namespaces_changed_with_refs_rewritten(
    bundle: Path, tmp_path: Path, empty_install: Path
) -> None:
    assert run_import(empty_install, str(bundle), "--accept-risks").returncode == 0
    again = run_import(empty_install, str(bundle), "--accept-risks", "--as", "second", "--json")
    assert again.returncode == 0, again.stderr
    document = json.loads(again.stdout)
    assert document["added"] == ["agents.second"] and document["renamed"] == {}
    assert "providers.models.anthropic.main" in document["reused"]
    assert "mcp.servers.github" in document["reused"]

    def other_backup(data: dict[str, Any]) -> None:
        data["providers"]["models"]["openai"]["backup"]["model"] = "gpt-4.1"

    changed = changed_bundle(tmp_path, other_backup)
    third = run_import(empty_install, str(changed), "--accept-risks", "--as", "third", "--json")
    assert third.returncode == 0, third.stderr
    renamed = json.loads(third.stdout)["renamed"]
    assert renamed == {
        "providers.models.openai.backup": "providers.models.openai.third-backup",
        "providers.models.anthropic.main": "providers.models.anthropic.third-main",
    }
    config = config_of(empty_install)
    assert config["agents"]["third"]["model_provider"] == "anthropic.third-main"
    assert config["providers"]["models"]["anthropic"]["third-main"]["fallback"] == [
        "openai.third-backup"
    ]
    assert config["providers"]["models"]["openai"]["backup"]["model"] == "gpt-4o"
    assert config["agents"]["second"]["model_provider"] == "anthropic.main"


def test_bind_to_local_profile_and_local_provider(bundle: Path, tmp_path: Path) -> None:
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text(
        '[risk_profiles.strict]\nlevel = "readonly"\n\n'
        '[providers.models.anthropic.prod]\napi_key = "sk-local-prod-key-abcdefgh"\n'
        'model = "claude"\n',
        encoding="utf-8",
    )
    result = run_import(
        install,
        str(bundle),
        "--accept-risks",
        "--json",
        "--bind",
        "risk_profiles.guarded=strict",
        "--bind",
        "providers.models.anthropic.main=anthropic.prod",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["bound"] == {
        "risk_profiles.guarded": "risk_profiles.strict",
        "providers.models.anthropic.main": "providers.models.anthropic.prod",
    }
    agent = config_of(install)["agents"][bf.ROOT_AGENT]
    assert (agent["risk_profile"], agent["model_provider"]) == ("strict", "anthropic.prod")
    assert "providers.models.anthropic.main.api_key" not in document["secrets_missing"]
    assert "guarded" not in config_of(install)["risk_profiles"]


def test_missing_bind_target_is_an_error(bundle: Path, empty_install: Path) -> None:
    result = run_import(
        empty_install, str(bundle), "--accept-risks", "--bind", "risk_profiles.guarded=nope"
    )
    assert result.returncode == 1
    assert result.stderr.startswith(
        "error: --bind risk_profiles.guarded=nope: bind to an existing entry; there is no "
        f"risk_profiles entry nope in {empty_install} (the install bundler looked at)"
    )
    assert snapshot(empty_install) == {}


def test_taken_alias_without_as_is_refused(bundle: Path, empty_install: Path) -> None:
    assert run_import(empty_install, str(bundle), "--accept-risks").returncode == 0
    before = snapshot(empty_install)
    result = run_import(empty_install, str(bundle), "--accept-risks")
    assert result.returncode == 1
    assert "researcher is taken" in result.stderr and "--as" in result.stderr
    assert snapshot(empty_install) == before


def test_non_empty_workspace_target_is_refused(bundle: Path, empty_install: Path) -> None:
    target = empty_install / "agents" / "researcher" / "workspace"
    target.mkdir(parents=True)
    (target / "mine.txt").write_text("do not touch\n")
    before = snapshot(empty_install)
    result = run_import(empty_install, str(bundle), "--accept-risks")
    assert result.returncode == 1
    assert "workspace exists and is not empty" in result.stderr
    assert snapshot(empty_install) == before


def test_empty_workspace_target_is_accepted(bundle: Path, empty_install: Path) -> None:
    (empty_install / "agents" / "researcher" / "workspace").mkdir(parents=True)
    result = run_import(empty_install, str(bundle), "--accept-risks")
    assert result.returncode == 0, result.stderr
    assert (empty_install / "agents" / "researcher" / "workspace" / "README.md").exists()


def test_non_empty_skill_target_is_refused(bundle: Path, empty_install: Path) -> None:
    (empty_install / "shared" / "skills" / bf.SKILL_BUNDLE / "x").mkdir(parents=True)
    before = snapshot(empty_install)
    result = run_import(empty_install, str(bundle), "--accept-risks")
    assert result.returncode == 1
    assert f"shared/skills/{bf.SKILL_BUNDLE} exists and is not empty" in result.stderr
    assert snapshot(empty_install) == before


def test_merged_config_invalid_is_refused_with_exit_3(bundle: Path, tmp_path: Path) -> None:
    install = tmp_path / "install"
    install.mkdir()
    # an existing skill bundle already uses the folder the imported one resolves to
    (install / "config.toml").write_text(
        f'[skill_bundles.mine]\ndirectory = "shared/skills/{bf.SKILL_BUNDLE}"\n'
    )
    before = snapshot(install)
    result = run_import(install, str(bundle), "--accept-risks")
    assert result.returncode == 3, result.stderr
    assert "the merged config would be invalid" in result.stderr
    assert snapshot(install) == before


def test_target_config_parse_error_never_shows_a_secret_looking_value(
    bundle: Path, tmp_path: Path
) -> None:
    # tomllib names a table declared twice by its key, and a key may be anything, a secret too;
    # import reads the target through the one config reader, whose errors give a position only
    secret = "sk-ant-TARGETPARSE-zqxjvwqzqxjvwqzq"
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text(
        f'[risk_profiles."{secret}"]\nlevel = "readonly"\n[risk_profiles."{secret}"]\n'
    )
    before = snapshot(install)
    for args in ([str(bundle), "--accept-risks"], [str(bundle), "--dry-run"]):
        result = run_import(install, *args)
        assert result.returncode == 3, result.stderr
        assert "invalid TOML" in result.stderr and "line 3" in result.stderr
        assert secret not in result.stdout + result.stderr
        assert snapshot(install) == before


def test_target_config_over_the_one_size_limit_is_refused_unread(
    bundle: Path, tmp_path: Path
) -> None:
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text("# " + "x" * MAX_CONFIG_TOML_BYTES + "\n")
    before = snapshot(install)
    result = run_import(install, str(bundle), "--accept-risks")
    assert result.returncode == 1, result.stderr
    assert f"larger than {human_size(MAX_CONFIG_TOML_BYTES)}" in result.stderr
    assert snapshot(install) == before


# --------------------------------------------------------------------------- secrets


def test_secrets_file_fills_and_group_readable_file_is_refused(
    bundle: Path, tmp_path: Path, empty_install: Path
) -> None:
    secrets = tmp_path / "secrets.toml"
    secrets.write_text(f'"providers.models.anthropic.main.api_key" = "{ANTHROPIC_KEY}"\n')
    os.chmod(secrets, 0o640)
    refused = run_import(
        empty_install, str(bundle), "--accept-risks", "--secrets-file", str(secrets)
    )
    assert refused.returncode == 1 and "readable by group or others" in refused.stderr
    assert snapshot(empty_install) == {}
    os.chmod(secrets, 0o600)
    result = run_import(
        empty_install, str(bundle), "--accept-risks", "--secrets-file", str(secrets), "--json"
    )
    assert result.returncode == 0, result.stderr
    assert (
        "providers.models.anthropic.main.api_key"
        not in json.loads(result.stdout)["secrets_missing"]
    )
    assert (
        config_of(empty_install)["providers"]["models"]["anthropic"]["main"]["api_key"]
        == ANTHROPIC_KEY
    )


def test_secret_values_never_leak_to_outputs_or_receipt(
    bundle: Path, tmp_path: Path, empty_install: Path
) -> None:
    file_secret = "ghp_FROMFILE-zqxjzqxjzqxjzqxjzqxj"
    secrets = tmp_path / "secrets.toml"
    secrets.write_text(f'"mcp.servers.github.env.GITHUB_TOKEN" = "{file_secret}"\n')
    os.chmod(secrets, 0o600)
    outputs: list[str] = []
    for extra in ((), ("--json",)):
        target = tmp_path / f"target{len(outputs)}"
        target.mkdir()
        dry = run_import(
            target, str(bundle), *SECRET_ARGS, "--secrets-file", str(secrets), "--dry-run", *extra
        )
        done = run_import(
            target,
            str(bundle),
            "--accept-risks",
            *SECRET_ARGS,
            "--secrets-file",
            str(secrets),
            *extra,
        )
        assert done.returncode == 0, done.stderr
        outputs += [dry.stdout, dry.stderr, done.stdout, done.stderr]
        outputs += [p.read_text() for p in (target / "data").rglob("*") if p.is_file()]
    # a malformed --secret must not echo its value either
    bad = run_import(empty_install, str(bundle), "--secret", f"not a path={ANTHROPIC_KEY}")
    outputs += [bad.stdout, bad.stderr]
    blob = "\n".join(outputs)
    assert ANTHROPIC_KEY not in blob and file_secret not in blob
    assert "command lines are visible" in blob or "visible to other users" in blob


def test_unknown_secret_path_is_a_usage_error(bundle: Path, empty_install: Path) -> None:
    result = run_import(
        empty_install, str(bundle), "--secret", "providers.models.openai.nope.api_key=x"
    )
    assert result.returncode == 2
    assert "not a required secret" in result.stderr


def test_secret_argument_without_path_is_a_usage_error_that_never_shows_it(
    bundle: Path, empty_install: Path
) -> None:
    """03 §3.1.6: a ``--secret`` missing ``PATH=`` is the bare value; no part of it is shown."""
    with pytest.raises(UsageError) as caught:
        split_assignment(ANTHROPIC_KEY, "--secret")
    assert ANTHROPIC_KEY not in str(caught.value) and ANTHROPIC_KEY not in str(caught.value.path)
    assert "not shown" in str(caught.value)
    # a --bind argument carries no secret: it is named so the user can find it
    with pytest.raises(UsageError, match="no-equals-here"):
        split_assignment("no-equals-here", "--bind")
    for extra in ([], ["--json"]):
        result = run_import(empty_install, str(bundle), "--secret", ANTHROPIC_KEY, *extra)
        assert result.returncode == 2
        assert ANTHROPIC_KEY not in result.stdout + result.stderr
        assert "Traceback" not in result.stderr
    assert snapshot(empty_install) == {}


# --------------------------------------------------------------------------- hostile bundles


def test_hostile_bundles_refused_by_import_install_byte_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole corpus through the real CLI entry point (in process: the corpus is large)."""
    from support import hostile_bundles

    from bundler.cli import main

    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text('[risk_profiles.mine]\nlevel = "readonly"\n')
    before = snapshot(install)
    good = bf.build_bundle(tmp_path / "good")
    failures = []
    for name, make in sorted(hostile_bundles.CASES.items()):
        copy = tmp_path / f"h-{name}"
        shutil.copytree(good, copy, symlinks=True)
        expected = make(copy)
        code = main(["--install", str(install), "agents", "import", str(copy), "--accept-risks"])
        captured = capsys.readouterr()
        lines = captured.err.splitlines()
        if not (
            code == 3
            and len(lines) == 1
            and lines[0].startswith("error: ")
            and expected in lines[0]
        ):
            failures.append((name, code, captured.err[-300:]))
        assert captured.out == "", name
        assert snapshot(install) == before, name
    assert not failures, failures
    assert len(hostile_bundles.CASES) >= 30


@pytest.mark.parametrize(
    "case", ["fifo_in_workspace", "hard_link_in_workspace", "second_agent_hidden"]
)
def test_hostile_bundle_in_a_real_process_exit_3_no_traceback(
    case: str, tmp_path: Path, empty_install: Path
) -> None:
    from support import hostile_bundles

    bundle = bf.build_bundle(tmp_path / "bundle")
    expected = hostile_bundles.CASES[case](bundle)
    result = run_import(empty_install, str(bundle), "--accept-risks")
    assert result.returncode == 3
    assert (
        result.stderr.startswith(f"error: bundle {bundle} failed verification: ")
        and expected in result.stderr
    )
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert snapshot(empty_install) == {}


def test_usage_errors(bundle: Path, empty_install: Path) -> None:
    assert run_import(empty_install).returncode == 2
    assert run_import(empty_install, str(bundle), "--undo", "x.toml").returncode == 2


def test_symlinked_parent_of_a_target_is_refused(
    bundle: Path, tmp_path: Path, empty_install: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (empty_install / "agents").symlink_to(elsewhere)
    before = snapshot(empty_install)
    result = run_import(empty_install, str(bundle), "--accept-risks")
    assert result.returncode == 1
    assert "agents" in result.stderr and "symbolic link" in result.stderr
    assert snapshot(empty_install) == before and list(elsewhere.iterdir()) == []


def test_bind_mcp_server_to_local_server(bundle: Path, tmp_path: Path) -> None:
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text('[[mcp.servers]]\nname = "gh-local"\ncommand = "gh-mcp"\n')
    result = run_import(
        install, str(bundle), "--accept-risks", "--bind", "mcp.servers.github=gh-local", "--json"
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["bound"] == {"mcp.servers.github": "mcp.servers.gh-local"}
    config = config_of(install)
    assert config["mcp_bundles"]["gh"]["servers"] == ["gh-local"]
    assert [server["name"] for server in config["mcp"]["servers"]] == ["gh-local"]
    assert "mcp.servers.github.env.GITHUB_TOKEN" not in document["secrets_missing"]


def test_terminal_prompts_for_secrets_without_echo_and_for_consent(
    bundle: Path, empty_install: Path
) -> None:
    token = "ghp_TYPEDatTHEprompt-zqxjzqxjzqxj"
    with Terminal(["--install", str(empty_install), "agents", "import", str(bundle)]) as tty:
        # consent first: a refusal must not throw away typed secrets
        tty.answer(b"Import it? [y/N]", b"yes\n")
        tty.answer(
            b"GITHUB_TOKEN (sent to local process: npx -y @modelcontextprotocol/server-github",
            token.encode() + b"\n",
        )
        tty.answer(b"api_key (sent to https://api.anthropic.com", b"\n")
        tty.answer(b"api_key (sent to https://api.openai.com/v1", b"\n")
        status, out, err = tty.finish()
        screen = tty.screen
    assert status == 0, err
    assert b"process_spawn mcp.servers.github.command" in screen
    assert token.encode() not in screen + out + err
    server = config_of(empty_install)["mcp"]["servers"][0]
    assert server["env"]["GITHUB_TOKEN"] == token


@pytest.mark.parametrize(
    ("typed", "said"),
    [(b"\x04", "end of input"), (b"ghp-\xff\xfe-Secret77\n", "not UTF-8")],
    ids=["ctrl_d", "not_utf8"],
)
def test_a_secret_prompt_without_a_usable_answer_is_one_line_and_imports_nothing(
    bundle: Path, empty_install: Path, typed: bytes, said: str
) -> None:
    """Both ended in a getpass traceback (EOFError, UnicodeDecodeError)."""
    before = snapshot(empty_install)
    with Terminal(["--install", str(empty_install), "agents", "import", str(bundle)]) as tty:
        tty.answer(b"Import it? [y/N]", b"yes\n")
        tty.answer(b"GITHUB_TOKEN (sent to", typed)
        status, out, err = tty.finish()
    text = err.decode("utf-8", "replace")
    assert status == (2 if typed == b"\x04" else 3) and one_error(text), text
    assert said in text and "GITHUB_TOKEN" in text
    assert b"Secret77" not in tty.screen + out + err
    assert snapshot(empty_install) == before


def test_consent_read_from_a_terminal_that_is_not_controlling_takes_any_bytes(
    bundle: Path, empty_install: Path
) -> None:
    """Without a controlling terminal (/dev/tty cannot be opened) the question is answered on
    standard input: an answer that is not UTF-8 ended in a traceback; now it is not a yes."""
    import pty

    master, slave = pty.openpty()
    os.write(master, b"yes\xff\n")  # typed ahead: the line is waiting when it is asked
    before = snapshot(empty_install)
    try:
        result = subprocess.run(
            [*cli_command(), "--install", str(empty_install), "agents", "import", str(bundle)],
            stdin=slave,
            capture_output=True,
            text=True,
            # as under a UTF-8 locale: standard input decoded strictly (under C, leniently)
            env=clean_env({"PYTHONIOENCODING": "utf-8:strict"}),
            start_new_session=True,
            timeout=120,
        )
    finally:
        os.close(slave)
        os.close(master)
    assert "Import it? [y/N]" in result.stderr
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert snapshot(empty_install) == before


def test_a_secret_argument_that_is_not_utf8_is_refused_unshown(
    bundle: Path, empty_install: Path
) -> None:
    """An argument's bytes that are not UTF-8 reach Python as lone surrogates, which the config
    could not be written with: it ended in a traceback."""
    before = snapshot(empty_install)
    result = run_import(
        empty_install,
        str(bundle),
        "--accept-risks",
        "--secret",
        "mcp.servers.github.env.GITHUB_TOKEN=ghp-\udcff-Secret77",
    )
    assert result.returncode == 3 and one_error(result.stderr), result.stderr
    assert "not UTF-8" in result.stderr and "GITHUB_TOKEN" in result.stderr
    assert "Secret77" not in result.stdout + result.stderr
    assert snapshot(empty_install) == before


def test_reused_skill_bundle_with_different_local_files_is_listed(
    bundle: Path, empty_install: Path
) -> None:
    assert run_import(empty_install, str(bundle), "--accept-risks").returncode == 0
    same = run_import(empty_install, str(bundle), "--dry-run", "--as", "second", "--json")
    assert json.loads(same.stdout)["skills_differ"] == []
    (empty_install / "shared" / "skills" / bf.SKILL_BUNDLE / "search" / "SKILL.md").write_text(
        "edited here\n"
    )
    result = run_import(empty_install, str(bundle), "--accept-risks", "--as", "second", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert f"skill_bundles.{bf.SKILL_BUNDLE}" in document["reused"]
    assert document["skills_differ"] == [f"skill_bundles.{bf.SKILL_BUNDLE}"]
    # the local content is kept
    assert (
        empty_install / "shared" / "skills" / bf.SKILL_BUNDLE / "search" / "SKILL.md"
    ).read_text() == "edited here\n"


@pytest.mark.slow
@pytest.mark.huge
def test_slow_hostile_bundles_refused_by_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from support import hostile_bundles

    from bundler.cli import main

    install = tmp_path / "install"
    install.mkdir()
    for name, make in sorted(hostile_bundles.SLOW_CASES.items()):
        bundle = bf.build_bundle(tmp_path / f"h-{name}")
        expected = make(bundle)
        code = main(["--install", str(install), "agents", "import", str(bundle), "--accept-risks"])
        err = capsys.readouterr().err
        assert code == 3 and expected in err and len(err.splitlines()) == 1, (name, err[-300:])
        assert snapshot(install) == {}
        shutil.rmtree(bundle)


def test_missing_install_folder_is_created_and_removed_again_on_refusal(
    bundle: Path, tmp_path: Path
) -> None:
    install = tmp_path / "new-install"
    refused = run_import(install, str(bundle))  # no consent
    assert refused.returncode == 1 and not install.exists()
    result = run_import(install, str(bundle), "--accept-risks")
    assert result.returncode == 0, result.stderr
    assert (install / "config.toml").exists() and stat.S_IMODE(install.stat().st_mode) == 0o755


def test_secret_prompt_endpoint_reads_the_one_family_default_table() -> None:
    """03 §3.1.6: the prompt names where a key goes; family defaults come from fragment's table."""
    config = {
        "providers": {
            "models": {
                "openai": {"main": {}},
                "azure": {"a": {"resource": "contoso"}},
                "custom": {
                    "c": {"uri": "https://llm.example/v1"},
                    "p": {"uri": "https://bob:Pass-Word-1@llm.example/v1?api_key=Key-Word-2"},
                },
            },
            "tts": {"elevenlabs": {"voice": {}}},
            "transcription": {"deepgram": {"ears": {}}},
        },
        "mcp": {
            "servers": [
                {"name": "remote", "transport": "http", "url": "https://tools.example/mcp"},
                {"name": "local", "command": "tool", "args": ["--url", "https://u:pw@h/"]},
            ]
        },
    }
    cases = {
        "providers.models.openai.main.api_key": "https://api.openai.com/v1",
        "providers.models.azure.a.api_key": (
            "https://contoso.openai.azure.com/openai/deployments/<deployment>"
        ),
        "providers.models.custom.c.api_key": "https://llm.example/v1",
        "providers.tts.elevenlabs.voice.api_key": "https://api.elevenlabs.io/v1/text-to-speech",
        "providers.transcription.deepgram.ears.api_key": "https://api.deepgram.com/v1/listen",
        "mcp.servers.remote.headers.Authorization": "https://tools.example/mcp",
        # where a secret goes, never with which other credential
        "providers.models.custom.p.api_key": "https://bob:***@llm.example/v1?api_key=***",
        "mcp.servers.local.env.TOKEN": "local process: tool --url https://u:***@h/",
    }
    for path, expected in cases.items():
        assert endpoint_of(config, path) == expected, path


# ----------------------------------------------------------------- one read of the workspace


def _same_size_change(bundle: Path) -> str:
    """Flip one byte of a workspace file: every size and count still agrees, only the digest
    of that file tells."""
    target = next(p for p in sorted((bundle / "workspace").rglob("*")) if p.is_file())
    data = bytearray(target.read_bytes())
    data[0] ^= 0x01
    target.write_bytes(bytes(data))
    return target.relative_to(bundle).as_posix()


def test_verify_deferring_workspace_digests_checks_everything_but_their_contents(
    bundle: Path,
) -> None:
    from bundler.bundle.verify import verify_bundle

    changed = _same_size_change(bundle)
    deferred = verify_bundle(bundle, defer_workspace_digests=True)
    assert deferred.ok and deferred.workspace_digests_deferred
    full = verify_bundle(bundle)
    assert [p.path for p in full.errors] == [changed]


def test_import_checks_workspace_contents_on_the_copy_and_changes_nothing(
    bundle: Path, empty_install: Path
) -> None:
    """A real import reads the workspace once: the digest of each copied file is compared with
    the checksums while staging, and a mismatch refuses the import with the file named."""
    changed = _same_size_change(bundle)
    result = run_import(empty_install, str(bundle), "--accept-risks")
    assert result.returncode == 3, result.stderr
    assert result.stderr == (
        f"error: {changed}: content does not match its digest in checksums.xxh3; "
        "nothing was imported\n"
    )
    assert snapshot(empty_install) == {}


def test_dry_run_import_still_reads_every_workspace_file(bundle: Path, empty_install: Path) -> None:
    changed = _same_size_change(bundle)
    result = run_import(empty_install, str(bundle), "--dry-run")
    assert result.returncode == 3, result.stderr
    assert "failed verification" in result.stderr and changed in result.stderr
    assert snapshot(empty_install) == {}
