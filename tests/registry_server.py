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
