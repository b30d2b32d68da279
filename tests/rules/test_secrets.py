"""Secrets (02 §5): scrub, ciphertext check, sweep targets and the one-pass sweep matcher."""

from __future__ import annotations

import base64
import json
import random
import re
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bundler.rules import sweep_hyperscan
from bundler.rules.credentials import authorization_token, credentials_in, mask_credentials
from bundler.rules.secrets import (
    SweepTarget,
    address_credentials,
    find_ciphertext,
    scrub,
    sweep_targets,
)
from bundler.rules.sweeper import ENGINE_VARIABLE, Hit, Sweeper, encodings_of, sweep_engine

# every test here runs once per sweep engine
pytestmark = pytest.mark.usefixtures("each_sweep_engine")

SECRET = "Zq8#Xv!2Lp@9Wm$4"  # 16 characters with URL- and JSON-significant ones
API = "sk-live-0123456789abcdef"


def config() -> dict[str, Any]:
    return {
        "agents": {"a": {"model_provider": "openai.main", "note_token": "agent-unknown-token-1"}},
        "providers": {
            "models": {
                "openai": {
                    "main": {
                        "api_key": API,
                        "extra_headers": {"X-Org.Id": "org-0123456789abcdef", "Short": "short-val"},
                    },
                    "enc": {"api_key": "enc2:AAAA"},
                    "tiny": {"api_key": "1234567"},
                }
            },
            "transcription": {"local_whisper": {"w": {"bearer_token": "bearer-token-777"}}},
        },
        "mcp": {"servers": [{"name": "gh", "command": "npx", "env": {"GITHUB_TOKEN": SECRET}}]},
        "channels": {
            "telegram": {
                "main": {"bot_token": "123456:telegram-token", "chat": "not-a-secret-value"}
            }
        },
        "cron": {
            "job": {
                "ApiKey": "cron-api-key-0000",
                "password": "pw",
                "secrets": ["list-secret-0001"],
            }
        },
        "custom_table": {"nested": {"db_password": "hunter2hunter2"}},
    }


# --- scrub and ciphertext ---------------------------------------------------------------------


def test_scrub_empties_every_secret_and_returns_sorted_paths() -> None:
    fragment = config()
    paths = scrub(fragment)
    assert paths == sorted(
        [
            "channels.telegram.main.bot_token",
            "mcp.servers.gh.env.GITHUB_TOKEN",
            "providers.models.openai.enc.api_key",
            "providers.models.openai.main.api_key",
            "providers.models.openai.main.extra_headers.X-Org.Id",
            "providers.models.openai.main.extra_headers.Short",
            "providers.models.openai.tiny.api_key",
            "providers.transcription.local_whisper.w.bearer_token",
        ]
    )
    main = fragment["providers"]["models"]["openai"]["main"]
    assert main["api_key"] == "" and main["extra_headers"] == {"X-Org.Id": "", "Short": ""}
    assert fragment["mcp"]["servers"][0]["env"] == {"GITHUB_TOKEN": ""}
    # every #[secret] field is marked, in every table: a channel's token too (a fragment never
    # holds channels, but nothing marked secret could leave through one that did)
    assert fragment["channels"]["telegram"]["main"]["bot_token"] == ""
    assert fragment["channels"]["telegram"]["main"]["chat"] == "not-a-secret-value"
    # scrubbing covers schema-marked fields only: opaque tables are not its business
    assert fragment["cron"]["job"]["ApiKey"] == "cron-api-key-0000"


def test_scrub_of_empty_secrets_requires_nothing() -> None:
    fragment = {
        "providers": {"models": {"openai": {"m": {"api_key": "", "extra_headers": {"A": ""}}}}}
    }
    assert scrub(fragment) == []


def test_find_ciphertext_names_paths_outside_secret_fields() -> None:
    fragment = {
        "agents": {"a": {"model_provider": "enc:abc", "skill_bundles": ["x", "enc2:y"]}},
        "mcp": {"servers": [{"name": "s.1", "command": "enc2:zzz"}]},
    }
    assert find_ciphertext(fragment) == [
        "agents.a.model_provider",
        "agents.a.skill_bundles[1]",
        'mcp.servers."s.1".command',
    ]


def test_find_ciphertext_ignores_lookalikes() -> None:
    assert (
        find_ciphertext(
            {"agents": {"a": {"model_provider": "xenc:abc", "risk_profile": "ENC:abc"}}}
        )
        == []
    )


# --- sweep targets ----------------------------------------------------------------------------


def test_sweep_targets_thresholds_opaque_keys_and_encrypted_count() -> None:
    targets, encrypted = sweep_targets(config())
    got = {(t.config_path, t.value) for t in targets}
    assert got == {
        ("providers.models.openai.main.api_key", API),
        ("providers.models.openai.main.extra_headers.X-Org.Id", "org-0123456789abcdef"),
        ("providers.transcription.local_whisper.w.bearer_token", "bearer-token-777"),
        ("mcp.servers.gh.env.GITHUB_TOKEN", SECRET),
        ("agents.a.note_token", "agent-unknown-token-1"),
        ("channels.telegram.main.bot_token", "123456:telegram-token"),
        ("cron.job.ApiKey", "cron-api-key-0000"),
        ("cron.job.secrets[0]", "list-secret-0001"),
        ("custom_table.nested.db_password", "hunter2hunter2"),
    }
    # "short-val" (9 chars) is a secret map value below 16; "1234567" below 8; "pw" below 8
    assert encrypted == 1


def test_every_item_of_a_secret_list_is_a_secret_to_sweep_for() -> None:
    # ZeroClaw encrypts a #[secret] Vec<String> item by item: each item is a secret of its own
    config = {
        "reliability": {"api_keys": ["sk-first-fallback-key-0001", "sk-second-fallback-key-02"]},
        "gateway": {"paired_tokens": ["paired-token-abcdefgh-1"]},
    }
    targets, _ = sweep_targets(config)
    values = {target.value for target in targets}
    assert {
        "sk-first-fallback-key-0001",
        "sk-second-fallback-key-02",
        "paired-token-abcdefgh-1",
    } <= values


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("https://bob:hunter2hunter2@proxy.example.com/v1", ["hunter2hunter2"]),
        ("https://proxy.example.com/v1?key=AIzaSyFAKE0123&region=eu", ["AIzaSyFAKE0123"]),
        (
            "wss://h/sse?x=1&api_key=sk-q-0123456789&token=t%2Bk-0000000",
            ["sk-q-0123456789", "t%2Bk-0000000", "t+k-0000000"],
        ),
        (
            "https://ghp_FAKE0123456789abcdefghij@github.com/o/r.git",
            ["ghp_FAKE0123456789abcdefghij"],
        ),
        (
            "--url=https://u:pass-pass-9@h:8080/x and http://h2/?secret=s3cr3t-s3cr3t",
            ["pass-pass-9", "s3cr3t-s3cr3t"],
        ),
        # none: no credential, a user name alone that is short, a non-secret parameter, no //
        ("https://api.openai.com/v1", []),
        ("ssh://git@github.com/o/r.git", []),
        ("https://h/x?model=gpt-4o-2024-08-06&region=eu-west-1", []),
        ("mailto:someone@example.com", []),
        ("https://bob:@h/x", []),
        ("https://bob:short@h/x?key=abc", []),  # under the sweep's 8 characters
        # as written and decoded, when the two differ: a byte search needs both spellings
        (
            "https://bob:LEAK%2dPASS%2d1@h/v1?api_key=LEAK%2DQUERY%2D1",
            ["LEAK%2dPASS%2d1", "LEAK-PASS-1", "LEAK%2DQUERY%2D1", "LEAK-QUERY-1"],
        ),
        # the fragment (OAuth's implicit flow) and a path segment's parameters
        ("https://h/mcp#access_token=frag-token-0001&state=s", ["frag-token-0001"]),
        ("https://h/v1;api_key=path-param-0001/more?q=1", ["path-param-0001"]),
        # ';' separates query and fragment parameters as '&' does
        ("https://h/x?a=1;token=semi-token-0001;b=2", ["semi-token-0001"]),
        ("https://h/x#a=1;sig=fragsig-00001", ["fragsig-00001"]),
        # a parameter's name is decoded before it is judged
        ("https://h/x?api%5Fkey=named-encoded-01", ["named-encoded-01"]),
    ],
)
def test_address_credentials_are_userinfo_and_secret_named_parameter_values(
    text: str, found: list[str]
) -> None:
    assert address_credentials(text) == found


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "sent to https://bob:hunter2%2d@h/v1?api_key=k-0001&model=m",
            "sent to https://bob:***@h/v1?api_key=***&model=m",
        ),
        ("https://ghp_FAKE0123456789abcdefghij@github.com/o", "https://***@github.com/o"),
        ("https://git@github.com/o", "https://git@github.com/o"),  # a short user is a name
        ("https://h/mcp#access_token=abc&state=s", "https://h/mcp#access_token=***&state=s"),
        ("https://h/v1;key=abc/p", "https://h/v1;key=***/p"),
        ("a https://u:p@h b http://h2/?token=t c", "a https://u:***@h b http://h2/?token=*** c"),
        ("https://h/?token=&x=1", "https://h/?token=&x=1"),  # nothing to hide
        ("no address here: token=abc", "no address here: token=abc"),
    ],
)
def test_mask_credentials_hides_every_credential_of_an_address_whatever_its_length(
    text: str, shown: str
) -> None:
    assert mask_credentials(text) == shown


@given(st.text(max_size=80))
@settings(max_examples=300)
def test_mask_credentials_leaves_no_credential_behind(text: str) -> None:
    """Whatever the text, its masked form holds no credential of any length (a masked address
    reads as one whose credentials are all ``***``)."""
    masked = mask_credentials("https://" + text)
    assert all(c.value in ("", "***") for c in credentials_in(masked)), masked


@pytest.mark.parametrize(
    ("value", "token"),
    [
        ("Bearer sk-live-0123456789", "sk-live-0123456789"),
        ("bearer  tok", "tok"),
        ("Bot 123456:telegram", "123456:telegram"),
        ("Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
        ("sk-live-0123456789", None),
        ("Hello world", None),  # not an authorization scheme
        ("Bearer two words", None),
    ],
)
def test_authorization_token_is_the_credential_after_a_known_scheme(
    value: str, token: str | None
) -> None:
    assert authorization_token(value) == token


def test_sweep_targets_hold_the_token_of_an_authorization_value() -> None:
    """A header holding ``Bearer TOKEN`` is swept for whole and for its token, which is what a
    script or a log repeats (``export TOKEN=…``)."""
    data = {"mcp": {"servers": [{"name": "s", "headers": {"Authorization": "Bearer tok-0123456"}}]}}
    values = {t.value for t in sweep_targets(data)[0]}
    assert values == {"Bearer tok-0123456", "tok-0123456"}


def test_sweep_targets_hold_credentials_written_into_addresses() -> None:
    """A password or token in a web address is a secret of the install by its look (02 §5.3
    sweeps values by the look of their key too): the export refuses to carry it by default."""
    data = {
        "providers": {
            "models": {"openai": {"p": {"uri": "https://bob:hunter2hunter2@proxy.example.com/v1"}}}
        },
        "mcp": {
            "servers": [{"name": "s", "url": "https://mcp.example.com/sse?api_key=sk-mcp-0123456"}]
        },
    }
    targets, _ = sweep_targets(data)
    assert {(t.config_path, t.value) for t in targets} == {
        ("providers.models.openai.p.uri", "hunter2hunter2"),
        ("mcp.servers.s.url", "sk-mcp-0123456"),
    }


def test_sweep_target_repr_hides_the_value() -> None:
    target = SweepTarget("providers.models.openai.main.api_key", API)
    assert API not in repr(target) and API not in str(target)


# --- encodings --------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", [b"", b"a", b"ab", b"abc", b"abcd"])
def test_base64_pattern_found_at_every_alignment(prefix: bytes) -> None:
    sweeper = Sweeper([SweepTarget("p", SECRET)])
    encoded = base64.b64encode(prefix + SECRET.encode() + b"tail")
    hits = sweeper.scan_bytes("f", b"xx" + encoded + b"yy")
    assert Hit("f", "p", "base64") in hits


def test_url_encoded_and_json_escaped_forms_found() -> None:
    sweeper = Sweeper([SweepTarget("p", SECRET)])
    url = urllib.parse.quote(SECRET, safe="").encode()
    assert sweeper.scan_bytes("u", b"?token=" + url + b"&x=1") == [Hit("u", "p", "url-encoded")]
    quoted = json.dumps({"k": 'a"' + SECRET + "\\"}).encode()
    value_with_quote = 'q"uote-secret-0000'
    sweeper2 = Sweeper([SweepTarget("j", value_with_quote)])
    assert Hit("x", "j", "json-escaped") in sweeper2.scan_bytes(
        "x", json.dumps({"k": value_with_quote}).encode()
    )
    assert Hit("r", "p", "raw") in sweeper.scan_bytes("r", quoted)


SPELLED = "sk/LEAK+CANARY&12345678?ab~"  # a '/', a '+', an '&': every spelling differs


@pytest.mark.parametrize(
    ("encoding", "spell"),
    [
        ("url-encoded", lambda v: re.sub("%..", lambda m: m[0].lower(), quote(v, safe=""))),
        ("url-encoded", lambda v: urllib.parse.quote(v)),  # "/" left as it is
        ("json-escaped", lambda v: json.dumps(v)[1:-1].replace("/", "\\/")),  # PHP's
        ("json-escaped", lambda v: json.dumps(v)[1:-1].replace("&", "\\u0026")),  # Go's
        ("base64", lambda v: base64.urlsafe_b64encode(v.encode()).decode()),  # URL-safe
    ],
    ids=["url-lower-hex", "url-path", "json-slash", "json-html-safe", "base64url"],
)
def test_common_spellings_of_each_encoding_are_found(
    encoding: str, spell: Callable[[str], str]
) -> None:
    spelled = spell(SPELLED)
    hits = Sweeper([SweepTarget("p", SPELLED)]).scan_bytes("f", b"<" + spelled.encode() + b">")
    assert Hit("f", "p", encoding) in hits


def test_encodings_are_unique_and_never_empty() -> None:
    forms = encodings_of("plainalnum0123")
    patterns = [pattern for _, pattern in forms]
    assert len(patterns) == len(set(patterns)) and all(patterns)
    assert forms[0] == ("raw", b"plainalnum0123")


def test_raw_hit_names_file_and_path_never_the_value() -> None:
    sweeper = Sweeper([SweepTarget("providers.models.openai.main.api_key", API)])
    hits = sweeper.scan_bytes("workspace/notes.md", b"my key is " + API.encode() + b" ok")
    assert hits == [Hit("workspace/notes.md", "providers.models.openai.main.api_key", "raw")]
    assert all(API not in repr(hit) for hit in hits)


def test_no_hit_in_clean_data() -> None:
    sweeper = Sweeper([SweepTarget("p", SECRET), SweepTarget("q", API)])
    assert sweeper.scan_bytes("f", bytes(range(256)) * 100) == []


def test_secret_contained_in_another_secret_both_found() -> None:
    sweeper = Sweeper(
        [SweepTarget("long", "abcdefgh-SUPERSECRET-1"), SweepTarget("short", "SUPERSECRET-1")]
    )
    hits = {hit.secret_path for hit in sweeper.scan_bytes("f", b"..abcdefgh-SUPERSECRET-1..")}
    assert hits == {"long", "short"}


def test_overlapping_occurrences_of_two_secrets_both_found() -> None:
    sweeper = Sweeper([SweepTarget("a", "AAAABBBBCCCC"), SweepTarget("b", "CCCCDDDDEEEE")])
    hits = {hit.secret_path for hit in sweeper.scan_bytes("f", b"AAAABBBBCCCCDDDDEEEE")}
    assert hits == {"a", "b"}


def test_each_secret_and_encoding_reported_once_per_file() -> None:
    sweeper = Sweeper([SweepTarget("p", API)])
    assert sweeper.scan_bytes("f", (API.encode() + b"\n") * 50) == [Hit("f", "p", "raw")]


def test_empty_sweeper_finds_nothing() -> None:
    sweeper = Sweeper([])
    assert sweeper.empty and sweeper.scan_bytes("f", b"anything") == []
    stream = sweeper.stream("f")
    stream.feed(b"anything")
    assert stream.close() == []


def test_stream_finds_a_value_split_at_every_chunk_boundary() -> None:
    sweeper = Sweeper([SweepTarget("p", SECRET)])
    data = b"header " + SECRET.encode() + b" footer"
    for cut in range(len(data) + 1):
        stream = sweeper.stream("f")
        stream.feed(data[:cut])
        stream.feed(data[cut:])
        assert stream.close() == [Hit("f", "p", "raw")], cut


def test_stream_finds_a_value_spread_over_many_tiny_chunks() -> None:
    sweeper = Sweeper([SweepTarget("p", SECRET)])
    encoded = base64.b64encode(b"z" + SECRET.encode())
    stream = sweeper.stream("f")
    for i in range(len(encoded)):
        stream.feed(encoded[i : i + 1])
    assert stream.close() == [Hit("f", "p", "base64")]


def test_stream_matches_scan_on_random_chunking() -> None:
    rng = random.Random(7)
    targets = [
        SweepTarget(f"s{i}", "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(20)))
        for i in range(10)
    ]
    sweeper = Sweeper(targets)
    blob = bytearray(rng.randbytes(200_000))
    for target in targets[::3]:
        at = rng.randrange(len(blob) - 40)
        blob[at : at + 20] = target.value.encode()
    whole = set(sweeper.scan_bytes("f", bytes(blob)))
    stream = sweeper.stream("f")
    at = 0
    while at < len(blob):
        step = rng.randint(1, 5000)
        stream.feed(memoryview(blob)[at : at + step])
        at += step
    assert set(stream.close()) == whole
    assert {hit.secret_path for hit in whole} == {t.config_path for t in targets[::3]}


def test_sweep_of_utf8_secret() -> None:
    value = "päßwörd-ÜNICODE-secret"
    sweeper = Sweeper([SweepTarget("p", value)])
    assert sweeper.scan_bytes("f", value.encode()) == [Hit("f", "p", "raw")]
    assert Hit("g", "p", "json-escaped") in sweeper.scan_bytes("g", json.dumps(value).encode())


def _naive_hits(targets: list[SweepTarget], name: str, data: bytes) -> set[Hit]:
    return {
        Hit(name, target.config_path, encoding)
        for target in targets
        for encoding, pattern in encodings_of(target.value)
        if pattern in data
    }


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(
        st.text(min_size=8, max_size=30).filter(lambda v: not v.startswith(("enc:", "enc2:"))),
        min_size=1,
        max_size=6,
    ),
    noise=st.binary(max_size=400),
    placements=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 6), st.integers(0, 400)), max_size=6
    ),
    chunk=st.integers(1, 64),
)
def test_sweep_agrees_with_a_naive_search_of_every_encoding(
    values: list[str], noise: bytes, placements: list[tuple[int, int, int]], chunk: int
) -> None:
    targets = [SweepTarget(f"s{i}", value) for i, value in enumerate(values)]
    data = bytearray(noise)
    for which, form, at in placements:
        forms = encodings_of(values[which % len(values)])
        data[at:at] = forms[form % len(forms)][1]
    blob = bytes(data)
    sweeper = Sweeper(targets)
    expected = _naive_hits(targets, "f", blob)
    assert set(sweeper.scan_bytes("f", blob)) == expected
    stream = sweeper.stream("f")
    for offset in range(0, len(blob), chunk):
        stream.feed(blob[offset : offset + chunk])
    assert set(stream.close()) == expected


def test_secret_map_of_the_wrong_type_is_scrubbed_whole() -> None:
    fragment: dict[str, Any] = {
        "providers": {"models": {"openai": {"m": {"extra_headers": "Bearer wrong-type-secret"}}}}
    }
    assert scrub(fragment) == ["providers.models.openai.m.extra_headers"]
    assert fragment["providers"]["models"]["openai"]["m"]["extra_headers"] == ""


@pytest.mark.parametrize("chunk", [1 << 20, 4096, 1000])
def test_sweep_in_dense_base64_and_hex_data_finds_every_placement(chunk: int) -> None:
    rng = random.Random(chunk)
    values = [
        "".join(rng.choice("ABCDEFGHabcdefgh0123456789") for _ in range(rng.randint(15, 40)))
        for _ in range(8)
    ]
    values.append("short-09")  # below 15 bytes: the trie engine's
    targets = [SweepTarget(f"s{i}", value) for i, value in enumerate(values)]
    for filler in (base64.b64encode(rng.randbytes(60_000)), rng.randbytes(40_000).hex().encode()):
        data = bytearray(filler)
        for i in range(0, len(values), 2):
            forms = encodings_of(values[i])
            at = rng.randrange(len(data))
            data[at:at] = forms[rng.randrange(len(forms))][1]
        blob = bytes(data)
        expected = _naive_hits(targets, "f", blob)
        assert {hit.secret_path for hit in expected} >= {f"s{i}" for i in range(0, len(values), 2)}
        sweeper = Sweeper(targets)
        assert set(sweeper.scan_bytes("f", blob)) == expected
        stream = sweeper.stream("f")
        for offset in range(0, len(blob), chunk):
            stream.feed(memoryview(blob)[offset : offset + chunk])
        assert set(stream.close()) == expected


def test_long_secrets_sampled_with_a_stride_are_found_at_every_offset() -> None:
    rng = random.Random(3)
    values = [
        "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(n)) for n in (40, 47, 63)
    ]
    sweeper = Sweeper([SweepTarget(f"s{i}", value) for i, value in enumerate(values)])
    filler = base64.b64encode(rng.randbytes(12_000))
    for i, value in enumerate(values):
        for offset in range(0, 70):
            at = 4096 + offset
            blob = filler[:at] + value.encode() + filler[at:]
            assert Hit("f", f"s{i}", "raw") in sweeper.scan_bytes("f", blob), (i, offset)
            sparse = rng.randbytes(at) + value.encode() + rng.randbytes(100)
            assert Hit("f", f"s{i}", "raw") in sweeper.scan_bytes("f", sparse), (i, offset)


def test_ciphertext_prefixes_are_listed_once() -> None:
    """Export's check (02 §5.2) and verify's (03 §1) read one list, not two copies."""
    from pathlib import Path

    import bundler

    package = Path(bundler.__file__).parent
    holders = [
        path.name for path in package.rglob("*.py") if '"enc2:"' in path.read_text(encoding="utf-8")
    ]
    assert holders == ["secrets.py"]


@pytest.mark.parametrize(
    "shown",
    [
        "cannot read workspace/Bearer Zq8#Xv!2Lp@9Wm$4 (Permission denied)",
        "a/Bearer Zq8#Xv!2Lp@9Wm$4/b",
        "x" + base64.b64encode(b"ab" + b"Bearer Zq8#Xv!2Lp@9Wm$4").decode() + "y",
        "k="
        + urllib.parse.quote("Bearer Zq8#Xv!2Lp@9Wm$4", safe="")
        + " and again Bearer Zq8#Xv!2Lp@9Wm$4",
        json.dumps({"v": "Bearer Zq8#Xv!2Lp@9Wm$4"}),
    ],
    ids=["space", "slash", "base64", "url-twice", "json"],
)
def test_withhold_removes_a_secret_by_exact_value_in_every_encoding(shown: str) -> None:
    """By value over the whole text, not word by word."""
    secret = "Bearer " + SECRET
    sweeper = Sweeper([SweepTarget("mcp.servers.s.headers.Authorization", secret)])
    withheld = sweeper.withhold(shown)
    assert "withheld" in withheld
    assert sweeper.scan_bytes("m", withheld.encode()) == []
    assert sweeper.withhold("nothing secret here") == "nothing secret here"


def test_sweep_targets_of_the_file_and_the_overrides_are_both_kept() -> None:
    """An override replacing a key leaves the stored key a target."""
    stored = {"providers": {"models": {"openai": {"m": {"api_key": API, "model": "x"}}}}}
    overridden = {"providers": {"models": {"openai": {"m": {"api_key": "", "model": "x"}}}}}
    targets, _ = sweep_targets(stored, overridden)
    assert [t.value for t in targets] == [API]
    other = {"providers": {"models": {"openai": {"m": {"api_key": SECRET, "model": "x"}}}}}
    targets, _ = sweep_targets(stored, other)
    assert sorted(t.value for t in targets) == sorted([API, SECRET])


# --- the engines ------------------------------------------------------------------------------


def test_the_sweep_runs_on_the_engine_the_variable_names(each_sweep_engine: str) -> None:
    assert sweep_engine() == each_sweep_engine
    assert Sweeper([SweepTarget("p", SECRET)]).engine == each_sweep_engine


def test_hyperscan_is_the_default_engine_where_it_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    if not sweep_hyperscan.available():
        pytest.skip("hyperscan is not installed on this platform")
    monkeypatch.delenv(ENGINE_VARIABLE, raising=False)
    assert sweep_engine() == "hyperscan" and Sweeper([SweepTarget("p", API)]).engine == "hyperscan"


def test_a_secret_hyperscan_cannot_take_is_swept_by_the_pure_engine() -> None:
    # the literal compiler stops at a NUL byte; a value Hyperscan refuses must still be found
    value = "abc\x00def-0123456789"
    sweeper = Sweeper([SweepTarget("p", value)], engine="hyperscan")
    assert sweeper.engine == "python"
    assert sweeper.scan_bytes("f", b"<" + value.encode() + b">") == [Hit("f", "p", "raw")]


def test_hits_of_a_file_come_in_target_order_whatever_the_engine() -> None:
    targets = [SweepTarget("long", "L" * 20 + "-long-secret"), SweepTarget("short", "shrt-123")]
    blob = b"shrt-123 then " + ("L" * 20 + "-long-secret").encode()
    sweeper = Sweeper(targets)
    assert [hit.secret_path for hit in sweeper.scan_bytes("f", blob)] == ["long", "short"]
    stream = sweeper.stream("f")
    for i in range(0, len(blob), 5):
        stream.feed(memoryview(blob)[i : i + 5])
    assert [hit.secret_path for hit in stream.close()] == ["long", "short"]


def test_a_sweeper_scans_from_several_threads_at_once() -> None:
    # the export sweeps beside the copy: a second thread must neither fail nor miss a hit
    sweeper = Sweeper([SweepTarget("p", API)])
    blob = (b"x" * 100_000 + API.encode()) * 20
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: sweeper.scan_bytes("f", blob), range(16)))
    assert results == [[Hit("f", "p", "raw")]] * 16


@pytest.mark.parametrize("char", ["\t", "\n", "\x1b", "\u202e"], ids=["tab", "nl", "esc", "bidi"])
def test_withholding_covers_the_display_escaped_spelling_of_a_secret(char: str) -> None:
    """Messages escape a name for display before the error is made, and so withheld: a secret
    holding a control or bidi character must be withheld in that spelling too, in the message,
    the path, ``repr`` and a name's redaction."""
    from bundler.errors import Refused, withholding
    from bundler.rules.names import escape_display
    from bundler.rules.sweeper import withholder

    secret = f"sk-LEAK{char}CANARY-0123456789"
    scrub = withholder([SweepTarget("providers.models.a.b.api_key", secret)])
    shown = escape_display(f"workspace/key-{secret}")
    assert "CANARY" in shown  # the escaped spelling is not the raw value
    with pytest.raises(Refused) as caught, withholding(scrub):
        raise Refused(f"cannot read {shown} (Permission denied)", path=shown)
    for text in (str(caught.value), repr(caught.value), caught.value.path):
        assert "CANARY" not in text, text
