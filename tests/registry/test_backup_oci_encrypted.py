"""Encrypted data-home backups on a registry (04 §5.5, §5.6; specs/oci-artifact.md): ``home
backup --to oci://… --encrypt-to`` pushes the ``NAME.zip.age`` a local encrypted backup is, whole,
as one layer, and ``home restore oci://… --age-identity`` decrypts it only into the restore's
staging, through the real ``docker-registry``, with keys made by the real ``age-keygen`` and
``ssh-keygen`` and the blob opened by the real ``age -d``.

A marker file of random bytes (stored, so a plain zip holds them as they are) lies in the home:
they must never be found in the registry's storage, in ``$TMPDIR``, or beside the restore.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest
from support.agekeys import age_key, found_in, needs, ssh_key
from support.faultinject import (
    Call,
    FaultRun,
    kill_at_each,
    ptrace_unavailable,
    sample,
    slow_sample_count,
    trace_calls,
)
from support.hostile_zips import clean_env, content_state, make_project, run_cli
from support.kit import one_error
from support.registry_server import Registry

from bundler.registry import backup_artifact as bart
from bundler.registry.distribution import Session
from bundler.registry.reference import parse_reference
from bundler.registry.transport import Options

REPOSITORY = "me/backups"
MARKER_BYTES = 96 << 10
AGE = "/usr/bin/age"


class Home:
    """A project whose data home holds the marker, the CLI's environment (its own
    ``$TMPDIR``), and the test's folder."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.project, self.home = make_project(tmp_path)
        user = tmp_path / "user"
        user.mkdir()
        self.env = clean_env(user)
        self.tmpdir = tmp_path / "tmpdir"
        self.tmpdir.mkdir()
        self.env["TMPDIR"] = str(self.tmpdir)
        self.marker = os.urandom(MARKER_BYTES)
        (self.home / "files" / "marker.bin").write_bytes(self.marker)

    def leaked(self, registry: Registry, *restored: Path) -> list[str]:
        """Where the marker is outside the home and the restored homes: the registry's
        storage, ``$TMPDIR`` and every other file of the test's folder."""
        skip = ("project", *(os.path.relpath(path, self.root) for path in restored))
        return [
            *found_in(registry.base / "storage", self.marker),
            *found_in(self.tmpdir, self.marker),
            *found_in(self.root, self.marker, skip=skip),
        ]


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path)


def _push(registry: Registry, home: Home, *extra: str) -> dict[str, object]:
    done = run_cli(
        "home", "backup", "--project", str(home.project), "--to", registry.ref(REPOSITORY),
        "--plain-http", "--json", *extra, env=home.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload: dict[str, object] = json.loads(done.stdout)
    return payload


def _restore(
    registry: Registry, home: Home, pinned: str, target: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "home", "restore", pinned, "--project", str(home.project), "--home", str(target),
        "--plain-http", *extra, env=home.env,
    )  # fmt: skip


def _listed(registry: Registry, home: Home) -> list[dict[str, object]]:
    done = run_cli(
        "home", "backups", "--project", str(home.project), "--to", registry.ref(REPOSITORY),
        "--plain-http", "--json", env=home.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    backups: list[dict[str, object]] = json.loads(done.stdout)["backups"]
    return backups


def _manifest(pinned: str) -> dict[str, object]:
    ref = parse_reference(pinned)
    with Session(ref, Options(plain_http=True)) as session:
        document: dict[str, object] = json.loads(session.get_manifest(ref.target)[0])
    return document


def _layer(pinned: str) -> dict[str, object]:
    layers = _manifest(pinned)["layers"]
    assert isinstance(layers, list) and len(layers) == 1
    layer: dict[str, object] = layers[0]
    return layer


def _blob(registry: Registry, digest: str) -> bytes:
    url = f"http://{registry.host}/v2/{REPOSITORY}/blobs/{digest}"
    with urllib.request.urlopen(url) as answer:
        data: bytes = answer.read()
    return data


def _stored_blob(registry: Registry, digest: str) -> Path:
    """The file the registry's filesystem storage keeps the blob ``digest`` in."""
    hexdigest = digest.split(":", 1)[1]
    return next((registry.base / "storage").rglob(f"blobs/sha256/{hexdigest[:2]}/{hexdigest}/data"))


def _messages(database: Path) -> list[tuple[int, str]]:
    conn = sqlite3.connect(f"file:{database}?mode=ro&immutable=1", uri=True)
    try:
        return list(conn.execute("SELECT id, body FROM msg ORDER BY id"))
    finally:
        conn.close()


def _same_home(original: Path, restored: Path) -> None:
    mine = ("backups", "README.md", "chat.db")  # the database is a snapshot: rows compared
    before = {k: v for k, v in content_state(original).items() if not k.startswith(mine)}
    after = {k: v for k, v in content_state(restored).items() if not k.startswith(mine)}
    assert after == before
    assert _messages(restored / "chat.db") == _messages(original / "chat.db")
    assert not [name for name in os.listdir(restored) if name.startswith(".restore-")]


def test_an_encrypted_registry_backup_round_trips_to_an_age_and_an_ssh_ed25519_recipient(
    registry: Registry, home: Home
) -> None:
    import bundler

    age_identity, age_public = age_key(home.root)
    ssh_identity, ssh_public = ssh_key(home.root)
    pushed = _push(registry, home, "--encrypt-to", age_public, "--encrypt-to", ssh_public)
    assert pushed["encrypted"] is True
    assert pushed["uploaded"] == [bart.ENCRYPTED_TITLE] and pushed["skipped"] == []
    assert str(pushed["backup"]).startswith(registry.ref(REPOSITORY) + ":backup-")
    pinned = str(pushed["pinned"])
    by_age = home.root / "by-age"
    done = _restore(registry, home, pinned, by_age, "--age-identity", str(age_identity), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["reference"] == pinned
    assert json.loads(done.stdout)["entries"] == pushed["entries"]
    _same_home(home.home, by_age)
    # the API does what the CLI does, with the SSH key
    by_ssh = home.root / "by-ssh"
    restored = bundler.restore_from_registry(
        home.project,
        pinned,
        bundler.RegistryRestoreOptions(
            home=by_ssh,
            age_identities=(ssh_identity,),
            registry=bundler.RegistryOptions(plain_http=True),
        ),
    )
    assert restored.reference == pinned
    _same_home(home.home, by_ssh)
    assert os.listdir(home.tmpdir) == []  # the pulled age file is gone


def test_the_api_pushes_an_encrypted_backup_given_its_recipients(
    registry: Registry, home: Home
) -> None:
    import bundler

    _identity, public = age_key(home.root)
    report = bundler.backup_to_registry(
        home.project,
        registry.ref(REPOSITORY),
        bundler.RegistryBackupOptions(
            encrypt_to=(public,), registry=bundler.RegistryOptions(plain_http=True)
        ),
    )
    assert report.encrypted and report.uploaded == [bart.ENCRYPTED_TITLE]
    assert _layer(report.pinned)["mediaType"] == bart.ENCRYPTED_TYPE


def test_the_pushed_blob_is_an_age_file_that_age_d_opens_to_a_zip_unzip_t_accepts(
    registry: Registry, home: Home
) -> None:
    needs("unzip")
    identity, public = age_key(home.root)
    pushed = _push(registry, home, "--encrypt-to", public)
    layer = _layer(str(pushed["pinned"]))
    sealed = home.root / "pulled.zip.age"
    sealed.write_bytes(_blob(registry, str(layer["digest"])))
    assert sealed.read_bytes().startswith(b"age-encryption.org/v1\n")
    plain = home.root / "plain.zip"
    with plain.open("wb") as sink:
        subprocess.run([AGE, "-d", "-i", str(identity), str(sealed)], stdout=sink, check=True)
    tested = subprocess.run(["unzip", "-t", str(plain)], capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout
    with zipfile.ZipFile(plain) as archive:
        assert archive.read("files/marker.bin") == home.marker
        assert json.loads(archive.read("backup.json"))["entries"]
    checked = run_cli("home", "verify-backup", str(plain), env=home.env)
    assert checked.returncode == 0, checked.stderr


def test_the_manifest_of_an_encrypted_backup_tells_nothing_of_what_it_holds(
    registry: Registry, home: Home
) -> None:
    """A plain backup's manifest carries ``backup.json``, part titles and digests, the files'
    bytes and count and the agent; an encrypted one's only its time and the age file's size,
    as a local ``.zip.age``'s name and length do."""
    _identity, public = age_key(home.root)
    pushed = _push(registry, home, "--encrypt-to", public)
    manifest = _manifest(str(pushed["pinned"]))
    assert manifest["artifactType"] == bart.ARTIFACT_TYPE
    assert manifest["config"] == {
        "mediaType": "application/vnd.oci.empty.v1+json",
        "digest": bart.EMPTY_DIGEST,
        "size": 2,
    }
    assert _blob(registry, bart.EMPTY_DIGEST) == b"{}"
    assert manifest["annotations"] == {
        "org.opencontainers.image.created": manifest["annotations"][  # type: ignore[index]
            "org.opencontainers.image.created"
        ]
    }
    layer = _layer(str(pushed["pinned"]))
    assert layer["mediaType"] == bart.ENCRYPTED_TYPE
    assert layer["annotations"] == {"org.opencontainers.image.title": bart.ENCRYPTED_TITLE}
    text = json.dumps(manifest)
    for told in ("marker", "a.txt", "chat.db", "s1", "demo", str(pushed["bytes"])):
        assert told not in text, told
    # and the registry holds no other blob than these (no backup.json, no part)
    stored = (registry.base / "storage").rglob("blobs/sha256/*/*/data")
    expected = {str(pushed["digest"]), str(layer["digest"]), bart.EMPTY_DIGEST}
    assert {path.parent.name for path in stored} == {d.split(":")[1] for d in expected}


def test_no_plain_byte_of_the_home_reaches_the_registry_tmpdir_or_beside_the_restore(
    registry: Registry, home: Home
) -> None:
    identity, public = age_key(home.root)
    pushed = _push(registry, home, "--encrypt-to", public)
    assert home.leaked(registry) == []
    assert os.listdir(home.home / "backups") == []  # the plain zip's private folder is gone
    target = home.root / "restored"
    done = _restore(registry, home, str(pushed["pinned"]), target, "--age-identity", str(identity))
    assert done.returncode == 0, done.stderr
    assert found_in(target, home.marker) == ["files/marker.bin"]
    assert home.leaked(registry, target) == []


def test_the_marker_scan_finds_a_plain_registry_backup_in_the_storage(
    registry: Registry, home: Home
) -> None:
    """The scan above would see a plain backup: the marker is stored as it is."""
    _push(registry, home)
    assert len(found_in(registry.base / "storage", home.marker)) == 1


def test_an_encrypted_push_or_restore_killed_at_any_call_leaves_no_plain_byte_outside_the_home(
    registry: Registry, home: Home
) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    identity, public = age_key(home.root)
    env = {**home.env, "PYTHONDONTWRITEBYTECODE": "1"}
    base = [sys.executable, "-m", "bundler", "home"]
    push = [*base, "backup", "--project", str(home.project), "--to", registry.ref(REPOSITORY)]
    push += ["--plain-http", "--encrypt-to", public]
    syscalls = ["openat", "write", "connect", "unlinkat", "linkat", "rename"]
    done, calls = trace_calls(push, syscalls, env=env, relevant=str(home.root))
    assert done.returncode == 0, done.stderr
    pinned = json.loads(
        run_cli(*push[3:], "--json", env=env).stdout  # a backup the restores below pull
    )["pinned"]
    target = home.root / "restored"

    def check(call: Call, _run: FaultRun) -> None:
        assert home.leaked(registry, target) == [], call.line

    count = slow_sample_count() or 6
    assert kill_at_each(push, sample(calls, count), check, reset=lambda: None, env=env)
    restore = [*base, "restore", pinned, "--project", str(home.project), "--home", str(target)]
    restore += ["--plain-http", "--age-identity", str(identity)]
    done, calls = trace_calls(restore, syscalls, env=env, relevant=str(home.root))
    assert done.returncode == 0, done.stderr

    def reset() -> None:
        run_cli("recover", "--home", str(target), env=env)

    assert kill_at_each(restore, sample(calls, count), check, reset=reset, env=env)


def test_a_wrong_identity_is_refused_exit_3_with_nothing_restored(
    registry: Registry, home: Home
) -> None:
    _identity, public = age_key(home.root)
    other, _ = age_key(home.root, "other.txt")
    pinned = str(_push(registry, home, "--encrypt-to", public)["pinned"])
    target = home.root / "new-home"
    done = _restore(registry, home, pinned, target, "--age-identity", str(other))
    assert done.returncode == 3, done.stderr
    assert one_error(done.stderr), done.stderr
    assert "no identity given is one of its recipients" in done.stderr
    assert pinned.split("@")[0] in done.stderr and str(home.tmpdir) not in done.stderr
    assert not target.exists()
    before = content_state(home.home)
    done = run_cli(
        "home", "restore", pinned, "--project", str(home.project), "--plain-http",
        "--age-identity", str(other), env=home.env,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert content_state(home.home) == before
    assert os.listdir(home.tmpdir) == []


def test_an_encrypted_registry_backup_without_age_identity_is_a_usage_error_before_any_blob(
    registry: Registry, home: Home
) -> None:
    """As for a local ``.zip.age``: exit 2, one line; the manifest says it is encrypted, so
    no blob is pulled. And ``--age-identity`` with a plain backup is the same error as a
    plain zip given one."""
    key, public = age_key(home.root)
    sealed = str(_push(registry, home, "--encrypt-to", public)["pinned"])
    plain = str(_push(registry, home)["pinned"])
    target = home.root / "h"
    for pinned, extra, words in (
        (sealed, (), "is an encrypted backup: give --age-identity"),
        (plain, ("--age-identity", str(key)), "is not an encrypted backup"),
    ):
        mark = registry.mark()
        done = _restore(registry, home, pinned, target, *extra)
        assert done.returncode == 2, done.stderr
        assert one_error(done.stderr), done.stderr
        assert words in done.stderr, done.stderr
        assert not [path for _m, path, _s in registry.requests()[mark:] if "/blobs/" in path]
        assert not target.exists()
    assert os.listdir(home.tmpdir) == []


def test_listing_marks_encrypted_backups_and_prune_removes_them_as_any_backup(
    registry: Registry, home: Home
) -> None:
    _identity, public = age_key(home.root)
    made = [_push(registry, home)]
    made += [_push(registry, home, "--encrypt-to", public) for _ in range(2)]
    listed = _listed(registry, home)
    assert [item["digest"] for item in listed] == [item["digest"] for item in made]
    assert [item["encrypted"] for item in listed] == [False, True, True]
    assert [item["files"] for item in listed][1:] == [None, None]
    assert [item["bytes"] for item in listed][1:] == [None, None]
    assert listed[0]["files"] == made[0]["entries"]
    sealed = _layer(str(made[2]["pinned"]))
    assert listed[2]["size"] == int(sealed["size"]) + 2  # type: ignore[call-overload]
    human = run_cli(
        "home", "backups", "--project", str(home.project), "--to", registry.ref(REPOSITORY),
        "--plain-http", env=home.env,
    )  # fmt: skip
    assert human.returncode == 0, human.stderr
    assert human.stdout.count(", encrypted") == 2, human.stdout
    prune = [
        "home", "prune", "--project", str(home.project), "--to", registry.ref(REPOSITORY),
        "--keep-last", "1", "--plain-http", "--json",
    ]  # fmt: skip
    dry = run_cli(*prune, "--dry-run", env=home.env)
    assert dry.returncode == 0, dry.stderr
    would = [item["digest"] for item in json.loads(dry.stdout)["removed"]]
    assert would == [made[0]["digest"], made[1]["digest"]]
    done = run_cli(*prune, env=home.env)
    assert done.returncode == 0, done.stderr
    assert [item["digest"] for item in json.loads(done.stdout)["removed"]] == would
    assert [item["digest"] for item in _listed(registry, home)] == [made[2]["digest"]]


def test_a_tampered_encrypted_blob_is_refused_exit_3_with_nothing_restored(
    registry: Registry, home: Home
) -> None:
    """The registry serves the age file with one byte changed (its storage edited): the
    download's sha256 refuses it before anything is decrypted."""
    identity, public = age_key(home.root)
    pinned = str(_push(registry, home, "--encrypt-to", public)["pinned"])
    stored = _stored_blob(registry, str(_layer(pinned)["digest"]))
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF
    stored.write_bytes(bytes(data))
    target = home.root / "restored"
    done = _restore(registry, home, pinned, target, "--age-identity", str(identity))
    assert done.returncode == 3, done.stderr
    assert one_error(done.stderr), done.stderr
    assert "sha256" in done.stderr, done.stderr
    assert not target.exists()
    assert os.listdir(home.tmpdir) == []
