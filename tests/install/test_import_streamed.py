"""Import stages a bundle against ``checksums.xxh3`` read a line at a time, beside the copy,
and hashes each staged folder as it is copied: nothing is held per file (06 P4), and the folder
digest the receipt records is the one undo computes of the folder as it lies (walk order)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import tomllib
import xxhash
from support import bundlefactory as bf
from support.installs import run_cli
from support.kit import run_cli_peak
from support.verify_kit import spread

from bundler.errors import InvalidInput
from bundler.install.files import tree_at
from bundler.install.stage import ListedChecksums, Staged, stage_folder


def _imported(tmp_path: Path, bundle: Path) -> tuple[Path, dict[str, object]]:
    install = tmp_path / "install"
    install.mkdir()
    result = run_cli(
        ["--install", str(install), "agents", "import", str(bundle), "--accept-risks", "--json"]
    )
    assert result.returncode == 0, result.stderr
    receipt = Path(json.loads(result.stdout)["receipt"])
    return install, tomllib.loads(receipt.read_text(encoding="utf-8"))


def test_the_receipt_records_each_folder_as_undo_reads_it(tmp_path: Path) -> None:
    """``a/c`` comes before ``a-b`` in a walk (each folder's names by bytes, depth first) but
    after it as whole paths: the staged folder's digest follows the walk, as undo's does, so an
    untouched import is not taken for a changed one."""
    bundle = bf.build_bundle(tmp_path / "bundle", format_version=2)
    (bundle / "workspace" / "a").mkdir()
    (bundle / "workspace" / "a" / "c").write_text("c\n", encoding="utf-8")
    (bundle / "workspace" / "a-b").write_text("a-b\n", encoding="utf-8")
    (bundle / "workspace" / "memorz").write_text("after memory/\n", encoding="utf-8")
    bf.reseal(bundle)
    install, receipt = _imported(tmp_path, bundle)
    folders = receipt["folders"]
    assert isinstance(folders, list) and folders
    fd = os.open(install, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for folder in folders:
            assert folder["tree"] == tree_at(fd, folder["path"]), folder["path"]
    finally:
        os.close(fd)


def _peak_import_mib(tmp_path: Path, bundle: Path, name: str) -> float:
    install = tmp_path / name
    install.mkdir()
    proc, peak = run_cli_peak(
        ["--install", str(install), "--quiet", "agents", "import", str(bundle), "--accept-risks"]
    )
    assert proc.returncode == 0, proc.stderr
    return peak


def test_import_memory_does_not_grow_with_the_number_of_files(tmp_path: Path) -> None:
    """Ten times the files, the same peak memory within a few MiB (the tables of every file
    cost about 1.3 KiB a file: 34 MiB more at 20,000 than at 2,000)."""
    small, large = tmp_path / "small", tmp_path / "large"
    bf.build_bundle(small)
    spread(small, 2_000)
    bf.build_bundle(large)
    spread(large, 20_000)
    baseline = _peak_import_mib(tmp_path, small, "small-install")
    grown = _peak_import_mib(tmp_path, large, "large-install")
    assert grown - baseline < 4.0, (baseline, grown)


def _long_named(bundle: Path, count: int) -> None:
    """``count`` tiny workspace files whose paths are about 200 characters long, so that any
    copy of the receipt's per-file listing held in memory costs some 0.5 KiB a file."""
    for index in range(count):
        folder = bundle / "workspace" / f"long-{index % 40:02d}-{'y' * 80}"
        folder.mkdir(exist_ok=True)
        (folder / f"file-{index:06d}-{'x' * 100}.txt").write_bytes(b"%d\n" % index)
    bf.reseal(bundle)


def test_the_receipt_listing_costs_import_no_memory_by_the_file(tmp_path: Path) -> None:
    """06 P4 for the receipt: each imported file's path, size and digest go to the listing
    beside the receipt a line at a time, never into memory, the receipt's TOML or the journal.
    Held there, 18,000 more files of 200-character paths cost more than 10 MiB."""
    small, large = tmp_path / "small", tmp_path / "large"
    bf.build_bundle(small)
    _long_named(small, 2_000)
    bf.build_bundle(large)
    _long_named(large, 20_000)
    baseline = _peak_import_mib(tmp_path, small, "small-install")
    grown = _peak_import_mib(tmp_path, large, "large-install")
    assert grown - baseline < 4.0, (baseline, grown)
    for name in ("small-install", "large-install"):
        receipt = next((tmp_path / name / "data" / "state" / "imports").glob("*.toml"))
        assert receipt.stat().st_size < 16 << 10  # the TOML names the listing, never holds it
        assert Path(f"{receipt}.files").read_bytes().count(b"\n") > 2_000


def _stage(bundle: Path, tmp_path: Path, digest: str) -> str:
    """Stage the bundle's workspace against its checksums as verified with ``digest``."""
    staging = tmp_path / "staging"
    staging.mkdir()
    bundle_fd = os.open(bundle, os.O_RDONLY | os.O_DIRECTORY)
    staging_fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
    listed = ListedChecksums(bundle_fd, digest)
    try:
        item = Staged("workspace", [("workspace", "")], "agents/researcher/workspace")
        return stage_folder(bundle_fd, staging_fd, item, listed)
    finally:
        listed.close()
        os.close(staging_fd)
        os.close(bundle_fd)


def _verified(tmp_path: Path) -> tuple[Path, str]:
    bundle = bf.build_bundle(tmp_path / "bundle")
    spread(bundle, 1500)  # checksums of many 64 KiB blocks
    return bundle, xxhash.xxh3_128((bundle / "checksums.xxh3").read_bytes()).hexdigest()


SPREAD = f"workspace/spread-17/file-000617-{'x' * 40}.txt"


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ("removed", f"{SPREAD}: vanished from the bundle after verification; verify it again"),
        ("last removed", "workspace/spread-39/"),
        ("rewritten", f"{SPREAD}: content does not match its digest in checksums.xxh3"),
        ("added", "workspace/spread-17/unlisted.txt: content does not match its digest"),
        ("checksums", "checksums.xxh3 changed after verification; verify the bundle again"),
    ],
)
def test_a_bundle_changed_after_verification_is_refused_while_staged(
    tmp_path: Path, change: str, refusal: str
) -> None:
    bundle, digest = _verified(tmp_path)
    if change == "removed":
        (bundle / SPREAD).unlink()
    elif change == "last removed":
        last = sorted((bundle / "workspace" / "spread-39").iterdir())[-1]
        last.unlink()
        refusal += f"{last.name}: vanished from the bundle after verification"
    elif change == "rewritten":
        (bundle / SPREAD).write_bytes(b"other\n")
    elif change == "added":
        (bundle / "workspace" / "spread-17" / "unlisted.txt").write_bytes(b"new\n")
    else:
        (bundle / SPREAD).unlink()
        bf.reseal(bundle)  # a consistent bundle, but not the one verified
    with pytest.raises(InvalidInput) as caught:
        _stage(bundle, tmp_path, digest)
    assert refusal in caught.value.message


def test_a_bundle_unchanged_since_verification_is_staged_with_the_walks_digest(
    tmp_path: Path,
) -> None:
    bundle, digest = _verified(tmp_path)
    tree = _stage(bundle, tmp_path, digest)
    fd = os.open(tmp_path / "staging", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert tree == tree_at(fd, "workspace")
    finally:
        os.close(fd)
