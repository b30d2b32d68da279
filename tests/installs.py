"""Build installs on disk for tests: ``make_install(tmp_path, toml_text, files={})``.

Shared by every helper's tests; keep it small and free of assertions.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

# the CLI runner and the one-error-line check live in the shared kit; re-exported for callers
from kit import one_error, run_cli

__all__ = ["EXAMPLES", "MINIMAL_CONFIG", "copy_example", "make_install", "one_error", "run_cli"]

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
