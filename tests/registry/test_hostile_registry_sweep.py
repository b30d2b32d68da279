"""A seeded sweep of randomly broken registry answers from hostile
registries: whatever a registry answers, a pull or an inspect ends in success or one line,
never a traceback, never a credential, and a failed pull leaves nothing beside its destination.

The named cases are in ``test_hostile_registry``; this sweep found the ones a list had missed
(http.client's IncompleteRead and a reset escaping a blob read, urllib's ValueError on a token
realm, a non-ASCII redirect), and keeps looking: each seed is one breakage, reproducible.
Answers that only stall are left to the named timeout test (each would wait 60 s here).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import random
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from support import bundlefactory as bf
from support.faultinject import slow_sample_count
from support.hostile_registry import (
    REPO,
    TAG,
    Built,
    FakeRegistry,
    build,
    digest_of,
    send,
    send_garbled,
)
from support.kit import one_error, run_cli

PASSWORD = "Sweep-Secret-Password-6120"
BASIC = base64.b64encode(f"user:{PASSWORD}".encode()).decode()

ODD_VALUES: list[Any] = [
    None, True, -1, 0, 2**70, 1.5, "", "x", "sha256:", "sha256:" + "0" * 64, "sha512:" + "a" * 128,
    "../../etc/passwd", "\u202e", "a" * 5000, [], {}, [1], {"a": 1}, "\x00",
]  # fmt: skip
CHALLENGES = [
    'Basic realm="r"',
    'Bearer realm="http://{host}/token",service="s",scope="repository:agents/r:pull"',
    "Bearer",
    'Bearer realm="',
    'Bearer realm="ftp://x/y"',
    'Bearer realm="http://[::1/t"',
    'Bearer realm="http://{host}:99999/t"',
    'Bearer realm="http://{host}/caf\u00e9"',
    "Bearer " + 'a="b",' * 500,
    "Negotiate",
]
TOKEN_ANSWERS: list[Any] = [{}, {"token": 1}, {"token": ""}, {"token": "t"}, [], "x", None]
ERROR_BODIES = [
    b"{}",
    b'{"errors":1}',
    b'{"errors":[{"code":5,"message":[1]}]}',
    b"not json",
    b"\xff\xfe",
    b'{"errors":[{"code":"UNAUTHORIZED","message":"' + PASSWORD.encode() + b'"}]}',
]
LOCATIONS = ["", "/v2/", "//elsewhere/x", "javascript:1", "http://[::1/x", "ftp://x", " http://x"]
STATUSES = [200, 201, 204, 206, 301, 302, 307, 400, 401, 403, 404, 416, 429, 500, 503]

Hook = Callable[[BaseHTTPRequestHandler], None]


def _mutated(value: Any, rng: random.Random, depth: int = 0) -> Any:
    """``value`` (the manifest's JSON) with one random change somewhere in it."""
    if isinstance(value, dict) and value and depth < 4:
        key = rng.choice(list(value))
        choice = rng.randrange(3)
        if choice == 0:
            del value[key]
        elif choice == 1:
            value[key] = rng.choice(ODD_VALUES)
        else:
            value[key] = _mutated(value[key], rng, depth + 1)
        return value
    if isinstance(value, list) and value and depth < 4:
        index = rng.randrange(len(value))
        choice = rng.randrange(3)
        if choice == 0:
            value.append(copy.deepcopy(value[index]))
        elif choice == 1:
            value[index] = rng.choice(ODD_VALUES)
        else:
            value[index] = _mutated(value[index], rng, depth + 1)
        return value
    return rng.choice(ODD_VALUES)


def _closing(hook: Hook) -> Hook:
    """``hook``, then the connection closed: a body shorter than its length ends there rather
    than stalling the client until its timeout."""

    def answer(handler: BaseHTTPRequestHandler) -> None:
        hook(handler)
        handler.close_connection = True

    return answer


def _cut(status_line: bytes) -> Hook:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True
        handler.wfile.write(status_line)

    return answer


def _break(fake: FakeRegistry, built: Built, rng: random.Random) -> str:
    """Break one answer of ``fake`` at random; a few words saying which (for the failure)."""
    _config, layers = built.descriptors()
    manifest_path = f"/v2/{REPO}/manifests/{TAG}"
    blob_paths = [f"/v2/{REPO}/blobs/{digest_of(built.config)}"]
    blob_paths += [f"/v2/{REPO}/blobs/{layer.digest}" for layer in layers]
    target = rng.choice([manifest_path, "/v2/", *blob_paths])
    kind = rng.randrange(6)
    if kind == 0:
        doc = _mutated(json.loads(fake.manifest), rng)
        body = json.dumps(doc).encode()
        fake.hooks[manifest_path] = lambda h: send(h, 200, body, {"Content-Type": fake.media})
        return f"manifest {body[:200]!r}"
    if kind == 1:
        status, body = rng.choice(STATUSES), rng.choice(ERROR_BODIES)
        headers = {"Location": rng.choice(LOCATIONS)}
        if status == 401:
            headers["WWW-Authenticate"] = rng.choice(CHALLENGES).format(host=fake.host)
        fake.hooks[target] = lambda h: send(h, status, body, headers)
        return f"{target} answers {status} {headers}"
    if kind == 2:
        real = fake.blobs.get(target.rsplit("/", 1)[1], fake.manifest)
        cut = rng.choice([0, 1, len(real) // 2, len(real) - 1])
        length = rng.choice([None, -1, len(real), len(real) + 10])
        fake.hooks[target] = _closing(lambda h: send(h, 200, real[:cut], length=length))
        return f"{target} cut at {cut}, length {length}"
    if kind == 3:
        status = rng.choice([200, 401, 404])
        fake.hooks[target] = lambda h: send_garbled(h, status)
        return f"{target} garbles its chunked body"
    if kind == 4:
        line = rng.choice([b"", b"HTTP/1.1 200", b"HTTP/1.1 999 X\r\n\r\n", b"garbage\r\n\r\n"])
        fake.hooks[target] = _cut(line)
        return f"{target} closes after {line!r}"
    fake.challenge = rng.choice(CHALLENGES).format(host=fake.host)
    token = json.dumps(rng.choice(TOKEN_ANSWERS)).encode()
    status = rng.choice([200, 401, 500])
    fake.hooks["/token"] = lambda h: send(h, status, token, {"Content-Type": "application/json"})
    fake.accept_auth = lambda value: value in ("Bearer t", f"Basic {BASIC}")
    return f"challenge {fake.challenge[:80]!r}, token service {status} {token!r}"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    base = tmp_path_factory.mktemp("sweep")
    install = bf.write_install(base / "install")
    return build(bf.export_bundle(install, base / "bundle"))


@pytest.mark.slow
def test_no_registry_answer_gives_a_traceback_a_credential_or_leftovers(
    built: Built, tmp_path: Path
) -> None:
    count = slow_sample_count() or 40
    for seed in range(count):
        rng = random.Random(seed)
        fake = FakeRegistry(built)
        try:
            what = _break(fake, built, rng)
            work = tmp_path / f"seed-{seed}"
            (work / "docker").mkdir(parents=True)
            (work / "docker" / "config.json").write_text(
                json.dumps({"auths": {fake.host: {"auth": BASIC}}}), encoding="utf-8"
            )
            env = {"DOCKER_CONFIG": str(work / "docker")}
            for args in (
                ["bundle", "pull", fake.ref(), str(work / "out"), "--plain-http"],
                ["bundle", "inspect", fake.ref(), "--plain-http"],
            ):
                done = run_cli(args, env=env, timeout=90)
                text = done.stdout + done.stderr
                shown = f"seed {seed} ({what}), {args[:2]}: {text[-600:]}"
                assert "Traceback" not in text, shown
                assert PASSWORD not in text and BASIC not in text, shown
                assert done.returncode in (0, 1, 3), shown
                if done.returncode:
                    assert one_error(done.stderr), shown
            assert sorted(os.listdir(work)) in (["docker"], ["docker", "out"]), what
        finally:
            fake.close()
