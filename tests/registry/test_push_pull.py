"""Push and pull against a real distribution registry (round trips and
uploads counted from the registry's own access log)."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.installs import opened_config
from support.kit import clean_env, cli_command, one_error, run_cli, tree_snapshot
from support.registry_server import Registry


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    install = bf.write_install(tmp_path / "install")
    return bf.export_bundle(install, tmp_path / "bundle")


def push(bundle: Path, ref: str, *extra: str) -> dict[str, object]:
    done = run_cli(["bundle", "push", str(bundle), ref, "--plain-http", "--json", *extra])
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def secrets_file(tmp_path: Path, bundle: Path) -> Path:
    required = bf.read_manifest(bundle)["required_secrets"]
    path = tmp_path / "secrets.toml"
    path.write_text(
        "".join(f'"{name}" = "value-{i}"\n' for i, name in enumerate(required)), encoding="utf-8"
    )
    path.chmod(0o600)
    return path


def test_folder_push_pull_folder_is_byte_for_byte(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    pushed = push(bundle, registry.ref("agents/researcher:1"))
    done = run_cli(
        ["bundle", "pull", registry.ref("agents/researcher:1"), str(tmp_path / "out"),
         "--plain-http"]
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert str(pushed["digest"]) in done.stdout
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(bundle)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_pull_by_digest_gives_the_pushed_artifact(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    pushed = push(bundle, registry.ref("agents/researcher:1"))
    pinned = f"{registry.ref('agents/researcher')}@{pushed['digest']}"
    done = run_cli(["bundle", "pull", pinned, str(tmp_path / "out"), "--plain-http"])
    assert done.returncode == 0, done.stderr
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(bundle)


def test_push_prints_the_digest_and_quiet_prints_only_it(registry: Registry, bundle: Path) -> None:
    done = run_cli(
        ["bundle", "push", str(bundle), registry.ref("agents/r:1"), "--plain-http", "--quiet"]
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("sha256:") and len(done.stdout.strip()) == 71


def test_export_push_import_ref_equals_importing_the_folder(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    pushed = push(bundle, registry.ref("agents/researcher:1"))
    secrets = secrets_file(tmp_path, bundle)
    common = ["agents", "import", "--accept-risks", "--secrets-file", str(secrets)]
    by_folder = run_cli(["--install", str(tmp_path / "a"), *common, str(bundle)])
    assert by_folder.returncode == 0, by_folder.stderr
    by_ref = run_cli(
        ["--install", str(tmp_path / "b"), *common, registry.ref("agents/researcher:1"),
         "--plain-http"]
    )  # fmt: skip
    assert by_ref.returncode == 0, by_ref.stderr
    # each sealed under its own key with a fresh nonce: equal once opened as ZeroClaw reads them
    assert opened_config(tmp_path / "a") == opened_config(tmp_path / "b")
    workspace = Path("agents") / bf.ROOT_AGENT / "workspace"
    assert tree_snapshot(tmp_path / "a" / workspace) == tree_snapshot(tmp_path / "b" / workspace)
    # the receipt names the artifact by digest, not the private folder it was read from
    receipts = list((tmp_path / "b" / "data" / "state" / "imports").glob("*.toml"))
    assert str(pushed["digest"]) in receipts[0].read_text(encoding="utf-8")


def test_second_push_of_an_unchanged_bundle_uploads_no_blob(
    registry: Registry, bundle: Path
) -> None:
    push(bundle, registry.ref("agents/researcher:1"))
    mark = registry.mark()
    again = push(bundle, registry.ref("agents/researcher:2"))
    assert registry.uploads_since(mark) == []
    assert again["uploaded"] == []


def test_push_into_an_empty_repository_streams_each_layer_once_as_it_is_made(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    """Nothing in a repository without tags can spare an upload, so no layer is hashed ahead:
    each is sent as it is made (one PATCH each), and what arrives is exactly the bundle."""
    mark = registry.mark()
    pushed = push(bundle, registry.ref("fresh/agent:1"))
    requests = registry.requests()[mark:]
    patches = [p for m, p, s in requests if m == "PATCH" and s == 202]
    layer_checks = [p for m, p, _s in requests if m == "HEAD" and "/blobs/" in p]
    assert len(patches) == len(pushed["uploaded"]) >= 2  # type: ignore[arg-type]
    assert layer_checks == []
    assert len(registry.uploads_since(mark)) == len(patches) + 1  # and the config blob
    by_digest = registry.ref(f"fresh/agent@{pushed['digest']}")
    done = run_cli(["bundle", "pull", by_digest, str(tmp_path / "back"), "--plain-http"])
    assert done.returncode == 0, done.stderr
    assert tree_snapshot(tmp_path / "back") == tree_snapshot(bundle)


def test_a_changed_workspace_file_uploads_only_the_workspace_layer(
    registry: Registry, bundle: Path
) -> None:
    push(bundle, registry.ref("agents/researcher:1"))
    changed = bundle / "workspace" / "notes.md"
    if not changed.exists():
        changed = next(p for p in (bundle / "workspace").rglob("*") if p.is_file())
    changed.write_bytes(changed.read_bytes() + b"one more line\n")
    bf.reseal(bundle)
    mark = registry.mark()
    again = push(bundle, registry.ref("agents/researcher:2"))
    # the metadata layer changes too (the checksums name the new file); skills do not
    assert sorted(str(x) for x in again["uploaded"]) == ["metadata", "workspace"]  # type: ignore[attr-defined]
    # config blob (zeroclaw-agent.toml, resealed) + the two layers
    assert len(registry.uploads_since(mark)) == 3


def test_existing_tag_is_refused_without_force(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    ref = registry.ref("agents/researcher:1")
    first = push(bundle, ref)
    bf.edit_manifest(bundle, lambda m: m["provenance"].update(exported_at="2024-01-01T00:00:00Z"))
    done = run_cli(["bundle", "push", str(bundle), ref, "--plain-http"])
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "--force" in done.stderr and "Traceback" not in done.stderr
    # the tag still names the first artifact
    out = tmp_path / "out"
    assert run_cli(["bundle", "pull", ref, str(out), "--plain-http", "--json"]).returncode == 0
    forced = push(bundle, ref, "--force")
    assert forced["digest"] != first["digest"]


def test_verify_and_inspect_read_a_reference(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    ref = registry.ref("agents/researcher:1")
    pushed = push(bundle, ref)
    private = tmp_path / "tmp"
    private.mkdir()
    env = {"TMPDIR": str(private)}
    verified = run_cli(["bundle", "verify", ref, "--plain-http"], env=env)
    assert verified.returncode == 0, verified.stderr
    assert str(pushed["digest"]) in verified.stdout
    inspected = run_cli(["bundle", "inspect", ref, "--plain-http", "--json"], env=env)
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["reference"].endswith(str(pushed["digest"]))
    # the private copy they read is gone
    assert list(private.iterdir()) == []


def with_identity(bundle: Path) -> Path:
    """``bundle`` with an identity file for its agent (``identity.aieos_path``), resealed."""
    (bundle / "workspace" / "identity").mkdir()
    (bundle / "workspace" / "identity" / "aieos.json").write_text('{"name": "researcher"}\n')
    bf.edit_config(
        bundle,
        lambda d: d["agents"][bf.ROOT_AGENT].update(
            identity={"format": "aieos", "aieos_path": "identity/aieos.json"}
        ),
    )
    return bundle


def test_inspect_of_a_reference_judges_the_files_a_pulled_folder_verify_judges(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    """An agent with an identity file under workspace/: the bundle verifies, pulled or not,
    and inspect of its reference says the same as inspect of the folder (it refused, "names
    no file under workspace/", having never looked at the workspace). ``--json`` names the
    reference as the bundle, not the private copy it read, which is gone."""
    with_identity(bundle)
    assert run_cli(["bundle", "verify", str(bundle)]).returncode == 0
    ref = registry.ref("agents/researcher:1")
    pushed = push(bundle, ref)
    pinned = f"{registry.ref('agents/researcher')}@{pushed['digest']}"
    pulled = run_cli(["bundle", "pull", ref, str(tmp_path / "pulled"), "--plain-http"])
    assert pulled.returncode == 0, pulled.stderr
    folder = json.loads(run_cli(["bundle", "inspect", str(bundle), "--json"]).stdout)
    inspected = run_cli(["bundle", "inspect", ref, "--plain-http", "--json"])
    assert inspected.returncode == 0, inspected.stderr
    remote = json.loads(inspected.stdout)
    for key in ("root_agent", "entries", "required_secrets", "risk_flags", "dropped", "errors"):
        assert remote[key] == folder[key], key
    assert (remote["files"], remote["bytes"]) == (folder["files"], folder["bytes"])
    assert remote["not_read"] == [] and remote["errors"] == []
    assert remote["bundle"] == remote["reference"] == pinned


def test_pull_into_an_existing_bundle_needs_force(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    ref = registry.ref("agents/researcher:1")
    push(bundle, ref)
    out = tmp_path / "out"
    assert run_cli(["bundle", "pull", ref, str(out), "--plain-http"]).returncode == 0
    before = tree_snapshot(out)
    again = run_cli(["bundle", "pull", ref, str(out), "--plain-http"])
    assert again.returncode == 1 and one_error(again.stderr) and "--force" in again.stderr
    # the destination is an operand of pull: no '--out' named (an export's option)
    assert again.stderr.startswith(f"error: {out} ") and "--out" not in again.stderr
    assert tree_snapshot(out) == before
    assert run_cli(["bundle", "pull", ref, str(out), "--plain-http", "--force"]).returncode == 0


def test_a_missing_tag_is_one_line(registry: Registry, tmp_path: Path) -> None:
    done = run_cli(
        ["bundle", "pull", registry.ref("agents/none:1"), str(tmp_path / "o"), "--plain-http"]
    )
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert not (tmp_path / "o").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_an_archive_pushes_as_its_folder_does_and_pulls_back_to_an_archive(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    """push FILE.tar gives the same artifact (digest) as push DIR; pull REF FILE.tar gives the
    same archive bytes as 'bundle pack'."""
    archive = tmp_path / "bundle.tar"
    packed = run_cli(["bundle", "pack", str(bundle), str(archive)])
    assert packed.returncode == 0, packed.stderr
    by_folder = push(bundle, registry.ref("agents/r:folder"))
    by_archive = push(archive, registry.ref("agents/r:archive"))
    assert by_archive["digest"] == by_folder["digest"]
    pulled = tmp_path / "pulled.tar"
    done = run_cli(
        ["bundle", "pull", registry.ref("agents/r:archive"), str(pulled), "--plain-http"]
    )
    assert done.returncode == 0, done.stderr
    assert pulled.read_bytes() == archive.read_bytes()


@pytest.mark.parametrize("where", ["tmp_path", "/dev/shm"])
def test_a_long_layer_pulled_into_an_archive_is_written_past_the_page_cache_as_packed(
    registry: Registry, tmp_path: Path, where: str
) -> None:
    """The workspace layer of a bundle with a 48 MB file is written with direct writes (a
    second, O_DIRECT descriptor of the staging file), starting where the metadata layer's
    members end (not on a block boundary); the archive is the bytes 'bundle pack' gives, on
    ext4 and on tmpfs alike."""
    from support.faultinject import ptrace_unavailable, trace_log

    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    folder = tmp_path if where == "tmp_path" else Path(where) / f"bundler-test-{os.getpid()}"
    folder.mkdir(exist_ok=True)
    try:
        big = bf.big_bundle(tmp_path, "big", b"long")
        ref = registry.ref("agents/big:1")
        assert run_cli(["bundle", "push", str(big), ref, "--plain-http"]).returncode == 0
        pulled = folder / "pulled.tar"
        cmd = [*cli_command(), "bundle", "pull", ref, str(pulled), "--plain-http"]
        done, trace = trace_log(cmd, ["openat", "pwritev2"], env=clean_env(), timeout=300)
        assert done.returncode == 0, done.stderr
        assert pulled.read_bytes() == bf.pack_bytes(big)
        assert "/proc/self/fd/" in trace and "O_DIRECT" in trace
        if where == "tmp_path":  # tmpfs takes direct writes since Linux 6.6, ext4 always
            assert "pwritev2(" in trace
    finally:
        if folder != tmp_path:
            shutil.rmtree(folder)


@pytest.mark.parametrize("repository", ["fresh", "tagged"])
def test_push_verifies_the_bundle_before_uploading_anything(
    registry: Registry, bundle: Path, repository: str
) -> None:
    """A folder that is not a sound bundle (here a golden folder's NOTES.md beside the bundle's
    files) is refused before any upload, whether the repository is new (layers streamed as they
    are made) or already holds tags (layers hashed first): pull would refuse it anyway."""
    if repository == "tagged":
        push(bundle, registry.ref("agents/researcher:1"))
    (bundle / "NOTES.md").write_text("how this bundle was made\n", encoding="utf-8")
    mark = registry.mark()
    done = run_cli(
        ["bundle", "push", str(bundle), registry.ref("agents/researcher:2"), "--plain-http"]
    )
    assert done.returncode == 3, done.stderr
    assert one_error(done.stderr) and "NOTES.md" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert [m for m, _path, _status in registry.requests()[mark:] if m not in ("GET", "HEAD")] == []


@pytest.mark.parametrize("repository", ["fresh", "tagged"])
def test_push_refuses_a_workspace_file_that_does_not_match_its_checksum(
    registry: Registry, bundle: Path, repository: str
) -> None:
    """The workspace's contents are judged as they are read for the upload: a file changed
    after export (same size, other bytes) never becomes a tagged artifact."""
    if repository == "tagged":
        push(bundle, registry.ref("agents/researcher:1"))
    changed = next(p for p in sorted((bundle / "workspace").rglob("*")) if p.is_file())
    data = bytearray(changed.read_bytes())
    data[0] ^= 0x01
    changed.write_bytes(bytes(data))
    done = run_cli(
        ["bundle", "push", str(bundle), registry.ref("agents/researcher:2"), "--plain-http"]
    )
    assert done.returncode == 3, done.stderr
    assert one_error(done.stderr) and changed.name in done.stderr, done.stderr
    # the tag was never written: the registry holds no manifest by that name
    missing = run_cli(["bundle", "inspect", registry.ref("agents/researcher:2"), "--plain-http"])
    assert missing.returncode != 0 and "Traceback" not in missing.stderr


def test_pull_by_tag_warns_and_names_the_digest_to_pin(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    """Users ask to pull by digest and to be warned when they do not: a tag can be moved."""
    pushed = push(bundle, registry.ref("agents/researcher:1"))
    pinned = f"{registry.ref('agents/researcher')}@{pushed['digest']}"
    by_tag = run_cli(
        ["bundle", "pull", registry.ref("agents/researcher:1"), str(tmp_path / "a"), "--plain-http"]
    )
    assert by_tag.returncode == 0, by_tag.stderr
    warnings = [line for line in by_tag.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "is a tag" in warnings[0] and pinned in warnings[0]
    as_json = run_cli(
        ["bundle", "pull", registry.ref("agents/researcher:1"), str(tmp_path / "b"),
         "--plain-http", "--json"]
    )  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    assert any(pinned in warning for warning in json.loads(as_json.stdout)["warnings"])
    by_digest = run_cli(["bundle", "pull", pinned, str(tmp_path / "c"), "--plain-http"])
    assert by_digest.returncode == 0 and "warning" not in by_digest.stderr, by_digest.stderr


def test_import_by_tag_warns_and_names_the_digest_to_pin(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    pushed = push(bundle, registry.ref("agents/researcher:1"))
    pinned = f"{registry.ref('agents/researcher')}@{pushed['digest']}"
    secrets = secrets_file(tmp_path, bundle)
    common = ["agents", "import", "--accept-risks", "--secrets-file", str(secrets), "--plain-http"]
    by_tag = run_cli(
        ["--install", str(tmp_path / "a"), *common, registry.ref("agents/researcher:1")]
    )
    assert by_tag.returncode == 0, by_tag.stderr
    assert any(
        line.startswith("warning: ") and "is a tag" in line and pinned in line
        for line in by_tag.stderr.splitlines()
    ), by_tag.stderr
    by_digest = run_cli(["--install", str(tmp_path / "b"), *common, pinned])
    assert by_digest.returncode == 0, by_digest.stderr
    assert "is a tag" not in by_digest.stderr


def test_push_of_an_unsound_archive_names_the_archive_and_sends_nothing(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    """An archive is unpacked into a private folder before it is verified: the refusal names
    the archive the user gave, never that folder."""
    (bundle / "NOTES.md").write_text("how this bundle was made\n", encoding="utf-8")
    archive = tmp_path / "with-notes.tar"
    with tarfile.open(archive, "w", format=tarfile.USTAR_FORMAT) as tar:
        for path in sorted(bundle.rglob("*")):
            tar.add(path, arcname=path.relative_to(bundle).as_posix(), recursive=False)
    mark = registry.mark()
    done = run_cli(
        ["bundle", "push", str(archive), registry.ref("agents/researcher:1"), "--plain-http"]
    )
    assert done.returncode == 3 and one_error(done.stderr), done.stderr
    # refused as its member NOTES.md, which checksums.xxh3 does not list, arrives
    assert done.stderr.startswith(f"error: {archive}: member NOTES.md "), done.stderr
    assert "bundler-archive-" not in done.stderr
    assert registry.requests()[mark:] == []


def test_a_sealed_bundle_round_trips_with_its_own_sealed_layer(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    """secrets.age travels as the layer ``sealed`` of its own media type; pull gives the folder
    and the archive back byte for byte, and an import by reference opens the seal."""
    import urllib.request

    from support import hostile_bundles

    sealed = bundle
    identity = hostile_bundles.seal_bundle(sealed)
    key_file = tmp_path / "receiver.age"
    key_file.write_text(f"{identity}\n")
    pushed = push(sealed, registry.ref("agents/sealed:1"))
    url = f"http://{registry.host}/v2/agents/sealed/manifests/{pushed['digest']}"
    request = urllib.request.Request(
        url, headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        layers = json.loads(answer.read())["layers"]
    types = {
        layer["annotations"]["org.opencontainers.image.title"]: layer["mediaType"]
        for layer in layers
    }
    assert types["sealed"] == "application/vnd.zeroclaw.agent.bundle.sealed.v1.tar"
    assert types["metadata"] == "application/vnd.zeroclaw.agent.bundle.layer.v1.tar"
    ref = registry.ref("agents/sealed:1")
    done = run_cli(["bundle", "pull", ref, str(tmp_path / "out"), "--plain-http"])
    assert done.returncode == 0, done.stderr
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(sealed)
    pulled = tmp_path / "pulled.tar"
    done = run_cli(["bundle", "pull", ref, str(pulled), "--plain-http"])
    assert done.returncode == 0, done.stderr
    assert pulled.read_bytes() == bf.pack_bytes(sealed)
    target = tmp_path / "target"
    done = run_cli(
        ["--install", str(target), "--json", "agents", "import", ref, "--plain-http",
         "--accept-risks", "--age-identity", str(key_file)]
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["secrets_missing"] == [] and report["secrets_from_seal"]
