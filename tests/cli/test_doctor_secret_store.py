"""``doctor`` reports ZeroClaw's secret store: the policy, the key (present, missing,
unreadable, too open), how many stored values decrypt and how many do not, never which; and
``recover --install`` removes a key a crash left unpublished."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.installs import copy_example, encrypt_install, run_cli, stored_secrets

from bundler.config.secretkey import KEY_NAME


def _doctor(root: Path) -> tuple[int, dict[str, list[dict[str, str]]], str]:
    done = run_cli(["--install", str(root), "--json", "doctor"], env={"HOME": str(root.parent)})
    return done.returncode, json.loads(done.stdout), done.stdout + done.stderr


def _store(payload: dict[str, list[dict[str, str]]]) -> dict[str, list[str]]:
    return {
        level: [f["detail"] for f in payload.get(level, []) if f["kind"] == "secret-store"]
        for level in ("problems", "warnings", "notes")
    }


@pytest.fixture
def install(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = copy_example(tmp_path)
    return root, encrypt_install(root)


def test_a_healthy_store_is_noted_with_its_policy_and_count(
    install: tuple[Path, dict[str, str]],
) -> None:
    root, plain = install
    code, payload, text = _doctor(root)
    found = _store(payload)
    assert found["problems"] == [] and found["warnings"] == []
    assert any("stored encrypted" in line for line in found["notes"])
    assert any(f"{len(plain)} stored secret(s) decrypt" in line for line in found["notes"])
    assert all(value not in text for value in plain.values())
    assert code == 0, text


def test_values_that_do_not_decrypt_are_a_problem_counted_never_named(
    install: tuple[Path, dict[str, str]],
) -> None:
    root, plain = install
    (root / KEY_NAME).write_text(os.urandom(32).hex())
    code, payload, text = _doctor(root)
    assert code == 3
    problems = _store(payload)["problems"]
    assert len(problems) == 1 and f"{len(plain)} stored secret(s) do not decrypt" in problems[0]
    for path, stored in stored_secrets((root / "config.toml").read_text()).items():
        assert path not in problems[0] and stored[5:] not in text


def test_a_missing_key_with_stored_values_is_a_problem_and_without_them_a_note(
    tmp_path: Path, install: tuple[Path, dict[str, str]]
) -> None:
    root, _plain = install
    (root / KEY_NAME).unlink()
    code, payload, _text = _doctor(root)
    assert code == 3 and any("cannot be decrypted" in p for p in _store(payload)["problems"])
    fresh = copy_example(tmp_path / "fresh")
    code, payload, text = _doctor(fresh)
    assert code == 0, text
    assert any("created by the first secret" in n for n in _store(payload)["notes"])


@pytest.mark.parametrize("kind", ["symlink", "fifo", "empty", "31-bytes"])
def test_an_unreadable_key_is_a_problem(
    tmp_path: Path, install: tuple[Path, dict[str, str]], kind: str
) -> None:
    root, _plain = install
    key_path = root / KEY_NAME
    key_path.unlink()
    if kind == "symlink":
        (tmp_path / "k").write_text(os.urandom(32).hex())
        key_path.symlink_to(tmp_path / "k")
    elif kind == "fifo":
        os.mkfifo(key_path)
    else:
        key_path.write_text("" if kind == "empty" else "ab" * 31)
    code, payload, _text = _doctor(root)
    assert code == 3
    assert any(KEY_NAME in p for p in _store(payload)["problems"])


def test_a_key_others_may_read_is_a_warning(install: tuple[Path, dict[str, str]]) -> None:
    root, _plain = install
    os.chmod(root / KEY_NAME, 0o644)
    code, payload, text = _doctor(root)
    assert code == 0, text
    assert any("mode 0644" in w for w in _store(payload)["warnings"])


def test_policy_off_is_reported(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    config = root / "config.toml"
    config.write_text(config.read_text() + "\n[secrets]\nencrypt = false\n")
    _code, payload, _text = _doctor(root)
    assert any("plain text" in n for n in _store(payload)["notes"])


def test_recover_removes_a_key_left_unpublished_and_keeps_the_key(
    install: tuple[Path, dict[str, str]],
) -> None:
    root, _plain = install
    key_before = (root / KEY_NAME).read_bytes()
    (root / ".secret_key.tmp-AAAAAAAAAAAA").write_text(os.urandom(32).hex())
    _code, payload, _text = _doctor(root)
    assert any(".secret_key.tmp-" in w["detail"] for w in payload["warnings"])
    done = run_cli(["recover", "--install", str(root)])
    assert done.returncode == 0, done.stderr
    assert ".secret_key.tmp-AAAAAAAAAAAA" in done.stdout
    assert not (root / ".secret_key.tmp-AAAAAAAAAAAA").exists()
    assert (root / KEY_NAME).read_bytes() == key_before
