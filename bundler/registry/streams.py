"""Bodies streamed both ways: a blob read as it arrives, never past its declared size and
checked against its sha256 at its end, with a stall bounded; and a request body written as it
is made, hashed as it goes.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import socket
import time
from collections.abc import Callable
from typing import BinaryIO

from bundler.errors import InvalidInput, Refused, RegistryRefused, RegistryUnreachable, Tampered
from bundler.registry.hashing import Hash, Sha256
from bundler.registry.network import (
    CLOSED,
    TIMED_OUT,
    cause_of,
    lost,
    shown_host,
)
from bundler.registry.transport import TIMEOUT, Transport, failure_reason, socket_of
from bundler.rules import retry
from bundler.rules.names import escape_display

_TAIL = 64 << 10
"""A blob's last bytes, read against one deadline rather than a low mark (see
:meth:`BlobStream._watched_read`); more than the reader's buffer and a TLS record together."""


def not_declared(shown: str, digest: str, why: str) -> InvalidInput:
    """The error for a blob from registry ``shown`` that is not the one its descriptor
    declares."""
    return Tampered(f"registry {shown}: blob {digest[:19]}… refused: {why}; nothing was written")


class BlobStream:
    """A blob as the registry sends it, read chunk by chunk: never more than its declared
    size, and :meth:`read` raises :class:`InvalidInput` instead of giving the end when the
    bytes that arrived were not the ones declared (longer, another sha256), and
    :class:`RegistryUnreachable` when the connection to ``netloc`` (the host that sends the blob)
    closed, was reset or timed out before they all arrived. Bytes read before the
    end are not yet checked: a caller acts on them only in ways it can undo. Use it as a
    context manager: leaving early drops the connection, whose stream would be out of step."""

    def __init__(
        self,
        session: Transport,
        response: http.client.HTTPResponse,
        netloc: str,
        digest: str,
        size: int,
        length_declared: bool,
        progress: Callable[[int], None] | None,
        *,
        start: int = 0,
        hashed: Hash | None = None,
    ) -> None:
        self._session = session
        self._response = response
        self._netloc = netloc
        self._digest = digest
        self.start = start
        """Where the bytes sent start in the blob: 0, or the end of what ``hashed`` (the
        sha256 of the blob's first ``start`` bytes) hashed, for the rest of a blob that an
        answer to a ``Range`` request sends."""
        self._left = size - start
        self._length_declared = length_declared
        self._progress = progress
        self._hash = Sha256(size - start, hashed)
        self._checked = False
        self._sock = socket_of(response)
        self._timings = retry.timings(session.auth.environ)
        self._tail_deadline: float | None = None

    def __enter__(self) -> BlobStream:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._hash.close()
        if not self._checked:
            self._session.drop_response(self._response)
        self._unwatch()

    def _unwatch(self) -> None:
        """The socket as every other answer reads it: any byte wakes a read."""
        if self._sock is not None and self._sock.fileno() >= 0:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
            self._sock.settimeout(TIMEOUT)

    def read(self, limit: int) -> bytes:
        """Up to ``limit`` bytes (``limit`` > 0), or ``b""`` at the end once it is checked."""
        if not self._left:
            self._check()
            return b""
        chunk = self._receive(min(limit, self._left))
        if not chunk:
            # the end of the stream before the declared size: whether the answer declared its
            # length or runs to the close, the connection closed before the blob was whole
            raise self._lost(CLOSED)
        self._hash.update(chunk)
        self._left -= len(chunk)
        if self._progress is not None:
            self._progress(len(chunk))
        return chunk

    def _lost(self, cause: str) -> RegistryUnreachable:
        doing = f"the download of blob {self._digest[:19]}…"
        return lost(self._netloc, cause, doing, waited=TIMEOUT)

    def _watched_read(self, size: int) -> bytes:
        """Read up to ``size`` bytes, a stall (:mod:`bundler.rules.retry`) raising
        ``TimeoutError``. The bulk of a blob is read as it always is, in chunks of up to
        :data:`CHUNK`, with no work per chunk beyond one ``setsockopt``: the kernel wakes the
        read only once a stall window's worth of bytes (1 KiB/s over 60 s) has arrived, and
        the socket's timeout is that window. Its last :data:`_TAIL` bytes, which may be fewer
        than that, are read piece by piece against one deadline of a window."""
        if self._sock is None:
            return self._response.read(size)
        window = self._timings.stall_window
        if self._left > _TAIL:
            # bytes that may already sit in the reader's and TLS's buffers never reach the
            # kernel's queue again: the low mark counts only bytes still to come
            low = min(int(self._timings.stall_rate * window), self._left - _TAIL)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, max(1, low))
            self._sock.settimeout(window)
            return self._response.read(min(size, self._left - _TAIL))
        if self._tail_deadline is None:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
            self._tail_deadline = time.monotonic() + window
        left = self._tail_deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self._sock.settimeout(left)
        piece = self._response.read1(size)
        if self._response.length == 0:
            self._response.read()  # read1 leaves the answer open at its end; read closes it
        return piece

    def _receive(self, size: int) -> bytes:
        # the connection broke or timed out (the network's failure), or the framing of the
        # body is not HTTP's (the registry's): never taken for an error of the local disk
        try:
            return self._watched_read(size)
        except TimeoutError:
            host = shown_host(self._netloc)
            raise RegistryUnreachable(
                f"{host} sent less than {self._timings.stall_rate >> 10} KiB/s for "
                f"{self._timings.stall_window:g} s during the download of blob "
                f"{self._digest[:19]}…; try again",
                host=host,
                cause=TIMED_OUT,
            ) from None
        except (OSError, http.client.HTTPException) as err:
            cause = cause_of(err)
            if cause is not None:
                raise self._lost(cause) from None
            raise RegistryRefused(
                f"registry {self._session.shown}: the download of blob {self._digest[:19]}… "
                f"broke off ({escape_display(failure_reason(err))}); nothing was kept, try again"
            ) from None

    def _check(self) -> None:
        if self._checked:
            return
        if not self._length_declared and self._receive(1):
            raise not_declared(
                self._session.shown, self._digest, "it is longer than the manifest declares"
            )
        if f"sha256:{self._hash.hexdigest()}" != self._digest:
            raise not_declared(
                self._session.shown, self._digest, "its sha256 does not match the manifest"
            )
        self._checked = True
        self._unwatch()


class Spooled(BlobStream):
    """A blob already whole and checked (a mirror's, spooled to an unnamed file), read back
    as a :class:`BlobStream` is read."""

    def __init__(
        self,
        session: Transport,
        spool: BinaryIO,
        digest: str,
        size: int,
        progress: Callable[[int], None] | None,
    ) -> None:
        self._session = session
        self.start = 0
        self._spool = spool
        self._digest = digest
        self._progress = progress
        self._checked = True

    def __exit__(self, *_exc: object) -> None:
        self._spool.close()

    def read(self, limit: int) -> bytes:
        chunk = self._spool.read(limit)
        if chunk and self._progress is not None:
            self._progress(len(chunk))
        return chunk


class NotAsHashed(Exception):
    """A body made a second time is not the one hashed the first time."""


class BodySink(io.RawIOBase):
    """The body of a request as a raw write-only stream: each ``write`` is hashed, counted and
    sent at once, as one chunk of chunked transfer encoding, or as it is when the body's
    ``length`` was declared (never past it: :class:`NotAsHashed`; its last byte is sent only
    once :meth:`end` has checked the digest). A failed send raises what
    ``broken`` makes of the send's ``OSError``, so that it is never taken for an error reading
    the bundle, which the writer raises as ``OSError``."""

    def __init__(
        self,
        conn: http.client.HTTPConnection,
        broken: Callable[[OSError], Refused],
        length: int | None,
    ) -> None:
        super().__init__()
        self.conn = conn
        self.broken = broken
        self.length = length
        self.hash = hashlib.sha256()
        self.size = 0
        self.held = b""  # see write()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        if not data:
            return 0
        if self.length is not None and self.size + len(data) > self.length:
            raise NotAsHashed
        self.hash.update(data)
        self.size += len(data)
        try:
            if self.length is None:
                self.conn.send(b"%x\r\n" % len(data))
                self.conn.send(data)
                self.conn.send(b"\r\n")
            elif self.size == self.length:
                # the body's last byte waits for end() to check the digest: a registry never
                # holds a whole body that is not the one hashed before
                view = memoryview(data)
                self.conn.send(view[:-1])
                self.held = bytes(view[-1:])
            else:
                self.conn.send(data)
        except OSError as err:
            raise self.broken(err) from None
        return len(data)

    def end(self, digest: str | None) -> None:
        """After the last write: the last, empty chunk; or, for a declared length, the check
        that the body was that long and had that ``digest``."""
        if self.length is not None and (
            self.size != self.length or f"sha256:{self.hash.hexdigest()}" != digest
        ):
            raise NotAsHashed
        try:
            self.conn.send(b"0\r\n\r\n" if self.length is None else self.held)
        except OSError as err:
            raise self.broken(err) from None
