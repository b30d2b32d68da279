"""Encrypted backups (04 §5.6): ``home backup --encrypt-to``, and ``restore``, ``verify-backup``,
``backups`` and ``prune`` of ``NAME.zip.age``, through the real CLI, with keys made by the real
``age-keygen`` and ``ssh-keygen`` and files checked by the real ``age -d`` (Debian's).

A marker file of random bytes (stored, so its bytes appear as they are in a plain zip) lies in
the home: its bytes must never be found outside the home and the restore's own staging.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import zipfile
from pathlib import Path

from support.agekeys import age_key, backup_cli, found_in, needs, setup, ssh_key
from support.hostile_zips import (
    content_state,
    hostile_age_backups,
    run_cli,
    tree_state,
)
from support.kit import Terminal, one_error

AGE = "/usr/bin/age"


def messages(database: Path) -> list[tuple[int, str]]:
    conn = sqlite3.connect(f"file:{database}?mode=ro&immutable=1", uri=True)
    try:
        return list(conn.execute("SELECT id, body FROM msg ORDER BY id"))
    finally:
        conn.close()


def test_encrypted_backup_round_trips_with_age_identity(tmp_path: Path) -> None:
    project, home, env, marker = setup(tmp_path)
    key, public = age_key(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    sealed = backup_cli(project, env, "--to", str(out), "--encrypt-to", public)
    assert sealed.parent == out and sealed.name.endswith(".zip.age")
    assert sealed.name.startswith("backup-")
    assert sealed.read_bytes().startswith(b"age-encryption.org/v1\n")
    assert sealed.stat().st_mode & 0o777 == 0o600
    assert os.listdir(out) == [sealed.name]
    target = tmp_path / "restored"
    done = run_cli(
        "home", "restore", str(sealed), "--home", str(target), "--age-identity", str(key), env=env
    )
    assert done.returncode == 0, done.stderr
    mine = ("backups", "README.md", "chat.db")  # the database is a snapshot: rows compared
    original = {k: v for k, v in content_state(home).items() if not k.startswith(mine)}
    restored = {k: v for k, v in content_state(target).items() if not k.startswith(mine)}
    assert restored == original
    assert messages(target / "chat.db") == messages(home / "chat.db")
    assert (target / "files" / "marker.bin").read_bytes() == marker
    assert not [n for n in os.listdir(target) if n.startswith(".restore-")]


def test_age_d_of_the_file_gives_the_plain_zip(tmp_path: Path) -> None:
    project, _home, env, marker = setup(tmp_path)
    key, public = age_key(tmp_path)
    sealed = backup_cli(project, env, "--to", str(tmp_path / "b.zip.age"), "--encrypt-to", public)
    plain = tmp_path / "x.zip"
    with plain.open("wb") as sink:
        subprocess.run([AGE, "-d", "-i", str(key), str(sealed)], stdout=sink, check=True)
    needs("unzip")
    tested = subprocess.run(["unzip", "-t", str(plain)], capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout
    with zipfile.ZipFile(plain) as archive:
        assert archive.read("files/marker.bin") == marker
    # and the plain zip is a sound backup in its own right
    checked = run_cli("home", "verify-backup", str(plain), env=env)
    assert checked.returncode == 0, checked.stderr


def test_ssh_recipients_and_recipients_file_each_open_it(tmp_path: Path) -> None:
    project, _home, env, _marker = setup(tmp_path)
    ed_key, ed_public = ssh_key(tmp_path)
    rsa_key, rsa_public = ssh_key(tmp_path, "id_rsa", "rsa")
    age_identity, age_public = age_key(tmp_path)
    listed = tmp_path / "recipients.txt"
    listed.write_text(f"# the team\n{rsa_public}\n\n{age_public}\n")
    sealed = backup_cli(
        project, env, "--to", str(tmp_path / "b.zip.age"), "--encrypt-to", ed_public,
        "--encrypt-to", f"@{listed}",
    )  # fmt: skip
    for identity in (ed_key, rsa_key, age_identity):
        done = run_cli(
            "home", "verify-backup", str(sealed), "--age-identity", str(identity), env=env
        )
        assert done.returncode == 0, (identity.name, done.stderr)
        plain = subprocess.run([AGE, "-d", "-i", str(identity), str(sealed)], capture_output=True)
        assert plain.returncode == 0 and plain.stdout.startswith(b"PK\x03\x04")


def test_no_plain_byte_reaches_the_destination_or_tmpdir(tmp_path: Path) -> None:
    project, home, env, marker = setup(tmp_path)
    key, public = age_key(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    tmpdir = Path(env["TMPDIR"])
    sealed = backup_cli(project, env, "--to", str(out), "--encrypt-to", public)
    assert found_in(out, marker) == [] and found_in(tmpdir, marker) == []
    # the home's own backups/ holds nothing left over either
    assert os.listdir(home / "backups") == []
    done = run_cli("home", "verify-backup", str(sealed), "--age-identity", str(key), env=env)
    assert done.returncode == 0, done.stderr
    assert os.listdir(out) == [sealed.name]
    target = tmp_path / "restored"
    done = run_cli(
        "home", "restore", str(sealed), "--home", str(target), "--age-identity", str(key), env=env
    )
    assert done.returncode == 0, done.stderr
    assert found_in(out, marker) == [] and found_in(tmpdir, marker) == []
    assert found_in(target, marker) == ["files/marker.bin"]
    assert found_in(tmp_path, marker, skip=("project", "restored")) == []


def test_the_plain_zip_in_the_destination_is_a_plain_backup_the_marker_test_finds(
    tmp_path: Path,
) -> None:
    """The scan above would find a plain backup: the marker is stored as it is."""
    project, _home, env, marker = setup(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    backup_cli(project, env, "--to", str(out))
    assert len(found_in(out, marker)) == 1


def test_wrong_identity_is_one_error_line_exit_3_and_nothing_written(tmp_path: Path) -> None:
    project, home, env, _marker = setup(tmp_path)
    _key, public = age_key(tmp_path)
    other, _ = age_key(tmp_path, "other.txt")
    sealed = backup_cli(project, env, "--to", str(tmp_path / "b.zip.age"), "--encrypt-to", public)
    before = tree_state(tmp_path)
    target = tmp_path / "new-home"
    for args in (
        ("home", "restore", str(sealed), "--home", str(target)),
        ("home", "restore", str(sealed), "--project", str(project)),
        ("home", "verify-backup", str(sealed)),
    ):
        done = run_cli(*args, "--age-identity", str(other), env=env)
        assert done.returncode == 3, (args, done.stderr)
        assert one_error(done.stderr), done.stderr
        assert "no identity given is one of its recipients" in done.stderr
        assert tree_state(tmp_path) == before, args
    assert not target.exists()
    assert (home / "files" / "a.txt").read_text() == "alpha\n"


def test_encrypted_backup_without_identity_and_plain_with_one_are_usage_errors(
    tmp_path: Path,
) -> None:
    project, _home, env, _marker = setup(tmp_path)
    key, public = age_key(tmp_path)
    sealed = backup_cli(project, env, "--to", str(tmp_path / "b.zip.age"), "--encrypt-to", public)
    plain = backup_cli(project, env, "--to", str(tmp_path / "b.zip"))
    before = tree_state(tmp_path)
    for args in (
        ("home", "restore", str(sealed), "--home", str(tmp_path / "h")),
        ("home", "verify-backup", str(sealed)),
        ("home", "restore", str(plain), "--home", str(tmp_path / "h"), "--age-identity", str(key)),
        ("home", "verify-backup", str(plain), "--age-identity", str(key)),
        ("home", "backup", "--project", str(project), "--age-identity", str(key)),
        ("home", "backup", "--project", str(project), "--to", str(tmp_path / "c.zip"),
         "--encrypt-to", public),
        ("home", "backup", "--project", str(project), "--encrypt-to", str(key)),
        ("home", "backup", "--project", str(project), "--to", str(tmp_path / "c.zip.age")),
        ("home", "backup", "--project", str(project), "--encrypt-to", "age1notakey"),
    ):  # fmt: skip
        done = run_cli(*args, env=env)
        assert done.returncode == 2, (args, done.stderr)
        assert one_error(done.stderr), done.stderr
    assert tree_state(tmp_path) == before


def test_identity_given_as_a_secret_key_never_reaches_the_error(tmp_path: Path) -> None:
    project, _home, env, _marker = setup(tmp_path)
    key, _public = age_key(tmp_path)
    secret = next(
        line for line in key.read_text().splitlines() if line.startswith("AGE-SECRET-KEY-")
    )
    done = run_cli("home", "backup", "--project", str(project), "--encrypt-to", secret, env=env)
    assert done.returncode == 2 and one_error(done.stderr)
    assert secret not in done.stderr and secret[16:40] not in done.stderr


def test_hostile_encrypted_backups_are_refused_with_nothing_written(tmp_path: Path) -> None:
    project, _home, env, _marker = setup(tmp_path)
    key, public = age_key(tmp_path)
    sealed = backup_cli(project, env, "--to", str(tmp_path / "b.zip.age"), "--encrypt-to", public)
    cases = hostile_age_backups(sealed.read_bytes())
    folder = tmp_path / "hostile"
    folder.mkdir()
    target = tmp_path / "target"
    for name, data in cases.items():
        bad = folder / f"backup-20260101-000000-{len(os.listdir(folder)) + 1}.zip.age"
        bad.write_bytes(data)
        # damage only a key finds is found after the decryption, into the staging of a home the
        # restore made: both removed, the parent's time changed (content_state has no times)
        before = content_state(tmp_path)
        for args in (
            ("home", "restore", str(bad), "--home", str(target)),
            ("home", "verify-backup", str(bad)),
        ):
            done = run_cli(*args, "--age-identity", str(key), env=env)
            if name in ("listed:garbage", "listed:zip-renamed"):
                # not an age file at all: read as a zip, refused as one, never decrypted
                assert done.returncode in (2, 3), (name, args, done.stderr)
            else:
                assert done.returncode == 3, (name, args, done.stderr)
            assert one_error(done.stderr), (name, done.stderr)
            assert content_state(tmp_path) == before, (name, args)
        assert not target.exists()
        bad.unlink()
    # listed without a key: the header and length tell these from a backup
    for data in cases.values():
        (folder / f"backup-20260101-000000-{len(os.listdir(folder)) + 1}.zip.age").write_bytes(data)
    shutil.copy(sealed, folder / "backup-20270101-000000.zip.age")
    done = run_cli("home", "backups", "--to", str(folder), "--json", env=env)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)["backups"]
    refused = [n for n in cases if n.startswith("listed:")]
    assert len(listed) == len(cases) - len(refused) + 1
    assert done.stdout.count("is not a backup this tool reads") == len(refused)
    # with the key, the damaged ones that looked whole fail the check
    done = run_cli(
        "home", "backups", "--to", str(folder), "--verify", "--age-identity", str(key), "--json",
        env=env,
    )  # fmt: skip
    checked = {Path(b["backup"]).name: b["verified"] for b in json.loads(done.stdout)["backups"]}
    assert checked.pop("backup-20270101-000000.zip.age") is True
    assert checked and set(checked.values()) == {False}


def test_identity_file_that_is_huge_a_fifo_or_a_link_to_one_is_refused(tmp_path: Path) -> None:
    project, _home, env, _marker = setup(tmp_path)
    key, public = age_key(tmp_path)
    sealed = backup_cli(project, env, "--to", str(tmp_path / "b.zip.age"), "--encrypt-to", public)
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as sink:
        sink.truncate(64 << 20)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "to-huge").symlink_to(huge)
    (tmp_path / "to-fifo").symlink_to(fifo)
    (tmp_path / "to-zero").symlink_to("/dev/zero")
    before = tree_state(tmp_path)
    for identity in ("huge.txt", "fifo", "to-huge", "to-fifo", "to-zero"):
        done = run_cli(
            "home", "restore", str(sealed), "--home", str(tmp_path / "h"),
            "--age-identity", str(tmp_path / identity), env=env,
        )  # fmt: skip
        assert done.returncode == 3, (identity, done.stderr)
        assert one_error(done.stderr), done.stderr
        assert tree_state(tmp_path) == before
    # a link to a real key is followed, as age and ssh follow one
    (tmp_path / "to-key").symlink_to(key)
    done = run_cli(
        "home", "verify-backup", str(sealed), "--age-identity", str(tmp_path / "to-key"), env=env
    )
    assert done.returncode == 0, done.stderr


def test_backups_lists_and_prune_removes_encrypted_backups(tmp_path: Path) -> None:
    project, home, env, _marker = setup(tmp_path)
    key, public = age_key(tmp_path)
    made = [backup_cli(project, env, "--encrypt-to", public) for _ in range(2)]
    made.append(backup_cli(project, env, "--full"))
    (home / "backups" / "backup-20200101-000000.zip.age").write_bytes(b"not mine")
    (home / "backups" / "notes.zip.age").write_bytes(made[0].read_bytes())
    done = run_cli("home", "backups", "--project", str(project), "--json", env=env)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)["backups"]
    assert [Path(b["backup"]) for b in listed] == made
    assert [b["encrypted"] for b in listed] == [True, True, False]
    assert [b["files"] for b in listed][:2] == [None, None] and listed[2]["files"] > 0
    assert [b["verified"] for b in listed] == [None, None, None]
    assert "backup-20200101-000000.zip.age is not a backup this tool reads" in done.stdout
    verified = run_cli(
        "home", "backups", "--project", str(project), "--verify", "--age-identity", str(key),
        "--json", env=env,
    )  # fmt: skip
    rows = json.loads(verified.stdout)["backups"]
    assert [b["verified"] for b in rows] == [True, True, True]
    assert rows[0]["files"] == rows[2]["files"]
    unkeyed = run_cli("home", "backups", "--project", str(project), "--verify", env=env)
    assert unkeyed.returncode == 0 and "give --age-identity to verify it" in unkeyed.stderr
    pruned = run_cli("home", "prune", "--project", str(project), "--keep-last", "1", env=env)
    assert pruned.returncode == 0, pruned.stderr
    assert sorted(os.listdir(home / "backups")) == sorted(
        [made[2].name, "backup-20200101-000000.zip.age", "notes.zip.age"]
    )


def test_an_encrypted_base_is_reused_only_with_its_identity(tmp_path: Path) -> None:
    project, home, env, marker = setup(tmp_path)
    key, public = age_key(tmp_path)
    backup_cli(project, env, "--encrypt-to", public)
    done = run_cli(
        "home", "backup", "--project", str(project), "--encrypt-to", public, "--json", env=env
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["reused"] == 0
    assert "is encrypted and is not used as the base" in done.stdout
    done = run_cli(
        "home", "backup", "--project", str(project), "--encrypt-to", public,
        "--age-identity", str(key), "--json", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["reused"] == report["entries"]
    assert Path(report["base"]).parent == home / "backups"
    assert Path(report["base"]).name.endswith(".zip.age")
    assert not [n for n in os.listdir(home / "backups") if n.startswith(".")]
    checked = run_cli(
        "home", "verify-backup", report["backup"], "--age-identity", str(key), env=env
    )
    assert checked.returncode == 0, checked.stderr
    assert found_in(Path(env["TMPDIR"]), marker) == []


def test_a_passphrase_protected_ssh_identity_is_asked_for_on_a_terminal_only(
    tmp_path: Path,
) -> None:
    project, home, env, marker = setup(tmp_path)
    needs("ssh-keygen")
    key = tmp_path / "id_locked"
    passphrase = "correct horse battery"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(key)],
        check=True,
        capture_output=True,
    )
    public = (tmp_path / "id_locked.pub").read_text().strip()
    sealed = backup_cli(project, env, "--to", str(tmp_path / "b.zip.age"), "--encrypt-to", public)
    target = tmp_path / "restored"
    args = ["home", "restore", str(sealed), "--home", str(target), "--age-identity", str(key)]
    blind = run_cli(*args, env=env)
    assert blind.returncode == 1 and one_error(blind.stderr), blind.stderr
    assert "no terminal to ask" in blind.stderr and not target.exists()
    with Terminal(args, env=env) as tty:
        tty.answer(b"passphrase for ", f"{passphrase}\n".encode())
        code, _out, err = tty.finish()
    assert code == 0, err
    assert passphrase.encode() not in err and passphrase.encode() not in tty.screen
    assert (target / "files" / "marker.bin").read_bytes() == marker
    assert found_in(Path(env["TMPDIR"]), marker) == []
