"""A fresh ``pip install .`` ships the API typed: ``py.typed`` is in the wheel, the names import,
and ``mypy --strict`` checks a program against the installed package's own annotations.

Slow (a virtual environment, a wheel built, the dependencies installed from the index): it runs
in CI's sample like the other slow tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PROGRAM = textwrap.dedent(
    """\
    from pathlib import Path

    import bundler
    from bundler import api


    def fleet(reference: str, install: Path, secrets: Path) -> str:
        options = api.ImportOptions(secrets_file=secrets, accept_risks=True)
        with bundler.open_bundle(reference) as bundle:
            checked: bundler.VerifyReport = bundler.verify(bundle)
            if not checked.ok:
                raise SystemExit(str(checked.errors[0]))
            done: bundler.ImportReport = bundler.import_bundle(install, bundle, options)
        return done.receipt


    def export(install: Path) -> int:
        options = bundler.ExportOptions(scan_secrets=bundler.ScanSecrets.WARN)
        report = bundler.export_agent(install, "main", Path("out.tar"), options)
        return report.files
    """
)


def _run(*args: str | os.PathLike[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    return subprocess.run(
        [os.fspath(a) for a in args], capture_output=True, text=True, cwd=cwd, env=env, timeout=900
    )


@pytest.mark.slow
def test_a_fresh_install_ships_the_typed_api(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    made = _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = _run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", REPO,
                     cwd=tmp_path)  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    where = _run(python, "-c", "import bundler; print(bundler.__file__)", cwd=tmp_path)
    package = Path(where.stdout.strip()).parent
    assert package.is_relative_to(venv), "the test must read the installed copy"
    assert (package / "py.typed").is_file()

    names = _run(python, "-c", "import bundler; print(bundler.open_bundle, bundler.export_agent)",
                 cwd=tmp_path)  # fmt: skip
    assert names.returncode == 0, names.stderr
    assert "function open_bundle" in names.stdout and "function export_agent" in names.stdout

    program = tmp_path / "program.py"
    program.write_text(PROGRAM, encoding="utf-8")
    mypy = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable",
            python]  # fmt: skip
    checked = _run(*mypy, program, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # and the check is real: a wrong use of the API is caught from the installed annotations
    program.write_text(PROGRAM + "\nwrong: int = bundler.verify(Path('b'))\n", encoding="utf-8")
    caught = _run(*mypy, program, cwd=tmp_path)
    assert caught.returncode == 1
    assert '"VerifyReport", variable has type "int"' in caught.stdout
