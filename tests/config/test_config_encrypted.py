"""``config set`` and ``config get`` on ZeroClaw's secret store: a secret is written
as the file's ``[secrets] encrypt`` says (default: ``enc2:`` under ``.secret_key``, created 0600
when missing), ``config.toml`` is then 0600, and ``--reveal`` decrypts."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from support.e2e_helpers import leaks_in
from support.installs import copy_example, encrypt_install, one_error, run_cli, stored_secrets

from bundler.config.secretcipher import decrypt, encrypt
from bundler.config.secretkey import KEY_NAME, SecretKey

PATH = "providers.models.anthropic.main.api_key"
NEW = "sk-FAKE-new-value-0123456789abcdef"


def _key(root: Path) -> SecretKey:
    return SecretKey(bytes.fromhex((root / KEY_NAME).read_text()))


def _set(root: Path, value: str, *, env: dict[str, str] | None = None) -> tuple[int, str]:
    done = run_cli(["--install", str(root), "config", "set", PATH, value], env=env)
    return done.returncode, done.stdout + done.stderr


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".config.lock"
    }


def _plain_in_no_file(root: Path, value: str) -> None:
    for name, data in _files(root).items():
        assert leaks_in(data, [value]) == [], name


def test_default_policy_seals_the_value_under_a_key_it_creates_and_makes_the_file_private(
    tmp_path: Path,
) -> None:
    root = copy_example(tmp_path)
    os.chmod(root / "config.toml", 0o644)
    assert not (root / KEY_NAME).exists()
    code, out = _set(root, NEW)
    assert code == 0, out
    stored = stored_secrets((root / "config.toml").read_text())[PATH]
    assert stored.startswith("enc2:") and decrypt(stored, _key(root)) == NEW
    assert stat.S_IMODE((root / KEY_NAME).stat().st_mode) == 0o600
    assert stat.S_IMODE((root / "config.toml").stat().st_mode) == 0o600
    _plain_in_no_file(root, NEW)
    assert not [n for n in os.listdir(root) if ".tmp-" in n]


def test_policy_off_writes_plain_text(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    config = root / "config.toml"
    config.write_text(config.read_text() + "\n[secrets]\nencrypt = false\n")
    code, out = _set(root, NEW, env={"ZEROCLAW_secrets__encrypt": "true"})
    assert code == 0, out
    assert stored_secrets(config.read_text())[PATH] == NEW
    assert not (root / KEY_NAME).exists()
    assert "ZEROCLAW_secrets__encrypt" in out and "plain text" in out  # the override disagrees


def test_an_existing_key_is_used_and_kept(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    plain = encrypt_install(root)
    key_before = (root / KEY_NAME).read_bytes()
    code, out = _set(root, NEW)
    assert code == 0, out
    assert (root / KEY_NAME).read_bytes() == key_before
    now = stored_secrets((root / "config.toml").read_text())
    assert decrypt(now[PATH], _key(root)) == NEW
    others = {p: decrypt(v, _key(root)) for p, v in now.items() if p != PATH}
    assert others == {p: v for p, v in plain.items() if p != PATH}


def test_an_empty_value_is_never_sealed_and_needs_no_key(tmp_path: Path) -> None:
    # an empty secret is refused (clearing one is 'config unset'), before any key is made
    root = copy_example(tmp_path)
    before = (root / "config.toml").read_bytes()
    code, out = _set(root, "")
    assert code == 2, out
    assert "config unset" in out
    assert (root / "config.toml").read_bytes() == before
    assert not (root / KEY_NAME).exists()


def test_a_value_given_sealed_under_this_key_is_kept_and_legacy_enc_is_rewritten(
    tmp_path: Path,
) -> None:
    root = copy_example(tmp_path)
    encrypt_install(root)
    key = _key(root)
    sealed = encrypt(NEW, key)
    assert _set(root, sealed)[0] == 0
    assert stored_secrets((root / "config.toml").read_text())[PATH] == sealed
    legacy = "enc:" + bytes(b ^ key.raw[i % 32] for i, b in enumerate(NEW.encode())).hex()
    assert _set(root, legacy)[0] == 0
    now = stored_secrets((root / "config.toml").read_text())[PATH]
    assert now.startswith("enc2:") and decrypt(now, key) == NEW


@pytest.mark.parametrize("case", ["another-key", "not-hex", "too-short", "no-key"])
def test_a_value_given_sealed_that_does_not_open_here_is_refused_naming_the_path(
    tmp_path: Path, case: str
) -> None:
    root = copy_example(tmp_path)
    if case != "no-key":
        encrypt_install(root)
    value = {
        "another-key": encrypt(NEW, SecretKey(os.urandom(32))),
        "not-hex": "enc2:" + "zz" * 40,
        "too-short": "enc2:" + "ab" * 20,
        "no-key": encrypt(NEW, SecretKey(os.urandom(32))),
    }[case]
    before = _files(root)
    done = run_cli(["--install", str(root), "config", "set", PATH, value])
    assert done.returncode == 3, done.stderr
    assert one_error(done.stderr) and PATH in done.stderr
    assert value[5:25] not in done.stdout + done.stderr
    assert _files(root) == before


def test_get_reveal_decrypts_and_without_it_shows_stars(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    plain = encrypt_install(root)
    hidden = run_cli(["--install", str(root), "config", "get", PATH])
    assert hidden.returncode == 0 and hidden.stdout.strip() == "***"
    shown = run_cli(["--install", str(root), "config", "get", PATH, "--reveal"])
    assert shown.returncode == 0 and shown.stdout.strip() == plain[PATH]
    table = run_cli(["--install", str(root), "--json", "config", "get",
                     "providers.models.anthropic.main", "--reveal"])  # fmt: skip
    assert json.loads(table.stdout)["value"]["api_key"] == plain[PATH]


def test_get_reveal_of_a_value_that_does_not_open_is_one_line_and_no_value(
    tmp_path: Path,
) -> None:
    root = copy_example(tmp_path)
    encrypt_install(root)
    stored = stored_secrets((root / "config.toml").read_text())[PATH]
    (root / KEY_NAME).write_text(os.urandom(32).hex())
    done = run_cli(["--install", str(root), "config", "get", PATH, "--reveal"])
    assert done.returncode == 3 and one_error(done.stderr)
    assert PATH in done.stderr and stored[5:] not in done.stdout + done.stderr


def test_two_writers_racing_on_a_keyless_install_end_with_one_key_that_opens_both(
    tmp_path: Path,
) -> None:
    import subprocess

    from support.kit import clean_env, cli_command

    root = copy_example(tmp_path)
    other = "providers.models.openai.backup.api_key"
    values = {PATH: NEW, other: "sk-FAKE-racing-writer-9876543210"}
    env = clean_env({"PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    runs = [
        subprocess.Popen([*cli_command(), "--install", str(root), "config", "set", path, value],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for path, value in values.items()
    ]  # fmt: skip
    for run in runs:
        _out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
    stored = stored_secrets((root / "config.toml").read_text())
    key = _key(root)
    assert {path: decrypt(stored[path], key) for path in values} == values
    assert not [n for n in os.listdir(root) if ".tmp-" in n]


def test_a_policy_that_is_not_a_boolean_refuses_writing_a_secret(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    config = root / "config.toml"
    config.write_text(config.read_text() + '\n[secrets]\nencrypt = "yes"\n')
    before = config.read_bytes()
    done = run_cli(["--install", str(root), "config", "set", PATH, NEW])
    assert done.returncode == 3 and one_error(done.stderr)
    assert "secrets.encrypt" in done.stderr and NEW not in done.stderr
    assert config.read_bytes() == before and not (root / KEY_NAME).exists()
