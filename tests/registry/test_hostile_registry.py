"""Hostile registries: every answer a registry can get wrong is refused
with one line, leaves nothing behind, shows no traceback and no credential."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import socket
import struct
import subprocess
import tarfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.hostile_registry import (
    DROPPED_BLOBS,
    HOSTILE_AUTH_FILES,
    RANGED_ANSWERS,
    REPO,
    TAG,
    Built,
    FakeRegistry,
    build,
    digest_of,
    send,
    send_garbled,
)
from support.installs import copy_example
from support.kit import one_error, run_cli, tree_snapshot
from xxhash import xxh3_128_hexdigest

from bundler.bundle.manifest import CHECKSUMS_NAME, parse_checksums, render_checksums
from bundler.errors import InvalidInput, RegistryUnreachable
from bundler.fs.durable import open_dir
from bundler.registry import artifact as art
from bundler.registry.distribution import Session
from bundler.registry.pull import BLOBS, pull_into
from bundler.registry.reference import parse_reference
from bundler.registry.transport import Options

PASSWORD = "Hostile-Test-Password-9931"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    base = tmp_path_factory.mktemp("hostile")
    install = bf.write_install(base / "install")
    return build(bf.export_bundle(install, base / "bundle"))


@pytest.fixture
def fake(built: Built) -> Iterator[FakeRegistry]:
    server = FakeRegistry(built)
    try:
        yield server
    finally:
        server.close()


def env_for(tmp_path: Path, host: str) -> dict[str, str]:
    folder = tmp_path / "docker"
    folder.mkdir(exist_ok=True)
    token = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    (folder / "config.json").write_text(json.dumps({"auths": {host: {"auth": token}}}))
    return {"DOCKER_CONFIG": str(folder)}


def basic_auth(fake: FakeRegistry) -> None:
    """Ask for Basic auth and accept the configured password, so credentials are in play."""
    good = "Basic " + base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    fake.challenge = 'Basic realm="hostile"'
    fake.accept_auth = lambda value: value == good


def inspect_with_docker_config(
    fake: FakeRegistry, tmp_path: Path, config: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``bundle inspect`` of ``fake`` with ``config`` as the Docker config (``env`` added)."""
    folder = tmp_path / "docker"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(config, encoding="utf-8")
    return run_cli(
        ["bundle", "inspect", fake.ref(), "--plain-http"],
        env={"DOCKER_CONFIG": str(folder), **(env or {})},
        timeout=60,
    )


@pytest.fixture(params=["out", "out.tar"])
def dest_name(request: pytest.FixtureRequest) -> str:
    """A pull's destination: a bundle folder, or an archive (whose parts other than the metadata
    and the memory store are judged in their layers, never unpacked)."""
    return str(request.param)


def refused(
    fake: FakeRegistry,
    tmp_path: Path,
    ref: str | None = None,
    dest_name: str = "out",
    code: int | None = None,
) -> str:
    """Pull from ``fake``; assert the refusal's shape (exit ``code`` when given, else 1 or 3)
    and that nothing is left; the message."""
    dest = tmp_path / dest_name
    done = run_cli(
        ["bundle", "pull", ref or fake.ref(), str(dest), "--plain-http"],
        env=env_for(tmp_path, fake.host),
        timeout=60,
    )
    text = done.stdout + done.stderr
    assert done.returncode in ((1, 3) if code is None else (code,)), text
    assert one_error(done.stderr), done.stderr
    assert "Traceback" not in text
    assert PASSWORD not in text
    assert base64.b64encode(f"user:{PASSWORD}".encode()).decode() not in text
    assert not dest.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docker"]
    return done.stderr


def rebuilt(built: Built, layers: list[tuple[str, bytes]], config: bytes | None = None) -> Built:
    return Built(built.config if config is None else config, layers, built.annotations)


def serve(fake: FakeRegistry, new: Built) -> None:
    fake.manifest = new.manifest()
    fake.blobs = new.blobs()


def tar_of(*members: tuple[str, bytes | None, bytes]) -> bytes:
    """A tar from (name, content or None for a folder, type) triples."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.DIRTYPE:
                info.mode = 0o755
            elif kind == tarfile.SYMTYPE:
                info.linkname = "/etc/passwd"
            else:
                info.size = len(data or b"")
                info.mode = 0o644
            archive.addfile(info, io.BytesIO(data or b"") if kind == tarfile.REGTYPE else None)
    return out.getvalue()


def layer_path(fake: FakeRegistry, built: Built, title: str) -> str:
    _config, layers = built.descriptors()
    digest = next(d.digest for d in layers if d.title == title)
    return f"/v2/{REPO}/blobs/{digest}"


# --------------------------------------------------------------------------- the baseline


def test_the_scripted_registry_serves_a_good_artifact(
    fake: FakeRegistry, built: Built, tmp_path: Path
) -> None:
    """Unbroken, the fake registry's artifact pulls: every refusal below is the breakage's."""
    basic_auth(fake)
    done = run_cli(
        ["bundle", "pull", fake.ref(), str(tmp_path / "out"), "--plain-http"],
        env=env_for(tmp_path, fake.host),
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "zeroclaw-agent.toml").read_bytes() == built.config


# --------------------------------------------------------------------------- blobs


# One blob answered wrongly, its bytes all arrived: the part whose blob, the answer's status, the
# body served in place of the good one, the Content-Length declared (None: the body's own, -1:
# none, so the body runs on until the connection closes) and a fragment of the refusal ("" where
# the wording is not the point). Basic auth is asked for, so a credential is in play and must
# not show. Each is the artifact's fault (exit 3): fetching it again would fetch the same bytes.
BROKEN_BLOBS: dict[str, tuple[str, int, Callable[[bytes], bytes], int | None, str]] = {
    "does_not_match_its_digest": (
        "workspace",
        200,
        lambda b: bytes([b[0] ^ 1]) + b[1:],
        None,
        "sha256",
    ),
    # never read past the size the manifest declares
    "runs_on_past_its_declared_size": ("workspace", 200, lambda b: b + b"\0" * 4096, -1, "longer"),
    "has_a_length_header_that_disagrees": ("workspace", 200, lambda b: b + b"extra", None, ""),
    "is_missing": ("skills", 404, lambda _b: b"{}", None, ""),
}


@pytest.mark.parametrize("case", BROKEN_BLOBS)
def test_a_blob_is_refused_when_it(
    fake: FakeRegistry, built: Built, tmp_path: Path, case: str, dest_name: str
) -> None:
    part, status, served, length, fragment = BROKEN_BLOBS[case]
    basic_auth(fake)
    path = layer_path(fake, built, part)
    body = served(fake.blobs[path.rsplit("/", 1)[1]])
    fake.hooks[path] = lambda h: send(h, status, body, length=length)
    assert fragment in refused(fake, tmp_path, dest_name=dest_name, code=3)


def test_a_blob_whose_body_breaks_the_chunked_encoding_it_declares_is_refused(
    fake: FakeRegistry, built: Built, tmp_path: Path, dest_name: str
) -> None:
    """HTTP's own framing broken mid-body (found by a fuzzer: http.client's IncompleteRead
    escaped as a traceback): the registry's fault, in one line."""
    basic_auth(fake)

    fake.hooks[layer_path(fake, built, "workspace")] = lambda h: send_garbled(h, 200)
    assert "broke off (IncompleteRead)" in refused(fake, tmp_path, dest_name=dest_name)


@pytest.mark.parametrize("case", DROPPED_BLOBS)
def test_a_connection_dropped_mid_blob_is_a_network_failure_not_a_bad_artifact(
    fake: FakeRegistry, built: Built, tmp_path: Path, case: str, dest_name: str
) -> None:
    """A registry that dies (or a proxy that resets) before a blob is whole says nothing of the
    artifact: exit 1, naming the connection and to try again, nothing published. It was exit
    3, "refused: it ended before the size the manifest declares"."""
    basic_auth(fake)
    path = layer_path(fake, built, "workspace")
    fake.hooks[path] = DROPPED_BLOBS[case](fake.blobs[path.rsplit("/", 1)[1]])
    message = refused(fake, tmp_path, dest_name=dest_name, code=1)
    assert f"the connection to {fake.host} closed" in message, message
    assert "try again" in message and "manifest" not in message, message


def cached_blobs() -> dict[str, bytes]:
    """The layer cache's files by name."""
    folder = Path(os.environ["XDG_CACHE_HOME"]) / "bundler" / "blobs" / "sha256"
    return {p.name: p.read_bytes() for p in folder.iterdir()} if folder.exists() else {}


@pytest.mark.parametrize("case", RANGED_ANSWERS)
def test_a_resumed_blob_is_the_digest_s_whatever_the_range_answer(
    fake: FakeRegistry, built: Built, tmp_path: Path, case: str, dest_name: str
) -> None:
    """A pull dropped mid-blob leaves the bytes received in the cache; the rerun's Range
    request is answered badly (ignored, another range, refused, other bytes): the pull still
    gives the artifact, and every file the cache keeps is the blob its name says."""
    basic_auth(fake)
    path = layer_path(fake, built, "workspace")
    digest = path.rsplit("/", 1)[1]
    good = fake.blobs[digest]
    fake.hooks[path] = DROPPED_BLOBS["closed_mid_blob"](good)
    refused(fake, tmp_path, dest_name=dest_name, code=1)
    assert len(cached_blobs()[f"{digest[7:]}.partial"]) == len(good) // 2
    fake.hooks[path] = RANGED_ANSWERS[case](good)
    done = run_cli(
        ["bundle", "pull", fake.ref(), str(tmp_path / dest_name), "--plain-http"],
        env=env_for(tmp_path, fake.host),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    ranged = [h.get("Range") for _m, p, h in fake.requests if p == path]
    assert ranged[1] == f"bytes={len(good) // 2}-", ranged
    kept = cached_blobs()
    assert kept[digest[7:]] == good
    assert all(f"sha256:{hashlib.sha256(data).hexdigest()}"[7:] == name
               for name, data in kept.items()), sorted(kept)  # fmt: skip


@pytest.mark.parametrize("case", ["does_not_match_its_digest", "runs_on_past_its_declared_size"])
def test_a_blob_that_fails_its_digest_leaves_nothing_in_the_cache(
    fake: FakeRegistry, built: Built, tmp_path: Path, case: str, dest_name: str
) -> None:
    part, status, served, length, _fragment = BROKEN_BLOBS[case]
    path = layer_path(fake, built, part)
    digest = path.rsplit("/", 1)[1]
    body = served(fake.blobs[digest])
    fake.hooks[path] = lambda h: send(h, status, body, length=length)
    refused(fake, tmp_path, dest_name=dest_name, code=3)
    assert [name for name in cached_blobs() if name.startswith(digest[7:])] == []


def test_a_dropped_connection_is_one_exception_type_a_retry_can_catch(
    fake: FakeRegistry, built: Built
) -> None:
    """The classification is made once, in the registry layer: what a dropped connection
    raises is a RegistryUnreachable saying what happened; bytes that arrived wrong are not one."""
    path = layer_path(fake, built, "workspace")
    digest = path.rsplit("/", 1)[1]
    good = fake.blobs[digest]
    session = Session(parse_reference(fake.ref()), Options(plain_http=True), environ={})
    with session:
        for case, cause in (("closed_mid_blob", "closed"), ("reset_mid_blob", "reset")):
            fake.hooks[path] = DROPPED_BLOBS[case](good)
            with pytest.raises(RegistryUnreachable) as caught:
                session.download_blob(digest, len(good), io.BytesIO())
            assert (caught.value.cause, caught.value.host) == (cause, fake.host)
        fake.hooks[path] = lambda h: send(h, 200, good[:-1] + bytes([good[-1] ^ 1]))
        with pytest.raises(InvalidInput, match="sha256") as wrong:
            session.download_blob(digest, len(good), io.BytesIO())
        assert not isinstance(wrong.value, RegistryUnreachable)


def test_a_blob_that_stalls_mid_body_is_refused_after_the_timeout(
    fake: FakeRegistry, built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry that stops sending, connection open: the read is cut once less than 1 KiB/s
    arrived over the stall window, and says so (the window shortened here; the CLI waits 60 s)."""
    path = layer_path(fake, built, "workspace")
    good = fake.blobs[path.rsplit("/", 1)[1]]
    stalled = threading.Event()

    def stall(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(good)))
        handler.end_headers()
        handler.wfile.write(good[:100])
        handler.wfile.flush()
        stalled.wait(10)

    fake.hooks[path] = stall
    environ = {"BUNDLER_REGISTRY_TIME_SCALE": "0.01"}
    session = Session(parse_reference(fake.ref()), Options(plain_http=True), environ=environ)
    try:
        with (
            session,
            pytest.raises(RegistryUnreachable, match=r"less than 1 KiB/s for 0.6 s") as caught,
        ):
            session.download_blob(path.rsplit("/", 1)[1], len(good), io.BytesIO())
        assert caught.value.cause == "timed out"
    finally:
        stalled.set()


def push_refused(fake: FakeRegistry, tmp_path: Path, code: int | None = None) -> str:
    """Push a bundle to a new tag of ``fake``; assert the refusal's shape (exit ``code`` when
    given, else 1 or 3); the message."""
    install = bf.write_install(tmp_path / "install")
    bundle = bf.export_bundle(install, tmp_path / "bundle")
    done = run_cli(
        ["bundle", "push", str(bundle), fake.ref(f"{REPO}:2"), "--plain-http"],
        env=env_for(tmp_path, fake.host),
        timeout=60,
    )
    text = done.stdout + done.stderr
    assert done.returncode in ((1, 3) if code is None else (code,)), text
    assert one_error(done.stderr), text
    assert "Traceback" not in text and PASSWORD not in text
    return done.stderr


def test_a_push_answered_with_a_garbled_body_fails_in_one_line(
    fake: FakeRegistry, tmp_path: Path
) -> None:
    """The upload session's answer breaks HTTP's framing (found by a fuzzer: a traceback)."""
    basic_auth(fake)

    fake.hooks[f"/v2/{REPO}/blobs/uploads/"] = lambda h: send_garbled(
        h, 202, {"Location": f"/v2/{REPO}/blobs/uploads/x"}
    )
    # the upload goes on to the PUT, which this registry answers 404
    assert "uploading a blob failed (HTTP 404" in push_refused(fake, tmp_path)


def test_a_connection_dropped_mid_upload_is_a_network_failure(
    fake: FakeRegistry, tmp_path: Path
) -> None:
    """The registry takes a little of a blob's body, then the connection is reset: exit 1,
    naming the connection and to try again, as for a pull."""
    fake.hooks[f"/v2/{REPO}/blobs/uploads/"] = lambda h: send(
        h, 202, b"", {"Location": f"/v2/{REPO}/blobs/uploads/x"}
    )

    def take_some_then_reset(handler: BaseHTTPRequestHandler) -> None:
        handler.rfile.read(100)
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()
        handler.wfile = io.BytesIO()
        handler.close_connection = True

    fake.hooks[f"/v2/{REPO}/blobs/uploads/x"] = take_some_then_reset
    message = push_refused(fake, tmp_path, code=1)
    assert f"the connection to {fake.host} closed" in message, message
    assert "try again" in message, message


# Addresses a registry may send that are no web address to reach (found by a fuzzer: urllib's
# ValueError escaped as a traceback).
MALFORMED_ADDRESSES = [
    "http://[::1/x",
    "http://127.0.0.1:99999/x",
    "http://127.0.0.1:port/x",
    "http://:80/x",
    "http://127.0.0.1/caf\u00e9",  # a request line is ASCII
]


@pytest.mark.parametrize("address", MALFORMED_ADDRESSES)
def test_a_blob_redirect_to_a_malformed_address_is_refused(
    fake: FakeRegistry, built: Built, tmp_path: Path, address: str
) -> None:
    fake.hooks[layer_path(fake, built, "workspace")] = lambda h: send(
        h, 307, b"", {"Location": address}
    )
    assert "non-web address" in refused(fake, tmp_path)


@pytest.mark.parametrize("address", MALFORMED_ADDRESSES)
def test_a_token_service_at_a_malformed_address_is_refused(
    fake: FakeRegistry, tmp_path: Path, address: str
) -> None:
    fake.challenge = f'Bearer realm="{address}",service="registry"'
    assert "no usable token service" in refused(fake, tmp_path)


@pytest.mark.parametrize("address", MALFORMED_ADDRESSES)
def test_an_upload_sent_to_a_malformed_address_is_refused(
    fake: FakeRegistry, tmp_path: Path, address: str
) -> None:
    fake.hooks[f"/v2/{REPO}/blobs/uploads/"] = lambda h: send(h, 202, b"", {"Location": address})
    assert "sent its upload elsewhere" in push_refused(fake, tmp_path)


@pytest.mark.parametrize(
    ("script", "mode", "why"),
    [
        ("#!/bin/sh\necho '{}'\n", 0o644, "Permission denied"),
        ("echo '{}'\n", 0o755, "Exec format error"),  # no #! line: not a program
    ],
    ids=["not_executable", "not_a_program"],
)
def test_a_credential_helper_that_cannot_run_is_named(
    fake: FakeRegistry, tmp_path: Path, script: str, mode: int, why: str
) -> None:
    """It was reported as the pull failing with the system's words alone."""
    basic_auth(fake)
    helpers = tmp_path / "bin"
    helpers.mkdir()
    helper = helpers / "docker-credential-broken"
    helper.write_text(script, encoding="utf-8")
    helper.chmod(mode)
    done = inspect_with_docker_config(
        fake, tmp_path, '{"credsStore": "broken"}', {"PATH": f"{helpers}:{os.environ['PATH']}"}
    )
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert f"cannot run the credential helper docker-credential-broken ({why})" in done.stderr


def test_a_blob_whose_digest_does_not_match_unpacks_nothing(
    fake: FakeRegistry, built: Built, tmp_path: Path
) -> None:
    """The sha256 is checked before a byte of the blob is unpacked: of a bad workspace blob,
    the staging folder holds only the downloaded scratch file, no member and no layer folder."""
    path = layer_path(fake, built, "workspace")
    good = fake.blobs[path.rsplit("/", 1)[1]]
    fake.hooks[path] = lambda h: send(h, 200, good[:-1] + bytes([good[-1] ^ 1]))
    staging = tmp_path / "staging"
    staging.mkdir(mode=0o700)
    fd = open_dir(staging, follow=False)
    try:
        session = Session(parse_reference(fake.ref()), Options(plain_http=True), environ={})
        with session, pytest.raises(InvalidInput, match="sha256"):
            pull_into(session, fd)
    finally:
        os.close(fd)
    index = [title for title, _data in built.layers].index("workspace")
    left = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*"))
    assert not [name for name in left if name.startswith(("workspace", ".bundler-blobs/.bundler"))]
    assert [name for name in left if name.startswith(BLOBS)] == [BLOBS, f"{BLOBS}/{index}"]
    assert "zeroclaw-agent.toml" in left  # the layers before it were unpacked: not vacuous


def test_a_member_whose_bytes_differ_from_the_checksums_is_refused_naming_it(
    fake: FakeRegistry, built: Built, tmp_path: Path
) -> None:
    """A well-formed blob (its digest right) whose one file differs from ``checksums.xxh3`` at
    the same size: the verification of the unpacker's digests refuses it, naming the file."""
    data = dict(built.layers)["workspace"]
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        victim = next(m for m in archive.getmembers() if m.isfile() and m.size)
    raw = bytearray(data)
    raw[victim.offset_data] ^= 0x01
    layers = [(title, bytes(raw) if title == "workspace" else d) for title, d in built.layers]
    serve(fake, rebuilt(built, layers))
    message = refused(fake, tmp_path)
    assert victim.name in message and "does not match its digest" in message


def test_a_manifest_pointing_at_a_huge_blob_is_refused_before_download(
    fake: FakeRegistry, built: Built, tmp_path: Path
) -> None:
    doc = json.loads(fake.manifest)
    doc["layers"][1]["size"] = 1 << 50
    fake.manifest = json.dumps(doc).encode()
    refused(fake, tmp_path)
    assert not [r for r in fake.requests if "/blobs/" in r[1] and r[0] == "GET"][1:]


def test_a_blob_larger_than_the_free_space_is_refused_before_download(
    fake: FakeRegistry, tmp_path: Path
) -> None:
    doc = json.loads(fake.manifest)
    doc["layers"][1]["size"] = 900 << 30
    fake.manifest = json.dumps(doc).encode()
    assert "free" in refused(fake, tmp_path)


# --------------------------------------------------------------------------- redirects and auth


def test_a_blob_redirect_to_another_host_gets_no_credentials(
    fake: FakeRegistry, built: Built, tmp_path: Path
) -> None:
    """Registries send blob downloads to storage elsewhere: followed, without our password,
    and the blob is still checked against its digest."""
    basic_auth(fake)
    storage = FakeRegistry(built, host="localhost")
    try:
        path = layer_path(fake, built, "workspace")
        fake.hooks[path] = lambda h: send(h, 307, b"", {"Location": f"http://{storage.host}{path}"})
        done = run_cli(
            ["bundle", "pull", fake.ref(), str(tmp_path / "out"), "--plain-http"],
            env=env_for(tmp_path, fake.host),
        )
        assert done.returncode == 0, done.stderr
        assert [r for r in storage.requests if r[1] == path]
        assert all("Authorization" not in headers for _m, _p, headers in storage.requests)
    finally:
        storage.close()


@pytest.mark.parametrize("dest_name", ["out", "out.tar"])
def test_an_unreachable_redirect_is_named_by_its_host_never_its_user_information(
    fake: FakeRegistry, built: Built, tmp_path: Path, dest_name: str
) -> None:
    """The address a registry redirects to is its text: user information there may be the
    credential it was sent, cut so that no scrubber knows it. Only the host is named."""
    basic_auth(fake)
    cut = base64.b64encode(f"user:{PASSWORD}".encode()).decode()[:-2]
    path = layer_path(fake, built, "workspace")
    location = f"http://{cut}@127.0.0.1:1{path}"
    fake.hooks[path] = lambda h: send(h, 302, b"", {"Location": location})
    message = refused(fake, tmp_path, dest_name=dest_name)
    assert cut not in message and "cannot talk to registry 127.0.0.1:1 (" in message


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_a_served_bundle_repeating_the_password_is_shown_without_it(
    tmp_path: Path, command: str
) -> None:
    """What a registry serves is its text: a bundle rewritten to hold the password the
    registry was sent is shown, in every report and in --json, without it."""
    install = copy_example(tmp_path / "source")
    config = install / "config.toml"
    docs = "https://docs.example.com/sse"
    config.write_text(config.read_text().replace(docs, f"{docs}/{PASSWORD}"))
    bundle = tmp_path / "bundle"
    exported = run_cli(
        ["--install", str(install), "agents", "export", "researcher", "--out", str(bundle)]
    )
    assert exported.returncode == 0, exported.stderr
    server = FakeRegistry(build(bundle))
    try:
        basic_auth(server)
        for mode in ([], ["--json"]):
            done = run_cli(
                [*mode, "bundle", command, server.ref(), "--plain-http"],
                env=env_for(tmp_path, server.host),
            )
            assert done.returncode == 0, done.stderr
            assert PASSWORD not in done.stdout + done.stderr
            assert "docs.example.com/sse/" in done.stdout or command == "verify"
    finally:
        server.close()


def test_a_redirect_of_the_manifest_is_refused(fake: FakeRegistry, tmp_path: Path) -> None:
    basic_auth(fake)
    path = f"/v2/{REPO}/manifests/1"
    fake.hooks[path] = lambda h: send(h, 302, b"", {"Location": "http://localhost:9/x"})
    refused(fake, tmp_path)


def test_a_redirect_loop_is_refused(fake: FakeRegistry, built: Built, tmp_path: Path) -> None:
    path = layer_path(fake, built, "workspace")
    fake.hooks[path] = lambda h: send(h, 307, b"", {"Location": path})
    assert "too often" in refused(fake, tmp_path)


def test_a_401_loop_is_refused_after_one_answer(fake: FakeRegistry, tmp_path: Path) -> None:
    fake.challenge = 'Basic realm="loop"'
    assert "credentials" in refused(fake, tmp_path)
    assert len(fake.requests) <= 3


def test_a_bearer_challenge_is_answered_from_the_token_service(
    fake: FakeRegistry, tmp_path: Path
) -> None:
    token = "Bearer-Token-Never-Shown-123456"
    fake.challenge = (
        f'Bearer realm="http://{fake.host}/token",service="fake",scope="repository:{REPO}:pull"'
    )
    fake.accept_auth = lambda value: value == f"Bearer {token}"
    fake.hooks["/token"] = lambda h: send(h, 200, json.dumps({"token": token}).encode())
    done = run_cli(
        ["bundle", "pull", fake.ref(), str(tmp_path / "out"), "--plain-http"],
        env=env_for(tmp_path, fake.host),
    )
    assert done.returncode == 0, done.stderr
    asked = [h for _m, p, h in fake.requests if p.startswith("/token")]
    assert asked and asked[0]["Authorization"].startswith("Basic ")
    assert token not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("code", "shown"),
    [
        # a registry echoing what it was sent, cut anywhere: no piece of it is repeated
        (base64.b64encode(f"user:{PASSWORD}".encode()).decode(), ""),
        (base64.b64encode(f"user:{PASSWORD}".encode()).decode()[:20], ""),
        (PASSWORD.upper().replace("-", "_"), ""),
        ("MANIFEST_UNKNOWN", ", MANIFEST_UNKNOWN"),  # a code of the OCI specification is shown
    ],
    ids=["credential", "cut-credential", "code-shaped-password", "oci-code"],
)
def test_an_error_code_is_shown_only_when_the_specification_defines_it(
    fake: FakeRegistry, tmp_path: Path, code: str, shown: str
) -> None:
    basic_auth(fake)
    body = json.dumps({"errors": [{"code": code, "message": "x"}]}).encode()
    fake.hooks[f"/v2/{REPO}/manifests/{TAG}"] = lambda h: send(h, 500, body)
    message = refused(fake, tmp_path)
    assert f"(HTTP 500{shown});" in message
    if not shown:
        assert code not in message


def test_a_token_service_that_refuses_is_one_line(fake: FakeRegistry, tmp_path: Path) -> None:
    fake.challenge = f'Bearer realm="http://{fake.host}/token",service="fake"'
    fake.hooks["/token"] = lambda h: send(h, 401, b"{}")
    refused(fake, tmp_path)


# --------------------------------------------------------------------------- the manifest


def test_a_manifest_served_as_another_media_type_is_refused(
    fake: FakeRegistry, tmp_path: Path
) -> None:
    fake.media = "application/vnd.docker.distribution.manifest.v2+json"
    refused(fake, tmp_path)


def test_an_image_that_is_not_a_bundle_is_refused(fake: FakeRegistry, tmp_path: Path) -> None:
    doc = json.loads(fake.manifest)
    doc["artifactType"] = "application/vnd.example.other"
    fake.manifest = json.dumps(doc).encode()
    assert "artifactType" in refused(fake, tmp_path)


def test_a_manifest_larger_than_4_mib_is_refused(fake: FakeRegistry, tmp_path: Path) -> None:
    doc = json.loads(fake.manifest)
    doc["annotations"]["padding"] = "x" * (5 << 20)
    fake.manifest = json.dumps(doc).encode()
    assert "4 MiB" in refused(fake, tmp_path)


def test_a_manifest_that_is_not_json_is_refused(fake: FakeRegistry, tmp_path: Path) -> None:
    fake.manifest = b"[" * 100000
    refused(fake, tmp_path)


def test_a_digest_reference_served_another_manifest_is_refused(
    fake: FakeRegistry, tmp_path: Path
) -> None:
    pinned = fake.ref(f"{REPO}@{digest_of(b'something else')}")
    refused(fake, tmp_path, pinned)


def test_a_config_that_is_not_the_bundles_manifest_is_refused(
    fake: FakeRegistry, built: Built, tmp_path: Path
) -> None:
    serve(fake, rebuilt(built, built.layers, config=built.config + b"\n# changed\n"))
    assert "config" in refused(fake, tmp_path)


# --------------------------------------------------------------------------- the layers


Members = tuple[tuple[str, bytes | None, bytes], ...]

# One part's layer swapped for a hand-made tar: the part, the tar's members (name, data, type)
# and a fragment of the one-line refusal ("" where the wording is not the point). Every one is
# refused before anything is published, and nothing lands outside the destination.
SWAPPED_LAYERS: dict[str, tuple[str, Members, str]] = {
    # a root file (config.toml) in the workspace layer would replace metadata's
    "unpacks_over_another_layers_file": (
        "workspace",
        (("config.toml", b"evil", tarfile.REGTYPE),),
        "not its part",
    ),
    "carries_another_part": (
        "skills",
        (("workspace", None, tarfile.DIRTYPE), ("workspace/x", b"1", tarfile.REGTYPE)),
        "",
    ),
    "holds_a_link": (
        "workspace",
        (("workspace", None, tarfile.DIRTYPE), ("workspace/l", None, tarfile.SYMTYPE)),
        "",
    ),
    "climbs_out": ("metadata", (("../escape.txt", b"x", tarfile.REGTYPE),), ""),
    # blobs intact, tars well-formed, but a workspace file differs from the bundle's checksums:
    # the bundle's own verification refuses it before the swap
    "fails_the_bundles_checksums": (
        "workspace",
        (
            ("workspace", None, tarfile.DIRTYPE),
            ("workspace/README.md", b"# tampered\n", tarfile.REGTYPE),
        ),
        "verify",
    ),
}


@pytest.mark.parametrize("case", SWAPPED_LAYERS)
def test_a_layer_is_refused_before_publishing_when_it(
    fake: FakeRegistry, built: Built, tmp_path: Path, case: str, dest_name: str
) -> None:
    part, members, fragment = SWAPPED_LAYERS[case]
    layers = [(title, tar_of(*members) if title == part else d) for title, d in built.layers]
    serve(fake, rebuilt(built, layers))
    assert fragment in refused(fake, tmp_path, dest_name=dest_name)
    assert not (tmp_path.parent / "escape.txt").exists()


def with_member(layer: bytes, name: str, data: bytes) -> bytes:
    """The layer with one more regular file appended, listed in the layer's checksums.xxh3
    (when it holds one, as the metadata layer does), so that only its name is at fault."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(layer)) as source,
        tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        for member in source.getmembers():
            content = source.extractfile(member)
            if member.name == CHECKSUMS_NAME and content is not None:
                listed = [*parse_checksums(content.read()), (xxh3_128_hexdigest(data), name)]
                raw = render_checksums(listed)
                member.size, content = len(raw), io.BytesIO(raw)
            archive.addfile(member, content)
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_a_metadata_file_named_like_another_part_is_refused(
    fake: FakeRegistry, built: Built, tmp_path: Path, dest_name: str
) -> None:
    """The metadata layer may hold files at the root only, and none may take the name of a part
    another layer carries: whichever lands first, the other would be written over."""
    layers = [
        (title, with_member(data, "workspace", b"not a folder") if title == "metadata" else data)
        for title, data in built.layers
    ]
    serve(fake, rebuilt(built, layers))
    assert "would overwrite workspace of another layer" in refused(
        fake, tmp_path, dest_name=dest_name
    )


def test_two_layers_for_one_part_are_refused(
    fake: FakeRegistry, built: Built, tmp_path: Path, dest_name: str
) -> None:
    serve(fake, rebuilt(built, [*built.layers, built.layers[-1]]))
    refused(fake, tmp_path, dest_name=dest_name)


def test_a_refused_pull_leaves_an_existing_bundle_untouched(
    fake: FakeRegistry, built: Built, tmp_path: Path
) -> None:
    dest = tmp_path / "out"
    # not through the cache, which would serve the second pull the good workspace blob
    good = run_cli(
        ["bundle", "pull", fake.ref(), str(dest), "--plain-http", "--no-cache"],
        env=env_for(tmp_path, fake.host),
    )
    assert good.returncode == 0, good.stderr
    before = tree_snapshot(dest)
    path = layer_path(fake, built, "workspace")
    fake.hooks[path] = lambda h: send(h, 200, b"x" * len(built.layers[0][1]))
    done = run_cli(
        ["bundle", "pull", fake.ref(), str(dest), "--plain-http", "--force"],
        env=env_for(tmp_path, fake.host),
    )
    assert done.returncode in (1, 3) and one_error(done.stderr), done.stderr
    assert tree_snapshot(dest) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docker", "out"]


def test_artifact_titles_are_checked(built: Built) -> None:
    """The parser alone: a layer title that is not a part name is refused."""
    doc = json.loads(built.manifest())
    doc["layers"][0]["annotations"][art.TITLE] = "../x"
    with pytest.raises(Exception, match="title"):
        art.parse_manifest(json.dumps(doc).encode(), "application/vnd.oci.image.manifest.v1+json")


# --------------------------------------------------------------------------- pull into an archive


def rewritten(
    layer: bytes, order: Callable[[list[tarfile.TarInfo]], list[tarfile.TarInfo]]
) -> bytes:
    """The layer as another tar program might write it: GNU headers, an owner, a time, and its
    members in ``order``; the same names, kinds, modes and contents."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(layer)) as source,
        tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as archive,
    ):
        for member in order(source.getmembers()):
            member.mtime, member.uid, member.uname = 1_700_000_000, 1000, "someone"
            archive.addfile(member, source.extractfile(member) if member.isfile() else None)
    return out.getvalue()


def folders_then_files_reversed(members: list[tarfile.TarInfo]) -> list[tarfile.TarInfo]:
    """Still every folder before its contents, but not the order a bundle archive has."""
    return [m for m in members if m.isdir()] + [m for m in reversed(members) if not m.isdir()]


def dirty_padding(layer: bytes) -> bytes:
    """The layer with the padding after each file's data set to 0xff (no tar program writes
    it; a reader that skipped it would take two different layers for one)."""
    raw = bytearray(layer)
    with tarfile.open(fileobj=io.BytesIO(layer)) as archive:
        for member in archive.getmembers():
            end = member.offset_data + member.size
            if member.isfile() and end % tarfile.BLOCKSIZE:
                raw[end : end + -end % tarfile.BLOCKSIZE] = b"\xff" * (-end % tarfile.BLOCKSIZE)
    return bytes(raw)


LAYER_FORMS: dict[str, Callable[[bytes], bytes]] = {
    "bundlers_own": lambda layer: layer,
    "written_by_another_tar": lambda layer: rewritten(layer, list),
    "in_another_order": lambda layer: rewritten(layer, folders_then_files_reversed),
}


def test_a_layer_padded_with_bytes_that_are_not_zeros_is_refused(
    fake: FakeRegistry, built: Built, tmp_path: Path, dest_name: str
) -> None:
    layers = [
        (title, dirty_padding(data) if title == "workspace" else data)
        for title, data in built.layers
    ]
    serve(fake, rebuilt(built, layers))
    message = refused(fake, tmp_path, dest_name=dest_name, code=3)
    assert "padded with bytes that are not zeros" in message, message


def pull_into_folder_and_archive(server: FakeRegistry, tmp_path: Path) -> None:
    """``bundle pull`` of the served artifact into ``tmp_path/folder`` and ``bundle.tar``."""
    env = env_for(tmp_path, server.host)
    for dest in ("folder", "bundle.tar"):
        done = run_cli(
            ["bundle", "pull", server.ref(), str(tmp_path / dest), "--plain-http"], env=env
        )
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("form", LAYER_FORMS)
def test_pull_into_an_archive_gives_the_bundles_own_archive_from_layers(
    fake: FakeRegistry, built: Built, tmp_path: Path, form: str
) -> None:
    """Whatever tar form the layers have, ``pull REF FILE.tar`` writes the one deterministic
    archive of the bundle (the bytes ``bundle pack`` gives of the same bundle pulled into a
    folder), though its workspace and skills were never unpacked."""
    layers = [(title, LAYER_FORMS[form](data)) for title, data in built.layers]
    serve(fake, rebuilt(built, layers))
    pull_into_folder_and_archive(fake, tmp_path)
    assert (tmp_path / "bundle.tar").read_bytes() == bf.pack_bytes(tmp_path / "folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle.tar", "docker", "folder"]


@pytest.mark.parametrize("form", ["written_by_another_tar", "in_another_order"])
def test_a_long_layer_of_another_form_is_rewritten_from_what_was_written_past_the_cache(
    built: Built, tmp_path: Path, form: str
) -> None:
    """A workspace layer long enough to be written with direct writes (a 48 MB file), in a
    form that must be written anew: its members are read back from the staging file, where
    they went past the page cache, and give the pack's bytes."""
    big = build(bf.big_bundle(tmp_path, "big", b"long"))
    layers = [(title, LAYER_FORMS[form](data)) for title, data in big.layers]
    assert max(len(data) for _title, data in layers) > 16 << 20
    server = FakeRegistry(big)
    try:
        serve(server, rebuilt(big, layers))
        pull_into_folder_and_archive(server, tmp_path)
    finally:
        server.close()
    assert (tmp_path / "bundle.tar").read_bytes() == bf.pack_bytes(tmp_path / "folder")


@pytest.mark.parametrize(
    "token",
    [
        "Tok-Line\r\nX-Evil: 1-Secret-77",
        "Tok-Newline\nSecret-77",
        "Tok-Nul\0Secret-77",
        "Tok-Ünïcode-Сек-77",
        "Tok-Tab\tSecret-77",
    ],
    ids=["crlf", "lf", "nul", "non-latin-1", "tab"],
)
def test_a_token_that_cannot_travel_in_a_header_is_refused(
    fake: FakeRegistry, tmp_path: Path, token: str
) -> None:
    fake.challenge = f'Bearer realm="http://{fake.host}/token",service="fake"'
    fake.hooks["/token"] = lambda h: send(h, 200, json.dumps({"token": token}).encode())
    message = refused(fake, tmp_path)
    assert "token" in message
    for piece in ("Secret-77", "Сек"):
        assert piece not in message


@pytest.mark.parametrize(
    ("entry", "challenge"),
    [
        ('{"username": "user", "password": "Pass-\\ud800-Secret-77"}', "basic"),
        ('{"username": "us\\udfffer", "password": "Pass-Secret-77"}', "basic"),
        ('{"identitytoken": "Refresh-\\ud800-Secret-77"}', "bearer"),
        ('{"username": "user", "password": "Pass-\\ud800-Secret-77"}', "bearer"),
    ],
    ids=["password_basic", "username_basic", "identity_token", "password_bearer"],
)
def test_credentials_that_are_not_text_are_refused_naming_the_config(
    fake: FakeRegistry, tmp_path: Path, entry: str, challenge: str
) -> None:
    """JSON can escape a lone surrogate, which no encoding can send: it used to end in a
    traceback when the credentials were first encoded."""
    if challenge == "basic":
        fake.challenge = 'Basic realm="hostile"'
    else:
        fake.challenge = f'Bearer realm="http://{fake.host}/token",service="fake"'
        fake.hooks["/token"] = lambda h: send(h, 200, b'{"token": "t0ken-never-used"}')
    done = inspect_with_docker_config(fake, tmp_path, f'{{"auths": {{"{fake.host}": {entry}}}}}')
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "Traceback" not in done.stderr
    assert "Secret-77" not in done.stdout + done.stderr
    assert str(tmp_path / "docker" / "config.json") in done.stderr
    assert "not valid text; log in again ('bundler login" in done.stderr


def test_a_credential_helper_answering_credentials_that_are_not_text_is_refused(
    fake: FakeRegistry, tmp_path: Path
) -> None:
    basic_auth(fake)
    helpers = tmp_path / "bin"
    helpers.mkdir()
    helper = helpers / "docker-credential-odd"
    helper.write_text(
        '#!/bin/sh\necho \'{"Username": "user", "Secret": "Pass-\\ud800-Secret-77"}\'\n'
    )
    helper.chmod(0o755)
    done = inspect_with_docker_config(
        fake, tmp_path, '{"credsStore": "odd"}', {"PATH": f"{helpers}:{os.environ['PATH']}"}
    )
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "Secret-77" not in done.stdout + done.stderr
    assert "docker-credential-odd" in done.stderr


@pytest.mark.parametrize(
    "auth",
    ["!!not-base64", "dXNlcjpw\\u00fcw==", "\\ud800", "/w=="],
    ids=["not_base64", "non_ascii", "lone_surrogate", "not_utf8"],
)
def test_a_docker_auth_that_is_not_base64_of_text_is_refused_naming_the_config(
    fake: FakeRegistry, tmp_path: Path, auth: str
) -> None:
    basic_auth(fake)
    done = inspect_with_docker_config(
        fake, tmp_path, f'{{"auths": {{"{fake.host}": {{"auth": "{auth}"}}}}}}'
    )
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "is not base64 of user:password; log in again ('bundler login" in done.stderr


@pytest.mark.parametrize("case", HOSTILE_AUTH_FILES)
def test_a_hostile_auth_json_is_refused_in_one_line_naming_it(
    fake: FakeRegistry, tmp_path: Path, case: str
) -> None:
    basic_auth(fake)
    make, words = HOSTILE_AUTH_FILES[case]
    runtime = tmp_path / "run"
    (runtime / "containers").mkdir(parents=True)
    auth_json = runtime / "containers" / "auth.json"
    make(auth_json, fake.host)
    done = run_cli(
        ["bundle", "inspect", fake.ref(), "--plain-http"],
        env={"XDG_RUNTIME_DIR": str(runtime), "HOME": str(tmp_path)},
        timeout=60,
    )
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert str(auth_json) in done.stderr and words in done.stderr
    assert "Traceback" not in done.stderr and "AAAA" not in done.stderr
