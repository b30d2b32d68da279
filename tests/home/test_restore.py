"""home restore and recover --home (04 §5.3), hostile zips (06 §3 S2), through the real CLI."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest
from support import kit
from support.hostile_zips import (
    CASES,
    NUMERIC_MANIFEST_CASES,
    NUMERIC_ZIP_CASES,
    Item,
    base_items,
    build,
    clean_env,
    content_state,
    make_project,
    manifest_for,
    rows,
    run_cli,
    tree_state,
    write_zip,
)

from bundler.errors import InvalidInput, Refused
from bundler.home.backup import backup_home
from bundler.home.restore import restore_home
from bundler.home.restore_journal import (
    STAGING_PREFIX,
    Journal,
    allowed_moves,
    parse_journal,
    plan_moves,
    recover_home,
)
from bundler.home.verify import verify_backup


def env_for(tmp_path: Path) -> dict[str, str]:
    user = tmp_path / "user"
    user.mkdir(exist_ok=True)
    return clean_env(user)


def take_backup(tmp_path: Path, project: Path) -> Path:
    report = backup_home(project, to=tmp_path / "b.zip", environ=env_for(tmp_path))
    return report.path


def restore(tmp_path: Path, project: Path, zip_path: Path, **kw: object) -> object:
    return restore_home(project, zip_path, environ=env_for(tmp_path), **kw)  # type: ignore[arg-type]


def trees(home: Path) -> dict[str, object]:
    return {tree: content_state(home / tree) for tree in ("files", "skills")}


def test_round_trip_restores_files_and_skills_byte_identical(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    expected = trees(home)
    mtimes = {p: p.stat().st_mtime_ns for p in (home / "files").rglob("*") if p.is_file()}
    zip_path = take_backup(tmp_path, project)
    (home / "files" / "a.txt").write_text("changed after the backup")
    (home / "files" / "new.txt").write_text("new")
    done = run_cli(
        "home", "restore", str(zip_path), "--project", str(project), "--json", env=env_for(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["ok"] is True and answer["entries"] == 6
    assert trees(home) == expected
    assert {p: p.stat().st_mtime_ns for p in (home / "files").rglob("*") if p.is_file()} == mtimes
    assert rows(home / "chat.db") == 30
    assert (home / "files.before-restore" / "new.txt").read_text() == "new"
    assert not [n for n in os.listdir(home) if n.startswith(STAGING_PREFIX)]


@pytest.mark.parametrize("sidecar", ["-wal", "-shm", "-journal"])
def test_restore_is_refused_while_a_sidecar_exists_and_forced_keeps_it(
    tmp_path: Path, sidecar: str
) -> None:
    project, home = make_project(tmp_path)
    zip_path = take_backup(tmp_path, project)
    (home / f"chat.db{sidecar}").write_bytes(b"sidecar bytes")
    before = tree_state(home)
    done = run_cli(
        "home", "restore", str(zip_path), "--project", str(project), env=env_for(tmp_path)
    )
    assert done.returncode == 1
    assert f"chat.db{sidecar}" in done.stderr and "--force" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert tree_state(home) == before
    forced = run_cli(
        "home",
        "restore",
        str(zip_path),
        "--project",
        str(project),
        "--force",
        env=env_for(tmp_path),
    )
    assert forced.returncode == 0, forced.stderr
    assert not (home / f"chat.db{sidecar}").exists(), "the new chat.db is placed without sidecars"
    assert (home / f"chat.db.before-restore{sidecar}").read_bytes() == b"sidecar bytes"


def test_before_restore_set_is_kept_for_one_restore(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    first = take_backup(tmp_path, project)
    (home / "files" / "a.txt").write_text("second state")
    second = backup_home(project, to=tmp_path / "c.zip", environ=env_for(tmp_path)).path
    (home / "files" / "a.txt").write_text("third state")
    (home / "chat.db-wal").write_bytes(b"w")
    restore(tmp_path, project, first, force=True)
    assert (home / "files.before-restore" / "a.txt").read_text() == "third state"
    assert (home / "chat.db.before-restore-wal").read_bytes() == b"w"
    assert (home / "files" / "a.txt").read_text() == "alpha\n"
    restore(tmp_path, project, second)
    # the previous set is gone, replaced by what the first restore had put in place
    assert (home / "files.before-restore" / "a.txt").read_text() == "alpha\n"
    assert not (home / "chat.db.before-restore-wal").exists()
    assert (home / "files" / "a.txt").read_text() == "second state"
    assert sorted(n for n in os.listdir(home) if "before-restore" in n) == [
        "chat.db.before-restore",
        "files.before-restore",
        "skills.before-restore",
    ]


def test_restore_into_a_new_home_creates_it_as_a_first_start(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    zip_path = take_backup(tmp_path, project)
    target = tmp_path / "elsewhere" / "new-home"
    done = run_cli(
        "home",
        "restore",
        str(zip_path),
        "--home",
        str(target),
        "--project",
        str(project),
        env=env_for(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert (target / "README.md").is_file() and (target / "backups").is_dir()
    assert trees(target) == trees(home)
    assert rows(target / "chat.db") == 30
    assert not [n for n in os.listdir(target) if "before-restore" in n]


def test_restored_files_never_get_setuid_setgid_sticky_or_group_other_write(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    items = base_items()
    items[2] = Item("files/a.txt", b"x", mode=stat.S_IFREG | 0o7777)
    items[1] = Item("files/", mode=stat.S_IFDIR | 0o7777)
    items[3] = Item("files/notes/", mode=stat.S_IFDIR | 0o7777)
    write_zip(tmp_path / "modes.zip", items, manifest_for(items))
    restore(tmp_path, project, tmp_path / "modes.zip")
    for path in [home / "files", *(home / "files").rglob("*"), *(home / "skills").rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert not mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | 0o022), (path, oct(mode))
    assert stat.S_IMODE((home / "files" / "a.txt").stat().st_mode) == 0o755


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_zip_is_refused_before_anything_changes(tmp_path: Path, case: str) -> None:
    project, home = make_project(tmp_path)
    zip_path, expect = build(case, tmp_path)
    with pytest.raises(InvalidInput) as caught:
        verify_backup(zip_path)
    assert expect in caught.value.message
    before = tree_state(home)
    done = run_cli(
        "home", "restore", str(zip_path), "--project", str(project), env=env_for(tmp_path)
    )
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert expect in lines[0]
    assert "Traceback" not in done.stderr
    assert tree_state(home) == before


@pytest.mark.parametrize("case", sorted(NUMERIC_MANIFEST_CASES) + sorted(NUMERIC_ZIP_CASES))
def test_number_out_of_range_fails_verify_and_restore_with_exit_3(
    tmp_path: Path, case: str
) -> None:
    """An out-of-range number verified, then crashed restore (OverflowError).

    Every number of backup.json and of the zip's records is checked before it is used.
    """
    project, home = make_project(tmp_path)
    zip_path, expect = build(case, tmp_path)
    before = tree_state(home)
    for args in (
        ("home", "verify-backup", str(zip_path)),
        ("home", "restore", str(zip_path), "--project", str(project)),
    ):
        done = run_cli(*args, env=env_for(tmp_path))
        assert done.returncode == 3, (args[1], done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
        assert expect in lines[0] and "Traceback" not in done.stderr
    assert tree_state(home) == before


def test_hostile_zip_json_envelope_names_the_entry(tmp_path: Path) -> None:
    project, _home = make_project(tmp_path)
    zip_path, _expect = build("zip_slip_dotdot_top", tmp_path)
    done = run_cli(
        "home", "restore", str(zip_path), "--project", str(project), "--json", env=env_for(tmp_path)
    )
    assert done.returncode == 3
    answer = json.loads(done.stdout)
    assert answer["ok"] is False and answer["error"]["code"] == 3
    assert answer["error"]["path"] == "../evil.txt"


def test_at_least_25_hostile_zips() -> None:
    assert len(CASES) >= 25


def test_restore_refuses_while_an_interrupted_swap_waits_for_recover(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    zip_path = take_backup(tmp_path, project)
    staging = home / f"{STAGING_PREFIX}abcdefabcdef"
    staging.mkdir()
    # a swap that had begun: only recovery may decide which way it goes
    (staging / "journal.toml").write_text(
        'format = 1\ntoken = "abcdefabcdef"\nstate = "swapping"\nstep = -1\nmoves = []\n'
    )
    with pytest.raises(Refused, match="recover --home"):
        restore(tmp_path, project, zip_path)
    assert len(recover_home(home)) == 1
    assert not staging.exists()
    restore(tmp_path, project, zip_path)


def test_restore_clears_a_dead_restore_that_never_began_its_swap(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    zip_path = take_backup(tmp_path, project)
    (home / f"{STAGING_PREFIX}abcdefabcdef").mkdir()
    report = restore(tmp_path, project, zip_path)
    assert [w for w in report.warnings if "interrupted restore" in w]
    assert not (home / f"{STAGING_PREFIX}abcdefabcdef").exists()


def test_plan_moves_keeps_the_previous_set_until_the_new_state_is_in_place() -> None:
    moves = plan_moves("T", {"chat.db", "chat.db-wal", "files", "files.before-restore"})
    assert moves == [
        ("files.before-restore", ".restore-T/previous/files.before-restore"),
        ("chat.db", "chat.db.before-restore"),
        ("chat.db-wal", "chat.db.before-restore-wal"),
        ("files", "files.before-restore"),
        (".restore-T/chat.db", "chat.db"),
        (".restore-T/files", "files"),
        (".restore-T/skills", "skills"),
    ]
    assert set(moves) <= allowed_moves("T")


def test_journal_round_trips_and_a_planted_move_is_refused() -> None:
    journal = Journal("T", "swapping", 2, plan_moves("T", {"chat.db", "files"}))
    assert parse_journal(journal.render(), "T") == journal
    planted = Journal("T", "swapping", 0, [("chat.db", "../../elsewhere")])
    with pytest.raises(InvalidInput, match="never makes"):
        parse_journal(planted.render(), "T")
    with pytest.raises(InvalidInput, match="not a journal"):
        parse_journal(Journal("T", "swapping", 9, journal.moves).render(), "T")


def _swap_state(
    home: Path, zip_path: Path, stop_after: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stop a real restore's swap before rename ``stop_after`` (0-based) without its in-process
    rollback, leaving the home as a SIGKILL at that point would."""
    from bundler.home import restore as module

    real_rename = module.rename_move
    calls = {"n": 0}

    def crashing(home_fd: int, src: str, dst: str) -> None:
        if calls["n"] == stop_after:
            raise KeyboardInterrupt("simulated crash")
        calls["n"] += 1
        real_rename(home_fd, src, dst)

    with monkeypatch.context() as patch:
        patch.setattr(module, "rename_move", crashing)
        patch.setattr(module, "_roll_back_after_failure", lambda *_args: None)
        with pytest.raises(KeyboardInterrupt):
            restore_home(tmp_path, zip_path, home=home, force=True, environ=env_for(tmp_path))


@pytest.mark.parametrize("stop_after", range(7))  # this home makes 7 renames
def test_recover_after_interrupted_swap_gives_old_or_new_state_whole(
    tmp_path: Path, stop_after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process variant of the crash sweep: the swap stops after N renames (R1's states)."""
    project, home = make_project(tmp_path)
    zip_path = take_backup(tmp_path, project)
    new_state = {"files": trees(home)["files"], "db": rows(home / "chat.db")}
    (home / "files" / "a.txt").write_text("old state")
    (home / "chat.db-wal").write_bytes(b"old wal")
    os.rename(home / "skills", home / "skills.before-restore")  # a previous set exists
    old = content_state(home)
    old_files = content_state(home / "files")
    _swap_state(home, zip_path, stop_after, tmp_path, monkeypatch)
    actions = recover_home(home)
    assert len(actions) == 1
    assert not [n for n in os.listdir(home) if n.startswith(STAGING_PREFIX)]
    if "rolled back" in actions[0]:
        assert content_state(home) == old
        assert content_state(home / "files") == old_files
    else:
        assert "completed" in actions[0]
        assert content_state(home / "files") == new_state["files"]
        assert rows(home / "chat.db") == new_state["db"]
        assert content_state(home / "files.before-restore") == old_files


def test_recover_dry_run_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project, home = make_project(tmp_path)
    zip_path = take_backup(tmp_path, project)
    _swap_state(home, zip_path, 2, tmp_path, monkeypatch)
    before = tree_state(home)
    actions = recover_home(home, dry_run=True)
    assert actions and actions[0].startswith("would roll back")
    assert tree_state(home) == before


def test_restore_zip_listing_is_not_a_zip_path_problem(tmp_path: Path) -> None:
    """A backup written by this tool restores even with an empty files/ and no skills/."""
    project, home = make_project(tmp_path)
    for path in sorted((home / "skills").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (home / "skills").rmdir()
    zip_path = take_backup(tmp_path, project)
    with zipfile.ZipFile(zip_path) as archive:
        assert not any(n.startswith("skills") for n in archive.namelist())
    restore(tmp_path, project, zip_path)
    assert (home / "skills").is_dir() and os.listdir(home / "skills") == []


@pytest.mark.parametrize(
    "where", ["/", "user", "parent-of-user", "link-to-user", "link-to-parent-of-user"]
)
def test_restore_home_that_is_root_or_holds_the_user_home_is_refused(
    tmp_path: Path, where: str
) -> None:
    """By real path too: --home naming a link to the user's home folder (or to a folder above
    it) restored chat.db, files/ and skills/ into the home folder itself."""
    project, _home = make_project(tmp_path)
    zip_path = take_backup(tmp_path, project)
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "to-user").symlink_to(tmp_path / "user")
    (tmp_path / "links" / "to-parent").symlink_to(tmp_path)
    target = {
        "/": Path("/"),
        "user": tmp_path / "user",
        "parent-of-user": tmp_path,
        "link-to-user": tmp_path / "links" / "to-user",
        "link-to-parent-of-user": tmp_path / "links" / "to-parent",
    }[where]
    with pytest.raises(Refused, match="cannot be / |cannot be or contain the user's home folder"):
        restore(tmp_path, project, zip_path, home=target)


def test_restore_home_named_by_its_real_path_when_the_user_home_is_a_link_is_refused(
    tmp_path: Path,
) -> None:
    project, _home = make_project(tmp_path)
    zip_path = take_backup(tmp_path, project)
    real = tmp_path / "real-user"
    real.mkdir()
    (tmp_path / "user-link").symlink_to(real)
    environ = {**env_for(tmp_path), "HOME": str(tmp_path / "user-link")}
    with pytest.raises(Refused, match="cannot be or contain the user's home folder"):
        restore_home(project, zip_path, environ=environ, home=real)


def test_restore_refuses_a_database_outside_the_home(tmp_path: Path) -> None:
    project, _home = make_project(tmp_path)
    zip_path = take_backup(tmp_path, project)
    env = env_for(tmp_path) | {"BXAGENTS_DB": str(tmp_path / "elsewhere" / "other.db")}
    with pytest.raises(Refused, match="BXAGENTS_DB"):
        restore_home(project, zip_path, environ=env)


def test_recover_refuses_a_planted_journal_and_moves_nothing(tmp_path: Path) -> None:
    _project, home = make_project(tmp_path)
    staging = home / f"{STAGING_PREFIX}abcdefabcdef"
    staging.mkdir()
    (staging / "journal.toml").write_bytes(
        Journal("abcdefabcdef", "swapping", 0, [("files", "../../stolen")]).render()
    )
    before = tree_state(home)
    done = run_cli("recover", "--home", str(home), env=env_for(tmp_path))
    assert done.returncode == 3
    assert done.stderr.startswith("error: ") and "never makes" in done.stderr
    assert tree_state(home) == before


def test_restore_of_a_missing_zip_is_refused_exit_1(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    before = tree_state(home)
    done = run_cli(
        "home",
        "restore",
        str(tmp_path / "nope.zip"),
        "--project",
        str(project),
        env=env_for(tmp_path),
    )
    assert done.returncode == 1 and "cannot open" in done.stderr
    assert tree_state(home) == before


def test_restore_that_does_not_fit_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    import subprocess

    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(small)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()[:100]}")
    try:
        project, _home = make_project(tmp_path)
        zip_path = take_backup(tmp_path, project)  # holds more than 128 KiB
        with pytest.raises(Refused, match="free"):
            restore(tmp_path, project, zip_path, home=small / "home")
        assert os.listdir(small) == []
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_zip64_records_and_headers_of_a_sound_backup_pass_the_numeric_checks(
    tmp_path: Path,
) -> None:
    """The end-record and local-header checks read ZIP64 too: a ZIP64 end record (more than
    65,535 entries) and a ZIP64 local header (sizes 0xFFFFFFFF) of a sound backup verify."""
    big = Item("files/zip64-header.txt", b"zip64 local header\n", compress=zipfile.ZIP_STORED)
    folders = [Item(f"files/d{i}/", mode=stat.S_IFDIR | 0o755) for i in range(70_000)]
    items = base_items() + folders
    path = tmp_path / "zip64.zip"
    write_zip(path, items, None)
    with zipfile.ZipFile(path, "a") as archive:
        info = zipfile.ZipInfo(big.name, (2026, 1, 1, 0, 0, 0))
        info.create_system = 3
        info.external_attr = big.mode << 16
        with archive.open(info, "w", force_zip64=True) as sink:
            sink.write(big.data)
        archive.writestr("backup.json", json.dumps(manifest_for([*items, big])))
    raw = path.read_bytes()
    assert b"PK\x06\x06" in raw, "a ZIP64 end record"
    with zipfile.ZipFile(path) as archive:
        at = archive.getinfo(big.name).header_offset
    assert raw[at + 18 : at + 26] == b"\xff" * 8, "ZIP64 sizes in the local header"
    done = run_cli("home", "verify-backup", str(path), env=env_for(tmp_path))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "field",
    ["step = true", "step = 1.0", "step = -2", "format = 2", "format = true", "format = 1.0"],
)
def test_journal_numbers_out_of_range_or_of_another_type_are_refused(field: str) -> None:
    """The restore journal's numbers are checked like backup.json's."""
    journal = Journal("T", "swapping", 1, plan_moves("T", {"chat.db", "files"}))
    key = field.split(" = ")[0]
    lines = [
        line for line in journal.render().decode().splitlines() if not line.startswith(key + " ")
    ]
    planted = "\n".join([field, *lines]) + "\n"
    with pytest.raises(InvalidInput, match="not a journal this tool wrote"):
        parse_journal(planted.encode(), "T")


def test_recover_refuses_a_journal_whose_format_is_true_with_exit_3(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    token = "abcdefabcdef"
    staging = home / f"{STAGING_PREFIX}{token}"
    staging.mkdir()
    journal = Journal(token, "swapping", 0, plan_moves(token, {"chat.db", "files"}))
    text = journal.render().decode().replace("format = 1", "format = true")
    (staging / "journal.toml").write_text(text)
    before = tree_state(home)
    done = run_cli("recover", "--home", str(home), env=env_for(tmp_path))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "journal.toml" in done.stderr and "Traceback" not in done.stderr
    assert tree_state(home) == before


def test_a_restore_while_another_holds_the_home_is_refused_and_recover_leaves_it_alone(
    tmp_path: Path,
) -> None:
    """One restore or recovery of a home at a time (its lock, a flock on the home folder)."""
    project, home = make_project(tmp_path)
    zip_path = take_backup(tmp_path, project)
    before = content_state(home)
    env = env_for(tmp_path)
    holder = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        done = run_cli("home", "restore", str(zip_path), "--home", str(home), env=env)
        assert done.returncode == 1 and "is running; wait for it to finish" in done.stderr, (
            done.stderr
        )
        recovered = run_cli("recover", "--home", str(home), env=env)
        assert recovered.returncode == 0 and "left alone" in recovered.stdout, recovered.stdout
    finally:
        os.close(holder)
    assert content_state(home) == before


def test_two_restores_at_once_never_take_each_others_staging_for_a_dead_one(
    tmp_path: Path,
) -> None:
    """A staging folder exists, unlocked, between its mkdir and its lock: a second restore
    removed it there as 'left by an interrupted restore', and the first failed with ENOENT."""
    project, home = make_project(tmp_path)
    zip_path = take_backup(tmp_path, project)
    (home / "files" / "a.txt").write_text("changed after the backup\n")
    env = env_for(tmp_path)
    command = [*kit.cli_command(), "home", "restore", str(zip_path), "--home", str(home), "--force"]
    for _ in range(8):
        pair = [
            subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        for process in pair:
            _out, err = process.communicate(timeout=120)
            assert "removed" not in err and "Traceback" not in err, err
            assert process.returncode == 0 or (
                process.returncode == 1 and "is running; wait for it to finish" in err
            ), err
        assert not [name for name in os.listdir(home) if name.startswith(".restore-")]
    assert (home / "files" / "a.txt").read_text() != "changed after the backup\n"


def test_a_backup_shares_the_home_with_backups_but_never_with_a_restore_or_recovery(
    tmp_path: Path,
) -> None:
    """A backup during a restore of the same home zipped chat.db from before the swap and
    files/ from after it: a home that never existed, which verify-backup passed. And recover
    --home during a backup removed the backup's temporaries as a dead one's; the backup then
    blamed chat.db. A backup now holds the home's lock shared: refused while a restore or a
    recovery holds it exclusively, and they are refused (recover leaves the home alone) while
    a backup holds it; backups run side by side."""
    project, home = make_project(tmp_path)
    env = env_for(tmp_path)
    zip_path = take_backup(tmp_path, project)
    holder = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # as a restore or a recovery holds it
        refused = run_cli("home", "backup", "--project", str(project), env=env)
        assert refused.returncode == 1 and "is running; wait" in refused.stderr, refused.stderr
        fcntl.flock(holder, fcntl.LOCK_SH)  # as a backup holds it
        again = run_cli("home", "backup", "--project", str(project), env=env)
        assert again.returncode == 0, again.stderr
        restore = run_cli("home", "restore", str(zip_path), "--home", str(home), env=env)
        assert restore.returncode == 1 and "is running; wait" in restore.stderr, restore.stderr
        recovered = run_cli("recover", "--home", str(home), env=env)
        assert recovered.returncode == 0 and "left alone" in recovered.stdout, recovered.stdout
    finally:
        os.close(holder)


def test_a_running_backups_temporaries_are_no_leftovers_a_dead_ones_are(tmp_path: Path) -> None:
    """doctor, recover --home and the next backup named a running backup's temporaries as
    'left by an interrupted backup' (and recover removed them). A backup holds its temporary
    zip locked for its whole run; an unlocked one is a dead run's."""
    from bundler.home.publish import leftover_backups

    _project, home = make_project(tmp_path)
    live = home / "backups" / ".backup-AAAAAAAAAAAA.zip"
    dead = home / "backups" / ".backup-BBBBBBBBBBBB.zip"
    (home / "backups" / ".backup-AAAAAAAAAAAA.db").write_bytes(b"")
    live.write_bytes(b"")
    dead.write_bytes(b"")
    holder = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # as the running backup holds it
        assert leftover_backups(home) == [["backups/.backup-BBBBBBBBBBBB.zip"]]
        recovered = run_cli("recover", "--home", str(home), env=env_for(tmp_path))
        assert recovered.returncode == 0, recovered.stderr
        assert live.exists() and not dead.exists(), recovered.stdout
    finally:
        os.close(holder)
    assert len(leftover_backups(home)) == 1  # the unlocked run's .db and .zip, together


def _folder_modes(home: Path) -> dict[str, int]:
    folders = [home / tree for tree in ("files", "skills")]
    folders += [p for tree in folders for p in tree.rglob("*") if p.is_dir()]
    return {str(p.relative_to(home)): stat.S_IMODE(p.lstat().st_mode) for p in folders}


def test_restore_into_a_new_home_gives_back_the_folder_modes_the_backup_recorded(
    tmp_path: Path,
) -> None:
    """The trees' own folders too: ``files/`` 0755 and ``skills/`` 0750 come back as they were
    backed up, not as the staging folder made them."""
    project, home = make_project(tmp_path)
    (home / "files" / "shared").mkdir()
    (home / "files" / "shared" / "x.txt").write_bytes(b"x")
    (home / "skills" / "private").mkdir()
    os.chmod(home / "files", 0o755)
    os.chmod(home / "files" / "shared", 0o750)
    os.chmod(home / "skills", 0o750)
    os.chmod(home / "skills" / "private", 0o700)
    env = env_for(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    made = run_cli("home", "backup", "--project", str(project), "--to", str(out), env=env)
    assert made.returncode == 0, made.stderr
    (zip_path,) = out.iterdir()
    target = tmp_path / "new-home"
    done = run_cli("home", "restore", str(zip_path), "--home", str(target), env=env)
    assert done.returncode == 0, done.stderr
    before = _folder_modes(home)
    assert before["files"] == 0o755 and before["skills"] == 0o750, before
    assert _folder_modes(target) == before
