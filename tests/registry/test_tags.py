"""Finding things in a registry: ``bundle tags`` (every page of the list, bounded), a missing
tag naming the tags there are, and "did you mean oci://…" for references other tools take."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.hostile_registry import HOSTILE_TAG_LISTS, REPO, FakeRegistry, send
from support.kit import one_error, run_cli
from support.registry_server import Registry


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    install = bf.write_install(tmp_path / "install")
    return bf.export_bundle(install, tmp_path / "bundle")


@pytest.fixture
def fake() -> Iterator[FakeRegistry]:
    registry = FakeRegistry()
    try:
        yield registry
    finally:
        registry.close()


def test_bundle_tags_lists_the_tags_of_a_repository(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    for tag in ("v1", "v2"):
        pushed = run_cli(
            ["bundle", "push", str(bundle), registry.ref(f"agents/r:{tag}"), "--plain-http"]
        )
        assert pushed.returncode == 0, pushed.stderr
    listed = run_cli(["bundle", "tags", registry.ref("agents/r"), "--plain-http"])
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["v1", "v2"]
    as_json = run_cli(["bundle", "tags", registry.ref("agents/r"), "--plain-http", "--json"])
    assert json.loads(as_json.stdout)["tags"] == ["v1", "v2"]
    missing = run_cli(["bundle", "tags", registry.ref("agents/nothing"), "--plain-http"])
    assert missing.returncode == 1 and one_error(missing.stderr), missing.stderr
    assert "no repository agents/nothing" in missing.stderr


def test_a_missing_tag_names_the_tags_there_are(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    for tag in ("v1", "v2"):
        assert (
            run_cli(
                ["bundle", "push", str(bundle), registry.ref(f"agents/r:{tag}"), "--plain-http"]
            ).returncode
            == 0
        )
    done = run_cli(
        ["bundle", "pull", registry.ref("agents/r:v3"), str(tmp_path / "o"), "--plain-http"]
    )
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "has no tag v3 in agents/r; it has v1, v2" in done.stderr
    other = run_cli(
        ["bundle", "pull", registry.ref("agents/zz:v1"), str(tmp_path / "o"), "--plain-http"]
    )
    assert "has no repository agents/zz" in other.stderr


def test_the_pages_of_a_tag_list_are_followed(fake: FakeRegistry) -> None:
    path = f"/v2/{REPO}/tags/list"

    def paged(handler: object) -> None:
        from http.server import BaseHTTPRequestHandler

        assert isinstance(handler, BaseHTTPRequestHandler)
        if "last=b" in handler.path:
            send(handler, 200, b'{"tags": ["c"]}')
        else:
            link = f'<{path}?n=2&last=b>; rel="next"'
            send(handler, 200, b'{"tags": ["b", "a"]}', {"Link": link})

    fake.hooks[path] = paged
    done = run_cli(["bundle", "tags", fake.ref(REPO), "--plain-http"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["a", "b", "c"]


@pytest.mark.parametrize("case", HOSTILE_TAG_LISTS)
def test_a_hostile_tag_list_is_refused_in_one_line(fake: FakeRegistry, case: str) -> None:
    hook, words = HOSTILE_TAG_LISTS[case]
    fake.hooks[f"/v2/{REPO}/tags/list"] = hook
    done = run_cli(["bundle", "tags", fake.ref(REPO), "--plain-http"], timeout=60)
    assert done.returncode == 3 and one_error(done.stderr), done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("docker://registry.example/agents/r:1", "oci://registry.example/agents/r:1"),
        ("registry.example/agents/r:1", "oci://registry.example/agents/r:1"),
        ("localhost:5000/agents/r", "oci://localhost:5000/agents/r"),
    ],
)
def test_a_reference_of_another_tool_gets_did_you_mean(
    given: str, meant: str, tmp_path: Path
) -> None:
    done = run_cli(["bundle", "pull", given, str(tmp_path / "o")])
    assert done.returncode == 2 and one_error(done.stderr), done.stderr
    assert f"did you mean {meant}?" in done.stderr


def test_a_local_path_gets_no_did_you_mean(tmp_path: Path) -> None:
    done = run_cli(["bundle", "pull", "./agents/r", str(tmp_path / "o")])
    assert done.returncode == 2 and "did you mean" not in done.stderr
