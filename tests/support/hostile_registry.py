"""A small scripted registry (stdlib ``http.server`` in a thread) for the hostile-registry tests.

It serves one artifact (a manifest and its blobs, built in process from a real bundle exactly as
``bundle push`` builds them) and lets a test break any answer: a handler per path, a different
media type, a 401 for everything. Every request it receives is recorded with its headers, so a
test can prove no credential went where it must not.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import socket
import struct
import threading
import time
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bundler.bundle.archive_write import write_tar
from bundler.bundle.manifest import MANIFEST_NAME
from bundler.fs.durable import open_dir
from bundler.registry import artifact as art
from bundler.registry.distribution import OCI_MANIFEST
from bundler.registry.push import plan_layers

REPO = "agents/r"
TAG = "1"

Hook = Callable[[BaseHTTPRequestHandler], None]


def digest_of(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


@dataclass
class Built:
    """An artifact in memory: the manifest's parts and every blob by digest."""

    config: bytes
    layers: list[tuple[str, bytes]]  # (title, tar bytes)
    annotations: dict[str, str] = field(default_factory=dict)

    def descriptors(self) -> tuple[art.Descriptor, list[art.Descriptor]]:
        config = art.Descriptor(art.CONFIG_TYPE, digest_of(self.config), len(self.config))
        layers = [
            art.Descriptor(art.LAYER_TYPE, digest_of(data), len(data), title)
            for title, data in self.layers
        ]
        return config, layers

    def manifest(self) -> bytes:
        config, layers = self.descriptors()
        return art.render_manifest(art.Artifact(config, layers, self.annotations))

    def blobs(self) -> dict[str, bytes]:
        found = {digest_of(self.config): self.config}
        found.update({digest_of(data): data for _title, data in self.layers})
        return found


def build(bundle: Path) -> Built:
    """The artifact ``bundle push`` would make of ``bundle``."""
    fd = open_dir(bundle, follow=False)
    try:
        layers = []
        for layer in plan_layers(fd):
            out = io.BytesIO()
            write_tar(fd, layer.names, out)
            layers.append((layer.title, out.getvalue()))
    finally:
        os.close(fd)
    return Built((bundle / MANIFEST_NAME).read_bytes(), layers)


class FakeRegistry:
    """Serves ``manifest`` under ``REPO:TAG`` and ``blobs``; ``hooks`` replace any path."""

    def __init__(self, built: Built | None = None, host: str = "127.0.0.1") -> None:
        self.manifest = built.manifest() if built else b"{}"
        self.media = OCI_MANIFEST
        self.blobs = built.blobs() if built else {}
        self.hooks: dict[str, Hook] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.challenge: str | None = None
        self.accept_auth: Callable[[str], bool] = lambda _value: False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: Any) -> None:
                pass

            def _handle(self) -> None:
                fake.requests.append((self.command, self.path, dict(self.headers.items())))
                path = self.path.split("?", 1)[0]
                hook = fake.hooks.get(path)
                if hook is not None:
                    hook(self)
                    return
                if fake.challenge is not None and not fake.accept_auth(
                    self.headers.get("Authorization", "")
                ):
                    send(self, 401, b"{}", {"WWW-Authenticate": fake.challenge})
                    return
                if path == "/v2/":
                    send(self, 200, b"{}")
                elif path == f"/v2/{REPO}/manifests/{TAG}" or path.startswith(
                    f"/v2/{REPO}/manifests/sha256:"
                ):
                    send(self, 200, fake.manifest, {"Content-Type": fake.media})
                elif path.startswith(f"/v2/{REPO}/blobs/"):
                    blob = fake.blobs.get(path.rsplit("/", 1)[1])
                    if blob is None:
                        send(self, 404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}')
                    else:
                        send(self, 200, blob, {"Content-Type": "application/octet-stream"})
                else:
                    send(self, 404, b"{}")

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = _handle

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.host = f"{host}:{self.server.server_address[1]}"

    def ref(self, tail: str = f"{REPO}:{TAG}") -> str:
        return f"oci://{self.host}/{tail}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def send(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: bytes,
    headers: dict[str, str] | None = None,
    *,
    length: int | None = None,
) -> None:
    """Answer with ``body``; ``length`` overrides the Content-Length (-1: none, close after)."""
    handler.send_response(status)
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    declared = len(body) if length is None else length
    if declared >= 0:
        handler.send_header("Content-Length", str(declared))
    else:
        handler.send_header("Connection", "close")
        handler.close_connection = True
    handler.end_headers()
    if handler.command != "HEAD":
        with contextlib.suppress(OSError):
            handler.wfile.write(body)


def send_garbled(
    handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str] | None = None
) -> None:
    """Answer ``status`` with a body in chunked transfer encoding that breaks it after one good
    chunk (a chunk size that is no number), then close: HTTP's own framing broken mid-body."""
    handler.send_response(status)
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(b"10\r\nsixteen bytes...\r\nzz\r\nnot a chunk size\r\n")
    handler.close_connection = True


def send_then_drop(
    handler: BaseHTTPRequestHandler, body: bytes, *, keep: int, reset: bool, declared: bool = True
) -> None:
    """Answer 200 for ``body`` (its Content-Length declared, or none: the body runs to the
    close), send its first ``keep`` bytes, then drop the connection: closed (FIN), as a registry
    that dies does, or, with ``reset``, reset (RST, a zero linger), as a crashed proxy does."""
    handler.send_response(200)
    if declared:
        handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body[:keep])
    handler.wfile.flush()
    if reset:
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    else:
        handler.connection.shutdown(socket.SHUT_RDWR)
    handler.connection.close()
    handler.wfile = io.BytesIO()  # the handler's own flush at the end has nowhere to go
    handler.close_connection = True


DROPPED_BLOBS: dict[str, Callable[[bytes], Hook]] = {
    "closed_mid_blob": lambda body: (
        lambda h: send_then_drop(h, body, keep=len(body) // 2, reset=False)
    ),
    "closed_mid_blob_of_no_declared_length": lambda body: (
        lambda h: send_then_drop(h, body, keep=len(body) // 2, reset=False, declared=False)
    ),
    "closed_before_the_first_byte": lambda body: (
        lambda h: send_then_drop(h, body, keep=0, reset=False)
    ),
    "reset_mid_blob": lambda body: (
        lambda h: send_then_drop(h, body, keep=len(body) // 2, reset=True)
    ),
}
"""A blob's answer whose connection drops before the blob is whole (made of the good blob):
the network's failure, never a verdict on the artifact."""


def _ranged(
    answer: Callable[[BaseHTTPRequestHandler, bytes, int], None],
) -> Callable[[bytes], Hook]:
    """A blob's hook that gives a ``Range`` request (``bytes=N-``) to ``answer(handler, body,
    N)`` and serves any other request the whole, good ``body``."""

    def hook(body: bytes) -> Hook:
        def serve(handler: BaseHTTPRequestHandler) -> None:
            asked = handler.headers.get("Range", "")
            if asked.startswith("bytes=") and asked.endswith("-"):
                answer(handler, body, int(asked[6:-1]))
            else:
                send(handler, 200, body)

        return serve

    return hook


def _flipped(data: bytes) -> bytes:
    return bytes([data[0] ^ 1]) + data[1:] if data else data


def _from(at: int, body: bytes) -> dict[str, str]:
    """The ``Content-Range`` of ``body`` from byte ``at`` to its end."""
    return {"Content-Range": f"bytes {at}-{len(body) - 1}/{len(body)}"}


RANGED_ANSWERS: dict[str, Callable[[bytes], Hook]] = {
    "ignored_the_whole_blob_sent": _ranged(lambda h, body, _at: send(h, 200, body)),
    "another_range_sent": _ranged(
        lambda h, body, at: send(h, 206, body[at // 2 :], _from(at // 2, body))
    ),
    "not_satisfiable": _ranged(
        lambda h, body, _at: send(h, 416, b"{}", {"Content-Range": f"bytes */{len(body)}"})
    ),
    "other_bytes_in_the_range": _ranged(
        lambda h, body, at: send(h, 206, _flipped(body[at:]), _from(at, body))
    ),
    "a_range_with_no_content_range": _ranged(lambda h, body, at: send(h, 206, body[at:])),
}
"""A registry's answers to the ``Range`` request that resumes a dropped blob (whose first
half the cache holds): each must end with the right blob, whole, or nothing kept, never a
blob made of bytes that are not its digest's."""


def _huge_auth_file(path: Path) -> None:
    with path.open("w", encoding="utf-8") as out:
        out.write('{"auths": {"x": {"auth": "')
        out.write("A" * (2 << 20))
        out.write('"}}}')


HOSTILE_AUTH_FILES: dict[str, tuple[Callable[[Path, str], None], str]] = {
    "huge": (lambda path, _host: _huge_auth_file(path), "larger than"),
    "not_json": (
        lambda path, _host: path.write_text('{"auths": {', encoding="utf-8"),
        "is not valid JSON",
    ),
    "a_link_to_dev_zero": (lambda path, _host: path.symlink_to("/dev/zero"), "not a regular"),
    "a_link_to_a_folder": (lambda path, _host: path.symlink_to(path.parent), "not a regular"),
    "auth_not_base64": (
        lambda path, host: path.write_text(
            json.dumps({"auths": {host: {"auth": "not base64!"}}}), encoding="utf-8"
        ),
        "is not base64 of user:password",
    ),
    "auth_base64_of_no_text": (
        lambda path, host: path.write_text(
            json.dumps({"auths": {host: {"auth": base64.b64encode(b"u:\xff\xfe").decode()}}}),
            encoding="utf-8",
        ),
        "is not base64 of user:password",
    ),
}
"""containers' ``auth.json`` as no login tool writes it, made at a path for a registry host,
and the words the one-line refusal must hold (it names the file, never its content)."""


def busy(status: int, retry_after: str | None = None) -> Hook:
    """An answer that says the registry is busy (``status``), with ``Retry-After`` when given."""
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    return lambda h: send(h, status, b'{"errors":[{"code":"TOOMANYREQUESTS"}]}', headers)


BUSY_STORMS: dict[str, Hook] = {
    "429_retry_after_999999": busy(429, "999999"),
    "429_retry_after_a_past_date": busy(429, "Wed, 21 Oct 2015 07:28:00 GMT"),
    "429_retry_after_garbage": busy(429, "soon, maybe \x7f"),
    "502": busy(502),
    "503": busy(503),
    "504_retry_after_negative": busy(504, "-5"),
}
"""A registry that answers every request of one path as busy, for ever: retried within the
bounds of :mod:`bundler.rules.retry`, then one line, exit 1, "try again"."""


def drip(body: bytes, delay: float = 1.0) -> Hook:
    """Answer 200 for ``body`` (its length declared) one byte every ``delay`` seconds."""

    def hook(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        for i in range(len(body)):
            try:
                handler.wfile.write(body[i : i + 1])
                handler.wfile.flush()
            except OSError:
                return
            time.sleep(delay)

    return hook


PROXY_ANSWERS: dict[str, tuple[bytes, str]] = {
    "closes": (b"", "through the proxy http://***@127.0.0.1"),
    "answers_407": (
        b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n",
        "HTTP 407); it asks for credentials",
    ),
}
"""A proxy that will not open the tunnel to the registry: what it sends after reading the
CONNECT (nothing: it closes), and the words of the one-line refusal."""


HOSTILE_TAG_NAMES: list[str] = ["../../../v2/", "a tag\r\nX-Injected: 1", "x?n=1#frag", ""]
"""Names a tag list may hold that no registry can tag (a path, a header injection, a query,
nothing): a client that looks tags up must put none into a request's address."""


HOSTILE_REGISTRIES_CONFS: dict[str, str] = {
    "not_toml": "[[registry]\nlocation = 'x'\n",
    "registry_not_a_table_array": "registry = 5\n",
    "insecure_not_a_boolean": "[[registry]]\nlocation = 'HOST'\ninsecure = 'yes'\n",
    "no_location": "[[registry]]\ninsecure = true\n",
    "mirror_not_a_table": "[[registry]]\nlocation = 'HOST'\nmirror = [1]\n",
    "pull_from_mirror_unknown": (
        "[[registry]]\nlocation = 'HOST'\n[[registry.mirror]]\nlocation = 'm'\n"
        "pull-from-mirror = 'sometimes'\n"
    ),
}
"""registries.conf files containers would not load ('HOST' is the registry's address): each
refused in one line naming the file, exit 3, before any request."""


def _tags_page(body: bytes, link: str | None = None) -> Hook:
    headers = {"Content-Type": "application/json"}
    if link is not None:
        headers["Link"] = link
    return lambda h: send(h, 200, body, headers)


def _huge_tags(handler: BaseHTTPRequestHandler) -> None:
    """A 100 MB tag list, its length declared, streamed until the client stops reading."""
    size = 100 << 20
    handler.send_response(200)
    handler.send_header("Content-Length", str(size))
    handler.end_headers()
    chunk = b" " * (1 << 20)
    with contextlib.suppress(OSError):
        handler.wfile.write(b'{"tags": [')
        for _ in range(100):
            handler.wfile.write(chunk)


def _endless_empty_pages(handler: BaseHTTPRequestHandler) -> None:
    """Pages of no tags, each naming a next page at an address never used before: a listing
    that never ends unless the client stops at a page that brings nothing."""
    query = handler.path.partition("?")[2]
    page = int(query.removeprefix("page=") or 0) if query.startswith("page=") else 0
    link = f'</v2/{REPO}/tags/list?page={page + 1}>; rel="next"'
    send(handler, 200, b'{"tags": []}', {"Content-Type": "application/json", "Link": link})


HOSTILE_TAG_LISTS: dict[str, tuple[Hook, str]] = {
    "empty_pages_whose_next_page_is_always_new": (_endless_empty_pages, "no tags"),
    "link_loops_to_the_first_page": (
        _tags_page(b'{"tags": ["1"]}', f'</v2/{REPO}/tags/list>; rel="next"'),
        "loops back",
    ),
    "link_to_another_host": (
        _tags_page(b'{"tags": ["1"]}', '<http://elsewhere.example/v2/x/tags/list>; rel="next"'),
        "another host",
    ),
    "link_to_no_web_address": (
        _tags_page(b'{"tags": ["1"]}', '<javascript:alert(1)>; rel="next"'),
        "another host",
    ),
    "a_million_tags": (
        _tags_page(json.dumps({"tags": [f"t{i}" for i in range(1_000_000)]}).encode()),
        "larger than",
    ),
    "a_100_mb_body": (_huge_tags, "larger than"),
    "tags_not_strings": (_tags_page(b'{"tags": [1, 2]}'), "unreadable tag list"),
    "not_json": (_tags_page(b"tags: 1"), "unreadable tag list"),
}
"""A repository's tag list as no registry should send it: each refused in one line, exit 3."""


# --- data-home backups as artifacts ----------------------------------------------------------


@dataclass
class BuiltBackup:
    """A data-home backup's artifact in memory, made as ``home backup --to oci://`` makes it:
    the ``backup.json`` blob and each part's zip, by title."""

    index: bytes
    parts: list[tuple[str, bytes]]
    created_at: str

    def manifest(self, *, artifact_type: str | None = None) -> bytes:
        from bundler.registry import backup_artifact as bart

        artifact = bart.BackupArtifact(
            art.Descriptor(bart.INDEX_TYPE, digest_of(self.index), len(self.index)),
            [
                art.Descriptor(bart.PART_TYPE, digest_of(data), len(data), title)
                for title, data in self.parts
            ],
            self.created_at,
            1,
            1,
            "demo",
        )
        data = bart.render_manifest(artifact)
        if artifact_type is not None:
            doc = json.loads(data)
            doc["artifactType"] = artifact_type
            data = json.dumps(doc).encode()
        return data

    def blobs(self) -> dict[str, bytes]:
        found = {digest_of(self.index): self.index}
        found.update({digest_of(data): data for _title, data in self.parts})
        return found


def build_backup(project: Path, scratch: Path, environ: dict[str, str]) -> BuiltBackup:
    """The artifact ``home backup --to oci://`` would push of ``project``'s data home."""
    from bundler.home.backup import backup_home
    from bundler.home.backup_parts import split_backup
    from bundler.home.zipindex import parse_index

    scratch.mkdir()
    made = backup_home(project, to=scratch / "b.zip", environ=environ, full=True)
    index, parts = split_backup(made.path, scratch)
    return BuiltBackup(
        index,
        [(part.title, part.path.read_bytes()) for part in parts],
        parse_index(index).created_at,
    )


def _serve_backup(fake: FakeRegistry, built: BuiltBackup, manifest: bytes | None = None) -> str:
    """Serve ``built`` from ``fake``; returns the reference pinned to its manifest."""
    fake.manifest = built.manifest() if manifest is None else manifest
    fake.blobs = built.blobs()
    return fake.ref(f"{REPO}@{digest_of(fake.manifest)}")


def _part(built: BuiltBackup, title: str) -> bytes:
    return next(data for name, data in built.parts if name == title)


def _tampered_part(fake: FakeRegistry, built: BuiltBackup) -> str:
    """The registry answers the files part's digest with other bytes of the same length."""
    ref = _serve_backup(fake, built)
    data = bytearray(_part(built, "files"))
    data[len(data) // 2] ^= 0xFF
    fake.blobs[digest_of(_part(built, "files"))] = bytes(data)
    return ref


def _titles_swapped(fake: FakeRegistry, built: BuiltBackup) -> str:
    """Digests all right, but the files part is titled as the database and back."""
    titles = {"files": "chat.db", "chat.db": "files"}
    swapped = BuiltBackup(
        built.index, [(titles.get(t, t), d) for t, d in built.parts], built.created_at
    )
    return _serve_backup(fake, swapped)


def _index_lies(fake: FakeRegistry, built: BuiltBackup) -> str:
    """A sound set of parts under a ``backup.json`` listing another digest for a file."""
    index = json.loads(built.index)
    for entry in index["entries"]:
        if entry["path"] == "files/a.txt":
            entry["xxh3_128"] = "0" * 32
    lying = BuiltBackup(json.dumps(index).encode(), built.parts, built.created_at)
    return _serve_backup(fake, lying)


def _part_missing(fake: FakeRegistry, built: BuiltBackup) -> str:
    """The manifest leaves the files part out: backup.json lists what no part holds."""
    short = BuiltBackup(
        built.index, [(t, d) for t, d in built.parts if t != "files"], built.created_at
    )
    return _serve_backup(fake, short)


def _bundle_type(fake: FakeRegistry, built: BuiltBackup) -> str:
    """A backup's blobs under a manifest saying it is an agent bundle."""
    return _serve_backup(fake, built, built.manifest(artifact_type=art.ARTIFACT_TYPE))


def _title_escapes(fake: FakeRegistry, built: BuiltBackup) -> str:
    """A part titled with a path that climbs out."""
    climbing = BuiltBackup(
        built.index,
        [("skills/../../x" if t == "skills/s1" else t, d) for t, d in built.parts],
        built.created_at,
    )
    return _serve_backup(fake, climbing)


def _not_a_zip(fake: FakeRegistry, built: BuiltBackup) -> str:
    """A part whose blob (its digest its own) is no zip at all."""
    junk = BuiltBackup(
        built.index,
        [(t, b"not a zip" if t == "skills/s1" else d) for t, d in built.parts],
        built.created_at,
    )
    return _serve_backup(fake, junk)


def _with_files_part(fake: FakeRegistry, built: BuiltBackup, extra: Callable[[Any], None]) -> str:
    """The files part with ``extra`` writing more entries into it (a real zip)."""
    buffer = io.BytesIO(_part(built, "files"))
    with zipfile.ZipFile(buffer, "a") as part, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a duplicate name is the point of one case
        extra(part)
    changed = BuiltBackup(
        built.index,
        [(t, buffer.getvalue() if t == "files" else d) for t, d in built.parts],
        built.created_at,
    )
    return _serve_backup(fake, changed)


def _entry(name: str, data: bytes, mode: int = 0o100600, deflated: bool = False) -> Any:
    info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
    info.create_system = 3
    info.external_attr = mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED if deflated else zipfile.ZIP_STORED
    return lambda part: part.writestr(info, data)


def _climbing_entry(fake: FakeRegistry, built: BuiltBackup) -> str:
    """The files part holds ``files/../../escaped``."""
    return _with_files_part(fake, built, _entry("files/../../escaped", b"x\n"))


def _symlink_entry(fake: FakeRegistry, built: BuiltBackup) -> str:
    """The files part holds a symbolic link to /etc/passwd."""
    return _with_files_part(fake, built, _entry("files/link", b"/etc/passwd", 0o120777))


def _bomb_entry(fake: FakeRegistry, built: BuiltBackup) -> str:
    """The files part holds 64 MiB of zeros deflated to a few KiB, listed nowhere."""
    return _with_files_part(fake, built, _entry("files/bomb", bytes(64 << 20), deflated=True))


def _entry_twice(fake: FakeRegistry, built: BuiltBackup) -> str:
    """The files part holds files/a.txt a second time, with other bytes."""
    return _with_files_part(fake, built, _entry("files/a.txt", b"other\n"))


def _encrypted(fake: FakeRegistry, built: BuiltBackup, change: Callable[[Any], None]) -> str:
    """An encrypted backup's manifest (one age layer under the empty config), with ``change``
    applied to its JSON; every blob it names is served."""
    from bundler.registry import backup_artifact as bart

    sealed = b"age-encryption.org/v1\n-> X25519 stand-in\n--- mac\n" + bytes(64)
    artifact = bart.encrypted_artifact(
        art.Descriptor(bart.ENCRYPTED_TYPE, digest_of(sealed), len(sealed)), built.created_at
    )
    doc = json.loads(bart.render_manifest(artifact))
    change(doc)
    ref = _serve_backup(fake, built, json.dumps(doc).encode())
    fake.blobs.update({digest_of(sealed): sealed, bart.EMPTY_DIGEST: bart.EMPTY_CONFIG})
    return ref


def _sealed_beside_a_part(fake: FakeRegistry, built: BuiltBackup) -> str:
    """The age layer and a plain part in one manifest: neither backup a push makes."""
    title, data = built.parts[0]

    def change(doc: Any) -> None:
        doc["layers"].append(
            art.Descriptor(
                "application/vnd.zeroclaw.agent.backup.part.v1.zip",
                digest_of(data),
                len(data),
                title,
            ).as_json()
        )

    return _encrypted(fake, built, change)


def _sealed_telling_its_files(fake: FakeRegistry, built: BuiltBackup) -> str:
    """An encrypted backup whose annotations give away its files' count and bytes."""

    def change(doc: Any) -> None:
        doc["annotations"].update(
            {"dev.zeroclaw.backup.files": "7", "dev.zeroclaw.backup.bytes": "9"}
        )

    return _encrypted(fake, built, change)


def _sealed_with_an_index(fake: FakeRegistry, built: BuiltBackup) -> str:
    """An encrypted backup whose config is a plain ``backup.json`` (file names, digests)."""

    def change(doc: Any) -> None:
        doc["config"] = art.Descriptor(
            "application/vnd.zeroclaw.agent.backup.index.v1+json",
            digest_of(built.index),
            len(built.index),
        ).as_json()

    return _encrypted(fake, built, change)


HOSTILE_BACKUP_ARTIFACTS: dict[str, tuple[Callable[[FakeRegistry, BuiltBackup], str], str]] = {
    "part_bytes_not_its_digest": (_tampered_part, "sha256"),
    "part_titles_swapped": (_titles_swapped, "not of that part"),
    "index_lists_another_digest": (_index_lies, "does not match"),
    "a_part_left_out": (_part_missing, "missing"),
    "a_bundle_s_manifest": (_bundle_type, "not a data-home backup"),
    "a_part_title_that_climbs_out": (_title_escapes, "not a part"),
    "a_part_that_is_no_zip": (_not_a_zip, "zip"),
    "an_entry_that_climbs_out": (_climbing_entry, "has a .. component"),
    "a_symbolic_link_entry": (_symlink_entry, "symbolic link"),
    "a_zip_bomb_entry_listed_nowhere": (_bomb_entry, "compression ratio"),
    "an_entry_twice_in_one_part": (_entry_twice, "more than once"),
    "an_encrypted_layer_beside_a_part": (_sealed_beside_a_part, "more than its one layer"),
    "an_encrypted_backup_telling_its_files": (_sealed_telling_its_files, "tells"),
    "an_encrypted_backup_with_an_index_config": (_sealed_with_an_index, "media type other"),
}
"""A data-home backup's artifact as a registry must not serve it (made from a real backup):
``home restore REF`` refuses each with one line, exit 3, restoring nothing; what the value's
words are, the refusal holds."""
