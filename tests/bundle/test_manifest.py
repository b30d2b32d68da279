"""Manifest, config.toml and checksums.xxh3 rendering and strict parsing (02 §9)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bundler.bundle.manifest import (
    CONFIG_HEADER,
    Contents,
    Dropped,
    Manifest,
    Memory,
    Provenance,
    checksum_sort_key,
    checksum_sort_text,
    exported_at,
    is_rfc3339,
    parse_checksums,
    parse_manifest,
    render_checksums,
    render_config,
    render_manifest,
)
from bundler.errors import InvalidInput, UsageError
from bundler.rules.risk import RiskFlag
from bundler.rules.tomlcompat import loads

DIGEST = "0123456789abcdef0123456789abcdef"
SCHEMA = Path(__file__).resolve().parents[2] / "manifests" / "bundle-manifest.schema.json"


def manifest(**changes: object) -> Manifest:
    base = Manifest(
        format_version=1,
        root_agent="researcher",
        required_secrets=[
            "mcp.servers.github.env.GITHUB_TOKEN",
            "providers.models.anthropic.main.api_key",
        ],
        skill_bundles=["research_tools"],
        provenance=Provenance("bundler 0.3.0", "2026-11-29T14:00:00Z"),
        contents=Contents(412, 18203311, "checksums.xxh3", DIGEST),
        dropped=[Dropped("workspace/memory", "not_yet_portable", "format 1")],
        risk_flags=[
            RiskFlag(
                "process_spawn",
                "mcp.servers.github.command",
                "starts a local process on the target host: npx -y x",
            )
        ],
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_manifest_round_trips() -> None:
    original = manifest()
    assert parse_manifest(render_manifest(original)) == original


def test_format_2_manifest_round_trips_with_memory() -> None:
    original = manifest(
        format_version=2,
        memory=Memory("sqlite", "memory/brain.db", "2026-11-29T14:00:01Z"),
        dropped=[],
    )
    parsed = parse_manifest(render_manifest(original))
    assert parsed == original and parsed.memory is not None


def test_render_is_deterministic_and_in_spec_key_order() -> None:
    text = render_manifest(manifest()).decode()
    assert render_manifest(manifest()) == text.encode()
    order = [
        text.index(key)
        for key in (
            "format_version",
            "root_agent",
            "required_secrets",
            "skill_bundles",
            "[provenance]",
            "[contents]",
            "[[dropped]]",
            "[[risk_flags]]",
        )
    ]
    assert order == sorted(order)
    assert text.startswith("format_version = 1\nroot_agent = ")


def test_reader_accepts_unknown_keys() -> None:
    data = b'future_key = "x"\n' + render_manifest(manifest()) + b"\n[future_table]\na = 1\n"
    parsed = parse_manifest(data)
    assert parsed.extra == {"future_key": "x", "future_table": {"a": 1}}
    assert parse_manifest(render_manifest(parsed)) == parsed


def test_newer_format_refused_as_made_by_a_newer_tool() -> None:
    data = render_manifest(manifest()).replace(b"format_version = 1", b"format_version = 3")
    with pytest.raises(InvalidInput, match="newer tool") as caught:
        parse_manifest(data)
    assert caught.value.code == 3 and caught.value.path == "format_version"


@pytest.mark.parametrize("version", [b"0", b'"1"', b"1.0", b"true"])
def test_bad_format_version_refused(version: bytes) -> None:
    data = render_manifest(manifest()).replace(
        b"format_version = 1", b"format_version = " + version
    )
    with pytest.raises(InvalidInput, match="format_version"):
        parse_manifest(data)


def test_format_2_without_memory_refused() -> None:
    data = render_manifest(manifest()).replace(b"format_version = 1", b"format_version = 2")
    with pytest.raises(InvalidInput, match=r"\[memory\]") as caught:
        parse_manifest(data)
    assert caught.value.path == "memory"


@pytest.mark.parametrize(
    ("old", "new", "path"),
    [
        (b'root_agent = "researcher"', b"root_agent = 5", "root_agent"),
        (
            b'exported_at = "2026-11-29T14:00:00Z"',
            b'exported_at = "yesterday"',
            "provenance.exported_at",
        ),
        (b"files = 412", b"files = -1", "contents.files"),
        (DIGEST.encode(), b"XYZ", "contents.checksums_xxh3_128"),
        (b'reason = "not_yet_portable"', b'reason = "because"', "dropped[0].reason"),
        (b'checksums = "checksums.xxh3"', b'checksums = "../../etc/passwd"', "contents.checksums"),
    ],
)
def test_schema_violation_names_the_field(old: bytes, new: bytes, path: str) -> None:
    data = render_manifest(manifest()).replace(old, new)
    with pytest.raises(InvalidInput) as caught:
        parse_manifest(data)
    assert caught.value.path == path
    assert "\n" not in caught.value.message


def test_missing_required_key_named() -> None:
    data = b"\n".join(
        line
        for line in render_manifest(manifest()).split(b"\n")
        if not line.startswith(b"root_agent")
    )
    with pytest.raises(InvalidInput, match="missing root_agent"):
        parse_manifest(data)


@pytest.mark.parametrize("data", [b"\xff\xfe", b"format_version = ", b"a = [" * 5000])
def test_unparseable_manifest_refused_without_traceback(data: bytes) -> None:
    with pytest.raises(InvalidInput):
        parse_manifest(data)


def test_manifest_schema_file_is_valid_json_schema() -> None:
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(json.loads(SCHEMA.read_text()))


# --- config.toml ------------------------------------------------------------------------------


def test_render_config_has_header_and_is_order_independent() -> None:
    a = {
        "providers": {"models": {"openai": {"b": {"model": "x"}, "a": {"model": "y"}}}},
        "agents": {"r": {"risk_profile": "p", "model_provider": "openai.a"}},
    }
    b = {
        "agents": {"r": {"model_provider": "openai.a", "risk_profile": "p"}},
        "providers": {"models": {"openai": {"a": {"model": "y"}, "b": {"model": "x"}}}},
    }
    assert render_config(a) == render_config(b)
    text = render_config(a).decode()
    assert text.startswith(CONFIG_HEADER) and "scrubbed config fragment made by bundler" in text
    assert text.index("[agents.r]") < text.index("[providers.models.openai.a]")
    assert loads(text) == b


def test_render_config_keeps_server_order_and_odd_keys() -> None:
    fragment = {"mcp": {"servers": [{"name": "z"}, {"name": "a", "env": {"X.Y": ""}}]}}
    parsed = loads(render_config(fragment).decode())
    assert [s["name"] for s in parsed["mcp"]["servers"]] == ["z", "a"]
    assert parsed["mcp"]["servers"][1]["env"] == {"X.Y": ""}


# --- checksums.xxh3 ---------------------------------------------------------------------------


def test_checksum_order_is_depth_first_by_name_bytes() -> None:
    paths = [
        "workspace/a-b",
        "workspace/a/c",
        "config.toml",
        "skills/t/SKILL.md",
        "workspace/B",
        "workspace/a",
    ]
    assert sorted(paths, key=checksum_sort_key) == [
        "config.toml",
        "skills/t/SKILL.md",
        "workspace/B",
        "workspace/a",
        "workspace/a/c",
        "workspace/a-b",
    ]


# no control character, no lone surrogate: the paths checksum_sort_text is for; "/" and the
# characters just above it, and beyond the BMP, where a wrong order would show
_STRICT_CHARS = st.characters(
    blacklist_categories=("Cc", "Cs"), whitelist_characters="/-.0~\u00e9\U0001f600"
)


@given(st.lists(st.text(_STRICT_CHARS, max_size=8), max_size=12))
def test_checksum_sort_text_orders_strict_paths_as_checksum_sort_key(paths: list[str]) -> None:
    assert sorted(paths, key=checksum_sort_text) == sorted(paths, key=checksum_sort_key)


def test_checksums_render_and_parse_round_trip() -> None:
    lines = [
        (DIGEST, "workspace/a-b"),
        ("f" * 32, "config.toml"),
        ("0" * 32, "workspace/a/c"),
        ("1" * 32, "workspace/ünï code.txt"),
    ]
    data = render_checksums(lines)
    assert data.startswith(b"f" * 32 + b"  config.toml\n")
    assert data.endswith(b"\n")
    assert parse_checksums(data) == sorted(lines, key=lambda line: checksum_sort_key(line[1]))
    assert parse_checksums(b"") == []


@pytest.mark.parametrize(
    "data",
    [
        b"0123456789ABCDEF0123456789abcdef  config.toml\n",  # upper-case hex
        b"0123456789abcdef0123456789abcde  config.toml\n",  # 31 digits
        b"0123456789abcdef0123456789abcdef config.toml\n",  # one space
        b"0123456789abcdef0123456789abcdef  config.toml",  # no final newline
        b"0123456789abcdef0123456789abcdef  /etc/passwd\n",
        b"0123456789abcdef0123456789abcdef  workspace/../x\n",
        b"0123456789abcdef0123456789abcdef  workspace//x\n",
        b"0123456789abcdef0123456789abcdef  workspace/a\x01b\n",
        b"0123456789abcdef0123456789abcdef  config.toml\r\n",
        b"0123456789abcdef0123456789abcdef  a\n0123456789abcdef0123456789abcdef  a\n",  # twice
        b"0123456789abcdef0123456789abcdef  b\n0123456789abcdef0123456789abcdef  a\n",  # order
        b"\xff\n",
        b"\n",
    ],
)
def test_parse_checksums_is_strict(data: bytes) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_checksums(data)
    assert caught.value.code == 3 and caught.value.path.startswith("checksums.xxh3")


# --- exported_at ------------------------------------------------------------------------------


def test_exported_at_honours_source_date_epoch() -> None:
    assert exported_at({"SOURCE_DATE_EPOCH": "1796000000"}) == "2026-11-30T00:53:20Z"
    assert exported_at({"SOURCE_DATE_EPOCH": "0"}) == "1970-01-01T00:00:00Z"


def test_exported_at_is_utc_now_without_it() -> None:
    value = exported_at({})
    assert len(value) == 20 and value.endswith("Z") and value[10] == "T"


@pytest.mark.parametrize("bad", ["yesterday", "-5", "1e9", "99999999999999999999"])
def test_bad_source_date_epoch_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH"):
        exported_at({"SOURCE_DATE_EPOCH": bad})


# --- provenance.exported_at: an RFC 3339 date-time ----------------------------------------------


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("2026-11-29T14:00:00Z", True),
        ("2026-11-29T14:00:00.123456789+00:00", True),
        ("2024-02-29T00:00:00Z", True),  # a leap year
        ("2000-02-29T00:00:00Z", True),  # divisible by 400
        ("1900-02-29T00:00:00Z", False),  # divisible by 100 only
        ("2023-02-29T00:00:00Z", False),
        ("2026-04-31T00:00:00Z", False),
        ("2026-13-01T00:00:00Z", False),
        ("2026-00-01T00:00:00Z", False),
        ("2026-01-00T00:00:00Z", False),
        ("0000-01-01T00:00:00Z", False),  # there is no year 0
        ("2026-01-01T24:00:00Z", False),
        ("2026-01-01T23:60:00Z", False),
        ("2016-12-31T23:59:60Z", True),  # a leap second
        ("2026-01-01T00:00:61Z", False),
        ("2026-01-01T00:00:00+24:00", False),
        ("2026-01-01T00:00:00-23:59", True),
        ("2026-01-01 00:00:00Z", False),
        ("2026-01-01T00:00:00", False),
    ],
)
def test_exported_at_must_be_an_rfc3339_date_time_of_a_real_day(text: str, valid: bool) -> None:
    assert is_rfc3339(text) is valid


def test_exported_at_days_are_the_calendars() -> None:
    """Every month's length, leap years included, as the standard library's calendar has it."""
    for year in (1, 4, 100, 400, 1900, 2000, 2023, 2024, 9999):
        for month in range(0, 14):
            for day in range(0, 33):
                try:
                    datetime.date(year, month, day)
                    exists = True
                except ValueError:
                    exists = False
                text = f"{year:04d}-{month:02d}-{day:02d}T12:00:00Z"
                assert is_rfc3339(text) is exists, text
