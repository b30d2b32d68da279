"""Issue 15: the secret sweep runs on Hyperscan where it imports and falls back to the pure-Python
engine elsewhere, finding the same hits; ``bundler doctor`` says once which engine runs.

Hyperscan is made unimportable the way a platform without a wheel has it: a ``hyperscan``
package that raises ImportError shadows the installed one (``PYTHONPATH``), in a real CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kit import run_cli
from test_export_kit import API_KEY, cli_env, export_cmd, make_install, run, workspace

from bundler.rules import sweep_hyperscan

FALLBACK_LINE = "ok: secret sweep engine: pure Python (hyperscan not available)"


@pytest.fixture
def no_hyperscan(tmp_path: Path) -> dict[str, str]:
    """A CLI environment in which ``import hyperscan`` fails."""
    shadow = tmp_path / "no-hyperscan" / "hyperscan"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("no wheel for this platform")\n')
    return {"PYTHONPATH": str(shadow.parent)}


def test_doctor_says_the_sweep_falls_back_to_pure_python_where_hyperscan_cannot_import(
    tmp_path: Path, no_hyperscan: dict[str, str]
) -> None:
    install = make_install(tmp_path / "install")
    done = run_cli(["--install", str(install), "doctor"], env=no_hyperscan)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines().count(FALLBACK_LINE) == 1
    machine = run_cli(["--install", str(install), "doctor", "--json"], env=no_hyperscan)
    notes = json.loads(machine.stdout)["notes"]
    assert [n["detail"] for n in notes if n["kind"] == "sweep-engine"] == [FALLBACK_LINE[4:]]


def test_doctor_names_hyperscan_where_it_imports(tmp_path: Path) -> None:
    if not sweep_hyperscan.available():
        pytest.skip("hyperscan is not installed on this platform")
    install = make_install(tmp_path / "install")
    done = run_cli(["--install", str(install), "doctor"], env={"BUNDLER_SWEEP_ENGINE": ""})
    assert done.returncode == 0, done.stderr
    assert "ok: secret sweep engine: Hyperscan" in done.stdout
    assert "pure Python" not in done.stdout


def test_export_without_hyperscan_still_refuses_the_key_straddling_two_chunks(
    tmp_path: Path, no_hyperscan: dict[str, str]
) -> None:
    # the copier reads back 1 MiB at a time: the key's bytes lie across the boundary
    install = make_install(tmp_path / "install")
    key = API_KEY.encode()
    data = b"x" * ((1 << 20) - len(key) // 2) + key + b"y" * 100
    (workspace(install) / "notes" / "big.bin").write_bytes(data)
    for env in (no_hyperscan, {}):
        done = run(export_cmd(install, tmp_path / "bundle"), env=cli_env(**env))
        assert done.returncode == 1, done.stderr
        assert "workspace/notes/big.bin" in done.stderr
        assert "providers.models.anthropic.main.api_key" in done.stderr
        assert API_KEY not in done.stderr + done.stdout
