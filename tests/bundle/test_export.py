"""``bundler agents export`` end to end through the real CLI (02 §1, §5.3, §7, §8, §9, §11; 05)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import kit
from support.export_kit import (
    API_KEY,
    OPENAI_KEY,
    SECRETS,
    bundle_bytes,
    bundler,
    check_bundle,
    cli_env,
    export_cmd,
    hidden_leftovers,
    make_install,
    run,
    secret_forms,
    snapshot,
    workspace,
)
from support.kit import cli_command, run_cli

from bundler.rules.tomlcompat import loads

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "install"


@pytest.fixture
def install(tmp_path: Path) -> Path:
    return make_install(tmp_path / "install")


def _export(install: Path, out: Path | str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run(export_cmd(install, out, *extra))


def _assert_no_secret(*texts: str | bytes) -> None:
    for text in texts:
        data = text.encode() if isinstance(text, str) else text
        for secret in SECRETS:
            for form in secret_forms(secret):
                assert form not in data


# --- destinations (02 §8.1) ------------------------------------------------------------------


def test_export_to_vacant_destination(install: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    done = _export(install, out)
    assert done.returncode == 0, done.stderr
    manifest = check_bundle(out)
    assert manifest["root_agent"] == "researcher"
    assert manifest["skill_bundles"] == ["research_tools"]
    assert (out / "workspace" / "notes" / "memory" / "kept.md").is_file()
    assert not (out / "workspace" / "memory").exists()
    assert not (out / "workspace" / "MEMORY_SNAPSHOT.md").exists()
    assert (out / "skills" / "research_tools" / "search" / "SKILL.md").is_file()
    assert not (out / "skills" / "research_tools" / "loose.txt").exists()
    assert hidden_leftovers(tmp_path) == []
    assert "exported researcher to" in done.stdout
    assert "bundler config set providers.models.anthropic.main.api_key" in done.stdout
    assert "copied as they are" in done.stdout
    _assert_no_secret(done.stdout, done.stderr, *(d for d in bundle_bytes(out).values() if d))


def test_export_to_empty_destination(install: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    out.mkdir()
    done = _export(install, out, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["publish_method"] == "renameat2-exchange"
    check_bundle(out)
    assert hidden_leftovers(tmp_path) == []


def test_existing_bundle_refused_without_force_and_untouched(install: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    assert _export(install, out).returncode == 0
    before = snapshot(out)
    done = _export(install, out)
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and "--force" in done.stderr
    assert done.stderr.count("\n") == 1
    assert snapshot(out) == before
    assert hidden_leftovers(tmp_path) == []


def test_force_replaces_bundle_without_merging(install: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    assert _export(install, out).returncode == 0
    (out / "workspace" / "stale.txt").write_text("from an earlier export")
    (workspace(install) / "README.md").unlink()
    done = _export(install, out, "--force", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["publish_method"] == "renameat2-exchange"
    assert not (out / "workspace" / "stale.txt").exists()
    assert not (out / "workspace" / "README.md").exists()
    check_bundle(out)
    assert hidden_leftovers(tmp_path) == []


def test_folder_that_is_not_a_bundle_refused_even_with_force(install: Path, tmp_path: Path) -> None:
    out = tmp_path / "photos"
    out.mkdir()
    (out / "cat.jpg").write_bytes(b"\xff\xd8")
    before = snapshot(out)
    for extra in ((), ("--force",)):
        done = _export(install, out, *extra)
        assert done.returncode == 1
        assert "not a bundle" in done.stderr
    assert snapshot(out) == before
    assert hidden_leftovers(tmp_path) == []


def test_file_destination_refused(install: Path, tmp_path: Path) -> None:
    out = tmp_path / "file"
    out.write_text("keep me")
    done = _export(install, out, "--force")
    assert done.returncode == 1 and "not a folder" in done.stderr
    assert out.read_text() == "keep me"
    assert hidden_leftovers(tmp_path) == []


def test_symlinked_destination_refused_with_target_untouched(install: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    assert _export(install, real).returncode == 0
    before = snapshot(real)
    (tmp_path / "link").symlink_to(real)
    done = _export(install, tmp_path / "link", "--force")
    assert done.returncode == 1 and "symbolic link" in done.stderr
    assert snapshot(real) == before
    assert os.path.islink(tmp_path / "link")
    assert hidden_leftovers(tmp_path) == []


@pytest.mark.parametrize("out", [".", "..", "sub/.."])
def test_dot_or_dotdot_destination_is_a_usage_error(
    install: Path, tmp_path: Path, out: str
) -> None:
    done = run(export_cmd(install, out), cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ")


def test_missing_parent_refused(install: Path, tmp_path: Path) -> None:
    done = _export(install, tmp_path / "no" / "bundle")
    assert done.returncode == 1 and "does not exist" in done.stderr
    assert not (tmp_path / "no").exists()


def _overlap_cases(install: Path) -> dict[str, Path]:
    ws = workspace(install)
    skills = install / "shared" / "skills" / "research_tools"
    writer = install.parent / f"{install.name}-writer"
    return {
        "install_root": install,
        "inside_install": install / "bundle",
        "containing_install": install.parent,
        "workspace": ws,
        "inside_workspace": ws / "notes" / "bundle",
        "skill_source": skills,
        "inside_skill_source": skills / "out",
        "other_agents_workspace": writer,
        "inside_other_agents_workspace": writer / "bundle",
    }


@pytest.mark.parametrize(
    "case",
    [
        "install_root",
        "inside_install",
        "containing_install",
        "workspace",
        "inside_workspace",
        "skill_source",
        "inside_skill_source",
        "other_agents_workspace",
        "inside_other_agents_workspace",
    ],
)
def test_destination_overlapping_a_source_refused_before_anything_is_created(
    install: Path, case: str
) -> None:
    out = _overlap_cases(install)[case]
    parent = out.parent
    before = snapshot(parent)
    done = _export(install, out, "--force")
    assert done.returncode == 1, done.stdout
    assert "overlaps" in done.stderr
    assert snapshot(parent) == before


def test_destination_overlap_seen_through_a_linked_parent(install: Path, tmp_path: Path) -> None:
    (tmp_path / "via").symlink_to(workspace(install))
    before = snapshot(workspace(install))
    done = _export(install, tmp_path / "via" / "bundle")
    assert done.returncode == 1 and "overlaps" in done.stderr
    assert snapshot(workspace(install)) == before


# --- failures roll back (02 §8.4) ------------------------------------------------------------


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder another user can traverse (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="bundler-h6-"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _open_to_nobody(root: Path) -> None:
    for folder, _dirs, files in os.walk(root):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)


def _as_nobody(cmd: list[str]) -> list[str]:
    assert cmd[1:3] == ["-m", "bundler"]
    return [*cli_command(as_nobody=True), *cmd[3:]]


@pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to drop privileges to uid 65534 in the child"
)
def test_unreadable_workspace_file_fails_removes_staging_keeps_old_bundle(shared_tmp: Path) -> None:
    install = make_install(shared_tmp / "install")
    _open_to_nobody(shared_tmp / "install")
    _open_to_nobody(shared_tmp / "install-writer")
    outdir = shared_tmp / "outdir"
    outdir.mkdir()
    os.chown(outdir, 65534, 65534)
    out = outdir / "bundle"
    first = run(_as_nobody(export_cmd(install, out)), cwd="/")
    assert first.returncode == 0, first.stderr
    before = snapshot(out)
    secret_file = workspace(install) / "notes" / "d1" / "f001.txt"
    os.chmod(secret_file, 0o600)
    done = run(_as_nobody(export_cmd(install, out, "--force")), cwd="/")
    assert done.returncode == 1
    assert done.stderr.startswith("error: cannot read workspace/notes/d1/f001.txt")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert snapshot(out) == before
    assert hidden_leftovers(outdir) == []


# --- the secret sweep (02 §5.3) --------------------------------------------------------------


@pytest.mark.usefixtures("each_sweep_engine")
@pytest.mark.parametrize("form", ["raw", "base64"])
def test_sweep_refuses_workspace_file_holding_the_api_key(
    install: Path, tmp_path: Path, form: str
) -> None:
    data = API_KEY.encode() if form == "raw" else base64.b64encode(b"key=" + API_KEY.encode())
    (workspace(install) / "notes" / "leak.txt").write_bytes(b"prefix " + data + b" suffix\n")
    out = tmp_path / "bundle"
    for extra in ((), ("--json",)):
        done = _export(install, out, *extra)
        assert done.returncode == 1
        text = done.stdout if extra else done.stderr
        assert "workspace/notes/leak.txt" in text
        assert "providers.models.anthropic.main.api_key" in text
        _assert_no_secret(done.stdout, done.stderr)
    assert not out.exists()
    assert hidden_leftovers(tmp_path) == []


@pytest.mark.usefixtures("each_sweep_engine")
def test_sweep_finds_a_secret_in_a_file_name(install: Path, tmp_path: Path) -> None:
    (workspace(install) / f"{API_KEY}.txt").write_text("harmless")
    (workspace(install) / f"link-{API_KEY}").symlink_to("/nowhere")
    done = _export(install, tmp_path / "bundle")
    assert done.returncode == 1 and "providers.models.anthropic.main.api_key" in done.stderr
    assert "workspace/<name withheld" in done.stderr
    _assert_no_secret(done.stdout, done.stderr)
    warned = _export(install, tmp_path / "bundle", "--scan-secrets", "off", "--json")
    assert warned.returncode == 0
    assert json.loads(warned.stdout)["skipped_paths"] == [
        "workspace/<name withheld: it holds a secret>"
    ]
    _assert_no_secret(warned.stdout, warned.stderr)


@pytest.mark.usefixtures("each_sweep_engine")
def test_sweep_warn_reports_and_publishes(install: Path, tmp_path: Path) -> None:
    (workspace(install) / "notes" / "leak.txt").write_text(f"token: {API_KEY}\n")
    done = _export(install, tmp_path / "bundle", "--scan-secrets", "warn", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert {
        "file": "workspace/notes/leak.txt",
        "secret_path": "providers.models.anthropic.main.api_key",
        "encoding": "raw",
    } in payload["secret_hits"]
    _assert_no_secret(done.stdout, done.stderr)
    check_bundle(tmp_path / "bundle")


ADDRESS_PASSWORD = "pw-FAKE-in-an-address-0042"


@pytest.mark.usefixtures("each_sweep_engine")
def test_a_credential_in_an_address_is_refused_by_default_and_never_shown(
    install: Path, tmp_path: Path
) -> None:
    """No secret byte leaves by default (users.md): a password written into a provider's uri
    used to travel in config.toml and the manifest's risk flag, and the report printed it."""
    config = install / "config.toml"
    uri = f"https://bob:{ADDRESS_PASSWORD}@proxy.example.com/v1"
    config.write_text(
        config.read_text().replace(
            f'api_key = "{OPENAI_KEY}"', f'api_key = "{OPENAI_KEY}"\nuri = "{uri}"'
        )
    )
    refused = _export(install, tmp_path / "bundle")
    assert refused.returncode == 1, refused.stderr
    assert "providers.models.openai.backup.uri" in refused.stderr
    assert ADDRESS_PASSWORD not in refused.stdout + refused.stderr
    assert not (tmp_path / "bundle").exists()
    warned = _export(install, tmp_path / "warned", "--scan-secrets", "warn", "--json")
    assert warned.returncode == 0, warned.stderr
    hits = json.loads(warned.stdout)["secret_hits"]
    assert {
        "file": "config.toml",
        "secret_path": "providers.models.openai.backup.uri",
        "encoding": "raw",
    } in hits
    assert ADDRESS_PASSWORD not in warned.stdout + warned.stderr
    shown = run_cli(["--install", str(install), "config", "get", "providers.models.openai.backup"])
    assert shown.returncode == 0 and ADDRESS_PASSWORD not in shown.stdout, shown.stdout


def test_sweep_off_skips_it(install: Path, tmp_path: Path) -> None:
    (workspace(install) / "notes" / "leak.txt").write_text(f"token: {API_KEY}\n")
    done = _export(install, tmp_path / "bundle", "--scan-secrets", "off", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["secret_hits"] == []


def test_encrypted_secrets_are_counted_as_not_swept(install: Path, tmp_path: Path) -> None:
    config = install / "config.toml"
    config.write_text(
        config.read_text().replace(
            f'api_key = "{API_KEY}"', 'api_key = "enc2:AAAAabcdef0123456789"'
        )
    )
    done = _export(install, tmp_path / "bundle", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["encrypted_not_swept"] == 1
    human = _export(install, tmp_path / "bundle2")
    assert "1 secret(s) stored encrypted could not be swept" in human.stdout


# --- report, determinism, odd inputs ---------------------------------------------------------

JSON_KEYS = [
    "ok", "bundle", "format_version", "root_agent", "files", "bytes", "skill_bundles", "skipped",
    "skipped_paths", "non_portable_names", "required_secrets", "dropped", "risk_flags",
    "secret_hits", "encrypted_not_swept", "encrypted_not_swept_why", "publish_method", "sealed",
    "warnings",
]  # fmt: skip


def test_json_report_has_exactly_the_cli_contract_shape(install: Path, tmp_path: Path) -> None:
    ws = workspace(install)
    (ws / "link-out").symlink_to("/etc/passwd")
    os.mkfifo(ws / "pipe")
    (ws / "notes" / "con.txt").write_text("non-portable name")
    os.link(ws / "README.md", ws / "hard")
    done = _export(install, tmp_path / "bundle", "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1
    payload = json.loads(done.stdout)
    assert list(payload) == JSON_KEYS
    assert payload["skipped"] == {
        "symlinks": 1,
        "special": 1,
        "hard_links": 2,
        "replaced": 0,
        "vanished": 0,
        "other_device": 0,
        "bad_names": 0,
    }
    assert sorted(payload["skipped_paths"]) == [
        "workspace/README.md",
        "workspace/hard",
        "workspace/link-out",
        "workspace/pipe",
    ]
    assert payload["non_portable_names"] == ["workspace/notes/con.txt"]
    assert payload["bundle"] == str(tmp_path / "bundle")
    assert payload["publish_method"] == "renameat2-noreplace"
    manifest = loads((tmp_path / "bundle" / "zeroclaw-agent.toml").read_text())
    assert payload["files"] == manifest["contents"]["files"]
    assert payload["dropped"] == manifest["dropped"]
    assert payload["risk_flags"] == manifest["risk_flags"]
    assert payload["required_secrets"] == manifest["required_secrets"]


def test_human_report_escapes_control_characters(install: Path, tmp_path: Path) -> None:
    (workspace(install) / "bad\x1b[31mname").write_text("x")
    done = _export(install, tmp_path / "bundle")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\\x1b" in done.stdout


def test_same_inputs_and_time_give_a_byte_identical_bundle(install: Path, tmp_path: Path) -> None:
    assert _export(install, tmp_path / "one").returncode == 0
    assert _export(install, tmp_path / "two").returncode == 0
    assert bundle_bytes(tmp_path / "one") == bundle_bytes(tmp_path / "two")
    manifest = loads((tmp_path / "one" / "zeroclaw-agent.toml").read_text())
    assert manifest["provenance"]["exported_at"] == "2026-11-18T11:06:40Z"


def test_published_files_keep_permission_bits_without_setuid(install: Path, tmp_path: Path) -> None:
    script = workspace(install) / "tool.sh"
    script.write_text("#!/bin/sh\n")
    os.chmod(script, 0o4755)
    assert _export(install, tmp_path / "bundle").returncode == 0
    assert stat.S_IMODE(os.stat(tmp_path / "bundle" / "workspace" / "tool.sh").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(tmp_path / "bundle" / "workspace").st_mode) == 0o700


def test_live_sqlite_store_is_dropped_not_copied(install: Path, tmp_path: Path) -> None:
    ws = workspace(install)
    (ws / "cache.db").write_bytes(b"SQLite format 3\x00" + b"\x01" * 64)
    (ws / "cache.db-wal").write_bytes(b"wal")
    done = _export(install, tmp_path / "bundle", "--json")
    assert done.returncode == 0, done.stderr
    dropped = {row["path"]: row["reason"] for row in json.loads(done.stdout)["dropped"]}
    assert dropped["workspace/cache.db"] == "not_yet_portable"
    assert not (tmp_path / "bundle" / "workspace" / "cache.db").exists()


def test_missing_workspace_gives_empty_workspace_folder(install: Path, tmp_path: Path) -> None:
    shutil.rmtree(workspace(install))
    done = _export(install, tmp_path / "bundle")
    assert done.returncode == 0, done.stderr
    assert os.listdir(tmp_path / "bundle" / "workspace") == []
    check_bundle(tmp_path / "bundle")


def test_unknown_agent_refused(install: Path, tmp_path: Path) -> None:
    done = (
        _export(install, tmp_path / "bundle")
        if False
        else run(export_cmd(install, tmp_path / "b", alias="nobody"))
    )
    assert done.returncode == 1 and "unknown agent" in done.stderr
    assert os.listdir(tmp_path) == ["install", "install-writer"]


def _real_brain(install: Path) -> Path:
    brain = workspace(install) / "memory" / "brain.db"
    brain.unlink()
    with sqlite3.connect(brain) as conn:
        conn.execute("CREATE TABLE facts (id INTEGER PRIMARY KEY, text TEXT)")
        conn.executemany(
            "INSERT INTO facts (text) VALUES (?)", [(f"fact {i}",) for i in range(200)]
        )
    conn.close()
    return brain


def test_include_memory_carries_a_consistent_snapshot_as_format_2(
    install: Path, tmp_path: Path
) -> None:
    brain = _real_brain(install)
    before = snapshot(workspace(install))
    out = tmp_path / "bundle"
    done = _export(install, out, "--include-memory", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["format_version"] == 2
    manifest = check_bundle(out)
    assert manifest["format_version"] == 2
    assert manifest["memory"] == {
        "backend": "sqlite",
        "store": "memory/brain.db",
        "snapshot_at": "2026-11-18T11:06:40Z",
    }
    assert {"kind": "carried_memory", "path": "agents.researcher.memory"} in [
        {"kind": f["kind"], "path": f["path"]} for f in payload["risk_flags"]
    ]
    assert not any(
        row["path"].startswith("workspace/memory") or "MEMORY_SNAPSHOT" in row["path"]
        for row in payload["dropped"]
    )
    assert (out / "memory" / "MEMORY_SNAPSHOT.md").read_text() == "private core memory\n"
    assert not (out / "workspace" / "memory").exists()
    assert not (out / "workspace" / "MEMORY_SNAPSHOT.md").exists()
    with sqlite3.connect(out / "memory" / "brain.db") as conn:
        assert conn.execute("SELECT count(*) FROM facts").fetchone() == (200,)
    conn.close()
    assert snapshot(workspace(install)) == before
    assert sorted(os.listdir(brain.parent)) == ["brain.db"]


def test_include_memory_refused_for_a_non_sqlite_backend(install: Path, tmp_path: Path) -> None:
    config = install / "config.toml"
    config.write_text(
        config.read_text().replace(
            "[agents.researcher]\n", '[agents.researcher]\nmemory.backend = "markdown"\n'
        )
    )
    done = _export(install, tmp_path / "bundle", "--include-memory")
    assert done.returncode == 1 and "agents.researcher.memory.backend" in done.stderr
    assert not (tmp_path / "bundle").exists()


def test_include_memory_refused_without_a_store(install: Path, tmp_path: Path) -> None:
    (workspace(install) / "memory" / "brain.db").unlink()
    done = _export(install, tmp_path / "bundle", "--include-memory")
    assert done.returncode == 1 and "brain.db" in done.stderr
    assert done.stderr.count("\n") == 1
    assert not (tmp_path / "bundle").exists()
    assert hidden_leftovers(tmp_path) == []


def test_symlinked_workspace_root_refused(install: Path, tmp_path: Path) -> None:
    ws = workspace(install)
    ws.rename(tmp_path / "elsewhere")
    ws.symlink_to(tmp_path / "elsewhere")
    done = _export(install, tmp_path / "bundle")
    assert done.returncode == 1 and "symbolic link" in done.stderr
    assert hidden_leftovers(tmp_path) == []


def test_export_is_read_only_on_the_install(install: Path, tmp_path: Path) -> None:
    """02: not even the record doctor reads to find leftovers is written there (it is the
    user's, in their state folder)."""
    before = kit.tree_snapshot(install, mtimes=True, dir_mtimes=True, inodes=True, sizes=True)
    assert _export(install, tmp_path / "bundle").returncode == 0
    assert kit.tree_snapshot(install, mtimes=True, dir_mtimes=True, inodes=True, sizes=True) == (
        before
    )
    assert not (install / "data").exists()


# --- the fallback swap, the interrupt, recovery through the CLI ------------------------------


def _strace_or_skip() -> None:
    from support.faultinject import ptrace_unavailable

    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.parametrize("force", [False, True])
def test_two_rename_fallback_where_renameat2_is_unsupported(
    install: Path, tmp_path: Path, force: bool
) -> None:
    _strace_or_skip()
    out = tmp_path / "bundle"
    if force:
        assert _export(install, out).returncode == 0
        (out / "workspace" / "stale.txt").write_text("old")
    cmd = [
        "strace",
        "-f",
        "-qq",
        "-o",
        "/dev/null",
        "-e",
        "trace=renameat2",
        "-e",
        "inject=renameat2:error=EINVAL",
        "--",
    ]
    done = run([*cmd, *export_cmd(install, out, "--json", *(["--force"] if force else []))])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["publish_method"] == ("rename-fallback" if force else "rename")
    check_bundle(out)
    assert not (out / "workspace" / "stale.txt").exists()
    assert hidden_leftovers(tmp_path) == []


def test_sigterm_during_export_cleans_up_and_exits_130(install: Path, tmp_path: Path) -> None:
    _strace_or_skip()
    out = tmp_path / "bundle"
    assert _export(install, out).returncode == 0
    before = snapshot(out)
    # SIGTERM delivered while the staged bundle is being flushed, before the swap
    cmd = [
        "strace",
        "-f",
        "-qq",
        "-o",
        "/dev/null",
        "-e",
        "trace=syncfs,fsync",
        "-e",
        "inject=syncfs,fsync:signal=SIGTERM:when=1",
        "--",
    ]
    done = run([*cmd, *export_cmd(install, out, "--force")])
    assert done.returncode == 130, done.stderr
    assert done.stderr.startswith("error: interrupted")
    assert snapshot(out) == before
    assert hidden_leftovers(tmp_path) == []


def test_recover_cli_restores_and_scan_lists(install: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    assert _export(install, out).returncode == 0
    token = "Abcdef123456"
    (tmp_path / f".zeroclaw-export-{token}.target").write_text("bundle\n")
    os.rename(out, tmp_path / f".zeroclaw-export-old-{token}")
    (tmp_path / f".zeroclaw-export-{token}").mkdir()
    scan = bundler("recover", "--scan", str(tmp_path), "--json")
    assert scan.returncode == 0 and len(json.loads(scan.stdout)["actions"]) == 3
    assert len(hidden_leftovers(tmp_path)) == 3
    dry = bundler("recover", str(out), "--dry-run")
    assert dry.returncode == 0 and "would restore" in dry.stdout
    assert not out.exists()
    done = bundler("recover", str(out))
    assert done.returncode == 0, done.stderr
    check_bundle(out)
    assert hidden_leftovers(tmp_path) == []
    again = bundler("recover", str(out))
    assert again.returncode == 0 and again.stdout.strip() == "nothing to do"


@pytest.mark.skipif(
    not (EXAMPLES / "config.toml").is_file(), reason="examples/install is not in this checkout yet"
)
def test_export_every_agent_of_the_examples_install(tmp_path: Path) -> None:
    install = tmp_path / "install"
    shutil.copytree(EXAMPLES, install, symlinks=True)
    listed = bundler("--install", str(install), "agents", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    aliases = [agent["alias"] for agent in json.loads(listed.stdout)["agents"]]
    assert aliases
    for alias in aliases:
        out = tmp_path / f"bundle-{alias}"
        done = run(export_cmd(install, out, "--json", alias=alias), cli_env())
        assert done.returncode == 0, done.stderr
        check_bundle(out)
    assert hidden_leftovers(tmp_path) == []
