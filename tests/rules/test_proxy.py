"""Proxy selection follows Go's ``ProxyFromEnvironment``, which docker and skopeo users know."""

from __future__ import annotations

import pytest

from bundler.errors import UsageError
from bundler.rules.proxy import is_loopback, parse_proxy, proxy_for

PROXY = {"HTTPS_PROXY": "http://proxy.corp:3128", "HTTP_PROXY": "http://plain.corp:8080"}


def _via(host: str, port: int | None = None, scheme: str = "https", **env: str) -> str | None:
    proxy = proxy_for(scheme, host, port, {**PROXY, **env})
    return None if proxy is None else proxy.netloc


def test_https_requests_use_https_proxy_and_http_requests_http_proxy() -> None:
    assert _via("registry.example") == "proxy.corp:3128"
    assert _via("registry.example", scheme="http") == "plain.corp:8080"


def test_upper_case_wins_and_lower_case_is_read_alone() -> None:
    env = {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2"}
    assert proxy_for("https", "r.example", None, env).netloc == "upper:1"  # type: ignore[union-attr]
    only_lower = {"https_proxy": "http://lower:2"}
    assert proxy_for("https", "r.example", None, only_lower).netloc == "lower:2"  # type: ignore[union-attr]
    empty_upper = {"HTTPS_PROXY": "", "https_proxy": "http://lower:2"}
    assert proxy_for("https", "r.example", None, empty_upper).netloc == "lower:2"  # type: ignore[union-attr]


def test_no_variable_means_no_proxy() -> None:
    assert proxy_for("https", "r.example", None, {}) is None
    assert proxy_for("https", "r.example", None, {"HTTP_PROXY": "http://p:1"}) is None


def test_http_proxy_is_ignored_inside_a_cgi_request() -> None:
    assert _via("r.example", scheme="http", REQUEST_METHOD="GET") is None
    assert _via("r.example", REQUEST_METHOD="GET") == "proxy.corp:3128"


@pytest.mark.parametrize(
    "host", ["localhost", "LOCALHOST", "127.0.0.1", "127.9.9.9", "::1", "[::1]"]
)
def test_loopback_is_never_proxied(host: str) -> None:
    assert is_loopback(host)
    assert _via(host) is None


def test_a_value_without_scheme_is_read_as_http() -> None:
    proxy = parse_proxy("proxy.corp:3128", "HTTPS_PROXY")
    assert (proxy.scheme, proxy.host, proxy.port) == ("http", "proxy.corp", 3128)
    assert parse_proxy("http://proxy.corp", "HTTPS_PROXY").port == 80
    assert parse_proxy("https://proxy.corp", "HTTPS_PROXY").port == 443


def test_proxy_credentials_are_read_and_never_shown() -> None:
    proxy = parse_proxy("http://alice:s%40cret@proxy.corp:3128", "HTTPS_PROXY")
    assert (proxy.username, proxy.password) == ("alice", "s@cret")
    assert "s@cret" not in proxy.shown() and "alice" not in proxy.shown()
    assert proxy.shown() == "http://***@proxy.corp:3128 (from HTTPS_PROXY)"


@pytest.mark.parametrize("value", ["socks5://p:1080", "http://", "http://p:notaport", "ftp://p"])
def test_an_unusable_proxy_is_a_usage_error_naming_the_variable_not_the_value(value: str) -> None:
    with pytest.raises(UsageError) as caught:
        proxy_for("https", "r.example", None, {"HTTPS_PROXY": value + "?pw=hunter22"})
    assert "HTTPS_PROXY" in str(caught.value) and "hunter22" not in str(caught.value)


def test_an_unusable_proxy_for_a_bypassed_host_stops_nothing() -> None:
    assert (
        proxy_for("https", "r.example", None, {"HTTPS_PROXY": "socks5://p", "NO_PROXY": "*"})
        is None
    )


@pytest.mark.parametrize(
    ("no_proxy", "host", "port", "bypassed"),
    [
        ("*", "anything.example", None, True),
        ("example.com", "example.com", None, True),
        ("example.com", "reg.example.com", None, True),
        ("example.com", "notexample.com", None, False),
        (".example.com", "reg.example.com", None, True),
        (".example.com", "example.com", None, False),
        ("*.example.com", "reg.example.com", None, True),
        ("*.example.com", "example.com", None, False),
        ("EXAMPLE.com", "Reg.Example.COM", None, True),
        ("example.com:5000", "reg.example.com", 5000, True),
        ("example.com:5000", "reg.example.com", None, False),
        ("example.com:443", "reg.example.com", None, True),
        ("10.0.0.0/8", "10.1.2.3", None, True),
        ("10.0.0.0/8", "11.1.2.3", None, False),
        ("10.1.2.3", "10.1.2.3", None, True),
        ("10.1.2.3:5000", "10.1.2.3", 443, False),
        ("10.1.2.3:5000", "10.1.2.3", 5000, True),
        ("[2001:db8::1]:5000", "2001:db8::1", 5000, True),
        ("2001:db8::/32", "2001:db8::7", None, True),
        ("10.0.0.0/8", "ten.example", None, False),
        ("example.com", "10.0.0.1", None, False),
        (" a.example , ,b.example ", "b.example", None, True),
        (":5000,[bad", "r.example", None, False),
    ],
)
def test_no_proxy_entries(no_proxy: str, host: str, port: int | None, bypassed: bool) -> None:
    assert (_via(host, port, NO_PROXY=no_proxy) is None) is bypassed


def test_lower_case_no_proxy_is_read() -> None:
    assert _via("r.example", no_proxy="r.example") is None
