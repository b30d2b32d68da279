"""The distribution API (OCI distribution spec): manifests, blobs, uploads and tags.

Why not the ORAS Python SDK (``oras`` 0.2.x): its monolithic upload reads the whole blob into
memory (``fd.read()``), its download neither checks the digest nor bounds the size, it needs
``requests`` and ``jsonschema`` at run time, and its errors and debug logs carry the registry's
response text. What bundler needs is a dozen requests; they are here, over the
:mod:`bundler.registry.transport` and the :mod:`bundler.registry.challenge` answers.

Rules this module keeps:

* a manifest is read to at most :data:`MAX_MANIFEST_BYTES`, a page of tags to at most
  :data:`MAX_TAG_PAGE_BYTES`, a blob never past the size its descriptor declares (and its
  sha256 is checked as it streams: :class:`bundler.registry.streams.BlobStream`);
* redirects are followed only for a blob GET (registries send those to blob storage), at most
  :data:`MAX_REDIRECTS`, never from HTTPS to HTTP, and without credentials to any other host;
* an upload goes only to the registry named in the reference;
* a mirror's blob is given out only once it is whole and its digest checked.
"""

from __future__ import annotations

import http.client
import io
import json
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from typing import BinaryIO, cast

from bundler.errors import (
    ChangedMeanwhile,
    CredentialsRefused,
    Hostile,
    InvalidInput,
    Malformed,
    NotFound,
    Refused,
    RegistryRefused,
    RegistryUnreachable,
    Tampered,
    TooLarge,
    UsageError,
)
from bundler.registry.challenge import Authenticated
from bundler.registry.hashing import Hash
from bundler.registry.network import BUSY, CLOSED, cause_of, lost
from bundler.registry.reference import DIGEST, parse_reference
from bundler.registry.streams import BlobStream, BodySink, NotAsHashed, Spooled, not_declared
from bundler.registry.transport import (
    CHUNK,
    MAX_SMALL_BYTES,
    TIMEOUT,
    Body,
    Options,
    web_address,
)
from bundler.rules import retry
from bundler.rules.names import escape_display
from bundler.rules.registries_conf import Mirror

MAX_MANIFEST_BYTES = 4 << 20
MAX_REDIRECTS = 3
MAX_TAG_PAGE_BYTES = 4 << 20
MAX_TAGS = 100_000
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_REDIRECTS = (301, 302, 303, 307, 308)
ERROR_CODES = frozenset(
    {
        "BLOB_UNKNOWN",
        "BLOB_UPLOAD_INVALID",
        "BLOB_UPLOAD_UNKNOWN",
        "DIGEST_INVALID",
        "MANIFEST_BLOB_UNKNOWN",
        "MANIFEST_INVALID",
        "MANIFEST_UNKNOWN",
        "NAME_INVALID",
        "NAME_UNKNOWN",
        "SIZE_INVALID",
        "UNAUTHORIZED",
        "DENIED",
        "UNSUPPORTED",
        "TOOMANYREQUESTS",
    }
)
"""The error codes of the OCI distribution specification: the only words of a registry's
error body an error message repeats. Anything else there is the registry's text, which a
hostile or broken one can fill with what it was sent, credentials included."""


class Session(Authenticated):
    """Requests to one registry repository: its manifests, blobs, uploads and tags."""

    def fail(self, response: http.client.HTTPResponse, what: str) -> Refused:
        """The error for an unexpected answer, with the registry's own error code when it is
        one of :data:`ERROR_CODES` (its message is not shown: it is the registry's text)."""
        data = self._read(response, MAX_SMALL_BYTES)
        code = ""
        try:
            errors = json.loads(data).get("errors")
            if isinstance(errors, list) and errors and isinstance(errors[0], dict):
                raw = errors[0].get("code")
                code = f", {raw}" if isinstance(raw, str) and raw in ERROR_CODES else ""
        except (ValueError, AttributeError, RecursionError):
            pass
        hint = "try again, or check the repository name and your access"
        if response.status == 400 and self.scheme == "http":
            hint = "it may speak HTTPS only: try without --plain-http"
        return RegistryRefused(
            f"registry {self.shown}: {what} failed (HTTP {response.status}{code}); {hint}"
        )

    # ------------------------------------------------------------------ API

    def base_path(self) -> str:
        """``/v2/REPO``."""
        return f"/v2/{self.ref.repository}"

    def check_login(self) -> None:
        """Ask the registry's ``/v2/`` with the credentials given (answering its challenge):
        :class:`Refused` unless it lets them in."""
        try:
            response = self.request("GET", "/v2/")
        except CredentialsRefused:  # the registry's answer to the credentials given
            raise CredentialsRefused(
                f"registry {self.shown} refused the user name and password; nothing was written"
            ) from None
        self._read(response, MAX_SMALL_BYTES)
        if response.status != 200:
            raise self.fail(response, "checking the login")

    def manifest_digest(self, target: str) -> str | None:
        """The digest a tag or digest points at (HEAD), or None when the registry has none."""
        response = self.request(
            "HEAD",
            f"{self.base_path()}/manifests/{target}",
            headers={"Accept": OCI_MANIFEST},
        )
        self._read(response, MAX_SMALL_BYTES)
        if response.status == 404:
            return None
        if response.status != 200:
            raise self.fail(response, f"looking up {escape_display(target)}")
        digest = response.getheader("Docker-Content-Digest") or ""
        return digest if DIGEST.fullmatch(digest) else "unknown"

    def get_manifest(self, target: str) -> tuple[bytes, str]:
        """(bytes, media type) of the manifest ``target`` names, at most 4 MiB."""
        response = self.request(
            "GET", f"{self.base_path()}/manifests/{target}", headers={"Accept": OCI_MANIFEST}
        )
        if response.status == 404:
            self._read(response, MAX_SMALL_BYTES)
            raise NotFound(self._missing())
        if response.status in _REDIRECTS:
            raise self.fail(response, "reading the manifest (a redirect where none belongs)")
        if response.status != 200:
            raise self.fail(response, "reading the manifest")
        media = (response.getheader("Content-Type") or "").split(";")[0].strip()
        declared = response.getheader("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_MANIFEST_BYTES:
            self._drop(self.scheme, self.ref.netloc)
            raise TooLarge(
                f"registry {self.shown}: the manifest is larger than 4 MiB; it is not a bundle's"
            )
        data = self._read(response, MAX_MANIFEST_BYTES)
        if len(data) > MAX_MANIFEST_BYTES:
            self._drop(self.scheme, self.ref.netloc)
            raise TooLarge(
                f"registry {self.shown}: the manifest is larger than 4 MiB; it is not a bundle's"
            )
        return data, media

    def _missing(self) -> str:
        """What a 404 for the manifest means: which of the repository and the tag is missing,
        and the tags there are (the first few)."""
        shown = escape_display(str(self.ref))
        if self.ref.digest is not None:
            return f"registry {self.shown} has no {shown}; check the digest"
        try:
            tags = self.list_tags(max_tags=10_000)
        except (Refused, InvalidInput):
            return f"registry {self.shown} has no {shown}; check the repository and tag"
        repo = escape_display(self.ref.repository)
        if tags is None:
            return f"registry {self.shown} has no repository {repo}; check its name"
        if not tags:
            return f"registry {self.shown} has no tag in {repo} yet"
        listed = ", ".join(escape_display(t) for t in sorted(tags)[:10])
        more = f" and {len(tags) - 10} more" if len(tags) > 10 else ""
        return (
            f"registry {self.shown} has no tag {escape_display(self.ref.tag or 'latest')} in "
            f"{repo}; it has {listed}{more}"
        )

    def put_manifest(self, tag: str, data: bytes) -> None:
        """Store the manifest under ``tag``: the push's commit point."""
        response = self.request(
            "PUT",
            f"{self.base_path()}/manifests/{tag}",
            headers={"Content-Type": OCI_MANIFEST, "Content-Length": str(len(data))},
            body=data,
        )
        if response.status not in (200, 201):
            raise self.fail(response, "storing the manifest")
        self._read(response, MAX_SMALL_BYTES)

    def delete_manifest(self, digest: str) -> None:
        """Delete the manifest ``digest`` (and with it every tag naming it); one already gone
        (404) counts as deleted. A registry that does not allow deletion (405, or 400 with
        ``UNSUPPORTED``: the CNCF distribution registry without ``storage.delete.enabled``)
        is :class:`Refused` saying so."""
        response = self.request("DELETE", f"{self.base_path()}/manifests/{digest}")
        if response.status in (200, 202, 404):
            self._read(response, MAX_SMALL_BYTES)
            return
        failure = self.fail(response, f"deleting the manifest {digest[:19]}…")
        if response.status in (400, 405) and (
            response.status == 405 or "UNSUPPORTED" in failure.message
        ):
            raise RegistryRefused(
                f"registry {self.shown} does not allow deleting manifests (HTTP "
                f"{response.status}); enable deletion there (the CNCF distribution registry: "
                "storage.delete.enabled: true)"
            )
        raise failure

    def blob_exists(self, digest: str) -> bool:
        """True when the repository holds the blob (a HEAD)."""
        response = self.request("HEAD", f"{self.base_path()}/blobs/{digest}")
        self._read(response, MAX_SMALL_BYTES)
        if response.status == 200:
            return True
        if response.status == 404:
            return False
        raise self.fail(response, "checking a blob")

    def repository_is_empty(self) -> bool:
        """True when the repository holds no tag (or does not exist yet): nothing in it can
        spare an upload, since blobs an interrupted push left there are referenced by nothing."""
        response = self.request("GET", f"{self.base_path()}/tags/list?n=1")
        data = self._read(response, MAX_SMALL_BYTES)
        if response.status == 404:
            return True
        if response.status != 200:
            raise self.fail(response, "listing the repository's tags")
        try:
            tags = json.loads(data).get("tags")
        except (ValueError, AttributeError, RecursionError):
            raise RegistryRefused(f"registry {self.shown} sent an unreadable tag list") from None
        return not tags

    def list_tags(self, *, max_tags: int = MAX_TAGS) -> list[str] | None:
        """Every tag of the repository, following the ``Link`` pagination (distribution spec):
        None when the repository does not exist. A page larger than
        :data:`MAX_TAG_PAGE_BYTES`, more than ``max_tags`` tags, a next page that loops back,
        a next page named by a page of no tags, or one on another host or scheme is
        :class:`InvalidInput`."""
        url: str | None = self.url(f"{self.base_path()}/tags/list")
        seen: set[str] = set()
        tags: list[str] = []
        while url is not None:
            seen.add(url)
            response = self.request("GET", "", url=url)
            if response.status == 404:
                self._read(response, MAX_SMALL_BYTES)
                return None
            if response.status != 200:
                raise self.fail(response, "listing the repository's tags")
            link = response.getheader("Link")
            data = self._read(response, MAX_TAG_PAGE_BYTES)
            if len(data) > MAX_TAG_PAGE_BYTES:
                raise TooLarge(
                    f"registry {self.shown} sent a page of tags larger than "
                    f"{MAX_TAG_PAGE_BYTES >> 20} MiB; refused"
                )
            try:
                page = json.loads(data).get("tags")
            except (ValueError, AttributeError, RecursionError):
                page = "unreadable"
            if page is None:
                page = []
            if not isinstance(page, list) or not all(isinstance(t, str) for t in page):
                raise Malformed(f"registry {self.shown} sent an unreadable tag list")
            tags += page
            if len(tags) > max_tags:
                raise TooLarge(
                    f"registry {self.shown} lists more than {max_tags} tags for "
                    f"{escape_display(self.ref.repository)}; refused"
                )
            url = self._next_page(url, link)
            if url is not None and not page:
                # each page must bring a tag: then ``max_tags`` bounds the pages read, where
                # empty pages at ever new addresses would be read forever
                raise Hostile(
                    f"registry {self.shown}: a page of its tag list holds no tags yet names a "
                    "next page; refused"
                )
            if url is not None and url in seen:
                raise Hostile(
                    f"registry {self.shown}: the tag list's next page loops back to one already "
                    "read; refused"
                )
        return tags

    def _next_page(self, url: str, link: str | None) -> str | None:
        """The ``rel="next"`` address of a ``Link`` header, which must be on this registry."""
        if not link:
            return None
        for part in link.split(","):
            target, _, params = part.strip().partition(";")
            if "next" not in params.replace(" ", "").lower() or not target.startswith("<"):
                continue
            given = web_address(url, target.strip().strip("<>"))
            if given is None or (given[1].scheme, given[1].netloc) != (
                urllib.parse.urlsplit(url).scheme,
                self.ref.netloc,
            ):
                raise Hostile(
                    f"registry {self.shown} sends the next page of its tag list to another "
                    "host or to no web address; refused"
                )
            return given[0]
        return None

    def _start_upload(self) -> str:
        """POST for an upload session; its absolute URL, which must be on this registry."""
        response = self.request(
            "POST", f"{self.base_path()}/blobs/uploads/", headers={"Content-Length": "0"}
        )
        if response.status != 202:
            raise self.fail(response, "starting a blob upload")
        self._read(response, MAX_SMALL_BYTES)
        return self._upload_location(response, f"{self.base_path()}/blobs/uploads/")

    def _upload_location(self, response: http.client.HTTPResponse, base: str) -> str:
        location = response.getheader("Location") or ""
        given = web_address(self.url(base), location) if location else None
        if given is None or (given[1].scheme, given[1].netloc) != (self.scheme, self.ref.netloc):
            raise RegistryRefused(
                f"registry {self.shown} sent its upload elsewhere; bundler uploads only to the "
                "registry named in the reference"
            )
        return given[0]

    def _finish_upload(self, target: str, digest: str, size: int, body: Body) -> None:
        """PUT ``?digest=``: the registry checks the bytes against it and commits the blob."""
        sep = "&" if urllib.parse.urlsplit(target).query else "?"
        response = self.request(
            "PUT",
            "",
            url=f"{target}{sep}{urllib.parse.urlencode({'digest': digest})}",
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
            body=body,
        )
        if response.status != 201:
            raise self.fail(response, "uploading a blob")
        self._read(response, MAX_SMALL_BYTES)

    def upload_blob(self, digest: str, size: int, source: BinaryIO) -> None:
        """A monolithic upload (POST for a session, PUT of the bytes) streamed from ``source``."""
        self._finish_upload(self._start_upload(), digest, size, source)

    def upload_streamed(self, produce: Callable[[BinaryIO], None]) -> tuple[str, int]:
        """Upload the bytes ``produce`` writes, hashed as they go: (digest, size).

        One pass and nothing spooled: a PATCH whose body is sent in chunked transfer encoding
        while ``produce`` makes it, then the PUT that names the digest (the registry checks it).
        Used when the digest cannot be known before the bytes exist. An exception from
        ``produce`` abandons the upload session (the registry discards it; no blob is made).
        """
        target = self._start_upload()
        path = urllib.parse.urlsplit(target).path
        response, raw = self._send_produced("PATCH", target, None, produce)
        if response.status != 202:
            raise self.fail(response, "uploading a blob")
        self._read(response, MAX_SMALL_BYTES)
        digest = f"sha256:{raw.hash.hexdigest()}"
        self._finish_upload(self._upload_location(response, path), digest, 0, b"")
        return digest, raw.size

    def upload_produced(self, digest: str, size: int, produce: Callable[[BinaryIO], None]) -> None:
        """A monolithic upload (POST for a session, one PUT naming ``digest``) of the ``size``
        bytes ``produce`` writes, sent as they are made: for bytes made a second time rather
        than kept in a file (push hashes a layer's tar first, then makes it again to send it
        only when the registry lacks it). Bytes that are not the ones hashed before (another
        length or another sha256: what they are made of changed meanwhile) are refused and the
        request abandoned, so no blob is stored.
        """
        timings = retry.timings(self.auth.environ)
        began = time.monotonic()
        failed = 0
        while True:
            # each try is a whole upload (a new session, the bytes made again and checked
            # against the digest again): a PUT naming its digest stores that blob or nothing
            target = self._start_upload()
            sep = "&" if urllib.parse.urlsplit(target).query else "?"
            url = f"{target}{sep}{urllib.parse.urlencode({'digest': digest})}"
            header: str | None = None
            try:
                response, _raw = self._send_produced("PUT", url, (digest, size), produce)
            except NotAsHashed:
                raise ChangedMeanwhile(
                    f"registry {self.shown}: the bytes made to send blob {digest[:19]}… are "
                    "not the ones hashed before (a file changed meanwhile); nothing was "
                    "stored, push again"
                ) from None
            except RegistryUnreachable as err:
                failed += 1
                if self._wait(failed, None, began, timings) is None:
                    raise
                lost_error: RegistryUnreachable | None = err
            else:
                if response.status not in retry.RETRY_STATUSES:
                    break
                failed += 1
                header = response.getheader("Retry-After")
                self._read(response, MAX_SMALL_BYTES)
                lost_error = None
            wait = self._wait(failed, header, began, timings)
            if wait is None:
                if lost_error is not None:
                    raise lost_error
                raise RegistryUnreachable(
                    f"the registry {self.shown} answered the upload of blob {digest[:19]}… as "
                    f"busy {failed} times in {time.monotonic() - began:.0f} s; try again later",
                    host=self.shown,
                    cause=BUSY,
                )
            time.sleep(wait)
        if response.status != 201:
            raise self.fail(response, "uploading a blob")
        self._read(response, MAX_SMALL_BYTES)

    def _send_produced(
        self,
        method: str,
        target: str,
        declared: tuple[str, int] | None,
        produce: Callable[[BinaryIO], None],
    ) -> tuple[http.client.HTTPResponse, BodySink]:
        """One request to ``target`` whose body ``produce`` writes while it is sent: in chunked
        transfer encoding, or, with ``declared`` (digest, size), as a body of that length whose
        sha256 must be that digest (else :class:`NotAsHashed`, the connection dropped before
        the answer). Answers 401 and 403 raise; any other is the caller's."""
        parts = urllib.parse.urlsplit(target)
        conn = self._conn(parts.scheme, parts.netloc)
        length = None if declared is None else declared[1]
        raw = BodySink(
            conn,
            lambda err: lost(
                parts.netloc, cause_of(err) or CLOSED, "the upload of a blob", waited=TIMEOUT
            ),
            length,
        )
        headers = {
            "Content-Type": "application/octet-stream",
            **(
                {"Transfer-Encoding": "chunked"}
                if length is None
                else {"Content-Length": str(length)}
            ),
            **self._auth_headers(parts.netloc),
            **(
                self._proxy_headers(self._proxied[(parts.scheme, parts.netloc)])
                if (parts.scheme, parts.netloc) in self._proxied
                else {}
            ),
        }
        try:
            # the request line and headers: any failure is the network's
            target_line = self._target(parts)
            self._network(parts.netloc, lambda: self._put_head(conn, method, target_line, headers))
            # the body: its own sends raise Refused, and an OSError from produce() is the
            # bundle's (a read error), not the network's
            # tar headers and paddings are small writes: gather them into chunks of CHUNK
            sink = io.BufferedWriter(cast(io.RawIOBase, raw), CHUNK)
            try:
                produce(cast(BinaryIO, sink))
                sink.flush()
            finally:
                sink.detach()
            raw.end(None if declared is None else declared[0])
            response = self._network(parts.netloc, conn.getresponse, "the upload of a blob")
        except BaseException:
            self._drop(parts.scheme, parts.netloc)
            raise
        if response.status in (401, 403):
            self._read(response, MAX_SMALL_BYTES)
            raise CredentialsRefused(self._denied_message())
        return response, raw

    def download_blob(
        self, digest: str, size: int, sink: BinaryIO, progress: Callable[[int], None] | None = None
    ) -> None:
        """Stream the blob ``digest`` into ``sink``, reading at most ``size`` bytes, checking
        its sha256 as it goes; raises :class:`InvalidInput` when it is not what was declared."""
        with self.open_blob(digest, size, progress) as blob:
            while chunk := blob.read(CHUNK):
                sink.write(chunk)

    def open_blob(
        self,
        digest: str,
        size: int,
        progress: Callable[[int], None] | None = None,
        *,
        resume: tuple[int, Hash] | None = None,
    ) -> BlobStream:
        """The blob ``digest`` as a stream to read (:class:`BlobStream`): at most ``size``
        bytes, and the read that finds its end checks them against ``digest``.

        ``resume`` (count, sha256 of the blob's first count bytes, which the caller holds)
        asks the registry for the rest only, with a ``Range`` request; the stream's ``start``
        says what was sent: ``count``, or 0 when the whole blob came (a mirror's, or a
        registry that ignores the range or answers another one)."""
        for mirror in self.mirrors:
            spooled = self._from_mirror(mirror, digest, size, progress)
            if spooled is not None:
                return spooled
        start, hashed = resume if resume is not None and 0 < resume[0] < size else (0, None)
        response, netloc = self._get_blob(digest, start)
        if start and response.status == 206:
            if response.getheader("Content-Range") != f"bytes {start}-{size - 1}/{size}":
                # not the range asked for: the whole blob, from the start
                self.drop_response(response)
                start, hashed = 0, None
                response, netloc = self._get_blob(digest, 0)
        elif start:
            start, hashed = 0, None  # the range was ignored: this is the whole blob
        declared = response.getheader("Content-Length")
        if declared is not None and (not declared.isdigit() or int(declared) != size - start):
            self.drop_response(response)
            raise not_declared(
                self.shown, digest, "its length is not the size the manifest declares"
            )
        return BlobStream(
            self,
            response,
            netloc,
            digest,
            size,
            declared is not None,
            progress,
            start=start,
            hashed=hashed,
        )

    def _from_mirror(
        self,
        mirror: Mirror,
        digest: str,
        size: int,
        progress: Callable[[int], None] | None,
    ) -> BlobStream | None:
        """The blob from ``mirror``, whole and checked against ``digest`` before a byte of it is
        given out (spooled to an unnamed temporary file); None, with a note, when the mirror
        cannot serve it or serves other bytes, which are dropped."""
        shown = escape_display(mirror.netloc)
        try:
            ref = parse_reference(
                f"oci://{mirror.netloc}/{mirror.repository(self.ref.repository)}@{digest}"
            )
            options = Options(ca_file=self.options.ca_file, insecure=mirror.insecure)
            with Session(
                ref, options, environ=self.auth.environ, conf=self.conf, mirrors=False
            ) as session:
                spool = tempfile.TemporaryFile(prefix="bundler-mirror-")  # noqa: SIM115 - handed on open
                try:
                    with session.open_blob(digest, size) as blob:
                        while chunk := blob.read(CHUNK):
                            spool.write(chunk)
                except BaseException:
                    spool.close()
                    raise
        except (Refused, InvalidInput, UsageError) as err:
            self.notes.append(
                f"mirror {shown} did not serve blob {digest[:19]}… ({err}); it came from the "
                f"registry {self.shown}"
            )
            return None
        spool.seek(0)
        return Spooled(self, spool, digest, size, progress)

    def _get_blob(self, digest: str, start: int = 0) -> tuple[http.client.HTTPResponse, str]:
        """The answer to the blob's GET, redirects followed, and the host it came from; from
        byte ``start`` on (a ``Range`` request, which may be answered with the whole blob)
        when it is not 0."""
        url = self.url(f"{self.base_path()}/blobs/{digest}")
        ranged = {"Range": f"bytes={start}-"} if start else {}
        response = self.request("GET", "", url=url, headers=ranged)
        hops = 0
        while response.status in _REDIRECTS:
            location = response.getheader("Location") or ""
            self._read(response, MAX_SMALL_BYTES)
            hops += 1
            if hops > MAX_REDIRECTS or not location:
                raise RegistryRefused(f"registry {self.shown} redirects a blob download too often")
            given = web_address(url, location)
            if given is None or (
                given[1].scheme == "http" and urllib.parse.urlsplit(url).scheme == "https"
            ):
                raise RegistryRefused(
                    f"registry {self.shown} redirects a blob download to plain HTTP or a "
                    "non-web address; refused"
                )
            url, parts = given
            if parts.netloc == self.ref.netloc:
                response = self.request("GET", "", url=url, headers=ranged)
            else:
                # blob storage on another host gets no credential of ours
                response = self._send("GET", url, dict(ranged), None)
        if response.status == 416 and start:
            # the registry cannot serve that range: the whole blob, then
            self._read(response, MAX_SMALL_BYTES)
            return self._get_blob(digest, 0)
        if response.status != 200 and not (start and response.status == 206):
            if response.status == 404:
                self._read(response, MAX_SMALL_BYTES)
                raise Tampered(
                    f"registry {self.shown} has no blob {digest[:19]}… that the manifest names; "
                    "push the bundle again"
                )
            raise self.fail(response, "downloading a blob")
        return response, urllib.parse.urlsplit(url).netloc


__all__ = ["OCI_MANIFEST", "Session"]
