"""Config paths (01 §6): quoting, parsing, field-name equivalence, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bundler.errors import UsageError
from bundler.rules import schema
from bundler.rules.paths import format_path, format_segment, parse_path

segment_text = st.text(min_size=1, max_size=24)
segments_lists = st.lists(segment_text, min_size=1, max_size=8)


@given(segments_lists)
def test_format_then_parse_round_trips_any_segments(segments: list[str]) -> None:
    assert parse_path(format_path(segments)) == segments


@given(segments_lists)
def test_formatted_path_is_one_line_of_printable_text(segments: list[str]) -> None:
    formatted = format_path(segments)
    assert "\n" not in formatted and "\r" not in formatted
    assert all(ord(ch) >= 0x20 and ord(ch) != 0x7F for ch in formatted)


@given(st.lists(st.from_regex(r"[A-Za-z0-9_-]+", fullmatch=True), min_size=1, max_size=6))
def test_bare_segments_are_written_bare(segments: list[str]) -> None:
    assert format_path(segments) == ".".join(segments)


def test_quoted_segment_with_dot_stays_one_segment() -> None:
    path = 'providers.models.openai.main.extra_headers."X-Org.Id"'
    assert parse_path(path) == [
        "providers",
        "models",
        "openai",
        "main",
        "extra_headers",
        "X-Org.Id",
    ]
    assert format_path(parse_path(path)) == path


def test_quoted_segment_escapes() -> None:
    assert format_segment('a"b\\c') == '"a\\"b\\\\c"'
    assert parse_path('"tab\\there"') == ["tab\there"]
    assert parse_path('"\\u00e9"') == ["é"]


@pytest.mark.parametrize(
    "bad", ["", ".", "a.", ".a", "a..b", '"open', 'a."b', "a b", '"\\q"', "a.b c"]
)
def test_malformed_paths_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_path(bad)


def test_field_names_accept_dash_for_underscore() -> None:
    canonical, node, secret = schema.resolve(parse_path("providers.models.openai.main.api-key"))
    assert canonical == ["providers", "models", "openai", "main", "api_key"]
    assert node is not None and secret


def test_aliases_and_map_keys_are_taken_exactly() -> None:
    canonical, _node, _secret = schema.resolve(
        parse_path("agents.my-agent.workspace.access.other-one")
    )
    assert canonical == ["agents", "my-agent", "workspace", "access", "other-one"]
    canonical, _node, _secret = schema.resolve(parse_path("mcp.servers.gh.env.MY-TOKEN"))
    assert canonical[-1] == "MY-TOKEN"


def test_mcp_servers_addressed_by_name() -> None:
    canonical, node, secret = schema.resolve(parse_path("mcp.servers.github.env.GITHUB_TOKEN"))
    assert canonical == ["mcp", "servers", "github", "env", "GITHUB_TOKEN"]
    assert node == {"type": "string"} and secret
