"""Data-home backups on a registry (04 §5.5, specs/oci-artifact.md): ``home backup --to oci://``
pushes one layer per part, a part unchanged since is not uploaded again, ``home backups``
lists the backups, ``home prune`` deletes what the retention rules do not keep (and nothing a
kept tag names), and ``home restore oci://…`` restores byte for byte, refusing, with nothing
restored, what a registry serves that is not the backup."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from support.faultinject import (
    Call,
    FaultRun,
    kill_at_each,
    ptrace_unavailable,
    sample,
    slow_sample_count,
    trace_calls,
)
from support.hostile_registry import (
    HOSTILE_BACKUP_ARTIFACTS,
    HOSTILE_TAG_NAMES,
    REPO,
    BuiltBackup,
    FakeRegistry,
    build_backup,
    send,
)
from support.hostile_zips import clean_env, content_state, make_project, run_cli, tree_state
from support.kit import one_error
from support.registry_server import Registry

from bundler.registry.distribution import Session
from bundler.registry.reference import parse_reference
from bundler.registry.transport import Options

REPOSITORY = "me/backups"


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A project, its data home, and the environment the CLI runs with (a private TMPDIR)."""
    made_project, home = make_project(tmp_path)
    user = tmp_path / "user"
    user.mkdir()
    env = clean_env(user)
    private = tmp_path / "tmp"
    private.mkdir()
    env["TMPDIR"] = str(private)
    return made_project, home, env


def _backup(registry: Registry, project: Path, env: dict[str, str]) -> dict[str, object]:
    done = run_cli(
        "home", "backup", "--project", str(project), "--to", registry.ref(REPOSITORY),
        "--plain-http", "--json", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload: dict[str, object] = json.loads(done.stdout)
    return payload


def _listed(registry: Registry, project: Path, env: dict[str, str]) -> list[dict[str, object]]:
    done = run_cli(
        "home", "backups", "--project", str(project), "--to", registry.ref(REPOSITORY),
        "--plain-http", "--json", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    backups: list[dict[str, object]] = json.loads(done.stdout)["backups"]
    return backups


def _trees(home: Path) -> dict[str, object]:
    """The home's files and skills, bytes, modes and times, as restore must give them back."""
    return {tree: tree_state(home / tree) for tree in ("files", "skills")}


def _without_root_times(trees: dict[str, object]) -> dict[str, object]:
    """Folder times are not restored (a restore makes its folders): files' are. The trees'
    own folders are made as a first start makes them (0700), as from a backup zip."""
    out: dict[str, object] = {}
    for tree, state in trees.items():
        assert isinstance(state, dict)
        out[tree] = {
            path: entry if entry[0] != "dir" else entry[:3]
            for path, entry in state.items()
            if path != "."
        }
    return out


def test_a_backup_pushed_and_restored_by_digest_gives_the_home_back_byte_for_byte(
    registry: Registry, project: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    made_project, home, env = project
    (home / "files" / "link").symlink_to("a.txt")  # never carried, and said so
    pushed = _backup(registry, made_project, env)
    assert pushed["left_out"]["symlinks"] == 1  # type: ignore[index]
    (home / "files" / "link").unlink()
    pinned = str(pushed["pinned"])
    assert pinned.startswith(registry.ref(REPOSITORY) + "@sha256:")
    assert str(pushed["backup"]).startswith(registry.ref(REPOSITORY) + ":backup-")
    assert sorted(pushed["uploaded"]) == ["chat.db", "files", "skills", "skills/s1"]  # type: ignore[arg-type]
    # the same home backed up to a zip: the database snapshot restore must give back
    local = tmp_path / "local.zip"
    done = run_cli("home", "backup", "--project", str(made_project), "--to", str(local), env=env)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(local) as archive:
        snapshot = archive.read("chat.db")

    target = tmp_path / "restored"
    done = run_cli(
        "home", "restore", pinned, "--project", str(made_project), "--home", str(target),
        "--plain-http", "--json", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["reference"] == pinned
    assert payload["entries"] == pushed["entries"]
    assert _without_root_times(_trees(target)) == _without_root_times(_trees(home))
    assert (target / "chat.db").read_bytes() == snapshot
    assert os.listdir(env["TMPDIR"]) == []  # the pulled parts and the zip are gone


def test_a_second_backup_with_one_changed_file_uploads_only_that_part(
    registry: Registry, project: tuple[Path, Path, dict[str, str]]
) -> None:
    made_project, home, env = project
    _backup(registry, made_project, env)
    (home / "files" / "a.txt").write_text("changed\n")
    mark = registry.mark()
    second = _backup(registry, made_project, env)
    assert second["uploaded"] == ["files"]
    assert sorted(second["skipped"]) == ["chat.db", "skills", "skills/s1"]  # type: ignore[arg-type]
    # the registry's own log: two blobs stored, the new backup.json and the files part
    uploads = registry.uploads_since(mark)
    ref = parse_reference(str(second["pinned"]))
    with Session(ref, Options(plain_http=True)) as session:
        manifest = json.loads(session.get_manifest(ref.target)[0])
    files_digest = next(
        layer["digest"]
        for layer in manifest["layers"]
        if layer["annotations"]["org.opencontainers.image.title"] == "files"
    )
    sent = sorted(path.rsplit("digest=", 1)[1].replace("%3A", ":") for path in uploads)
    assert sent == sorted([manifest["config"]["digest"], files_digest])


def test_backups_lists_each_backup_with_its_time_bytes_and_files_oldest_first(
    registry: Registry, project: tuple[Path, Path, dict[str, str]]
) -> None:
    made_project, home, env = project
    first = _backup(registry, made_project, env)
    (home / "files" / "new.txt").write_text("one more\n")
    second = _backup(registry, made_project, env)
    listed = _listed(registry, made_project, env)
    assert [item["digest"] for item in listed] == [first["digest"], second["digest"]]
    assert [item["files"] for item in listed] == [first["entries"], second["entries"]]
    assert [item["bytes"] for item in listed] == [first["bytes"], second["bytes"]]
    assert all(str(item["tag"]).startswith("backup-") for item in listed)
    assert listed[0]["created_at"] <= listed[1]["created_at"]  # type: ignore[operator]
    human = run_cli(
        "home", "backups", "--project", str(made_project), "--to", registry.ref(REPOSITORY),
        "--plain-http", env=env,
    )  # fmt: skip
    assert human.returncode == 0, human.stderr
    assert str(listed[1]["tag"]) in human.stdout


def test_restore_by_tag_names_the_digest_to_pin_and_the_api_does_what_the_cli_does(
    registry: Registry, project: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    import bundler

    made_project, home, env = project
    plain = bundler.RegistryOptions(plain_http=True)
    pushed = bundler.backup_to_registry(
        made_project,
        registry.ref(REPOSITORY),
        bundler.RegistryBackupOptions(registry=plain),
    )
    listing = bundler.registry_backups(registry.ref(REPOSITORY), plain)
    assert [item.digest for item in listing.backups] == [pushed.digest]
    done = run_cli(
        "home", "restore", pushed.reference, "--project", str(made_project), "--home",
        str(tmp_path / "by-tag"), "--plain-http", "--json", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["reference"] == pushed.pinned
    assert any(pushed.pinned in warning for warning in payload["warnings"])
    restored = bundler.restore_from_registry(
        made_project,
        pushed.pinned,
        bundler.RegistryRestoreOptions(home=tmp_path / "by-api", registry=plain),
    )
    assert restored.restore.entries == pushed.entries
    assert (tmp_path / "by-api" / "chat.db").read_bytes() == (
        tmp_path / "by-tag" / "chat.db"
    ).read_bytes()
    kept = bundler.prune_registry_backups(
        registry.ref(REPOSITORY),
        bundler.RegistryPruneOptions(keep_last=1, dry_run=True, registry=plain),
    )
    assert kept.removed == [] and [item.digest for item, _why in kept.kept] == [pushed.digest]


def _tag_alias(registry: Registry, source_tag: str, alias: str) -> None:
    """Put the manifest ``source_tag`` names under ``alias`` too (one manifest, two tags)."""
    ref = parse_reference(registry.ref(f"{REPOSITORY}:{source_tag}"))
    with Session(ref, Options(plain_http=True), push=True) as session:
        data, _media = session.get_manifest(source_tag)
        session.put_manifest(alias, data)


def test_prune_dry_run_lists_what_the_policy_removes_and_the_run_removes_only_that(
    registry: Registry, project: tuple[Path, Path, dict[str, str]]
) -> None:
    made_project, home, env = project
    pushed = []
    for n in range(3):
        (home / "files" / f"n{n}.txt").write_text(f"{n}\n")
        pushed.append(_backup(registry, made_project, env))
    tags = [str(p["backup"]).rsplit(":", 1)[1] for p in pushed]
    # the oldest backup under a second tag: both go, one manifest deleted
    _tag_alias(registry, tags[0], "backup-20000101-000000")
    # the newest under a second tag that sorts as old: its manifest is kept, so is the tag
    _tag_alias(registry, tags[2], "backup-20000101-000001")
    listed = _listed(registry, made_project, env)
    assert len(listed) == 5
    prune = [
        "home", "prune", "--project", str(made_project), "--to", registry.ref(REPOSITORY),
        "--keep-last", "2", "--plain-http", "--json",
    ]  # fmt: skip
    dry = run_cli(*prune, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert planned["dry_run"] is True
    would = sorted(str(item["tag"]) for item in planned["removed"])
    assert would == sorted([tags[0], "backup-20000101-000000"])
    assert len(_listed(registry, made_project, env)) == 5  # the dry run changed nothing

    done = run_cli(*prune, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert sorted(str(item["tag"]) for item in report["removed"]) == would
    left = sorted(str(item["tag"]) for item in _listed(registry, made_project, env))
    # the newest backup's second tag sorts as the oldest, and stays with its manifest
    assert left == sorted([tags[1], tags[2], "backup-20000101-000001"])


def test_a_backup_never_moves_a_tag_another_backup_took_while_its_parts_were_uploading(
    registry: Registry, project: tuple[Path, Path, dict[str, str]]
) -> None:
    """Two machines backing up to one repository at the same second of a schedule pick the
    same tag: the one whose parts take longer must not store its manifest over the other's
    (that backup would lose its only tag). Here the other backup's manifest is stored under
    the tag the moment this push's first blob is in, while a 48 MiB part is still on its way."""
    import threading
    import urllib.request

    from bundler.registry import backup_artifact as bart

    made_project, home, env = project
    first = _backup(registry, made_project, env)
    first_ref = parse_reference(str(first["pinned"]))
    (home / "files" / "big.bin").write_bytes(os.urandom(48 << 20))
    mark = registry.mark()
    taken: list[str] = []

    def take_the_tag() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not registry.uploads_since(mark):
            time.sleep(0.005)
        digest = registry.uploads_since(mark)[0].rsplit("digest=", 1)[1].replace("%3A", ":")
        url = f"http://{registry.host}/v2/{REPOSITORY}/blobs/{digest}"
        with urllib.request.urlopen(url) as answer:  # the index, uploaded first
            created = json.loads(answer.read())["created_at"]
        tag = bart.backup_tag(created)
        with Session(first_ref, Options(plain_http=True), push=True) as session:
            data, _media = session.get_manifest(str(first["digest"]))
            session.put_manifest(tag, data)
        taken.append(tag)

    thief = threading.Thread(target=take_the_tag)
    thief.start()
    second = _backup(registry, made_project, env)
    thief.join()
    assert taken, "the other backup never took a tag"
    second_tag = str(second["backup"]).rsplit(":", 1)[1]
    assert second_tag != taken[0]
    by_tag = {str(item["tag"]): item["digest"] for item in _listed(registry, made_project, env)}
    assert by_tag[taken[0]] == first["digest"]
    assert by_tag[second_tag] == second["digest"]


def test_prune_never_deletes_a_backup_that_a_tag_no_backup_made_also_names(
    registry: Registry, project: tuple[Path, Path, dict[str, str]]
) -> None:
    """Deleting a manifest deletes every tag naming it: a backup the user also tagged by
    hand (``keep-forever``) would go with its own tag, so prune leaves it, and says why."""
    made_project, home, env = project
    pushed = []
    for n in range(3):
        (home / "files" / f"n{n}.txt").write_text(f"{n}\n")
        pushed.append(_backup(registry, made_project, env))
    tags = [str(p["backup"]).rsplit(":", 1)[1] for p in pushed]
    _tag_alias(registry, tags[0], "keep-forever")
    prune = [
        "home", "prune", "--project", str(made_project), "--to", registry.ref(REPOSITORY),
        "--keep-last", "1", "--plain-http", "--json",
    ]  # fmt: skip
    dry = run_cli(*prune, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert [item["tag"] for item in json.loads(dry.stdout)["removed"]] == [tags[1]]
    done = run_cli(*prune, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [item["tag"] for item in report["removed"]] == [tags[1]]
    assert any(tags[0] in w and "keep-forever" in w for w in report["warnings"]), report
    left = sorted(str(item["tag"]) for item in _listed(registry, made_project, env))
    assert left == sorted([tags[0], tags[2]])
    ref = parse_reference(registry.ref(f"{REPOSITORY}:keep-forever"))
    with Session(ref, Options(plain_http=True)) as session:
        assert session.manifest_digest("keep-forever") == pushed[0]["digest"]


def test_prune_on_a_registry_that_refuses_deletion_is_one_line_exit_1_nothing_removed(
    tmp_path: Path, project: tuple[Path, Path, dict[str, str]]
) -> None:
    made_project, home, env = project
    registry = Registry(tmp_path / "no-delete")
    config = registry.write_config()
    config.write_text(config.read_text().replace("enabled: true", "enabled: false"))
    registry.start()
    try:
        for n in range(2):
            (home / "files" / f"n{n}.txt").write_text(f"{n}\n")
            _backup(registry, made_project, env)
        before = _listed(registry, made_project, env)
        done = run_cli(
            "home", "prune", "--project", str(made_project), "--to", registry.ref(REPOSITORY),
            "--keep-last", "1", "--plain-http", env=env,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        assert one_error(done.stderr), done.stderr
        assert "does not allow deleting" in done.stderr
        assert "nothing was removed" in done.stderr
        assert _listed(registry, made_project, env) == before
    finally:
        registry.kill()


def test_backup_to_a_registry_refuses_base_full_and_a_tag(
    registry: Registry, project: tuple[Path, Path, dict[str, str]]
) -> None:
    made_project, _home, env = project
    mark = registry.mark()
    for extra in (["--full"], ["--base", "x.zip"]):
        done = run_cli(
            "home", "backup", "--project", str(made_project), "--to", registry.ref(REPOSITORY),
            "--plain-http", *extra, env=env,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert one_error(done.stderr)
    tagged = run_cli(
        "home", "backup", "--project", str(made_project), "--to",
        registry.ref(f"{REPOSITORY}:mine"), "--plain-http", env=env,
    )  # fmt: skip
    assert tagged.returncode == 2, tagged.stderr
    assert "without a tag" in tagged.stderr
    local = run_cli("home", "backup", "--project", str(made_project), "--plain-http", env=env)
    assert local.returncode == 2, local.stderr
    assert "oci://" in local.stderr
    assert registry.requests()[mark:] == []


def test_age_identity_with_a_registry_backup_or_listing_is_refused_before_any_request(
    registry: Registry, project: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    """``--age-identity`` opens an encrypted base, which a backup to a registry never uses,
    and a listing of a registry reads manifests only (``--verify`` too is refused): each is
    one usage line, exit 2, before any request, and no key reaches it."""
    import pyrage

    made_project, home, env = project
    identity = pyrage.x25519.Identity.generate()
    key = tmp_path / "key.txt"
    key.write_text(f"{identity}\n")
    recipient = str(identity.to_public())
    repository = registry.ref(REPOSITORY)
    before = tree_state(home)
    mark = registry.mark()
    for args, named in (
        (["backup", "--to", repository, "--age-identity", str(key)], "--age-identity"),
        (
            ["backup", "--to", repository, "--encrypt-to", recipient, "--age-identity", str(key)],
            "--age-identity",
        ),
        (["backups", "--to", repository, "--age-identity", str(key)], "--age-identity"),
        (["backups", "--to", repository, "--verify"], "--verify"),
    ):
        done = run_cli(
            "home", *args, "--project", str(made_project), "--plain-http", env=env,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert one_error(done.stderr), done.stderr
        assert f"{named} with oci://" in done.stderr
        assert str(identity) not in done.stderr + done.stdout
    assert registry.requests()[mark:] == []
    assert tree_state(home) == before


# --- hostile registries -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> BuiltBackup:
    base = tmp_path_factory.mktemp("hostile-backup")
    made_project, _home = make_project(base)
    return build_backup(made_project, base / "scratch", clean_env(base))


@pytest.fixture
def fake() -> Iterator[FakeRegistry]:
    server = FakeRegistry()
    try:
        yield server
    finally:
        server.close()


def test_the_served_artifact_restores_when_nothing_is_wrong(
    fake: FakeRegistry, built: BuiltBackup, project: tuple[Path, Path, dict[str, str]]
) -> None:
    """The corpus's baseline: the artifact as pushed restores from this registry."""
    made_project, _home, env = project
    fake.manifest = built.manifest()
    fake.blobs = built.blobs()
    from support.hostile_registry import digest_of

    ref = fake.ref(f"{REPO}@{digest_of(fake.manifest)}")
    done = run_cli("home", "restore", ref, "--project", str(made_project), "--plain-http", env=env)
    assert done.returncode == 0, done.stderr


def test_a_backup_tag_removed_between_listing_and_reading_is_left_out_of_the_listing(
    fake: FakeRegistry, built: BuiltBackup, project: tuple[Path, Path, dict[str, str]]
) -> None:
    """A prune elsewhere may delete a tag after the tag list named it: the listing (and so a
    prune) goes on without it, rather than failing on a tag it never asked for."""
    made_project, _home, env = project
    gone, there = "backup-20260101-000000", "backup-20260102-000000"
    tags = json.dumps({"tags": [gone, there]}).encode()
    fake.hooks[f"/v2/{REPO}/tags/list"] = lambda h: send(h, 200, tags)
    fake.hooks[f"/v2/{REPO}/manifests/{gone}"] = lambda h: send(
        h, 404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}'
    )
    manifest = built.manifest()
    fake.hooks[f"/v2/{REPO}/manifests/{there}"] = lambda h: send(
        h, 200, manifest, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}
    )
    done = run_cli(
        "home", "backups", "--project", str(made_project), "--to", f"oci://{fake.host}/{REPO}",
        "--plain-http", "--json", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [item["tag"] for item in json.loads(done.stdout)["backups"]] == [there]


def test_a_backup_tag_whose_manifest_is_too_large_is_a_warning_and_the_rest_are_listed(
    fake: FakeRegistry, built: BuiltBackup, project: tuple[Path, Path, dict[str, str]]
) -> None:
    """One backup-named tag nobody can read (its manifest beyond 4 MiB) is left out with a
    warning, as an unreadable manifest is: it does not hide every other backup, nor stop a
    prune of them."""
    made_project, _home, env = project
    huge, there = "backup-20260101-000000", "backup-20260102-000000"
    tags = json.dumps({"tags": [huge, there]}).encode()
    fake.hooks[f"/v2/{REPO}/tags/list"] = lambda h: send(h, 200, tags)
    media = {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}
    fake.hooks[f"/v2/{REPO}/manifests/{huge}"] = lambda h: send(h, 200, b" " * (5 << 20), media)
    manifest = built.manifest()
    fake.hooks[f"/v2/{REPO}/manifests/{there}"] = lambda h: send(h, 200, manifest, media)
    done = run_cli(
        "home", "backups", "--project", str(made_project), "--to", f"oci://{fake.host}/{REPO}",
        "--plain-http", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert there in done.stdout and huge not in done.stdout
    assert f"warning: {huge} is not a backup this tool reads" in done.stderr, done.stderr


def _serving(manifest: bytes) -> Callable[[BaseHTTPRequestHandler], None]:
    media = {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}
    return lambda handler: send(handler, 200, manifest, media)


def test_prune_asks_the_registry_about_no_tag_its_list_names_that_is_not_a_valid_tag(
    fake: FakeRegistry, built: BuiltBackup, project: tuple[Path, Path, dict[str, str]]
) -> None:
    """Prune looks up the tags no backup made (one may name a doomed backup): a tag list
    holding names no registry can tag (a path, a space, a newline) has them left out, never
    put into a request's address."""
    made_project, _home, env = project
    old, new = "backup-20260101-000000", "backup-20260102-000000"
    tags = json.dumps({"tags": [old, new, *HOSTILE_TAG_NAMES]}).encode()
    fake.hooks[f"/v2/{REPO}/tags/list"] = lambda h: send(h, 200, tags)
    for tag, when in ((old, "2026-01-01T00:00:00Z"), (new, "2026-01-02T00:00:00Z")):
        fake.hooks[f"/v2/{REPO}/manifests/{tag}"] = _serving(
            BuiltBackup(built.index, built.parts, when).manifest()
        )
    done = run_cli(
        "home", "prune", "--project", str(made_project), "--to", f"oci://{fake.host}/{REPO}",
        "--keep-last", "1", "--dry-run", "--plain-http", "--json", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [item["tag"] for item in json.loads(done.stdout)["removed"]] == [old]
    asked = [path for _method, path, _headers in fake.requests]
    assert not [path for path in asked if "X-Injected" in path or "/../" in path or "#" in path]


@pytest.mark.parametrize("case", sorted(HOSTILE_BACKUP_ARTIFACTS))
def test_restore_refuses_what_the_registry_serves_wrong_exit_3_nothing_restored(
    case: str,
    fake: FakeRegistry,
    built: BuiltBackup,
    project: tuple[Path, Path, dict[str, str]],
) -> None:
    made_project, home, env = project
    make, words = HOSTILE_BACKUP_ARTIFACTS[case]
    ref = make(fake, built)
    # the home as it is: a restore that goes wrong must leave all of it
    with sqlite3.connect(home / "chat.db") as conn:
        conn.execute("INSERT INTO msg(body) VALUES ('after the backup')")
    conn.close()
    time.sleep(0.01)
    before = content_state(home)
    done = run_cli("home", "restore", ref, "--project", str(made_project), "--plain-http", env=env)
    assert done.returncode == 3, (case, done.returncode, done.stderr)
    assert one_error(done.stderr), done.stderr
    assert words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert content_state(home) == before
    assert os.listdir(env["TMPDIR"]) == []


# --- crashes ----------------------------------------------------------------------------------


def test_a_kill_at_each_request_of_a_push_leaves_no_half_backup_and_the_next_push_tidies(
    registry: Registry, project: tuple[Path, Path, dict[str, str]]
) -> None:
    """The manifest is the commit point: a push killed at any request leaves either no new tag
    or a whole backup (never a tag naming blobs the registry lacks), its scratch folder is
    removed by the next push, which succeeds, and the data home is never touched."""
    reason = ptrace_unavailable()
    assert reason is None, reason
    made_project, home, env = project
    env = {**env, "SOURCE_DATE_EPOCH": "1795965672", "PYTHONDONTWRITEBYTECODE": "1"}
    home_before = content_state(home)
    cmd = [
        sys.executable, "-m", "bundler", "home", "backup", "--project", str(made_project),
        "--to", registry.ref(REPOSITORY), "--plain-http",
    ]  # fmt: skip
    done, calls = trace_calls(cmd, ["connect", "sendto"], env=env)
    assert done.returncode == 0, done.stderr
    assert calls, "the push made no request"
    tmpdir = Path(env["TMPDIR"])

    def check(_call: Call, run: FaultRun) -> None:
        assert content_state(home) == home_before
        for item in _listed(registry, made_project, env):
            ref = parse_reference(registry.ref(f"{REPOSITORY}@{item['digest']}"))
            with Session(ref, Options(plain_http=True)) as session:
                manifest = json.loads(session.get_manifest(ref.target)[0])
                for blob in [manifest["config"], *manifest["layers"]]:
                    assert session.blob_exists(blob["digest"]), (run.stderr, blob)
        if run.killed:
            assert [p.name for p in tmpdir.iterdir()], "the killed push left its scratch"
            after = _backup(registry, made_project, env)  # clears the dead scratch
            assert after["pinned"]
        assert list(tmpdir.iterdir()) == []

    kill_at_each(cmd, sample(calls, slow_sample_count()), check, reset=lambda: None, env=env)
