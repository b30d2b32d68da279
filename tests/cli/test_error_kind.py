"""Errors by concept: each exception class of ``bundler.errors`` is one thing that went wrong,
carries the exit code of its base (usage 2, invalid input 3, refusal 1, interrupted 130), and
names itself in ``--json`` by a stable ``kind`` (the class's name in snake case), so a program
tells "the registry is unreachable" from "the destination is not empty" without reading words.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.faultinject import ptrace_unavailable, run_with_fault, trace_calls
from support.hostile_archives import cases as archive_cases
from support.hostile_zips import build as build_zip
from support.hostile_zips import clean_env as home_env
from support.hostile_zips import make_project
from support.installs import make_install
from support.kit import clean_env, cli_command, run_cli

import bundler
from bundler import errors
from bundler.errors import BundlerError, error_kind, kind_of_code

ROOT = Path(__file__).resolve().parents[2]

# every kind, pinned: a program branches on these strings, so one changes only on purpose
# (CHANGELOG.md), with the class's name
KINDS = {
    "BundlerError": "bundler_error",
    "UsageError": "usage_error",
    "InvalidInput": "invalid_input",
    "NotABundle": "not_a_bundle",
    "Malformed": "malformed",
    "InvalidConfig": "invalid_config",
    "Tampered": "tampered",
    "Hostile": "hostile",
    "TooLarge": "too_large",
    "Undecryptable": "undecryptable",
    "Unsupported": "unsupported",
    "Refused": "refused",
    "EnvironmentFailure": "environment_failure",
    "NoSpace": "no_space",
    "CannotAccess": "cannot_access",
    "NotFound": "not_found",
    "DestinationExists": "destination_exists",
    "UnsuitablePath": "unsuitable_path",
    "ChangedMeanwhile": "changed_meanwhile",
    "Locked": "locked",
    "RecoveryNeeded": "recovery_needed",
    "Damaged": "damaged",
    "NoAnswer": "no_answer",
    "PolicyRefused": "policy_refused",
    "RefusedWithList": "refused_with_list",
    "SecretFound": "secret_found",
    "JailError": "jail_error",
    "RegistryUnreachable": "registry_unreachable",
    "CredentialsRefused": "credentials_refused",
    "RegistryRefused": "registry_refused",
    "Interrupted": "interrupted",
}
BASES = {errors.UsageError: 2, errors.InvalidInput: 3, errors.Refused: 1}


def _every_class() -> list[type[BaseException]]:
    found: list[type[BaseException]] = [errors.Interrupted]
    pending: list[type[BaseException]] = [BundlerError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending += cls.__subclasses__()
    return found


def test_the_kinds_are_pinned_and_each_is_its_class_name_in_snake_case() -> None:
    classes = _every_class()
    assert {cls.__name__: error_kind(cls) for cls in classes} == KINDS
    for cls in classes:
        assert cls.__module__ == "bundler.errors", f"{cls.__name__} is not in bundler/errors.py"
        words = re.findall(r"[A-Z][a-z]*", cls.__name__)
        assert error_kind(cls) == "_".join(word.lower() for word in words)


def test_each_concept_carries_the_exit_code_of_its_base() -> None:
    for cls in _every_class():
        if cls in (BundlerError, errors.Interrupted):
            continue
        (base,) = [b for b in BASES if issubclass(cls, b)]
        assert cls.code == BASES[base], cls.__name__
        # an instance too: no concept is made with another code
        made = cls.__new__(cls)
        assert made.code == BASES[base], cls.__name__
    assert errors.Interrupted.code == 130
    assert [kind_of_code(code) for code in (1, 2, 3, 130)] == [
        "refused",
        "usage_error",
        "invalid_input",
        "interrupted",
    ]


def test_each_concept_says_when_it_is_raised_and_is_the_api_s_own() -> None:
    api_doc = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    for cls in _every_class():
        assert cls.__doc__ and len(cls.__doc__.split()) >= 12, f"{cls.__name__}: no docstring"
        assert getattr(bundler, cls.__name__) is cls, f"{cls.__name__} is not exported"
        assert f"`{error_kind(cls)}`" in api_doc, f"{error_kind(cls)} is not in docs/api.md"


def test_an_error_restated_keeps_its_concept_its_data_and_withholds_the_new_words() -> None:
    hits = errors.SecretFound("one secret", path="notes", listing=[{"file": "notes"}])
    again = hits.restated("one secret (cleanup incomplete)")
    assert type(again) is errors.SecretFound and again.listing == [{"file": "notes"}]
    assert (again.message, again.args, again.path, again.code) == (
        "one secret (cleanup incomplete)",
        ("one secret (cleanup incomplete)",),
        "notes",
        1,
    )
    lost = errors.RegistryUnreachable("gone", host="h:1", cause="reset")
    assert (lost.restated("gone; try again").host, lost.restated("x").cause) == ("h:1", "reset")
    with errors.withholding(lambda text: text.replace("hunter2", "<withheld>")):
        said = errors.Malformed("bad").restated("bad in hunter2.zip", path="hunter2.zip")
    assert "hunter2" not in repr(said) and said.path == "<withheld>.zip"


# --- through the real command line -------------------------------------------------------------


def _failure(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    document = json.loads(done.stdout)
    assert document["ok"] is False, document
    error: dict[str, object] = document["error"]
    assert error["code"] == done.returncode
    return error


def _export(install: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--install",
        str(install),
        "agents",
        "export",
        "researcher",
        "--out",
        str(out),
        "--json",
        *extra,
    ]


def test_a_usage_error_says_its_kind(exported: Path) -> None:
    pushed = run_cli(
        ["bundle", "push", str(exported), "oci://127.0.0.1/a@sha256:" + "0" * 64, "--json"]
    )
    assert (_failure(pushed)["kind"], pushed.returncode) == ("usage_error", 2)


def test_a_destination_that_exists_is_destination_exists(tmp_path: Path) -> None:
    install = bf.write_install(tmp_path / "install")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("not a bundle\n")
    done = run_cli(["--install", str(install), "agents", "export", bf.ROOT_AGENT, "--out",
                    str(taken), "--json"])  # fmt: skip
    assert (_failure(done)["kind"], done.returncode) == ("destination_exists", 1)
    assert sorted(p.name for p in taken.iterdir()) == ["mine.txt"]


@pytest.mark.parametrize("files", [1, 2])
def test_a_secret_found_by_the_export_is_secret_found_with_every_hit(
    tmp_path: Path, files: int
) -> None:
    install = make_install(tmp_path)
    for number in range(files):
        leak = install / "agents" / "researcher" / "workspace" / f"leak{number}.txt"
        leak.parent.mkdir(parents=True, exist_ok=True)
        leak.write_text("key: sk-FAKE-minimal-0123456789abcdef\n")
    done = run_cli(_export(install, tmp_path / "bundle"))
    error = _failure(done)
    assert (error["kind"], done.returncode) == ("secret_found", 1)
    assert sorted(hit["file"] for hit in error["secret_hits"]) == [  # type: ignore[attr-defined]
        f"workspace/leak{number}.txt" for number in range(files)
    ]
    assert "sk-FAKE-minimal" not in done.stdout + done.stderr
    assert not (tmp_path / "bundle").exists()


def test_a_registry_that_cannot_be_reached_is_registry_unreachable(exported: Path) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = run_cli(
        ["bundle", "push", str(exported), f"oci://127.0.0.1:{port}/a:v1", "--json"],
        env={"BUNDLER_REGISTRY_TIME_SCALE": "0.01"},
    )
    assert (_failure(done)["kind"], done.returncode) == ("registry_unreachable", 1)


def test_a_full_disk_is_no_space(tmp_path: Path) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    install = make_install(tmp_path)
    dest = tmp_path / "dest"
    dest.mkdir()
    cmd = [*cli_command(), *_export(install, dest / "bundle")]
    env = clean_env(
        {"PYTHONDONTWRITEBYTECODE": "1", "SOURCE_DATE_EPOCH": "1700000000", "PYTHONPATH": str(ROOT)}
    )
    writes = ["write", "pwrite64", "copy_file_range", "sendfile"]
    done, calls = trace_calls(cmd, writes, env=env, cwd="/", relevant=str(dest))
    assert done.returncode == 0, done.stderr
    shutil.rmtree(dest / "bundle")
    first = calls[0]
    failed = run_with_fault(cmd, first.syscall, first.index, "ENOSPC", env=env, cwd="/")
    assert failed.fired, first
    error = json.loads(failed.stdout)["error"]
    assert (error["kind"], error["code"], failed.returncode) == ("no_space", 1, 1), error
    assert "No space left on device" in error["message"]
    assert not (dest / "bundle").exists()


def _tampered_copy(exported: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    victim = next(p for p in sorted((copy / "workspace").rglob("*")) if p.is_file())
    victim.write_bytes(victim.read_bytes() + b"tampered")
    return copy


def test_a_tampered_bundle_is_tampered_to_verify_inspect_and_import(
    exported: Path, tmp_path: Path
) -> None:
    """A verify reports its faults as its result, an import stops at the first: both say the
    kind of that fault, a content that does not match its digest."""
    copy = _tampered_copy(exported, tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    for args in (
        ["bundle", "verify", str(copy)],
        ["bundle", "inspect", str(copy)],
        ["--install", str(target), "agents", "import", str(copy), "--accept-risks"],
    ):
        done = run_cli([*args, "--json"])
        assert (_failure(done)["kind"], done.returncode) == ("tampered", 3), args
    assert sorted(p.name for p in target.iterdir()) == []


def test_a_hostile_bundle_archive_says_what_is_wrong_with_it(
    exported: Path, tmp_path: Path
) -> None:
    expected = {
        "dotdot": "hostile",
        "symlink": "hostile",
        "char_device": "hostile",
        "huge_declared_size": "too_large",
        "member_not_in_checksums": "tampered",
        "gnu_sparse": "unsupported",
        "bad_checksum": "malformed",
        "not_a_tar": "not_a_bundle",
    }
    cases = {case.name: case for case in archive_cases(exported)}
    for name, kind in expected.items():
        archive = tmp_path / f"{name}.tar"
        archive.write_bytes(cases[name].data)
        done = run_cli(["bundle", "unpack", str(archive), str(tmp_path / f"{name}-out"), "--json"])
        assert (_failure(done)["kind"], done.returncode) == (kind, 3), (name, done.stdout)
        assert not (tmp_path / f"{name}-out").exists()


def _restore(tmp_path: Path, case: str) -> subprocess.CompletedProcess[str]:
    tmp_path.mkdir(exist_ok=True)
    project, _home = make_project(tmp_path)
    zip_path, _expect = build_zip(case, tmp_path)
    user = tmp_path / "user"
    user.mkdir(exist_ok=True)
    return run_cli(
        ["home", "restore", str(zip_path), "--project", str(project), "--json"],
        env=home_env(user),
    )


@pytest.mark.parametrize(
    ("case", "kind"),
    [
        ("zip_slip_dotdot_top", "hostile"),
        ("symlink_entry", "hostile"),
        ("device_entry", "hostile"),
        ("zip_bomb", "hostile"),
        ("wrong_digest", "tampered"),
        ("unlisted_entry", "tampered"),
        ("corrupt_data", "tampered"),
        ("manifest_not_json", "malformed"),
        ("newer_format", "unsupported"),
        ("encrypted_flag", "unsupported"),
        ("declares_too_many_entries", "too_large"),
        ("not_a_zip", "not_a_bundle"),
        ("missing_manifest", "not_a_bundle"),
    ],
)
def test_a_hostile_or_tampered_backup_says_what_is_wrong_with_it(
    tmp_path: Path, case: str, kind: str
) -> None:
    done = _restore(tmp_path, case)
    assert (_failure(done)["kind"], done.returncode) == (kind, 3), done.stdout


def test_a_backup_fault_is_named_with_the_zip_once(tmp_path: Path) -> None:
    """What is wrong inside the zip is said with the zip's name, once, whichever check
    found it: the end record, the directory, an entry or backup.json."""
    for case in ("not_a_zip", "zip_slip_dotdot_top", "wrong_digest", "manifest_not_json"):
        done = _restore(tmp_path / case, case)
        message = str(_failure(done)["message"])
        zip_path = str(tmp_path / case / f"{case}.zip")
        assert message.startswith(f"{zip_path}: "), message
        assert message.count(zip_path) == 1, message
