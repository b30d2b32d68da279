"""``verify_deferring_workspace`` and ``confirm_read``: a caller that reads the workspace itself
(import's staging, push's archiving) has every other rule checked first, and the bytes it read
judged after, against what was verified; together they refuse what ``verify_bundle`` refuses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import xxhash

from bundler.bundle.manifest import CHECKSUMS_NAME, CONFIG_NAME, MANIFEST_NAME
from bundler.bundle.verify import verify_bundle, verify_deferring_workspace
from bundler.bundle.verify_report import VerifyReport, confirm_read, unsound


@pytest.fixture
def bundle(exported: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(exported, copy)
    return copy


def read_as_archived(bundle: Path) -> dict[str, str]:
    """Every regular file's XXH3-128 by bundle path, as ``write_tar(digests=…)`` records it."""
    return {
        path.relative_to(bundle).as_posix(): xxhash.xxh3_128(path.read_bytes()).hexdigest()
        for path in sorted(bundle.rglob("*"))
        if path.is_file()
    }


def workspace_file(bundle: Path) -> str:
    first = next(p for p in sorted((bundle / "workspace").rglob("*")) if p.is_file())
    return first.relative_to(bundle).as_posix()


def confirmed(report: VerifyReport, read: dict[str, str]) -> list[str]:
    confirm_read(report, read)
    return [str(problem) for problem in report.errors]


def test_a_sound_bundle_read_as_verified_is_confirmed(bundle: Path) -> None:
    report = verify_deferring_workspace(bundle, per_file=True)
    assert report.ok and report.workspace_digests_deferred
    assert confirmed(report, read_as_archived(bundle)) == []


def test_deferring_leaves_the_workspace_contents_to_the_reader(bundle: Path) -> None:
    """Same size, other bytes: the deferred verify passes, the bytes read do not."""
    victim = workspace_file(bundle)
    data = bytearray((bundle / victim).read_bytes())
    data[0] ^= 0x01
    (bundle / victim).write_bytes(bytes(data))
    report = verify_deferring_workspace(bundle, per_file=True)
    assert report.ok
    full = verify_bundle(bundle)
    assert confirmed(report, read_as_archived(bundle)) == [str(p) for p in full.errors]
    assert victim in str(unsound(report, str(bundle)))


def test_a_bundle_unsound_elsewhere_is_verified_in_full_for_its_refusal(bundle: Path) -> None:
    """An extra root file fails the deferred verify; the second, full pass names the workspace
    file at fault too, so the refusal is the one ``bundle verify`` gives."""
    (bundle / "NOTES.md").write_text("notes\n", encoding="utf-8")
    victim = workspace_file(bundle)
    data = bytearray((bundle / victim).read_bytes())
    data[-1] ^= 0x01
    (bundle / victim).write_bytes(bytes(data))
    report = verify_deferring_workspace(bundle, per_file=True)
    assert not report.workspace_digests_deferred
    assert report.errors == verify_bundle(bundle).errors
    assert any(victim in str(p) for p in report.errors)


@pytest.mark.parametrize("change", ["not read", "read but never found"])
def test_a_workspace_that_changed_between_verify_and_read_is_refused(
    bundle: Path, change: str
) -> None:
    report = verify_deferring_workspace(bundle, per_file=True)
    read = read_as_archived(bundle)
    victim = workspace_file(bundle)
    if change == "not read":
        del read[victim]
    else:
        victim = "workspace/appeared-later.md"
        read[victim] = "0" * 32
    assert confirmed(report, read) == [
        f"{victim}: changed while it was read: verify the bundle again"
    ]


@pytest.mark.parametrize("name", [MANIFEST_NAME, CHECKSUMS_NAME, CONFIG_NAME])
def test_a_file_verified_in_full_then_read_with_other_bytes_is_refused(
    bundle: Path, name: str
) -> None:
    """Outside the workspace verify read the files itself; bytes read later that differ mean
    the folder changed in between, whatever the checksums say."""
    report = verify_deferring_workspace(bundle, per_file=True)
    read = read_as_archived(bundle)
    read[name] = xxhash.xxh3_128(b"other bytes").hexdigest()
    assert confirmed(report, read) == [
        f"{name}: changed while it was read: verify the bundle again"
    ]


def test_a_full_verify_compares_every_file_read_and_no_set(bundle: Path) -> None:
    """After a verify that read the workspace itself only digests are compared: a caller may
    read a part of the bundle (pull's listing, one layer)."""
    report = verify_bundle(bundle, per_file=True)
    read = {name: d for name, d in read_as_archived(bundle).items() if name == CONFIG_NAME}
    assert confirmed(report, read) == []
    read[CONFIG_NAME] = "0" * 32
    assert confirmed(report, read) == [
        f"{CONFIG_NAME}: changed while it was read: verify the bundle again"
    ]
