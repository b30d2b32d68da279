"""Test support for export tests: build installs, run the real CLI, check bundles.

Shared by ``tests/test_export*.py`` and ``tests/test_crash_export*.py`` (H6's files).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import xxhash

from bundler.rules.tomlcompat import loads
from support import kit
from support.kit import cli_command

API_KEY = "sk-ant-FAKE-h6-Zq8Xw3Vb7Nm2Lk5Jh9Gf4Dsa"
OPENAI_KEY = "sk-FAKE-h6-openai-Pq1Wo2Ei3Ru4Ty5"
GITHUB_TOKEN = "ghp_FAKEh6FAKEh6FAKEh6FAKEh6Tok"
SECRETS = (API_KEY, OPENAI_KEY, GITHUB_TOKEN)
EPOCH = "1795000000"

CONFIG = f"""\
# an install built for the export tests
[agents.researcher]
model_provider = "anthropic.main"
risk_profile = "safe"
runtime_profile = "fast"
skill_bundles = ["research_tools"]
mcp_bundles = ["dev"]
delegates = ["writer"]

[agents.writer]
model_provider = "openai.backup"
risk_profile = "safe"
workspace.path = "{{writer_ws}}"

[providers.models.anthropic.main]
api_key = "{API_KEY}"
model = "claude-test"
fallback = ["openai.backup"]

[providers.models.openai.backup]
api_key = "{OPENAI_KEY}"

[risk_profiles.safe]
level = "supervised"

[runtime_profiles.fast]
max_tool_iterations = 5

[skill_bundles.research_tools]

[mcp_bundles.dev]
servers = ["github"]

[[mcp.servers]]
name = "github"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
env = {{ GITHUB_TOKEN = "{GITHUB_TOKEN}" }}
"""


def make_install(root: Path, *, files: int = 12, writer_ws: Path | None = None) -> Path:
    """An install at ``root`` with agent ``researcher`` (``files`` workspace files) and ``writer``.

    ``writer``'s workspace lives outside the install (``writer_ws``, default ``<root>-writer``),
    so overlap checks are exercised on a configured ``workspace.path`` too.
    """
    writer = writer_ws if writer_ws is not None else root.parent / f"{root.name}-writer"
    writer.mkdir(parents=True, exist_ok=True)
    (writer / "draft.md").write_text("writer's draft\n")
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.toml").write_text(CONFIG.replace("{writer_ws}", str(writer)))
    ws = root / "agents" / "researcher" / "workspace"
    (ws / "notes").mkdir(parents=True)
    (ws / "memory").mkdir()
    (ws / "memory" / "brain.db").write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    (ws / "MEMORY_SNAPSHOT.md").write_text("private core memory\n")
    (ws / "notes" / "memory").mkdir()
    (ws / "notes" / "memory" / "kept.md").write_text("a nested memory folder travels\n")
    for index in range(files):
        folder = ws / "notes" / f"d{index % 4}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{index:03}.txt").write_bytes(f"note {index}\n".encode() * (index + 1))
    (ws / "README.md").write_text("researcher workspace\n")
    skill = root / "shared" / "skills" / "research_tools" / "search"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("# search\n")
    (skill / "scripts" / "run.sh").write_text("#!/bin/sh\necho search\n")
    os.chmod(skill / "scripts" / "run.sh", 0o755)
    (root / "shared" / "skills" / "research_tools" / "loose.txt").write_text("not a skill\n")
    return root


def workspace(install: Path) -> Path:
    """The researcher's workspace."""
    return install / "agents" / "researcher" / "workspace"


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a deterministic CLI run (no .pyc writes, fixed export time)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ZEROCLAW_")}
    env.update(
        PYTHONDONTWRITEBYTECODE="1",
        SOURCE_DATE_EPOCH=EPOCH,
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    env.update(extra)
    return env


def export_cmd(install: Path, out: Path | str, *extra: str, alias: str = "researcher") -> list[str]:
    """The argv of ``bundler agents export`` through the current interpreter."""
    return [
        *cli_command(),
        "--install",
        str(install),
        "agents",
        "export",
        alias,
        "--out",
        str(out),
        *extra,
    ]


def run(
    cmd: Sequence[str], env: Mapping[str, str] | None = None, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` with captured text output."""
    return subprocess.run(
        list(cmd), capture_output=True, text=True, env=dict(env or cli_env()), timeout=300, **kwargs
    )  # type: ignore[call-overload, no-any-return]


def bundler(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m bundler ARGS``."""
    return run([*cli_command(), *args], env)


def snapshot(folder: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path below ``folder`` with its mode and bytes (None for folders); links as targets."""
    return {
        rel: (mode, content.encode() if kind == "link" else content)
        for rel, (kind, mode, content) in kit.tree_snapshot(folder).items()
    }


def bundle_bytes(folder: Path) -> dict[str, bytes | None]:
    """Every path of a bundle with its bytes (modes aside)."""
    return {path: data for path, (_mode, data) in snapshot(folder).items()}


def hidden_leftovers(parent: Path) -> list[str]:
    """Export staging, retired and record names among ``parent``'s children."""
    return sorted(name for name in os.listdir(parent) if name.startswith(".zeroclaw-export"))


def check_bundle(folder: Path) -> dict[str, object]:
    """Assert ``folder`` is a complete bundle (manifest parses, checksums verify); return manifest.

    Recomputes every XXH3-128 in Python, checks the file list is exactly the regular files below
    ``config.toml``, ``workspace/`` and ``skills/``, and runs the real ``xxhsum -c`` when installed.
    """
    manifest = loads((folder / "zeroclaw-agent.toml").read_text())
    checksums = (folder / "checksums.xxh3").read_bytes()
    contents = manifest["contents"]
    assert xxhash.xxh3_128_hexdigest(checksums) == contents["checksums_xxh3_128"]
    listed = []
    total = 0
    for line in checksums.decode().splitlines():
        digest, rel = line.split("  ", 1)
        data = (folder / rel).read_bytes()
        assert xxhash.xxh3_128_hexdigest(data) == digest, rel
        listed.append(rel)
        total += len(data)
    assert contents["files"] == len(listed) and contents["bytes"] == total
    present = sorted(
        os.path.relpath(os.path.join(root, name), folder)
        for root, _dirs, files in os.walk(folder)
        for name in files
        if os.path.relpath(os.path.join(root, name), folder)
        not in ("checksums.xxh3", "zeroclaw-agent.toml")
    )
    assert sorted(listed) == present
    assert set(os.listdir(folder)) <= {
        "zeroclaw-agent.toml",
        "config.toml",
        "checksums.xxh3",
        "workspace",
        "skills",
        "memory",
    }
    xxhsum = shutil.which("xxhsum")
    if xxhsum is not None:
        done = subprocess.run(
            [xxhsum, "-c", "checksums.xxh3"], cwd=folder, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
    return manifest


def secret_forms(value: str) -> list[bytes]:
    """The raw and base64 forms of a secret, to prove none reached an output."""
    raw = value.encode()
    return [raw, base64.b64encode(raw)]
