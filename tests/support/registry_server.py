"""A real CNCF distribution registry (Debian ``docker-registry``) for the OCI tests.

Each :class:`Registry` runs its own process on a free loopback port with filesystem storage and
its own config file in a temporary folder; its log (which holds the access log: one line per
request) goes to a file the tests read to count uploads. ``tls=True`` serves HTTPS with a
certificate signed by a CA made here with the openssl CLI and asks for htpasswd basic auth
(bcrypt, made with ``htpasswd -B``). The apt-installed service is never used.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REGISTRY_BIN = "/usr/bin/docker-registry"
USER = "fleet"
PASSWORD = "s3cret-Registry-Pass-7731"

_REQUEST_LINE = re.compile(r'"(GET|HEAD|POST|PUT|PATCH|DELETE) (\S+) HTTP/[\d.]+" (\d{3})')


def require_registry() -> None:
    """Skip (naming the package) when the registry or the tools the fixture needs are missing."""
    for tool, package in (
        (REGISTRY_BIN, "docker-registry"),
        ("htpasswd", "apache2-utils"),
        ("openssl", "openssl"),
    ):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing: apt-get install {package} (.ci/run does)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def make_ca_and_cert(folder: Path, address: str = "127.0.0.1") -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server.key): a throwaway CA and a cert for 127.0.0.1, localhost
    and ``address``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca = folder / "ca.key", folder / "ca.pem"
    key, csr, cert = folder / "server.key", folder / "server.csr", folder / "server.pem"
    ext = folder / "san.ext"
    ext.write_text(f"subjectAltName=IP:127.0.0.1,IP:{address},DNS:localhost\n", encoding="ascii")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
        "-days", "2", "-subj", "/CN=bundler test CA",
    )  # fmt: skip
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
        "-subj", "/CN=127.0.0.1",
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext),
    )  # fmt: skip
    return ca, cert, key


@dataclass
class Registry:
    """One registry process; ``host`` is ``127.0.0.1:PORT`` as it goes into an ``oci://`` ref."""

    base: Path
    tls: bool = False
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    ca: Path | None = None
    address: str = "127.0.0.1"
    listen: str | None = None
    """The address to listen on when not ``address`` (``0.0.0.0``: every address)."""
    also: str | None = None
    """Another IP address the certificate names."""
    netns: str | None = None
    """A network namespace to run in (``ip netns exec``), listening on ``address`` there."""

    @property
    def host(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def log(self) -> Path:
        return self.base / "registry.log"

    def ref(self, repo: str) -> str:
        return f"oci://{self.host}/{repo}"

    def write_config(self) -> Path:
        storage = self.base / "storage"
        storage.mkdir(parents=True, exist_ok=True)
        lines = [
            "version: 0.1",
            "log:",
            "  level: info",
            "  formatter: text",
            "  accesslog:",
            "    disabled: false",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {storage}",
            "  delete:",
            "    enabled: true",
            "http:",
            f"  addr: {self.listen or self.address}:{self.port}",
            "  secret: bundler-test-secret",
        ]
        if self.tls:
            self.ca, cert, key = make_ca_and_cert(
                self.base / "tls",
                self.address if self.also is None else f"{self.address},IP:{self.also}",
            )
            htpasswd = self.base / "htpasswd"
            made = subprocess.run(
                ["htpasswd", "-Bbn", USER, PASSWORD], check=True, capture_output=True
            )
            htpasswd.write_bytes(made.stdout)
            lines += [
                "  tls:",
                f"    certificate: {cert}",
                f"    key: {key}",
                "auth:",
                "  htpasswd:",
                "    realm: bundler-test",
                f"    path: {htpasswd}",
            ]
        config = self.base / "config.yml"
        config.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return config

    def start(self) -> Registry:
        config = self.base / "config.yml"
        if not config.exists():
            self.write_config()
        log = self.log.open("ab")
        prefix = [] if self.netns is None else ["ip", "netns", "exec", self.netns]
        self.proc = subprocess.Popen(
            [*prefix, REGISTRY_BIN, "serve", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        scheme = "https" if self.tls else "http"
        context = ssl.create_default_context(cafile=str(self.ca)) if self.ca else None
        deadline = time.monotonic() + 20
        while self.netns is not None and time.monotonic() < deadline:
            # not reachable from here: its log says when it listens
            if "listening on" in self.log.read_text(encoding="utf-8", errors="replace"):
                return
            time.sleep(0.05)
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"registry exited: {self.log.read_text(errors='replace')}")
            try:
                urllib.request.urlopen(f"{scheme}://{self.host}/v2/", timeout=2, context=context)
                return
            except urllib.error.HTTPError:
                return  # 401 with auth on: it answers
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("registry did not start in 20 s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def requests(self) -> list[tuple[str, str, int]]:
        """Every request the access log holds so far: (method, path, status)."""
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return [(m, p, int(s)) for m, p, s in _REQUEST_LINE.findall(text)]

    def mark(self) -> int:
        """A position in the access log; :meth:`uploads_since` counts from there."""
        return len(self.requests())

    def uploads_since(self, mark: int) -> list[str]:
        """The blob uploads (the PUT that completes each) after ``mark``: their paths."""
        return [
            p
            for m, p, s in self.requests()[mark:]
            if m == "PUT" and "/blobs/uploads/" in p and s == 201
        ]


@dataclass
class Relayed:
    """One request the :class:`Relay` passed on: what was asked, the ``Range`` header, the
    registry's status, and the body bytes that reached the client."""

    method: str
    path: str
    range: str | None
    status: int
    sent: int


class Relay:
    """A real HTTP server in front of a real :class:`Registry`: every request is passed on (a
    connection of its own) and its answer relayed, and each is recorded (:class:`Relayed`), so
    a test counts the blobs a pull fetched and the bytes it was sent. ``cut[path] = n`` sends
    only the first ``n`` bytes of that path's next body, then closes the connection (a registry
    that dies mid-layer); ``slow[path] = s`` waits ``s`` seconds between 64 KiB pieces."""

    def __init__(self, upstream: Registry) -> None:
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.upstream = upstream
        self.log: list[Relayed] = []
        self.begun: list[str] = []
        """The path of every request, as it arrives."""
        self.ended = 0
        """How many requests have been answered (or failed), so a count waits for the rest."""
        self.cut: dict[str, int] = {}
        self.slow: dict[str, float] = {}
        self.lock = threading.Lock()
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: object) -> None:
                pass

            def _handle(self) -> None:
                with relay.lock:
                    relay.begun.append(self.path.split("?", 1)[0])
                try:
                    self._relay()
                finally:
                    with relay.lock:
                        relay.ended += 1

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "connection", "content-length")
                }
                conn = http.client.HTTPConnection(upstream.host, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                finally:
                    conn.close()
                path = self.path.split("?", 1)[0]
                with relay.lock:
                    cut = relay.cut.pop(path, None)
                    pause = relay.slow.get(path, 0.0)
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                sent = 0
                if self.command != "HEAD":
                    out = data if cut is None else data[:cut]
                    for at in range(0, len(out), 64 << 10):
                        self.wfile.write(out[at : at + (64 << 10)])
                        self.wfile.flush()
                        sent += len(out[at : at + (64 << 10)])
                        if pause and sent < len(out):
                            time.sleep(pause)
                with relay.lock:
                    relay.log.append(
                        Relayed(self.command, path, self.headers.get("Range"), answer.status, sent)
                    )
                if cut is not None:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.host = f"127.0.0.1:{self.server.server_address[1]}"

    def ref(self, repo: str) -> str:
        return f"oci://{self.host}/{repo}"

    def mark(self) -> int:
        """A position in the log, to count from."""
        self.settle()
        with self.lock:
            return len(self.log)

    def settle(self, timeout: float = 30.0) -> None:
        """Wait until every request that arrived has been logged: a client may hold its last
        byte before the relay's thread records what it sent."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if self.ended >= len(self.begun):
                    return
            time.sleep(0.01)

    def blob_gets(self, since: int = 0) -> list[Relayed]:
        """The blob GETs relayed after ``since``, once the requests in flight have ended."""
        self.settle()
        with self.lock:
            return [r for r in self.log[since:] if r.method == "GET" and "/blobs/sha256:" in r.path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
