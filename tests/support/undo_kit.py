"""What the undo tests share: a user's config with comments and a secret, and an install that
imported a bundle over it through the real CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support import bundlefactory as bf
from support.installs import run_cli

USER_CONFIG = (
    "# mine: keep every byte\n"
    '[agents.lead]\nmodel_provider = "openai.prod"   # comment kept\nrisk_profile = "strict"\n\n'
    '[providers.models.openai.prod]\napi_key = "sk-local-prod-key-1234567890"\nmodel = "gpt"\n\n'
    '[risk_profiles.strict]\nlevel = "readonly"\n'
)


def bundler(install: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["--install", str(install), *args])


def imported(tmp_path: Path, config: str | None = USER_CONFIG) -> tuple[Path, Path]:
    install = tmp_path / "install"
    install.mkdir()
    if config is not None:
        (install / "config.toml").write_text(config, encoding="utf-8")
    bundle = bf.build_bundle(tmp_path / "bundle")
    result = bundler(install, "agents", "import", str(bundle), "--accept-risks", "--json")
    assert result.returncode == 0, result.stderr
    return install, Path(json.loads(result.stdout)["receipt"])
