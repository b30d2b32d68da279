"""The secrets workflow: ``bundle secrets-template`` writes the skeleton that
``agents import --secrets-file`` reads, and ``config validate`` names the required secrets an
import left empty. Everything runs through the real CLI."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.faultinject import ptrace_unavailable, run_with_fault, trace_calls
from support.installs import one_error, opened_config, run_cli
from support.kit import clean_env, cli_command

from bundler.rules import tomlcompat

NEEDED = [
    "mcp.servers.github.env.GITHUB_TOKEN",
    "providers.models.anthropic.main.api_key",
    "providers.models.openai.backup.api_key",
]


def _fill(template: str, values: dict[str, str]) -> str:
    """The template as a user fills it: each ``"path" = ""`` line gets its value."""
    out = []
    for line in template.splitlines():
        for path, value in values.items():
            if line.startswith(f'"{path}" = '):
                line = f'"{path}" = "{value}"'
        out.append(line)
    return "\n".join(out) + "\n"


def test_secrets_template_round_trips_through_import_secrets_file(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    done = run_cli(["bundle", "secrets-template", str(bundle)])
    assert done.returncode == 0, done.stderr
    template = done.stdout
    table = tomlcompat.loads(template)
    assert sorted(table) == NEEDED
    assert all(value == "" for value in table.values())
    # each secret has where it is sent on a comment line just above it
    lines = template.splitlines()
    for path in NEEDED:
        index = next(i for i, line in enumerate(lines) if line.startswith(f'"{path}"'))
        assert lines[index - 1].startswith("# sent to "), template
    assert "https://api.anthropic.com" in template
    values = {path: f"value-{n}-secret" for n, path in enumerate(NEEDED)}
    secrets = tmp_path / "secrets.toml"
    secrets.write_text(_fill(template, values), encoding="utf-8")
    secrets.chmod(0o600)
    install = tmp_path / "install"
    imported = run_cli(
        [
            "--install",
            str(install),
            "agents",
            "import",
            str(bundle),
            "--accept-risks",
            "--secrets-file",
            str(secrets),
        ]
    )
    assert imported.returncode == 0, imported.stderr
    config = opened_config(install)  # the values as ZeroClaw reads them (stored sealed)
    assert config["providers"]["models"]["anthropic"]["main"]["api_key"] == values[NEEDED[1]]
    assert config["providers"]["models"]["openai"]["backup"]["api_key"] == values[NEEDED[2]]
    assert config["mcp"]["servers"][0]["env"]["GITHUB_TOKEN"] == values[NEEDED[0]]
    for value in values.values():
        assert value not in imported.stdout + imported.stderr


def test_secrets_template_left_empty_leaves_the_secrets_unfilled(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    secrets = tmp_path / "secrets.toml"
    done = run_cli(["bundle", "secrets-template", str(bundle), "--out", str(secrets)])
    assert done.returncode == 0, done.stderr
    install = tmp_path / "install"
    imported = run_cli(
        [
            "--install",
            str(install),
            "--json",
            "agents",
            "import",
            str(bundle),
            "--accept-risks",
            "--secrets-file",
            str(secrets),
        ]
    )
    assert imported.returncode == 0, imported.stderr
    assert sorted(json.loads(imported.stdout)["secrets_missing"]) == NEEDED


def test_secrets_template_out_is_created_0600_and_never_overwritten_without_force(
    tmp_path: Path,
) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    target = tmp_path / "secrets.toml"
    old_umask = os.umask(0)
    try:
        done = run_cli(["bundle", "secrets-template", str(bundle), "--out", str(target)])
    finally:
        os.umask(old_umask)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(tomlcompat.loads(target.read_text(encoding="utf-8"))) == NEEDED
    target.write_text('"x" = "filled-in-by-the-user"\n', encoding="utf-8")
    again = run_cli(["bundle", "secrets-template", str(bundle), "--out", str(target)])
    assert again.returncode == 1, again.stderr
    assert one_error(again.stderr) and "--force" in again.stderr and str(target) in again.stderr
    assert "filled-in-by-the-user" in target.read_text(encoding="utf-8")
    forced = run_cli(["bundle", "secrets-template", str(bundle), "--out", str(target), "--force"])
    assert forced.returncode == 0, forced.stderr
    assert sorted(tomlcompat.loads(target.read_text(encoding="utf-8"))) == NEEDED
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_secrets_template_out_that_fails_to_be_written_leaves_no_file(tmp_path: Path) -> None:
    """A full disk or an fsync's EIO refuses the command and leaves nothing: an empty 0600
    file used to stay, which the next run then refused as existing, needing --force."""
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    bundle = bf.build_bundle(tmp_path / "bundle")
    folder = tmp_path / "keys"
    folder.mkdir()
    target = folder / "secrets.toml"
    cmd = [*cli_command(), "bundle", "secrets-template", str(bundle), "--out", str(target)]
    env = clean_env({"PYTHONDONTWRITEBYTECODE": "1", "SOURCE_DATE_EPOCH": "1700000000"})
    done, calls = trace_calls(cmd, ["write", "fsync"], env=env, relevant=str(folder))
    assert done.returncode == 0, done.stderr
    # the file's write and fsync, and the folder's fsync that makes its name durable
    assert {call.syscall for call in calls} == {"write", "fsync"} and len(calls) >= 3, calls
    for call in calls:
        target.unlink()
        fault = "ENOSPC" if call.syscall == "write" else "EIO"
        run = run_with_fault(cmd, call.syscall, call.index, fault, env=env)
        assert run.fired, call
        assert run.returncode == 1 and one_error(run.stderr), (call, run.stderr)
        assert list(folder.iterdir()) == [], call
        again = run_cli(["bundle", "secrets-template", str(bundle), "--out", str(target)])
        assert again.returncode == 0, (call, again.stderr)


def test_config_validate_lists_required_secrets_left_empty_by_an_import(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    install = tmp_path / "install"
    secrets = tmp_path / "secrets.toml"
    secrets.write_text(f'"{NEEDED[1]}" = "sk-given-value"\n', encoding="utf-8")
    secrets.chmod(0o600)
    imported = run_cli(
        [
            "--install",
            str(install),
            "agents",
            "import",
            str(bundle),
            "--accept-risks",
            "--secrets-file",
            str(secrets),
        ]
    )
    assert imported.returncode == 0, imported.stderr
    checked = run_cli(["--install", str(install), "--json", "config", "validate"])
    assert checked.returncode == 0, checked.stderr
    warned = {w["path"] for w in json.loads(checked.stdout)["warnings"]}
    assert {NEEDED[0], NEEDED[2]} <= warned and NEEDED[1] not in warned
    plain = run_cli(["--install", str(install), "config", "validate"])
    assert "required secret" in plain.stdout + plain.stderr
    # filled later with config set: no longer listed
    filled = run_cli(
        ["--install", str(install), "config", "set", NEEDED[2]], input_text="sk-later\n"
    )
    assert filled.returncode == 0, filled.stderr
    again = run_cli(["--install", str(install), "--json", "config", "validate"])
    warned = {w["path"] for w in json.loads(again.stdout)["warnings"]}
    assert NEEDED[0] in warned and NEEDED[2] not in warned
    doctor = run_cli(["--install", str(install), "doctor"])
    assert NEEDED[0] in doctor.stdout + doctor.stderr


def test_secrets_template_names_the_import_command_that_reads_it(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    install = tmp_path / "target install"
    secrets = tmp_path / "keys.toml"
    done = run_cli(
        [
            "--install",
            str(install),
            "bundle",
            "secrets-template",
            str(bundle),
            "--out",
            str(secrets),
        ]
    )
    assert done.returncode == 0, done.stderr
    lines = secrets.read_text(encoding="utf-8").splitlines()
    command = next(line for line in lines if line.startswith("#   bundler "))[4:]
    expected = ["bundler", "--install", str(install), "agents", "import", str(bundle)]
    assert shlex.split(command) == [*expected, "--secrets-file", str(secrets)]


def test_secrets_template_force_replaces_only_a_secrets_file(tmp_path: Path) -> None:
    """--force wrote over anything that was not a folder: the install's config.toml (wiping
    its keys), a FIFO, a link, even /dev/null. It replaces a secrets file and nothing else."""
    bundle = bf.build_bundle(tmp_path / "bundle")
    config = tmp_path / "config.toml"
    config.write_text('[providers.models.openai.main]\napi_key = "sk-kept"\nmax_tokens = 5\n')
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(config)
    for name in ("config.toml", "fifo", "link"):
        target = tmp_path / name
        before = os.lstat(target)
        done = run_cli(
            ["bundle", "secrets-template", str(bundle), "--out", str(target), "--force"],
            timeout=30,
        )
        assert done.returncode == 1 and one_error(done.stderr), done.stderr
        assert "is not a secrets file" in done.stderr
        after = os.lstat(target)
        assert (after.st_ino, after.st_mode, after.st_size) == (
            before.st_ino,
            before.st_mode,
            before.st_size,
        )
    filled = tmp_path / "secrets.toml"
    filled.write_text('"providers.models.openai.backup.api_key" = "sk-filled"\n')
    done = run_cli(["bundle", "secrets-template", str(bundle), "--out", str(filled), "--force"])
    assert done.returncode == 0, done.stderr
    assert "Secrets required" in filled.read_text()


def test_secrets_template_out_may_be_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    target = os.fsencode(tmp_path) + b"/secrets-\xff.toml"
    done = run_cli(["bundle", "secrets-template", str(bundle), "--out", os.fsdecode(target)])
    assert done.returncode == 0, done.stderr
    with open(target, "rb") as written:
        assert b"--secrets-file" in written.read()
