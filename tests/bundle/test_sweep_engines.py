"""The secret sweep runs on Hyperscan where it imports and falls back to the pure-Python
engine elsewhere, finding the same hits; ``bundler doctor`` says once which engine runs; the
export sweeps on a thread of its own beside the copy, reporting exactly what it reported before.

Hyperscan is made unimportable the way a platform without a wheel has it: a ``hyperscan``
package that raises ImportError shadows the installed one (``PYTHONPATH``), in a real CLI.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from support.export_kit import API_KEY, cli_env, export_cmd, make_install, run, workspace
from support.kit import run_cli

from bundler.bundle.sweep import ExportSweep
from bundler.errors import Refused, RefusedWithList
from bundler.fs.threads import running
from bundler.rules import sweep_hyperscan
from bundler.rules.secrets import SweepTarget
from bundler.rules.sweeper import Hit, Sweeper

FALLBACK_LINE = "ok: secret sweep engine: pure Python (hyperscan not available)"


@pytest.fixture
def no_hyperscan(tmp_path: Path) -> dict[str, str]:
    """A CLI environment in which ``import hyperscan`` fails as it does where no wheel exists.

    ModuleNotFoundError, not a bare ImportError: that is what a missing package raises, and what
    pathspec (which uses hyperscan too when it can) expects.
    """
    shadow = tmp_path / "no-hyperscan" / "hyperscan"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ModuleNotFoundError("no hyperscan wheel here")\n')
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


# --- the sweep beside the copy (both cores) ----------------------------------------------------


def _feed(sweep: ExportSweep, files: list[tuple[str, bytes]]) -> None:
    """What the exporter's copy does for each file: chunks to the observer, then file_done."""
    observer = sweep.observer
    assert observer is not None
    for relpath, data in files:
        view = memoryview(bytearray(data))
        for start in range(0, len(data), 4096):
            observer(relpath, view[start : start + 4096])
        sweep.file_done(relpath)


def _files() -> list[tuple[str, bytes]]:
    files = [(f"workspace/f{i:04d}.txt", b"clean " * (100 + i)) for i in range(300)]
    files[40] = ("workspace/f0040.txt", b"x" * 5000 + API_KEY.encode() + b"y")
    files[41] = ("workspace/f0041.txt", base64.b64encode(b"k=" + API_KEY.encode()))
    files[200] = (f"workspace/{API_KEY}.txt", b"clean")
    return files


@pytest.mark.usefixtures("each_sweep_engine")
def test_sweeping_beside_the_copy_runs_on_its_own_thread_and_reports_the_same_hits() -> None:
    targets = [SweepTarget("providers.models.anthropic.main.api_key", API_KEY)]
    alone = ExportSweep(Sweeper(targets), "warn")
    _feed(alone, _files())
    beside = ExportSweep(Sweeper(targets), "warn")
    with beside.beside():
        assert "bundler-sweep" in running()
        _feed(beside, _files())
        beside.scan("config.toml", b"key = '" + API_KEY.encode() + b"'")
    alone.scan("config.toml", b"key = '" + API_KEY.encode() + b"'")
    assert beside.hits == alone.hits and len(alone.hits) == 4
    assert "bundler-sweep" not in running()


def test_refusal_beside_the_copy_lists_what_the_sweeping_thread_still_held() -> None:
    # refuse_if_found runs while the sweeping thread may still hold queued chunks: it must
    # wait for them, or a hit in the last files copied would be missing from the refusal
    sweep = ExportSweep(Sweeper([SweepTarget("p.api_key", API_KEY)]), "refuse")
    last = ("workspace/last.bin", b"z" * (4 << 20) + API_KEY.encode())
    with sweep.beside():
        _feed(sweep, [*_files(), last])
        with pytest.raises(RefusedWithList) as raised:
            sweep.refuse_if_found()
    listed = [row["file"] for row in raised.value.listing]
    assert listed[:2] == ["workspace/f0040.txt", "workspace/f0041.txt"]
    assert listed[-1] == "workspace/last.bin"
    assert len(listed) == 4 and API_KEY not in str(raised.value)
    assert API_KEY not in repr(raised.value.listing)


def test_a_copy_error_beside_the_sweep_is_raised_as_itself_and_stops_the_thread() -> None:
    # hits are listed once the whole pass is done; a copy that fails before that ends the
    # export with its own error (nothing is published either way)
    sweep = ExportSweep(Sweeper([SweepTarget("p.api_key", API_KEY)]), "refuse")
    with pytest.raises(Refused, match=r"cannot read workspace/f0059\.txt"), sweep.beside():
        _feed(sweep, _files()[:60])
        raise Refused("cannot read workspace/f0059.txt (EIO): check the disk", path="x")
    assert "bundler-sweep" not in running()
    assert sweep.hits[0] == Hit("workspace/f0040.txt", "p.api_key", "raw")
