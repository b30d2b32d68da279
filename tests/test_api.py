"""The public Python API (``bundler.api``): one way to name a bundle, typed options, the reports
the command line prints.

Every test drives the real library against real files, a real registry and a real install, and
compares what the API returns with what the CLI prints for ``--json``: the API is the command
line's work without its printing, so the two must agree.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.installs import copy_example
from support.kit import run_cli, tree_snapshot
from support.registry_server import Registry

import bundler
from bundler import api


def _scratch(tmp: str) -> list[str]:
    """What bundler left in the temporary folder (each test has its own, see conftest)."""
    return sorted(os.listdir(tmp))


def _cli_json(*args: str) -> dict[str, object]:
    done = run_cli([*args, "--json"])
    assert done.returncode == 0, done.stderr
    payload: dict[str, object] = json.loads(done.stdout)
    return payload


def _secrets_file(tmp_path: Path, bundle: Path) -> Path:
    required = bf.read_manifest(bundle)["required_secrets"]
    path = tmp_path / "secrets.toml"
    path.write_text(
        "".join(f'"{name}" = "value-{i}"\n' for i, name in enumerate(required)), encoding="utf-8"
    )
    path.chmod(0o600)
    return path


def test_open_bundle_reads_a_folder_where_it_is(exported: Path) -> None:
    with bundler.open_bundle(exported) as opened:
        assert opened.kind is api.BundleKind.FOLDER
        assert opened.folder == exported
        assert opened.reference is None and opened.digest is None
    assert exported.is_dir()


def test_open_bundle_unpacks_an_archive_and_removes_the_copy_however_the_block_ends(
    packed: Path,
) -> None:
    tmp = os.environ["TMPDIR"]
    with bundler.open_bundle(packed) as opened:
        assert opened.kind is api.BundleKind.ARCHIVE
        assert (opened.folder / "zeroclaw-agent.toml").is_file()
        assert opened.folder.is_relative_to(tmp)
    assert not opened.folder.exists()
    assert _scratch(tmp) == []
    with pytest.raises(RuntimeError), bundler.open_bundle(packed) as opened:
        raise RuntimeError("the caller's own failure")
    assert _scratch(tmp) == []


def test_open_bundle_pulls_a_reference_pinned_to_its_digest(
    registry: Registry, exported: Path
) -> None:
    pushed = bundler.push(exported, registry.ref("agents/a:1"), api.PushOptions(registry=PLAIN))
    with bundler.open_bundle(registry.ref("agents/a:1"), registry=PLAIN) as opened:
        assert opened.kind is api.BundleKind.REFERENCE
        assert opened.digest == pushed.digest
        assert opened.reference == f"{registry.ref('agents/a')}@{pushed.digest}"
        assert tree_snapshot(opened.folder) == tree_snapshot(exported)
    assert not opened.folder.exists()
    assert _scratch(os.environ["TMPDIR"]) == []


PLAIN = api.RegistryOptions(plain_http=True)


def test_verify_of_each_form_is_the_cli_s_verify(
    registry: Registry, exported: Path, packed: Path
) -> None:
    bundler.push(exported, registry.ref("agents/a:1"), api.PushOptions(registry=PLAIN))
    for given in (str(exported), str(packed)):
        report = bundler.verify(given)
        assert report.ok, report.errors
        assert report.as_json() | {"ok": True} == _cli_json("bundle", "verify", given)
    report = bundler.verify(registry.ref("agents/a:1"), registry=PLAIN)
    assert report.ok and report.as_json()["root_agent"] == bf.ROOT_AGENT
    cli = _cli_json("bundle", "verify", registry.ref("agents/a:1"), "--plain-http")
    # a registry artifact is named by its reference pinned to the digest read, never its copy
    assert report.as_json()["bundle"] == report.as_json()["reference"] == cli["reference"]
    described = bundler.inspect(registry.ref("agents/a:1"), registry=PLAIN)
    assert described.as_json()["bundle"] == cli["reference"]


def test_verify_lists_a_tampered_bundle_s_faults_instead_of_raising(
    exported: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    victim = next(p for p in sorted((copy / "workspace").rglob("*")) if p.is_file())
    victim.write_bytes(victim.read_bytes() + b"tampered")
    report = bundler.verify(copy)
    assert not report.ok
    assert any(str(victim.relative_to(copy)) in str(error) for error in report.errors)


def test_every_options_object_is_frozen() -> None:
    options = [getattr(api, name) for name in api.__all__ if name.endswith("Options")]
    assert len(options) == 21
    for kind in options:
        made = kind()
        field = dataclasses.fields(made)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(made, field, getattr(made, field))


def test_the_scan_modes_are_the_cli_s_choices() -> None:
    done = run_cli(["agents", "export", "--help"])
    assert "{refuse,warn,off}" in done.stdout
    assert [mode.value for mode in api.ScanSecrets] == ["refuse", "warn", "off"]


def test_export_to_a_folder_and_to_an_archive(tmp_path: Path) -> None:
    install = bf.write_install(tmp_path / "install")
    options = api.ExportOptions(scan_secrets=api.ScanSecrets.WARN, exclude=("*.tmp",))
    folder = bundler.export_agent(install, bf.ROOT_AGENT, tmp_path / "out", options)
    assert folder.bundle == str(tmp_path / "out") and bundler.verify(tmp_path / "out").ok
    archive = bundler.export_agent(install, bf.ROOT_AGENT, tmp_path / "out.tar", options)
    assert archive.bundle == str(tmp_path / "out.tar") and archive.files == folder.files
    assert bundler.verify(tmp_path / "out.tar").ok
    assert set(archive.as_json()) == set(
        _cli_json("--install", str(install), "agents", "export", bf.ROOT_AGENT, "--out",
                  str(tmp_path / "cli"))
    ) - {"ok"}  # fmt: skip


def test_an_import_planned_changes_nothing_and_one_undone_leaves_the_install_as_it_was(
    packed: Path, exported: Path, tmp_path: Path
) -> None:
    install = bf.write_install(tmp_path / "install")
    before = tree_snapshot(install)
    config = (install / "config.toml").read_bytes()
    options = api.ImportOptions(
        as_alias="copy", secrets_file=_secrets_file(tmp_path, exported), accept_risks=True
    )
    plan = bundler.plan_import(install, packed, options)
    assert plan.dry_run and plan.agent == "copy" and plan.receipt == ""
    assert tree_snapshot(install) == before
    done = bundler.import_bundle(install, packed, options)
    assert not done.dry_run and done.receipt and tree_snapshot(install) != before
    assert done.bundle == str(packed)
    undone = bundler.undo_import(install, "last")
    assert undone.agent == "copy" and undone.removed_entries
    assert (install / "config.toml").read_bytes() == config


def test_pack_and_unpack_round_trip(exported: Path, tmp_path: Path) -> None:
    packed = bundler.pack(exported, tmp_path / "b.tar")
    assert packed.destination == str(tmp_path / "b.tar")
    unpacked = bundler.unpack(tmp_path / "b.tar", tmp_path / "again")
    assert unpacked.members == packed.members
    assert tree_snapshot(tmp_path / "again") == tree_snapshot(exported)
    with pytest.raises(bundler.Refused):
        bundler.pack(exported, tmp_path / "b.tar")  # exists, and force was not given
    assert bundler.pack(exported, tmp_path / "b.tar", api.PackOptions(force=True)).members


def test_pull_by_tag_warns_and_by_digest_does_not(
    registry: Registry, exported: Path, tmp_path: Path
) -> None:
    pushed = bundler.push(exported, registry.ref("agents/a:1"), api.PushOptions(registry=PLAIN))
    assert pushed.as_json()["digest"] == pushed.digest
    by_tag = bundler.pull(
        registry.ref("agents/a:1"), tmp_path / "t", api.PullOptions(registry=PLAIN)
    )
    assert any("is a tag" in warning for warning in by_tag.warnings)
    pinned = f"{registry.ref('agents/a')}@{pushed.digest}"
    by_digest = bundler.pull(pinned, tmp_path / "d.tar", api.PullOptions(registry=PLAIN))
    assert by_digest.warnings == [] and by_digest.digest == pushed.digest
    assert bundler.verify(tmp_path / "d.tar").ok


def test_a_bundle_opened_once_serves_several_operations(
    registry: Registry, exported: Path, tmp_path: Path
) -> None:
    bundler.push(exported, registry.ref("agents/a:1"), api.PushOptions(registry=PLAIN))
    marked = registry.mark()
    install = bf.write_install(tmp_path / "install")
    with bundler.open_bundle(registry.ref("agents/a:1"), registry=PLAIN) as opened:
        assert bundler.verify(opened).ok
        assert bundler.inspect(opened).root_agent == bf.ROOT_AGENT
        plan = bundler.plan_import(
            install,
            opened,
            api.ImportOptions(
                as_alias="copy",
                secrets_file=_secrets_file(tmp_path, exported),
                accept_risks=True,
            ),
        )
        assert plan.bundle == opened.reference
    # one pull: each blob was fetched once, however many operations read it
    blobs = [path for verb, path, _ in registry.requests()[marked:] if "/blobs/" in path]
    assert blobs and len(blobs) == len(set(blobs))


def test_backup_restore_recover_and_doctor_give_the_cli_s_json(tmp_path: Path) -> None:
    project = copy_example(tmp_path, "project")
    made = bundler.backup(project, api.BackupOptions(to=tmp_path / "b.zip"))
    assert made.as_json()["backup"] == str(tmp_path / "b.zip")
    restored = bundler.restore(project, tmp_path / "b.zip")
    assert restored.entries == made.entries
    assert set(restored.as_json()) == {"home", "entries", "bytes", "kept", "created_home"}
    recovered = bundler.recover(project / "data-home", api.RecoverWhat.HOME)
    assert recovered.as_json() | {"ok": True} == _cli_json(
        "recover", "--home", str(project / "data-home")
    )
    install = bf.write_install(tmp_path / "install")
    found = bundler.doctor(api.DoctorOptions(install=install))
    assert found.problems == []
    cli = _cli_json("--install", str(install), "doctor")
    assert found.as_json()["problems"] == cli["problems"] == []


def test_every_report_says_itself_as_json() -> None:
    reports = [name for name in api.__all__ if name.endswith("Report")]
    assert len(reports) == 20
    for name in reports:
        assert callable(getattr(getattr(api, name), "as_json", None)), name


def test_the_api_tells_a_reference_as_the_registry_client_does() -> None:
    """The API spells the scheme itself, so that telling a folder apart loads no registry code."""
    from bundler.registry.reference import SCHEME

    assert api.REFERENCE_SCHEME == SCHEME


def test_what_the_cli_needed_of_the_api_gives_the_cli_s_json(
    packed: Path, exported: Path, tmp_path: Path
) -> None:
    """The operations the command line gained an API for answer as the command does."""
    install = bf.write_install(tmp_path / "install")
    assert bundler.find_install(install) == install
    # secrets-template of an archive opened once but not unpacked: the operation unpacks it
    with bundler.open_bundle(packed, unpack=False) as opened:
        assert opened.kind is api.BundleKind.ARCHIVE and opened.folder == packed
        made = bundler.secrets_template(opened)
    printed = run_cli(["bundle", "secrets-template", str(packed)])
    assert made.ok and made.text == printed.stdout
    assert made.required == bf.read_manifest(exported)["required_secrets"]
    options = api.ImportOptions(
        as_alias="copy", secrets_file=_secrets_file(tmp_path, exported), accept_risks=True
    )
    bundler.import_bundle(install, packed, options)
    listed = bundler.list_imports(install)
    assert [row.as_json() for row in listed] == _cli_json(
        "--install", str(install), "agents", "imports"
    )["imports"]
    assert bundler.leftovers_beside(exported) == [] and bundler.leftovers_beside(packed) == []
    scan = bundler.recover(tmp_path, api.RecoverWhat.LEFTOVERS)
    assert scan.as_json() | {"ok": True} == _cli_json("recover", "--scan", str(tmp_path))
    project = copy_example(tmp_path, "project")
    to = tmp_path / "backups"
    to.mkdir()
    made = [bundler.backup(project, api.BackupOptions(to=to)).path for _ in range(2)]
    assert bundler.verify_backup(made[0]).entries > 0
    listing = bundler.list_backups(project, api.ListBackupsOptions(to=to))
    assert [item.path for item in listing.backups] == made
    cli = _cli_json("home", "backups", "--project", str(project), "--to", str(to))
    assert listing.as_json() | {"ok": True} == cli
    pruned = bundler.prune_backups(project, api.PruneOptions(to=to, keep_last=1, dry_run=True))
    assert [item.path for item in pruned.removed] == made[:1]
    assert sorted(to.iterdir()) == sorted(made)
    cli = _cli_json("home", "prune", "--project", str(project), "--to", str(to), "--keep-last", "1",
                    "--dry-run")  # fmt: skip
    assert pruned.as_json() | {"ok": True} == cli


def test_prune_cache_is_bundle_cache_prune() -> None:
    """The cache's files, made here as a pull leaves them (a blob named by its sha256 and a
    partial download), pruned by the API as the command line prunes them, oldest first."""
    import hashlib
    import os

    folder = Path(os.environ["XDG_CACHE_HOME"]) / "bundler" / "blobs" / "sha256"
    folder.mkdir(parents=True)
    old, new = b"old blob" * 100, b"new blob" * 10
    for when, data in ((1_000_000, old), (2_000_000, new)):
        path = folder / hashlib.sha256(data).hexdigest()
        path.write_bytes(data)
        os.utime(path, (when, when))
    (folder / "not-ours").write_bytes(b"x" * 4096)
    shown = _cli_json("bundle", "cache", "--max-size", str(len(new)))
    assert shown["dry_run"] is True and len(list(folder.iterdir())) == 3
    report = api.prune_cache(len(new))
    payload = report.as_json()
    assert {k: v for k, v in shown.items() if k not in ("ok", "dry_run", "warnings")} == {
        k: v for k, v in payload.items() if k != "dry_run"
    }
    assert [r.digest for r in report.removed] == [f"sha256:{hashlib.sha256(old).hexdigest()}"]
    assert (report.kept_files, report.kept_bytes) == (1, len(new))
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [hashlib.sha256(new).hexdigest(), "not-ours"]
    )


def test_an_encrypted_backup_is_made_checked_listed_and_restored_through_the_api(
    tmp_path: Path,
) -> None:
    """The age options of the local backup commands are the API's: an encrypted backup made,
    checked, listed with --verify and restored with the identity only (04 §5.6)."""
    import subprocess

    if shutil.which("age-keygen") is None:
        pytest.fail("age-keygen is missing: install Debian's age")
    key = tmp_path / "key.txt"
    subprocess.run(["age-keygen", "-o", str(key)], check=True, capture_output=True)
    public = subprocess.run(
        ["age-keygen", "-y", str(key)], check=True, capture_output=True, text=True
    ).stdout.strip()
    project = copy_example(tmp_path, "project")
    to = tmp_path / "backups"
    to.mkdir()
    made = bundler.backup(project, api.BackupOptions(to=to, encrypt_to=(public,)))
    assert made.path.name.endswith(".zip.age") and made.entries > 0
    with pytest.raises(api.BundlerError):
        bundler.verify_backup(made.path)
    checked = bundler.verify_backup(made.path, api.VerifyBackupOptions(age_identities=(key,)))
    assert checked.encrypted and checked.entries == made.entries
    unopened = bundler.list_backups(project, api.ListBackupsOptions(to=to))
    assert [(item.encrypted, item.files) for item in unopened.backups] == [(True, None)]
    listing = bundler.list_backups(
        project, api.ListBackupsOptions(to=to, verify=True, age_identities=(key,))
    )
    assert [item.verified for item in listing.backups] == [True]
    cli = _cli_json("home", "backups", "--project", str(project), "--to", str(to), "--verify",
                    "--age-identity", str(key))  # fmt: skip
    assert listing.as_json() | {"ok": True} == cli
    restored = bundler.restore(project, made.path, api.RestoreOptions(age_identities=(key,)))
    assert restored.entries == made.entries
