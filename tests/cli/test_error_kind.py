"""The ``--json`` error object names the error's kind: a stable string a program can branch on
(the exception class's name in snake case), beside the exit code, which several kinds share."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import bundlefactory as bf
from kit import run_cli

from bundler import errors
from bundler.errors import error_kind, kind_of_code


def _error(*args: str) -> dict[str, object]:
    done = run_cli([*args, "--json"])
    document = json.loads(done.stdout)
    assert document["ok"] is False
    error: dict[str, object] = document["error"]
    assert error["code"] == done.returncode
    return error


def test_each_kind_is_its_class_name_in_snake_case() -> None:
    assert error_kind(errors.InvalidInput("x")) == "invalid_input"
    assert error_kind(errors.UsageError) == "usage_error"
    assert error_kind(errors.EnvironmentFailure("x")) == "environment_failure"
    assert error_kind(errors.RefusedWithList("x", details=[], key="k", listing=[])) == (
        "refused_with_list"
    )
    assert error_kind(errors.Interrupted("x")) == "interrupted"
    assert [kind_of_code(code) for code in (1, 2, 3, 130)] == [
        "refused",
        "usage_error",
        "invalid_input",
        "interrupted",
    ]


def test_a_usage_error_a_refusal_and_invalid_input_say_their_kind(
    exported: Path, tmp_path: Path
) -> None:
    assert (
        _error("bundle", "push", str(exported), "oci://127.0.0.1/a@sha256:" + "0" * 64)["kind"]
        == "usage_error"
    )
    install = bf.write_install(tmp_path / "install")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("not a bundle\n")
    refused = _error("--install", str(install), "agents", "export", bf.ROOT_AGENT, "--out",
                     str(taken))  # fmt: skip
    assert refused["kind"] == "refused" and refused["code"] == 1
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"not a tar archive at all" * 40)
    invalid = _error("bundle", "unpack", str(garbage), str(tmp_path / "out"))
    assert invalid["kind"] == "invalid_input" and invalid["code"] == 3


def test_a_finding_reported_as_a_result_has_the_kind_of_its_code(
    exported: Path, tmp_path: Path
) -> None:
    """``bundle verify`` of a tampered bundle fails with its report, not an exception."""
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    victim = next(p for p in sorted((copy / "workspace").rglob("*")) if p.is_file())
    victim.write_bytes(victim.read_bytes() + b"tampered")
    failed = _error("bundle", "verify", str(copy))
    assert failed["kind"] == "invalid_input" and failed["code"] == 3
