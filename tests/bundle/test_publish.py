"""Publishing protocol of 02 §8 on real folders: admission, staging, swap, rollback, recovery."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path

import pytest
from support.kit import tree_snapshot

from bundler.bundle.leftovers import (
    decode_record,
    encode_record,
    find_leftovers,
    record_name,
    retired_name,
    scan_leftovers,
    staging_name,
)
from bundler.bundle.publish import (
    DestKind,
    PublishMethod,
    admit,
    io_failure,
    rename_exchange_works,
)
from bundler.bundle.recover import recover_destination
from bundler.errors import Refused, UsageError


def _make_bundle(path: Path, marker: str) -> None:
    path.mkdir()
    (path / "zeroclaw-agent.toml").write_text(f'format_version = 1\nroot_agent = "{marker}"\n')
    (path / "config.toml").write_text(f"# {marker}\n")


def _snapshot(folder: Path) -> dict[str, bytes | str | None]:
    """Every path below ``folder`` with its bytes (None for folders, the target for links)."""
    return {rel: content for rel, (_kind, _mode, content) in tree_snapshot(folder).items()}


def _hidden(parent: Path) -> list[str]:
    return sorted(name for name in os.listdir(parent) if name.startswith(".zeroclaw-export"))


def _build(out: Path, *, force: bool = False, marker: str = "new") -> PublishMethod:
    with admit(out, force=force, protected=[]) as adm:
        staging = adm.stage()
        try:
            fd = os.open("zeroclaw-agent.toml", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=staging.fd)
            os.write(fd, f'root_agent = "{marker}"\n'.encode())
            os.close(fd)
            staging.flush()
            outcome = staging.publish()
        except BaseException:
            staging.abort()
            raise
    assert outcome.warnings == []
    return outcome.method


# --- admission -------------------------------------------------------------------------------


def test_admission_vacant_destination(tmp_path: Path) -> None:
    with admit(tmp_path / "out", force=False, protected=[]) as adm:
        assert adm.kind is DestKind.VACANT
        assert adm.identity is None
    assert os.listdir(tmp_path) == []


def test_admission_empty_folder_records_identity(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    st = os.stat(tmp_path / "out")
    with admit(tmp_path / "out", force=False, protected=[]) as adm:
        assert adm.kind is DestKind.EMPTY
        assert adm.identity == (st.st_dev, st.st_ino)


def test_admission_existing_bundle_refused_without_force(tmp_path: Path) -> None:
    _make_bundle(tmp_path / "out", "old")
    with pytest.raises(Refused, match="pass --force"):
        admit(tmp_path / "out", force=False, protected=[])
    with admit(tmp_path / "out", force=True, protected=[]) as adm:
        assert adm.kind is DestKind.BUNDLE


def test_admission_folder_that_is_not_a_bundle_refused_even_with_force(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    for force in (False, True):
        with pytest.raises(Refused, match="not a bundle"):
            admit(tmp_path / "out", force=force, protected=[])


def test_admission_file_destination_refused(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("x")
    with pytest.raises(Refused, match="not a folder; choose an empty or new folder"):
        admit(tmp_path / "out", force=True, protected=[])


def test_admission_fifo_destination_refused_without_opening_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "out")
    with pytest.raises(Refused, match="not a folder; choose an empty or new folder"):
        admit(tmp_path / "out", force=True, protected=[])


def test_admission_final_symlink_refused_target_untouched(tmp_path: Path) -> None:
    _make_bundle(tmp_path / "real", "old")
    before = _snapshot(tmp_path / "real")
    (tmp_path / "out").symlink_to(tmp_path / "real")
    with pytest.raises(Refused, match="symbolic link; name a real folder"):
        admit(tmp_path / "out", force=True, protected=[])
    assert _snapshot(tmp_path / "real") == before


def _is_archive(fd: int) -> bool:
    """A stand-in for the archive check: a file starting with ``tar`` is one."""
    return os.pread(fd, 3, 0) == b"tar"


def test_archive_admission_existing_archive_replaced_only_with_force(tmp_path: Path) -> None:
    (tmp_path / "b.tar").write_bytes(b"tar and more")
    with pytest.raises(Refused, match="already holds a bundle archive; pass --force"):
        admit(tmp_path / "b.tar", force=False, protected=[], archive_check=_is_archive)
    with admit(tmp_path / "b.tar", force=True, protected=[], archive_check=_is_archive) as adm:
        assert adm.kind is DestKind.ARCHIVE and adm.archive


def test_archive_admission_file_that_is_not_an_archive_refused_even_with_force(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(Refused, match="is not a bundle archive; choose a new file name"):
        admit(tmp_path / "notes.txt", force=True, protected=[], archive_check=_is_archive)


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_archive_admission_destination_that_is_not_a_file_refused_without_opening_it(
    tmp_path: Path, kind: str
) -> None:
    os.mkdir(tmp_path / "out") if kind == "folder" else os.mkfifo(tmp_path / "out")
    with pytest.raises(Refused, match="exists and is not a file; choose a new file name"):
        admit(tmp_path / "out", force=True, protected=[], archive_check=_is_archive)


def test_archive_admission_final_symlink_refused_target_untouched(tmp_path: Path) -> None:
    (tmp_path / "real.tar").write_bytes(b"tar old")
    (tmp_path / "out.tar").symlink_to(tmp_path / "real.tar")
    with pytest.raises(Refused, match="symbolic link; name a real file"):
        admit(tmp_path / "out.tar", force=True, protected=[], archive_check=_is_archive)
    assert (tmp_path / "real.tar").read_bytes() == b"tar old"


@pytest.mark.parametrize("tail", [".", "..", "x/..", "x/.", "/"])
def test_admission_dot_and_dotdot_are_usage_errors(tmp_path: Path, tail: str) -> None:
    out = tail if tail == "/" else f"{tmp_path}/{tail}"
    with pytest.raises(UsageError) as caught:
        admit(out, force=False, protected=[])
    assert caught.value.code == 2


def test_admission_missing_parent_refused(tmp_path: Path) -> None:
    with pytest.raises(Refused, match="does not exist"):
        admit(tmp_path / "nope" / "out", force=False, protected=[])


@pytest.mark.parametrize("where", ["equal", "inside", "contains"])
def test_admission_overlap_with_source_refused(tmp_path: Path, where: str) -> None:
    source = tmp_path / "install" / "agents" / "a" / "workspace"
    source.mkdir(parents=True)
    out = {"equal": source, "inside": source / "bundle", "contains": tmp_path / "install"}[where]
    with pytest.raises(Refused, match="overlaps"):
        admit(out, force=True, protected=[source])


def test_admission_overlap_seen_through_a_linked_parent(tmp_path: Path) -> None:
    install = tmp_path / "install"
    install.mkdir()
    (tmp_path / "alias").symlink_to(install)
    with pytest.raises(Refused, match="overlaps"):
        admit(tmp_path / "alias" / "out", force=False, protected=[install])
    assert os.listdir(install) == []


def test_admission_overlap_seen_through_a_linked_source(tmp_path: Path) -> None:
    real = tmp_path / "real-ws"
    real.mkdir()
    (tmp_path / "ws-link").symlink_to(real)
    with pytest.raises(Refused, match="overlaps"):
        admit(real / "out", force=False, protected=[tmp_path / "ws-link"])


def test_sibling_with_common_prefix_is_not_an_overlap(tmp_path: Path) -> None:
    (tmp_path / "install").mkdir()
    with admit(tmp_path / "install-bundle", force=False, protected=[tmp_path / "install"]) as adm:
        assert adm.kind is DestKind.VACANT


# --- staging and swap ------------------------------------------------------------------------


def test_staging_record_written_before_folder_and_folder_is_private(tmp_path: Path) -> None:
    with admit(tmp_path / "out", force=False, protected=[]) as adm:
        staging = adm.stage()
        try:
            record = tmp_path / record_name(staging.token)
            assert record.read_bytes() == b"out\n"
            mode = os.stat(tmp_path / staging_name(staging.token)).st_mode
            assert stat.S_IMODE(mode) == 0o700
        finally:
            staging.abort()
    assert _hidden(tmp_path) == []
    assert not (tmp_path / "out").exists()


def test_record_roundtrip_keeps_odd_names() -> None:
    for name in ["out", "with space", "new\nline", "é"]:
        assert decode_record(encode_record(name)) == name
    assert decode_record(b"") is None
    assert decode_record(b"out") is None  # torn: no newline yet
    assert decode_record(b"a/b\n") is None


def test_publish_vacant_uses_noreplace(tmp_path: Path) -> None:
    assert _build(tmp_path / "out") is PublishMethod.NOREPLACE
    assert (tmp_path / "out" / "zeroclaw-agent.toml").read_text() == 'root_agent = "new"\n'
    assert _hidden(tmp_path) == []


def test_publish_empty_folder_is_exchanged_and_removed(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    assert _build(tmp_path / "out") is PublishMethod.EXCHANGE
    assert os.listdir(tmp_path / "out") == ["zeroclaw-agent.toml"]
    assert _hidden(tmp_path) == []


def test_force_replaces_whole_bundle_without_merging(tmp_path: Path) -> None:
    _make_bundle(tmp_path / "out", "old")
    (tmp_path / "out" / "stale.txt").write_text("stale")
    assert _build(tmp_path / "out", force=True) is PublishMethod.EXCHANGE
    assert sorted(os.listdir(tmp_path / "out")) == ["zeroclaw-agent.toml"]
    assert _hidden(tmp_path) == []


def test_destination_appearing_during_build_is_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with admit(out, force=False, protected=[]) as adm:
        staging = adm.stage()
        _make_bundle(out, "racer")
        with pytest.raises(Refused, match="appeared"):
            staging.publish()
        staging.abort()
    assert (out / "zeroclaw-agent.toml").read_text().endswith('"racer"\n')
    assert _hidden(tmp_path) == []


def test_empty_destination_written_into_is_exchanged_back(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    identity = os.stat(out).st_ino
    with admit(out, force=False, protected=[]) as adm:
        staging = adm.stage()
        (out / "late.txt").write_text("someone else's")
        with pytest.raises(Refused, match="written into"):
            staging.publish()
        staging.abort()
    assert os.stat(out).st_ino == identity
    assert _snapshot(out) == {"late.txt": b"someone else's"}
    assert _hidden(tmp_path) == []


def test_replaced_destination_refused_at_swap(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _make_bundle(out, "old")
    with admit(out, force=True, protected=[]) as adm:
        staging = adm.stage()
        os.rename(out, tmp_path / "moved")
        _make_bundle(out, "impostor")
        with pytest.raises(Refused, match="replaced"):
            staging.publish()
        staging.abort()
    assert (out / "config.toml").read_text() == "# impostor\n"
    assert _hidden(tmp_path) == []


def test_abort_removes_staging_and_record(tmp_path: Path) -> None:
    _make_bundle(tmp_path / "out", "old")
    before = _snapshot(tmp_path / "out")
    with admit(tmp_path / "out", force=True, protected=[]) as adm:
        staging = adm.stage()
        os.mkdir("deep", dir_fd=staging.fd)
        assert staging.abort() == []
    assert _snapshot(tmp_path / "out") == before
    assert _hidden(tmp_path) == []


# --- recovery --------------------------------------------------------------------------------


def _leave(
    parent: Path, token: str, target: str | None, *, staging: bool, retired: str | None
) -> None:
    if target is not None:
        (parent / record_name(token)).write_bytes(encode_record(target))
    if staging:
        (parent / staging_name(token)).mkdir()
        (parent / staging_name(token) / "partial").write_text("half")
    if retired is not None:
        _make_bundle(parent / retired_name(token), retired)


def test_recover_restores_retired_bundle_when_destination_missing(tmp_path: Path) -> None:
    _leave(tmp_path, "A" * 12, "out", staging=True, retired="old")
    actions = recover_destination(tmp_path / "out")
    assert any(line.startswith("restored the previous bundle") for line in actions)
    assert (tmp_path / "out" / "config.toml").read_text() == "# old\n"
    assert _hidden(tmp_path) == []


def test_recover_removes_retired_when_destination_present(tmp_path: Path) -> None:
    _make_bundle(tmp_path / "out", "new")
    _leave(tmp_path, "B" * 12, "out", staging=False, retired="old")
    recover_destination(tmp_path / "out")
    assert (tmp_path / "out" / "config.toml").read_text() == "# new\n"
    assert _hidden(tmp_path) == []


def test_recover_never_promotes_staging(tmp_path: Path) -> None:
    _leave(tmp_path, "C" * 12, "out", staging=True, retired=None)
    (tmp_path / staging_name("C" * 12) / "zeroclaw-agent.toml").write_text("root_agent = 'x'\n")
    recover_destination(tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert _hidden(tmp_path) == []


def test_recover_half_removed_retired_is_not_restored(tmp_path: Path) -> None:
    _leave(tmp_path, "D" * 12, "out", staging=False, retired="old")
    os.unlink(tmp_path / retired_name("D" * 12) / "zeroclaw-agent.toml")
    recover_destination(tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert _hidden(tmp_path) == []


def test_recover_leaves_other_destinations_and_unrecorded_leftovers(tmp_path: Path) -> None:
    _leave(tmp_path, "E" * 12, "other", staging=True, retired="o")
    _leave(tmp_path, "F" * 12, None, staging=True, retired=None)
    before = _snapshot(tmp_path)
    actions = recover_destination(tmp_path / "out")
    assert _snapshot(tmp_path) == before
    assert sum(line.startswith("left alone") for line in actions) == 4


def test_recover_dry_run_changes_nothing_and_is_idempotent(tmp_path: Path) -> None:
    _leave(tmp_path, "G" * 12, "out", staging=True, retired="old")
    before = _snapshot(tmp_path)
    planned = recover_destination(tmp_path / "out", dry_run=True)
    assert _snapshot(tmp_path) == before
    assert all(line.startswith("would ") for line in planned)
    done = recover_destination(tmp_path / "out")
    # the same steps, said in the past tense once done
    steps = [(a.action, a.path, a.done) for a in planned]  # type: ignore[attr-defined]
    assert steps == [(a.action, a.path, False) for a in done]  # type: ignore[attr-defined]
    assert all(a.done and not a.startswith("would ") for a in done)  # type: ignore[attr-defined]
    assert recover_destination(tmp_path / "out") == []


def test_recover_leaves_a_running_export_alone(tmp_path: Path) -> None:
    _leave(tmp_path, "H" * 12, "out", staging=True, retired=None)
    fd = os.open(tmp_path / record_name("H" * 12), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        before = _snapshot(tmp_path)
        actions = recover_destination(tmp_path / "out")
        assert _snapshot(tmp_path) == before
        assert "still running" in actions[0]
    finally:
        os.close(fd)


def test_recover_removes_a_torn_record_no_export_holds(tmp_path: Path) -> None:
    """A record is written before its staging folder: one killed before it named its
    destination is listed, explains nothing, and goes when recover finds no export holding it."""
    (tmp_path / record_name("J" * 12)).write_bytes(b"")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert [item.target for item in find_leftovers(fd)] == [None]
    finally:
        os.close(fd)
    assert recover_destination(tmp_path / "out")[0].startswith("removed the record")
    assert os.listdir(tmp_path) == []


def test_recover_leaves_a_torn_record_a_running_export_holds(tmp_path: Path) -> None:
    """An export still writing its record holds it locked: recover leaves it alone."""
    record = tmp_path / record_name("J" * 12)
    record.write_bytes(b"")
    holder = os.open(record, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        assert recover_destination(tmp_path / "out")[0].startswith("left alone")
        assert os.listdir(tmp_path) == [record.name]
    finally:
        os.close(holder)


def test_scan_lists_every_leftover_and_changes_nothing(tmp_path: Path) -> None:
    _leave(tmp_path, "K" * 12, "out", staging=True, retired="old")
    _leave(tmp_path, "L" * 12, None, staging=True, retired=None)
    (tmp_path / ".zeroclaw-export-short").mkdir()  # not a token: not ours
    before = _snapshot(tmp_path)
    lines = scan_leftovers(tmp_path)
    assert _snapshot(tmp_path) == before
    assert len(lines) == 4
    assert sum(f"bundler recover {tmp_path}/out" in line for line in lines) == 3


def test_rename_exchange_works_on_this_filesystem(tmp_path: Path) -> None:
    assert rename_exchange_works(tmp_path) is True
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        (errno.ENOSPC, "free some space"),
        (errno.ENOMEM, "free some memory"),
        (errno.EMFILE, "ulimit -n"),
        (errno.EIO, "check the disk"),
        (errno.EROFS, "check the disk"),
    ],
)
def test_a_failure_before_the_swap_says_what_to_do_about_its_cause(code: int, hint: str) -> None:
    """Out of memory or descriptors is not the disk's fault: the hint says what is."""
    err = io_failure("/x/out.tar", "could not write the bundle", OSError(code, os.strerror(code)))
    assert err.message.startswith("could not write the bundle beside /x/out.tar (")
    assert "the destination is unchanged" in err.message and hint in err.message
