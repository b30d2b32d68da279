"""``bundler bundle verify`` (03 §1, §5; 06 §3 S1): valid bundles pass, hostile ones are refused.

Bundles are real folders; hostile ones are built for real (FIFOs, sockets, hard links, symlinks,
undecodable names) by ``tests/support/hostile_bundles.py``. The CLI runs in a real process.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import bundlefactory as bf
from support import hostile_bundles
from support.kit import run_cli

from bundler.bundle.verify import verify_bundle


def run_verify(bundle: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["bundle", "verify", str(bundle), *extra]
    return run_cli(args, errors="backslashreplace", timeout=600)


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A format 1 bundle made once by the real exporter from a small install."""
    base = tmp_path_factory.mktemp("exported")
    install = bf.write_install(base / "install")
    return bf.export_bundle(install, base / "bundle")


@pytest.fixture(scope="session")
def built_format_2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A format 2 bundle written part by part by the factory."""
    return bf.build_bundle(tmp_path_factory.mktemp("built") / "bundle", format_version=2)


@pytest.fixture(scope="session")
def exported_format_2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A format 2 bundle made by the real exporter (--include-memory)."""
    base = tmp_path_factory.mktemp("exported2")
    install = bf.write_install(base / "install", memory=True)
    return bf.export_bundle(install, base / "bundle", include_memory=True)


def fresh_copy(good: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(good, copy, symlinks=True)
    return copy


# --------------------------------------------------------------------------- valid bundles


def test_exported_bundle_verifies(exported: Path) -> None:
    before = bf.tree_snapshot(exported)
    result = run_verify(exported)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "format 1 bundle of agent researcher" in result.stdout
    assert bf.tree_snapshot(exported) == before


def test_built_bundle_verifies(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "b")
    report = verify_bundle(bundle)
    assert report.ok, report.errors
    assert report.skill_bundles == [bf.SKILL_BUNDLE]
    assert {f["kind"] for f in report.risk_flags} == {
        "process_spawn",
        "command_allowlist",
        "carried_skills",
    }
    assert report.files == len(bf.canonical_files(bundle))


def test_verify_json_reports_ok_and_counts(exported: Path) -> None:
    result = run_verify(exported, "--json")
    assert result.returncode == 0
    document = json.loads(result.stdout)
    assert document["ok"] is True
    assert document["errors"] == [] and document["warnings"] == []
    manifest = bf.read_manifest(exported)
    assert document["files"] == manifest["contents"]["files"]
    assert document["bytes"] == manifest["contents"]["bytes"]
    assert document["checksums_xxh3_128"] == manifest["contents"]["checksums_xxh3_128"]


@pytest.mark.parametrize("made_by", ["exported_format_2", "built_format_2"])
def test_format_2_store_checked_from_a_private_copy(
    made_by: str, request: pytest.FixtureRequest
) -> None:
    bundle: Path = request.getfixturevalue(made_by)
    before = bf.tree_snapshot(bundle)
    result = run_verify(bundle)
    assert result.returncode == 0, result.stderr
    assert "format 2 bundle" in result.stdout
    # No -journal, -wal or -shm appeared beside the store, and nothing changed.
    assert bf.tree_snapshot(bundle) == before
    assert sorted(os.listdir(bundle / "memory")) == ["MEMORY_SNAPSHOT.md", "brain.db"]


def test_format_2_risk_flags_include_carried_memory(built_format_2: Path) -> None:
    report = verify_bundle(built_format_2)
    assert report.ok, report.errors
    assert any(f["kind"] == "carried_memory" for f in report.risk_flags)


def test_format_1_without_checksums_verifies_with_warning(exported: Path, tmp_path: Path) -> None:
    """An older exporter's manifest names no checksums file: integrity unproven, said once."""
    bundle = fresh_copy(exported, tmp_path)
    (bundle / bf.CHECKSUMS).unlink()

    def older(manifest: dict[str, Any]) -> None:
        del manifest["contents"]["checksums"], manifest["contents"]["checksums_xxh3_128"]

    bf.edit_manifest(bundle, older)
    result = run_verify(bundle)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "checksums.xxh3" in line]
    assert len(warnings) == 1, result.stderr
    assert warnings[0].startswith("warning: checksums.xxh3: absent")
    assert "cannot be proven" in warnings[0]


def test_checksums_removed_though_the_manifest_names_them_is_refused(
    exported: Path, tmp_path: Path
) -> None:
    """The manifest's [contents] promised checksums.xxh3: without it a tampered file would pass."""
    bundle = fresh_copy(exported, tmp_path)
    (bundle / bf.CHECKSUMS).unlink()
    result = run_verify(bundle)
    assert result.returncode == 3, result.stderr
    assert (
        f"error: {bundle}: checksums.xxh3: missing, though the manifest's [contents] names it"
        in result.stderr
    )


def test_non_portable_workspace_name_is_a_warning(exported: Path, tmp_path: Path) -> None:
    bundle = fresh_copy(exported, tmp_path)
    (bundle / "workspace" / "aux.txt").write_text("fine on Linux, not on Windows\n")
    bf.reseal(bundle)
    result = run_verify(bundle)
    assert result.returncode == 0, result.stderr
    assert "warning: workspace/aux.txt: name is not portable" in result.stderr


# --------------------------------------------------------------------------- hostile bundles


def test_corpus_has_at_least_40_cases() -> None:
    assert len(hostile_bundles.CASES) + len(hostile_bundles.SLOW_CASES) >= 40


def _assert_refused(bundle: Path, expected: str, before: dict[str, tuple[object, ...]]) -> None:
    result = run_verify(bundle)
    assert result.returncode == 3, (expected, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines and lines[0].startswith("error: ")
    assert all(line.startswith(("error: ", "warning: ")) for line in lines), lines
    assert any(expected in line for line in lines if line.startswith("error: ")), (expected, lines)
    assert result.stdout == ""
    assert bf.tree_snapshot(bundle) == before, "verify changed the bundle"


@pytest.mark.parametrize("name", sorted(hostile_bundles.CASES))
def test_hostile_bundle_refused(name: str, exported: Path, tmp_path: Path) -> None:
    bundle = fresh_copy(exported, tmp_path)
    expected = hostile_bundles.CASES[name](bundle)
    _assert_refused(bundle, expected, bf.tree_snapshot(bundle))


@pytest.mark.slow
@pytest.mark.huge
@pytest.mark.parametrize("name", sorted(hostile_bundles.SLOW_CASES))
def test_hostile_bundle_refused_slow(name: str, exported: Path, tmp_path: Path) -> None:
    bundle = fresh_copy(exported, tmp_path)
    try:
        expected = hostile_bundles.SLOW_CASES[name](bundle)
        result = run_verify(bundle)
        assert result.returncode == 3
        assert "Traceback" not in result.stderr
        assert expected in result.stderr
    finally:
        shutil.rmtree(bundle)  # a million files must not outlive the test in pytest's tmp


def test_hostile_bundle_json_envelope(exported: Path, tmp_path: Path) -> None:
    bundle = fresh_copy(exported, tmp_path)
    hostile_bundles.fifo_in_workspace(bundle)
    hostile_bundles.second_agent_hidden(bundle)
    result = run_verify(bundle, "--json")
    assert result.returncode == 3
    document = json.loads(result.stdout)
    assert document["ok"] is False
    paths = [error["path"] for error in document["errors"]]
    assert "workspace/pipe" in paths and "agents.intruder" in paths
    assert document["error"]["code"] == 3
    assert document["error"]["path"] == document["errors"][0]["path"]
    assert "\n" not in document["error"]["message"]
    assert result.stderr == ""


def test_every_failure_is_reported_not_only_the_first(exported: Path, tmp_path: Path) -> None:
    bundle = fresh_copy(exported, tmp_path)
    expected = [
        hostile_bundles.symlink_escaping(bundle),
        hostile_bundles.hard_link_in_workspace(bundle),
        hostile_bundles.workspace_path_smuggled(bundle),
        hostile_bundles.unknown_key(bundle),
        hostile_bundles.risk_flags_omit_grant(bundle),
        hostile_bundles.files_count_mismatch(bundle),
    ]
    result = run_verify(bundle)
    assert result.returncode == 3
    for substring in expected:
        assert substring in result.stderr, (substring, result.stderr)


def test_entries_a_bundle_may_not_hold_are_one_error_naming_each_and_the_fix(
    exported: Path, tmp_path: Path
) -> None:
    """03 §1: only the entries of 02 §1 are allowed; the folder's extras are named together
    in one line with what to do, not one line each."""
    bundle = fresh_copy(exported, tmp_path)
    (bundle / "NOTES.md").write_text("notes\n")
    (bundle / "old").mkdir()
    (bundle / "old" / "a.txt").write_text("a\n")
    result = run_verify(bundle)
    assert result.returncode == 3
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {bundle}: NOTES.md, old/: not part of a bundle"), lines
    assert "copy just those to a new folder, or remove the rest" in lines[0]


def test_many_extra_entries_are_named_up_to_a_few_then_counted(
    exported: Path, tmp_path: Path
) -> None:
    bundle = fresh_copy(exported, tmp_path)
    for index in range(12):
        (bundle / f"extra{index:02d}.txt").write_text("x\n")
    report = verify_bundle(bundle)
    assert len(report.errors) == 1, report.errors
    assert report.errors[0].path == "extra00.txt, extra01.txt, extra02.txt, extra03.txt, " + (
        "extra04.txt and 7 more"
    )


def test_extra_entries_beside_a_format_2_bundle_are_told_it_may_hold_memory_too(
    built_format_2: Path, tmp_path: Path
) -> None:
    bundle = fresh_copy(built_format_2, tmp_path)
    (bundle / "NOTES.md").write_text("notes\n")
    report = verify_bundle(bundle)
    assert [p.path for p in report.errors] == ["NOTES.md"], report.errors
    assert "workspace/, skills/ and memory/)" in report.errors[0].message


def test_escaped_names_never_reach_the_terminal_raw(exported: Path, tmp_path: Path) -> None:
    bundle = fresh_copy(exported, tmp_path)
    (bundle / "workspace" / "evil\x1b[2J\u202ename").write_text("x\n")
    result = run_verify(bundle)
    assert result.returncode == 3
    assert "\x1b" not in result.stderr and "\u202e" not in result.stderr
    assert "\\x1b[2J" in result.stderr


def test_secret_value_never_printed(exported: Path, tmp_path: Path) -> None:
    bundle = fresh_copy(exported, tmp_path)
    planted = "sk-planted-secret-value-must-not-print-0123"
    bf.edit_config(
        bundle, lambda d: d["providers"]["models"]["anthropic"]["main"].update(api_key=planted)
    )
    for extra in ((), ("--json",)):
        result = run_verify(bundle, *extra)
        assert result.returncode == 3
        assert planted not in result.stdout + result.stderr


# --------------------------------------------------------------------------- paths and reads


def test_missing_bundle_is_a_refusal(tmp_path: Path) -> None:
    result = run_verify(tmp_path / "absent")
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and "no such bundle folder" in result.stderr


def test_bundle_path_that_is_a_symlink_is_refused(exported: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(exported)
    result = run_verify(link)
    assert result.returncode == 3
    assert "is a symbolic link" in result.stderr


@pytest.fixture
def public_tmp() -> Iterator[Path]:
    """A folder another user can reach (pytest's own tmp root is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="bundler-verify-test-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_unreadable_file_is_reported(exported: Path, public_tmp: Path) -> None:
    bundle = fresh_copy(exported, public_tmp)
    for folder, dirs, files in os.walk(bundle):
        for name in dirs:
            (Path(folder) / name).chmod(0o755)
        for name in files:
            (Path(folder) / name).chmod(0o644)
    bundle.chmod(0o755)
    (bundle / "workspace" / "README.md").chmod(0o000)
    if os.geteuid() != 0:
        pytest.skip("needs root to run the check as another user (root reads mode 000 files)")
    result = run_cli(["bundle", "verify", str(bundle)], as_nobody=True)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert "workspace/README.md" in result.stderr and "cannot read" in result.stderr


# --------------------------------------------------------------------------- property


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    names=st.sets(
        st.sampled_from(sorted(set(hostile_bundles.CASES) - {"config_oversized", "too_deep_tree"})),
        min_size=1,
        max_size=4,
    )
)
def test_verifying_never_changes_the_bundle(
    names: set[str], exported: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    bundle = fresh_copy(exported, tmp_path_factory.mktemp("prop"))
    applied = []
    for name in sorted(names):
        try:
            applied.append(hostile_bundles.CASES[name](bundle))
        except (OSError, KeyError, StopIteration, ValueError, sqlite3.DatabaseError):
            continue  # an earlier case removed or broke what this one edits; the rest apply
    before = bf.tree_snapshot(bundle)
    report = verify_bundle(bundle)
    assert bf.tree_snapshot(bundle) == before
    if applied:
        assert not report.ok


def test_identity_path_naming_a_carried_file_verifies(exported: Path, tmp_path: Path) -> None:
    bundle = fresh_copy(exported, tmp_path)
    (bundle / "workspace" / "identity").mkdir()
    (bundle / "workspace" / "identity" / "aieos.json").write_text("{}\n")
    bf.edit_config(
        bundle,
        lambda d: d["agents"][bf.ROOT_AGENT].update(
            identity={"format": "aieos", "aieos_path": "identity/aieos.json"}
        ),
    )
    report = verify_bundle(bundle)
    assert report.ok, report.errors


def test_entry_limit_counts_skipped_entries_too(
    exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real limit is 1,000,000 (slow test above); a lower one shows links count toward it.
    import bundler.bundle.walk as walk_module

    monkeypatch.setattr(walk_module, "MAX_ENTRIES", 40)
    bundle = fresh_copy(exported, tmp_path)
    for index in range(60):
        (bundle / "workspace" / f"link{index:02d}").symlink_to("README.md")
    report = verify_bundle(bundle)
    assert any("more than 40 entries" in p.message for p in report.errors)
    assert len(report.errors) < 60


def test_tree_errors_are_capped_with_a_count(
    exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bundler.bundle.walk as walk_module

    monkeypatch.setattr(walk_module, "MAX_LISTED_TREE_ERRORS", 5)
    bundle = fresh_copy(exported, tmp_path)
    for index in range(20):
        os.mkfifo(bundle / "workspace" / f"fifo{index:02d}")
    report = verify_bundle(bundle)
    fifo_errors = [p for p in report.errors if p.path.startswith("workspace/fifo")]
    assert len(fifo_errors) == 5
    assert any(p.message == "15 more entries at fault, not listed" for p in report.errors)


def test_bidi_controls_in_a_link_name_are_escaped(exported: Path, tmp_path: Path) -> None:
    bundle = fresh_copy(exported, tmp_path)
    (bundle / "workspace" / "invoice\u202etxt.exe").symlink_to("/etc/passwd")
    result = run_verify(bundle)
    assert result.returncode == 3
    assert "\u202e" not in result.stderr
    assert f"error: {bundle}: workspace/invoice\\u202etxt.exe: a symbolic link" in result.stderr
    document = json.loads(run_verify(bundle, "--json").stdout)
    assert "workspace/invoice\\u202etxt.exe" in [error["path"] for error in document["errors"]]


def test_older_format_1_manifest_without_checksums_keys_verifies_with_warning(
    exported: Path, tmp_path: Path
) -> None:
    bundle = fresh_copy(exported, tmp_path)
    (bundle / bf.CHECKSUMS).unlink()

    def older(manifest: dict[str, object]) -> None:
        contents = manifest["contents"]
        assert isinstance(contents, dict)
        del contents["checksums"], contents["checksums_xxh3_128"]

    bf.edit_manifest(bundle, older)
    report = verify_bundle(bundle)
    assert report.ok, report.errors
    assert [w.path for w in report.warnings] == [bf.CHECKSUMS]
    assert report.manifest is not None and "checksums_xxh3_128" not in report.manifest["contents"]


def test_format_2_manifest_must_keep_its_checksums_keys(
    built_format_2: Path, tmp_path: Path
) -> None:
    bundle = fresh_copy(built_format_2, tmp_path)
    (bundle / bf.CHECKSUMS).unlink()
    bf.edit_manifest(bundle, lambda m: m["contents"].pop("checksums_xxh3_128"))
    report = verify_bundle(bundle)
    assert {p.path for p in report.errors} >= {bf.MANIFEST, bf.CHECKSUMS}


def test_bundler_manifest_omitting_any_recomputed_flag_is_refused(
    exported: Path, tmp_path: Path
) -> None:
    """bundler knows all its kinds: leaving out any flag, bundler-only kinds too, is a lie."""
    kinds = [f["kind"] for f in bf.read_manifest(exported)["risk_flags"]]
    assert "command_allowlist" in kinds  # a kind ZeroClaw's exporter does not have
    for index, kind in enumerate(kinds):
        bundle = fresh_copy(exported, tmp_path / str(index))

        def omit(manifest: dict[str, Any], k: str = kind) -> None:
            manifest["risk_flags"] = [f for f in manifest["risk_flags"] if f["kind"] != k]

        bf.edit_manifest(bundle, omit)
        report = verify_bundle(bundle)
        assert any(f"omits {kind}" in p.message for p in report.errors), (kind, report.errors)


def test_an_interrupt_during_verify_is_an_interrupt_not_a_fault_of_the_bundle(
    tmp_path: Path,
) -> None:
    """Interrupted was a BundlerError, which the walk records as a file's fault and carries on
    after: Ctrl-C during 'bundle verify' said the bundle was unsound (the file it was reading
    'interrupted', then 'listed but not a regular file'), exit 3."""
    from support.faultinject import ptrace_unavailable, run_with_fault, trace_calls
    from support.installs import one_error
    from support.kit import cli_command

    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    bundle = bf.build_bundle(tmp_path / "bundle")
    for index in range(40):
        (bundle / "workspace" / "notes" / f"n{index:02d}.md").write_text(f"note {index}\n")
    bf.reseal(bundle)
    cmd = [*cli_command(), "bundle", "verify", str(bundle)]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done, calls = trace_calls(cmd, ["readv"], env=env, relevant="/workspace/notes/")
    assert done.returncode == 0, done.stderr
    middle = calls[len(calls) // 2]
    run = run_with_fault(cmd, "readv", middle.index, "SIGINT", env=env)
    assert run.fired, middle.line
    assert run.returncode == 130 and one_error(run.stderr), run.stderr
    assert "interrupted by SIGINT" in run.stderr and "workspace/" not in run.stderr
