"""Retries and stalls: a busy registry (429, 502, 503, 504) is asked again within bounded
backoff that honours a capped Retry-After, and a registry that drips its answer is cut off.
The waits are shortened with $BUNDLER_REGISTRY_TIME_SCALE so that each test runs in seconds;
the counts and the ordering are the real ones."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.hostile_registry import (
    BUSY_STORMS,
    REPO,
    TAG,
    Built,
    FakeRegistry,
    build,
    busy,
    drip,
    send,
)
from support.kit import one_error, run_cli

from bundler.rules import retry

SCALE = "0.02"  # Retry-After capped at 1.2 s, 6 s a request, a stall window of 1.2 s


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    base = tmp_path_factory.mktemp("retries")
    install = bf.write_install(base / "install")
    return build(bf.export_bundle(install, base / "bundle"))


@pytest.fixture
def fake(built: Built) -> Iterator[FakeRegistry]:
    registry = FakeRegistry(built)
    try:
        yield registry
    finally:
        registry.close()


def pull(fake: FakeRegistry, tmp_path: Path, scale: str = SCALE) -> tuple[int, str, float]:
    began = time.monotonic()
    done = run_cli(
        ["bundle", "pull", fake.ref(), str(tmp_path / "out"), "--plain-http"],
        env={"BUNDLER_REGISTRY_TIME_SCALE": scale, "HOME": str(tmp_path)},
        timeout=120,
    )
    assert "Traceback" not in done.stderr
    return done.returncode, done.stderr, time.monotonic() - began


def asked(fake: FakeRegistry, path: str) -> int:
    return sum(1 for _method, where, _headers in fake.requests if where.split("?")[0] == path)


def a_layer(fake: FakeRegistry, built: Built) -> str:
    digest = next(d for d in fake.blobs if fake.blobs[d] != built.config)
    return f"/v2/{REPO}/blobs/{digest}"


def test_a_blob_answered_503_twice_then_served_is_pulled(
    fake: FakeRegistry, built: Built, tmp_path: Path
) -> None:
    path = a_layer(fake, built)
    good = fake.blobs[path.rsplit("/", 1)[1]]
    answers = [busy(503), busy(503, "0")]

    def flaky(handler: BaseHTTPRequestHandler) -> None:
        if answers:
            answers.pop(0)(handler)
        else:
            send(handler, 200, good)

    fake.hooks[path] = flaky
    code, stderr, _ = pull(fake, tmp_path)
    assert code == 0, stderr
    assert asked(fake, path) == 3
    assert (tmp_path / "out").is_dir()


@pytest.mark.parametrize("case", BUSY_STORMS)
def test_a_registry_busy_for_ever_ends_the_pull_within_its_budget(
    fake: FakeRegistry, tmp_path: Path, case: str
) -> None:
    path = f"/v2/{REPO}/manifests/{TAG}"
    fake.hooks[path] = BUSY_STORMS[case]
    code, stderr, took = pull(fake, tmp_path)
    assert code == 1 and one_error(stderr), stderr
    assert "try again" in stderr
    assert asked(fake, path) == retry.DEFAULT.tries
    assert took < retry.DEFAULT.budget * float(SCALE) + 10
    assert not (tmp_path / "out").exists()


def test_retry_after_is_capped_at_a_minute_and_the_budget_holds(
    fake: FakeRegistry, tmp_path: Path
) -> None:
    """At full scale a Retry-After of 999999 s would be waited 60 s a try; scaled by 0.02 it is
    1.2 s: four waits, never the 999999 s asked."""
    path = f"/v2/{REPO}/manifests/{TAG}"
    fake.hooks[path] = busy(429, "999999")
    _code, _stderr, took = pull(fake, tmp_path)
    assert 4 * 1.2 <= took < 4 * 1.2 + 10


def test_a_blob_dripped_one_byte_a_second_is_cut(
    fake: FakeRegistry, built: Built, tmp_path: Path
) -> None:
    path = a_layer(fake, built)
    fake.hooks[path] = drip(fake.blobs[path.rsplit("/", 1)[1]])
    code, stderr, took = pull(fake, tmp_path)
    assert code == 1 and one_error(stderr), stderr
    assert "less than 1 KiB/s" in stderr and "try again" in stderr
    assert took < 30
    assert not (tmp_path / "out").exists()


def test_a_manifest_dripped_one_byte_a_second_is_cut(fake: FakeRegistry, tmp_path: Path) -> None:
    path = f"/v2/{REPO}/manifests/{TAG}"
    fake.hooks[path] = drip(fake.manifest)
    code, stderr, took = pull(fake, tmp_path)
    assert code == 1 and one_error(stderr), stderr
    assert "try again" in stderr
    assert took < 40


def test_the_retry_rules() -> None:
    t = retry.DEFAULT
    assert retry.retry_after("999999", 0.0, t.retry_after_cap) == 60.0
    assert retry.retry_after("7", 0.0, t.retry_after_cap) == 7.0
    assert retry.retry_after("Wed, 21 Oct 2015 07:28:00 GMT", time.time(), 60) is None
    assert retry.retry_after("garbage", 0.0, 60) is None
    assert retry.retry_after("-5", 0.0, 60) is None
    future = time.time() + 30
    from email.utils import formatdate

    assert 25 < (retry.retry_after(formatdate(future, usegmt=True), time.time(), 60) or 0) <= 30
    assert retry.next_wait(5, None, now=0, elapsed=0, timings=t, unit=0.5) is None
    assert retry.next_wait(1, "999999", now=0, elapsed=250, timings=t, unit=0.5) is None
    waits = [retry.backoff(n, t, 0.999) for n in range(10)]
    assert waits == sorted(waits) and max(waits) <= t.backoff_max
    assert retry.timings({"BUNDLER_REGISTRY_TIME_SCALE": "5"}) == t
    assert retry.timings({"BUNDLER_REGISTRY_TIME_SCALE": "x"}) == t


def push(fake: FakeRegistry, tmp_path: Path) -> tuple[int, str]:
    install = bf.write_install(tmp_path / "install")
    bundle = bf.export_bundle(install, tmp_path / "bundle")
    done = run_cli(
        ["bundle", "push", str(bundle), fake.ref(f"{REPO}:2"), "--plain-http"],
        env={"BUNDLER_REGISTRY_TIME_SCALE": SCALE, "HOME": str(tmp_path)},
        timeout=120,
    )
    assert "Traceback" not in done.stderr
    return done.returncode, done.stderr


def upload_session(fake: FakeRegistry, answer: Callable[[BaseHTTPRequestHandler], None]) -> None:
    fake.hooks[f"/v2/{REPO}/blobs/uploads/"] = lambda h: send(
        h, 202, b"", {"Location": f"/v2/{REPO}/blobs/uploads/x"}
    )
    fake.hooks[f"/v2/{REPO}/blobs/uploads/x"] = answer


def test_a_chunked_patch_is_never_repeated(fake: FakeRegistry, tmp_path: Path) -> None:
    """A new repository's layers go up in one pass (a chunked PATCH): a busy answer to it fails
    the push, which a rerun repeats, rather than a PATCH sent twice into one session."""

    def answer(handler: BaseHTTPRequestHandler) -> None:
        if handler.command == "PUT":  # the config blob, sent first: taken
            handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
            send(handler, 201, b"")
            return
        if handler.command == "PATCH":
            length = handler.headers.get("Transfer-Encoding")
            assert length == "chunked"
            while True:
                size = int(handler.rfile.readline().strip() or b"0", 16)
                handler.rfile.read(size + 2)
                if size == 0:
                    break
        busy(503)(handler)

    upload_session(fake, answer)
    code, stderr = push(fake, tmp_path)
    assert code == 1 and one_error(stderr), stderr
    patches = [r for r in fake.requests if r[0] == "PATCH"]
    assert len(patches) == 1


def test_a_monolithic_put_answered_busy_is_made_again_in_a_new_session(tmp_path: Path) -> None:
    """Into a repository with a tag, layers go up as a monolithic PUT ?digest=: a 503 to it
    starts the upload again (a new session, the bytes made again), at most 5 times."""
    fake = FakeRegistry()  # holds no blob: every layer goes up
    fake.hooks[f"/v2/{REPO}/tags/list"] = lambda h: send(h, 200, b'{"tags": ["1"]}')

    taken: list[int] = []

    def answer(handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        handler.rfile.read(length)
        if not taken:  # the config blob, sent first: taken
            taken.append(length)
            send(handler, 201, b"")
        else:
            busy(503)(handler)

    upload_session(fake, answer)
    code, stderr = push(fake, tmp_path)
    assert code == 1 and one_error(stderr), stderr
    assert "try again" in stderr
    posts = [r for r in fake.requests if r[0] == "POST"]
    puts = [r for r in fake.requests if r[0] == "PUT" and "digest=" in r[1]]
    fake.close()
    assert len(puts) == 1 + retry.DEFAULT.tries
    assert len(posts) == 1 + retry.DEFAULT.tries
