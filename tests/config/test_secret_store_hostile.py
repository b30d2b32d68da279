"""The secret store's hostile inputs (``tests/support/hostile_secret_store.py``) met by every
command that
reads the key or opens a value: one ``error:`` line, exit 3, the key file or the config path
named, nothing changed, no value printed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.hostile_secret_store import HOSTILE_KEYS, HOSTILE_VALUES, HostileKey, HostileValue
from support.installs import copy_example, encrypt_install, one_error, run_cli, stored_secrets

from bundler.config.secretkey import KEY_NAME, SecretKey

PATH = "providers.models.anthropic.main.api_key"
GIVEN = "sk-FAKE-given-hostile-0123456789ab"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bf.build_bundle(tmp_path_factory.mktemp("bundle") / "b")


def _snapshot(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if rel == ".config.lock":
            continue
        if path.is_symlink():
            out[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            out[rel] = path.read_bytes()
        else:
            out[rel] = "folder" if path.is_dir() else "other"
    return out


def _refused(root: Path, args: list[str], names: str, secrets: list[str]) -> None:
    before = _snapshot(root)
    done = run_cli(["--install", str(root), *args])
    assert done.returncode == 3, (args, done.stderr)
    assert one_error(done.stderr), done.stderr
    assert names in done.stderr, done.stderr
    for secret in secrets:
        assert secret not in done.stdout + done.stderr
    assert _snapshot(root) == before


@pytest.mark.parametrize("case", HOSTILE_KEYS, ids=lambda c: c.name)
def test_a_hostile_key_file_is_refused_by_every_reader(
    tmp_path: Path, bundle: Path, case: HostileKey
) -> None:
    root = copy_example(tmp_path)
    plain = encrypt_install(root)
    (root / KEY_NAME).unlink()
    case.make(root)
    secrets = [*plain.values(), GIVEN]
    _refused(root, ["config", "set", PATH, GIVEN], KEY_NAME, secrets)
    _refused(root, ["config", "get", PATH, "--reveal"], KEY_NAME, secrets)
    _refused(root, ["agents", "import", str(bundle), "--as", "other", "--accept-risks",
                    "--secret", f"{PATH}={GIVEN}"], KEY_NAME, secrets)  # fmt: skip
    doctor = run_cli(["--install", str(root), "--json", "doctor"], env={"HOME": str(tmp_path)})
    assert doctor.returncode == 3
    problems = [p["detail"] for p in json.loads(doctor.stdout)["problems"]]
    assert any(KEY_NAME in p for p in problems)


@pytest.mark.parametrize("case", HOSTILE_VALUES, ids=lambda c: c.name)
def test_a_value_that_does_not_open_is_refused_when_given_and_when_revealed(
    tmp_path: Path, bundle: Path, case: HostileValue
) -> None:
    root = copy_example(tmp_path)
    plain = encrypt_install(root)
    key = SecretKey(bytes.fromhex((root / KEY_NAME).read_text()))
    value = case.make(key)
    secrets = [*plain.values(), value[5:]]
    _refused(root, ["config", "set", PATH, value], PATH, secrets)
    _refused(root, ["agents", "import", str(bundle), "--as", "other", "--accept-risks",
                    "--secret", f"{PATH}={value}"], PATH, secrets)  # fmt: skip
    config = root / "config.toml"
    text = config.read_text()
    config.write_text(text.replace(json.dumps(stored_secrets(text)[PATH]), json.dumps(value)))
    _refused(root, ["config", "get", PATH, "--reveal"], PATH, secrets)
    doctor = run_cli(["--install", str(root), "--json", "doctor"], env={"HOME": str(tmp_path)})
    assert doctor.returncode == 3
    problems = [p["detail"] for p in json.loads(doctor.stdout)["problems"]]
    assert any("1 stored secret(s) do not decrypt" in p for p in problems), problems
