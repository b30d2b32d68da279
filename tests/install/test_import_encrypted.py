"""``agents import`` writes the secrets it is given as the target's ``[secrets] encrypt`` says:
by default sealed as ``enc2:`` under the install's ``.secret_key`` (created 0600
before the staged config exists when missing), the plain value in no file of the install,
``config.toml`` 0600; plain text with ``encrypt = false``. A value given already sealed must
open under the target's key."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.e2e_helpers import leaks_in, write_secrets_file
from support.installs import copy_example, encrypt_install, one_error, run_cli, stored_secrets

from bundler.config.secretcipher import decrypt, encrypt
from bundler.config.secretkey import KEY_NAME, SecretKey

PATH = "providers.models.anthropic.main.api_key"
OTHER_PATH = "providers.models.openai.backup.api_key"
GIVEN = "sk-FAKE-given-to-import-0123456789"
GIVEN2 = "sk-FAKE-given-openai-9876543210zz"
USER_CONFIG = '# mine\n[risk_profiles.strict]\nlevel = "readonly"\n'


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bf.build_bundle(tmp_path_factory.mktemp("bundle") / "b")


def _target(tmp_path: Path, text: str = USER_CONFIG) -> Path:
    root = tmp_path / "target"
    root.mkdir()
    (root / "config.toml").write_text(text)
    os.chmod(root / "config.toml", 0o644)
    return root


def _import(root: Path, bundle: Path, *extra: str) -> tuple[int, str, str]:
    done = run_cli(["--install", str(root), "agents", "import", str(bundle), "--accept-risks",
                    *extra])  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def _key(root: Path) -> SecretKey:
    return SecretKey(bytes.fromhex((root / KEY_NAME).read_text()))


def _every_file(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _check_sealed(root: Path, expected: dict[str, str]) -> None:
    stored = stored_secrets((root / "config.toml").read_text())
    key = _key(root)
    for path, plain in expected.items():
        assert stored[path].startswith("enc2:"), path
        assert decrypt(stored[path], key) == plain
    assert stat.S_IMODE((root / KEY_NAME).stat().st_mode) == 0o600
    assert stat.S_IMODE((root / "config.toml").stat().st_mode) == 0o600
    for name, data in _every_file(root).items():
        assert leaks_in(data, list(expected.values())) == [], name
        if name.startswith("data/state/imports/"):
            assert b"enc2:" not in data, name  # a receipt holds no secret, not even ciphertext


def test_secret_given_on_the_command_line_is_sealed_under_a_key_made_for_it(
    tmp_path: Path, bundle: Path
) -> None:
    root = _target(tmp_path)
    code, out, err = _import(root, bundle, "--secret", f"{PATH}={GIVEN}")
    assert code == 0, err
    _check_sealed(root, {PATH: GIVEN})
    assert not [n for n in os.listdir(root) if ".tmp-" in n or n.startswith(".bundler-")]


def test_secrets_file_values_are_sealed_too(tmp_path: Path, bundle: Path) -> None:
    root = _target(tmp_path)
    given = write_secrets_file(tmp_path / "s.toml", {PATH: GIVEN, OTHER_PATH: GIVEN2})
    code, _out, err = _import(root, bundle, "--secrets-file", str(given))
    assert code == 0, err
    _check_sealed(root, {PATH: GIVEN, OTHER_PATH: GIVEN2})


def test_into_an_encrypted_install_the_key_is_reused_and_other_values_kept(
    tmp_path: Path, bundle: Path
) -> None:
    root = copy_example(tmp_path)
    before = encrypt_install(root)
    key_before = (root / KEY_NAME).read_bytes()
    code, _out, err = _import(root, bundle, "--as", "other", "--secret", f"{PATH}={GIVEN}")
    assert code == 0, err
    assert (root / KEY_NAME).read_bytes() == key_before
    stored = stored_secrets((root / "config.toml").read_text())
    opened = {path: decrypt(value, _key(root)) for path, value in stored.items()}
    assert {p: opened[p] for p in before} == before
    assert GIVEN in opened.values()


def test_policy_off_writes_plain_text_and_makes_no_key(tmp_path: Path, bundle: Path) -> None:
    root = _target(tmp_path, USER_CONFIG + "\n[secrets]\nencrypt = false\n")
    code, _out, err = _import(root, bundle, "--secret", f"{PATH}={GIVEN}")
    assert code == 0, err
    assert stored_secrets((root / "config.toml").read_text())[PATH] == GIVEN
    assert not (root / KEY_NAME).exists()
    assert stat.S_IMODE((root / "config.toml").stat().st_mode) == 0o600


def test_no_secret_given_makes_no_key(tmp_path: Path, bundle: Path) -> None:
    root = _target(tmp_path)
    code, _out, err = _import(root, bundle)
    assert code == 0, err
    assert not (root / KEY_NAME).exists()


def test_a_dry_run_makes_no_key(tmp_path: Path, bundle: Path) -> None:
    root = _target(tmp_path)
    code, _out, err = _import(root, bundle, "--dry-run", "--secret", f"{PATH}={GIVEN}")
    assert code == 0, err
    assert sorted(os.listdir(root)) == ["config.toml"]


def test_a_value_given_sealed_under_the_targets_key_is_written_as_given(
    tmp_path: Path, bundle: Path
) -> None:
    root = copy_example(tmp_path)
    encrypt_install(root)
    sealed = encrypt(GIVEN, _key(root))
    code, _out, err = _import(root, bundle, "--as", "other", "--secret", f"{PATH}={sealed}")
    assert code == 0, err
    assert sealed in stored_secrets((root / "config.toml").read_text()).values()


@pytest.mark.parametrize("case", ["another-key", "no-key", "not-hex", "too-short"])
def test_a_value_given_sealed_that_does_not_open_under_the_targets_key_is_refused(
    tmp_path: Path, bundle: Path, case: str
) -> None:
    root = _target(tmp_path)
    if case != "no-key":
        (root / KEY_NAME).write_text(os.urandom(32).hex())
    value = {
        "another-key": encrypt(GIVEN, SecretKey(os.urandom(32))),
        "no-key": encrypt(GIVEN, SecretKey(os.urandom(32))),
        "not-hex": "enc2:" + "qq" * 40,
        "too-short": "enc2:" + "ab" * 20,
    }[case]
    before = _every_file(root)
    code, out, err = _import(root, bundle, "--secret", f"{PATH}={value}")
    assert code == 3, err
    assert one_error(err) and PATH in err
    assert value[5:30] not in out + err
    assert _every_file(root) == before
    assert sorted(os.listdir(root)) == sorted(["config.toml", *([KEY_NAME] * (case != "no-key"))])
