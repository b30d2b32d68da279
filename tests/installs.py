"""Build installs on disk for tests: ``make_install(tmp_path, toml_text, files={})``.

Shared by every helper's tests; keep it small and free of assertions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# a minimal valid config: one enabled agent with its provider and risk profile
MINIMAL_CONFIG = """\
[agents.researcher]
model_provider = "anthropic.main"
risk_profile = "default"

[providers.models.anthropic.main]
api_key = "sk-FAKE-minimal-0123456789abcdef"
model = "claude"

[risk_profiles.default]
level = "supervised"
"""


def make_install(
    tmp_path: Path,
    toml_text: str = MINIMAL_CONFIG,
    files: Mapping[str, str | bytes] | None = None,
    *,
    name: str = "install",
) -> Path:
    """Create ``<tmp_path>/<name>/`` with ``config.toml`` and ``files`` (relative path -> content).

    Parent folders of each file are created; returns the install root.
    """
    root = tmp_path / name
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.toml").write_text(toml_text, encoding="utf-8")
    for relative, content in (files or {}).items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    return root


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def copy_example(tmp_path: Path, which: str = "install") -> Path:
    """A private copy of ``examples/<which>`` (``install`` or ``project``) under ``tmp_path``.

    Tests that change an example must use a copy: the originals are the README's demo.
    """
    target = tmp_path / f"example-{which}"
    shutil.copytree(EXAMPLES / which, target, symlinks=True)
    return target


def run_cli(
    args: Sequence[str],
    *,
    input_text: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m bundler ARGS`` in a real process; ``env`` entries are added to ours."""
    full_env = dict(os.environ)
    full_env.pop("ZEROCLAW_CONFIG_DIR", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "bundler", *args],
        input=input_text,
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=120,
    )


def one_error(stderr: str) -> bool:
    """True when ``stderr`` is one ``error:`` line, optionally followed by the command that
    repairs the failure, alone and indented on the next line (05 §3, issue 14 item 1). Warnings
    said before the command started (``--secret`` is visible to others) may precede it."""
    lines = stderr.strip("\n").splitlines()
    while lines and lines[0].startswith("warning: "):
        lines.pop(0)
    if not lines or not lines[0].startswith("error: "):
        return False
    if len(lines) == 1:
        return True
    return len(lines) == 2 and lines[0].endswith("; run:") and lines[1].startswith("  bundler ")
