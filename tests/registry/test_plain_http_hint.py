"""A registry that answers TLS with plain HTTP is named as one: the TLS failure says to pass
``--plain-http``, told by the failure's OpenSSL reason, never by its text."""

from __future__ import annotations

from support.kit import run_cli
from support.registry_server import Registry


def test_a_plain_http_registry_reached_over_tls_suggests_plain_http(registry: Registry) -> None:
    done = run_cli(["bundle", "tags", registry.ref("agents/a")])
    assert done.returncode == 1, done.stderr
    assert "TLS failed (it may speak plain HTTP: pass --plain-http)" in done.stderr
