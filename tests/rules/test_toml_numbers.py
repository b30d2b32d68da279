"""A TOML integer too long for Python's int() is a parse error, not a traceback (06 §3 S3).

tomllib lets int()'s ValueError for a 5000-digit integer escape, which would crash every
reader of a bundle, a backup or an install.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support.bundlefactory import reseal
from support.kit import run_cli

from bundler.rules import tomlcompat

ROOT = Path(__file__).resolve().parents[2]
LONG = "9" * 5000


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(args, timeout=300)


def test_integer_beyond_python_int_limit_is_a_toml_decode_error() -> None:
    with pytest.raises(tomlcompat.TOMLDecodeError, match="more digits"):
        tomlcompat.loads(f"x = {LONG}\n")


def test_bundle_verify_refuses_a_config_with_a_5000_digit_integer_with_exit_3(
    tmp_path: Path,
) -> None:
    install = tmp_path / "install"
    shutil.copytree(ROOT / "examples" / "install", install, symlinks=True)
    bundle = tmp_path / "bundle"
    exported = _cli(
        "--install", str(install), "agents", "export", "researcher", "--out", str(bundle)
    )
    assert exported.returncode == 0, exported.stderr
    with open(bundle / "config.toml", "a", encoding="utf-8") as handle:
        handle.write(f"\n[extra]\nx = {LONG}\n")
    reseal(bundle)
    done = _cli("bundle", "verify", str(bundle))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "config.toml" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr and LONG not in done.stdout + done.stderr


def test_install_config_with_a_5000_digit_integer_is_refused_with_exit_3(tmp_path: Path) -> None:
    install = tmp_path / "install"
    shutil.copytree(ROOT / "examples" / "install", install, symlinks=True)
    with open(install / "config.toml", "a", encoding="utf-8") as handle:
        handle.write(f"\n[extra]\nx = {LONG}\n")
    done = _cli("--install", str(install), "agents", "list")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "config.toml" in done.stderr
    assert "Traceback" not in done.stderr
