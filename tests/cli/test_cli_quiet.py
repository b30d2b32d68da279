"""``--quiet`` (05 §1): errors, and the one result line a script wants (the
bundle, the receipt, the backup, the restored home); ``doctor`` prints its problems only and
``config validate`` its errors only."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support import bundlefactory as bf
from support.hostile_zips import make_project
from support.installs import MINIMAL_CONFIG, make_install
from support.kit import run_cli


def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env={"HOME": str(home)})


def test_quiet_export_prints_the_bundle_path_only(tmp_path: Path) -> None:
    install = bf.write_install(tmp_path / "install")
    out = tmp_path / "out"
    done = cli(
        "--install",
        str(install),
        "agents",
        "export",
        "researcher",
        "--out",
        str(out),
        "--quiet",
        home=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == (f"{out}\n", "")


def test_quiet_import_prints_the_receipt_path_only(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    install = tmp_path / "target"
    done = cli(
        "--install",
        str(install),
        "agents",
        "import",
        str(bundle),
        "--accept-risks",
        "--quiet",
        home=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    receipt = next((install / "data" / "state" / "imports").glob("*.toml"))
    assert (done.stdout, done.stderr) == (f"{receipt}\n", "")


def test_quiet_backup_and_restore_print_the_backup_and_the_home(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    user = tmp_path / "user"
    user.mkdir()
    backup = tmp_path / "b.zip"
    done = cli(
        "home", "backup", "--project", str(project), "--to", str(backup), "--quiet", home=user
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == (f"{backup}\n", "")
    done = cli("home", "restore", str(backup), "--project", str(project), "--quiet", home=user)
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == (f"{home}\n", "")


def test_quiet_doctor_prints_problems_only(tmp_path: Path) -> None:
    install = bf.write_install(tmp_path / "install")
    done = cli("--install", str(install), "doctor", "--quiet", home=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    (install / ".bundler-import-AbCdEfGhIjKl").mkdir()
    done = cli("--install", str(install), "doctor", "--quiet", home=tmp_path)
    assert done.returncode == 3
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == [
        "problem",
        f"  bundler recover --install {install}",
    ]
    assert done.stderr == "error: doctor found 1 problem(s)\n"


def test_quiet_config_validate_prints_errors_only(tmp_path: Path) -> None:
    dangling = MINIMAL_CONFIG.replace('model = "claude"', 'model = "claude"\nfallback = ["x.y"]')
    install = make_install(tmp_path, dangling)
    loud = cli("--install", str(install), "config", "validate", home=tmp_path)
    assert loud.returncode == 0 and "fallback" in loud.stdout
    done = cli("--install", str(install), "config", "validate", "--quiet", home=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    broken = dangling.replace('risk_profile = "default"', 'risk_profile = "nope"')
    (install / "config.toml").write_text(broken, encoding="utf-8")
    done = cli("--install", str(install), "config", "validate", "--quiet", home=tmp_path)
    assert done.returncode == 3
    assert "risk_profile" in done.stdout and "fallback" not in done.stdout
