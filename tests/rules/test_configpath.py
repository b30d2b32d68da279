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
    path = 'skill_bundles."research tools.v2".include'
    assert parse_path(path) == ["skill_bundles", "research tools.v2", "include"]
    assert format_path(parse_path(path)) == path


HEADERS = ["providers", "models", "openai", "main", "extra_headers"]


def test_value_map_key_is_the_rest_of_the_path_as_zeroclaw_config_set_takes_it() -> None:
    raw = "providers.models.openai.main.extra_headers.X-Org.Id"
    assert parse_path(raw) == [*HEADERS, "X-Org.Id"]
    assert format_path([*HEADERS, "X-Org.Id"]) == raw
    assert parse_path("mcp.servers.gh.env.A.B C") == ["mcp", "servers", "gh", "env", "A.B C"]
    assert format_path(["agents", "a", "workspace", "access", "x.y"]) == (
        "agents.a.workspace.access.x.y"
    )


def test_value_map_key_in_bundlers_older_quoted_form_is_still_read() -> None:
    quoted = 'providers.models.openai.main.extra_headers."X-Org.Id"'
    assert parse_path(quoted) == [*HEADERS, "X-Org.Id"]
    assert format_path(parse_path(quoted)) == "providers.models.openai.main.extra_headers.X-Org.Id"


@pytest.mark.parametrize("key", ["", '"quoted"', "tab\there", "line\nbreak"])
def test_value_map_key_that_cannot_read_back_raw_is_quoted(key: str) -> None:
    formatted = format_path([*HEADERS, key])
    assert formatted.startswith('providers.models.openai.main.extra_headers."')
    assert parse_path(formatted) == [*HEADERS, key]


@given(segment_text)
def test_value_map_key_round_trips_any_text(key: str) -> None:
    assert parse_path(format_path([*HEADERS, key])) == [*HEADERS, key]
    assert parse_path(format_path(["mcp", "servers", key, "env", key])) == [
        "mcp",
        "servers",
        key,
        "env",
        key,
    ]


def test_list_positions_are_written_in_brackets_as_zeroclaw_writes_them() -> None:
    fallback = ["providers", "models", "openai", "main", "fallback"]
    assert format_path([*fallback, "0"]) == "providers.models.openai.main.fallback[0]"
    assert format_path(["runtime_profiles", "r", "tool_filter_groups", "1", "tools", "2"]) == (
        "runtime_profiles.r.tool_filter_groups[1].tools[2]"
    )
    assert format_path(["mcp", "servers", 3, "name"]) == "mcp.servers[3].name"
    assert format_path(["volumes", 0, "mode"], config=False) == "volumes[0].mode"


def test_list_positions_are_read_in_brackets_and_in_the_dotted_form_users_type() -> None:
    expected = ["runtime_profiles", "r", "tool_filter_groups", "1", "tools", "2"]
    assert parse_path("runtime_profiles.r.tool_filter_groups[1].tools[2]") == expected
    assert parse_path("runtime_profiles.r.tool_filter_groups.1.tools.2") == expected


@pytest.mark.parametrize("bad", ["agents[0]", "mcp.servers[0]", "a[x]", "a[0]b", "[0]"])
def test_a_position_where_there_is_no_list_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_path(bad)


def test_a_server_named_like_a_number_is_still_a_name() -> None:
    assert format_path(["mcp", "servers", "2", "command"]) == "mcp.servers.2.command"
    assert parse_path("mcp.servers.2.command") == ["mcp", "servers", "2", "command"]


def test_quoted_segment_escapes() -> None:
    assert format_segment('a"b\\c') == '"a\\"b\\\\c"'
    assert parse_path('"tab\\there"') == ["tab\there"]
    assert parse_path('"\\u00e9"') == ["é"]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        ".",
        "a.",
        ".a",
        "a..b",
        '"open',
        'a."b',
        "a b",
        '"\\q"',
        "a.b c",
        "providers.models.openai.main.extra_headers.",
    ],
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
