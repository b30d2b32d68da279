"""Fixtures for the OCI tests: a registry behind TLS and basic auth (the plain one, ``registry``,
is in ``tests/conftest.py``: crash tests elsewhere pull from it too)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.registry_server import Registry, require_registry


@pytest.fixture
def tls_registry(tmp_path: Path) -> Iterator[Registry]:
    """A registry over HTTPS (a CA made for the test) asking for htpasswd basic auth."""
    require_registry()
    reg = Registry(tmp_path / "tls-registry", tls=True).start()
    try:
        yield reg
    finally:
        reg.kill()
