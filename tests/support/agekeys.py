"""age keys made by the real ``age-keygen`` and ``ssh-keygen``, a project whose home holds a
marker of random bytes, and the scan that finds a home's plain bytes where they must never be
(04 §5.6)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.hostile_zips import clean_env, make_project, run_cli


def needs(tool: str) -> None:
    """Skip the test when ``tool`` is not installed."""
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


def age_key(folder: Path, name: str = "key.txt") -> tuple[Path, str]:
    """A fresh age identity file and its public key, made by ``age-keygen``."""
    needs("age-keygen")
    path = folder / name
    subprocess.run(["age-keygen", "-o", str(path)], check=True, capture_output=True)
    public = subprocess.run(
        ["age-keygen", "-y", str(path)], check=True, capture_output=True, text=True
    ).stdout.strip()
    return path, public


def ssh_key(folder: Path, name: str = "id_ed25519", kind: str = "ed25519") -> tuple[Path, str]:
    """A fresh SSH key pair without a passphrase, made by ``ssh-keygen``."""
    needs("ssh-keygen")
    path = folder / name
    args = ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "test@host", "-f", str(path)]
    if kind == "rsa":
        args += ["-b", "2048"]
    subprocess.run(args, check=True, capture_output=True)
    return path, (folder / f"{name}.pub").read_text().strip()


def found_in(folder: Path, marker: bytes, *, skip: tuple[str, ...] = ()) -> list[str]:
    """The files below ``folder`` (links not followed) holding a 64-byte slice of ``marker``;
    top-level names starting with one of ``skip`` are left out."""
    probes = [marker[at : at + 64] for at in range(0, len(marker) - 64, len(marker) // 8)]
    hits: list[str] = []
    if not folder.exists():
        return hits
    for root, dirs, files in os.walk(folder):
        if skip and os.path.samefile(root, folder):
            dirs[:] = [d for d in dirs if not d.startswith(skip)]
            files = [f for f in files if not f.startswith(skip)]
        for name in files:
            path = Path(root) / name
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            if any(probe in data for probe in probes):
                hits.append(os.path.relpath(path, folder))
    return hits


MARKER_BYTES = 96 << 10


def setup(tmp_path: Path) -> tuple[Path, Path, dict[str, str], bytes]:
    """A project, its home holding a marker of random bytes, and an environment whose
    ``$TMPDIR`` is a folder of the test's (scanned afterwards)."""
    user = tmp_path / "user"
    user.mkdir()
    env = clean_env(user)
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    env["TMPDIR"] = str(tmpdir)
    project, home = make_project(tmp_path)
    marker = os.urandom(MARKER_BYTES)
    (home / "files" / "marker.bin").write_bytes(marker)
    return project, home, env, marker


def backup_cli(project: Path, env: dict[str, str], *extra: str) -> Path:
    done = run_cli("home", "backup", "--project", str(project), "--json", *extra, env=env)
    assert done.returncode == 0, done.stderr
    return Path(json.loads(done.stdout)["backup"])
