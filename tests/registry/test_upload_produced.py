"""``Session.upload_produced``: a layer's tar made a second time is sent as the body of a
monolithic upload whose digest and length the first pass found; against the real registry,
bytes that are not those (a file changed between the passes) store nothing."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import BinaryIO

import pytest
from support.registry_server import Registry

from bundler.errors import Refused
from bundler.registry.distribution import Session
from bundler.registry.reference import parse_reference
from bundler.registry.transport import Options

BODY = bytes(range(256)) * 8192  # 2 MiB: more than one chunk of the sender
DIGEST = f"sha256:{hashlib.sha256(BODY).hexdigest()}"


def session(registry: Registry) -> Session:
    return Session(
        parse_reference(registry.ref("produced/blob:1")),
        Options(plain_http=True),
        push=True,
        environ={},
    )


def writing(data: bytes) -> Callable[[BinaryIO], None]:
    def produce(out: BinaryIO) -> None:
        for at in range(0, len(data), 100_000):
            out.write(data[at : at + 100_000])

    return produce


def test_the_bytes_hashed_before_are_stored_under_their_digest(registry: Registry) -> None:
    with session(registry) as s:
        s.upload_produced(DIGEST, len(BODY), writing(BODY))
        assert s.blob_exists(DIGEST)


@pytest.mark.parametrize(
    "made",
    [
        pytest.param(BODY[:-1] + b"\x00", id="same length, other bytes"),
        pytest.param(BODY[:-4096], id="shorter"),
        pytest.param(BODY + b"more", id="longer"),
    ],
)
def test_bytes_other_than_the_ones_hashed_store_nothing(registry: Registry, made: bytes) -> None:
    mark = registry.mark()
    with session(registry) as s:
        with pytest.raises(Refused, match="not the ones hashed before"):
            s.upload_produced(DIGEST, len(BODY), writing(made))
        assert not s.blob_exists(DIGEST)
        # the session is usable again: the broken request's connection was dropped
        s.upload_produced(DIGEST, len(BODY), writing(BODY))
        assert s.blob_exists(DIGEST)
    assert len(registry.uploads_since(mark)) == 1


class _Recorded:
    """The one method of a connection the body sink uses, recording what it was given."""

    def __init__(self) -> None:
        self.sent = bytearray()

    def send(self, data: bytes | memoryview) -> None:
        self.sent += data


@pytest.mark.parametrize("chunks", [[BODY], [BODY[:5], BODY[5:]], [BODY[:-1], BODY[-1:]]])
def test_a_declared_body_is_never_whole_until_its_digest_is_checked(chunks: list[bytes]) -> None:
    """Bytes of the declared length whose digest is not the declared one: everything but the
    last byte goes out, and that byte never does, so a registry cannot hold the whole wrong
    body even for a moment."""
    from bundler.registry.streams import BodySink, NotAsHashed

    other = "sha256:" + hashlib.sha256(b"other bytes").hexdigest()
    for digest, body, whole in ((DIGEST, BODY, True), (other, BODY, False)):
        conn = _Recorded()
        sink = BodySink(conn, lambda: Refused("broken"), len(body))  # type: ignore[arg-type]
        for chunk in chunks:
            sink.write(chunk)
        assert bytes(conn.sent) == body[:-1]
        if whole:
            sink.end(digest)
            assert bytes(conn.sent) == body
        else:
            with pytest.raises(NotAsHashed):
                sink.end(digest)
            assert bytes(conn.sent) == body[:-1]
