"""Valid bundles for tests, and the tools to tamper with copies of them consistently.

:func:`build_bundle` writes a bundle of agent ``researcher`` (providers with a fallback, risk and
runtime profiles, a skill bundle with one skill, an MCP bundle granting a stdio server, a small
workspace) directly from its parts, the way 02 §1/§9 describe, with risk flags from the one
implementation (:func:`bundler.rules.risk.compute_risk_flags`). :func:`export_bundle` makes the same
agent through the real exporter, from the install :func:`write_install` creates.

Hostile variants change one thing and then :func:`reseal` the bundle (rewrite
``checksums.xxh3`` and the manifest's ``[contents]`` from the tree), as an attacker would, so
that each one exercises the check it targets and not merely the checksums.
"""

from __future__ import annotations

import io
import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomli_w
import xxhash

from bundler.rules import tomlcompat
from support import kit

ROOT_AGENT = "researcher"
SKILL_BUNDLE = "research_tools"
MANIFEST = "zeroclaw-agent.toml"
CHECKSUMS = "checksums.xxh3"

# Secrets of the install (never in a bundle). Long and distinctive so a leak is findable.
INSTALL_SECRETS = {
    "anthropic": "sk-ant-FACTORY-secret-value-0123456789",
    "openai": "sk-openai-FACTORY-secret-value-987654321",
    "github": "ghp_FACTORYsecretTOKENvalue1234567890",
}

FRAGMENT: dict[str, Any] = {
    "agents": {
        ROOT_AGENT: {
            "model_provider": "anthropic.main",
            "risk_profile": "guarded",
            "runtime_profile": "fast",
            "skill_bundles": [SKILL_BUNDLE],
            "mcp_bundles": ["gh"],
            "delegate_same_risk_profile": False,
        }
    },
    "providers": {
        "models": {
            "anthropic": {
                "main": {"api_key": "", "model": "claude-sonnet", "fallback": ["openai.backup"]}
            },
            "openai": {"backup": {"api_key": "", "model": "gpt-4o"}},
        }
    },
    "risk_profiles": {"guarded": {"level": "supervised", "allowed_commands": ["git", "ls"]}},
    "runtime_profiles": {"fast": {"max_tool_iterations": 5}},
    "skill_bundles": {SKILL_BUNDLE: {}},
    "mcp_bundles": {"gh": {"servers": ["github"]}},
    "mcp": {
        "servers": [
            {
                "name": "github",
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-github"],
                "env": {"GITHUB_TOKEN": ""},
            }
        ]
    },
}
REQUIRED_SECRETS = [
    "mcp.servers.github.env.GITHUB_TOKEN",
    "providers.models.anthropic.main.api_key",
    "providers.models.openai.backup.api_key",
]

WORKSPACE_FILES = {
    "README.md": b"# researcher\n",
    "notes/today.md": b"- read the paper\n",
    "notes/memory/kept.txt": b"a nested memory/ folder travels\n",
    "notes/MEMORY_SNAPSHOT.md": b"a nested snapshot travels too\n",
    "data/blob.bin": bytes(range(256)) * 64,
}
SKILL_FILES = {
    "search/SKILL.md": b"---\nname: search\n---\nSearch the web.\n",
    "search/scripts/run.sh": b"#!/bin/sh\necho search\n",
}


def fragment() -> dict[str, Any]:
    """A fresh copy of the good bundle's ``config.toml`` as data."""
    copied: dict[str, Any] = tomlcompat.loads(tomli_w.dumps(FRAGMENT))
    return copied


# --------------------------------------------------------------------------- files


def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def _write_store(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE memories (id INTEGER PRIMARY KEY, body TEXT)")
        conn.executemany(
            "INSERT INTO memories (body) VALUES (?)", [(f"memory {i}",) for i in range(50)]
        )
        conn.commit()
    finally:
        conn.close()


def canonical_files(bundle: Path) -> list[str]:
    """Regular files of a bundle in checksum order (02 §9.2), manifest, checksums and a sealed
    secrets.age excluded (none is listed in the checksums).

    Depth first, each folder's names sorted by their bytes; links and special files are not
    regular files and are left out (a hostile bundle may hold them).
    """
    found: list[str] = []

    def visit(folder: Path, prefix: str) -> None:
        for name in sorted(os.listdir(folder), key=os.fsencode):
            rel = prefix + name
            if not prefix and name in (MANIFEST, CHECKSUMS, "secrets.age"):
                continue
            st = os.lstat(folder / name)
            if stat.S_ISDIR(st.st_mode):
                visit(folder / name, rel + "/")
            elif stat.S_ISREG(st.st_mode):
                found.append(rel)

    visit(bundle, "")
    return found


def _digest(path: Path) -> str:
    hasher = xxhash.xxh3_128()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            hasher.update(chunk)
    return hasher.hexdigest()


def read_manifest(bundle: Path) -> dict[str, Any]:
    """The bundle's manifest as data."""
    return tomlcompat.loads((bundle / MANIFEST).read_text(encoding="utf-8"))


def write_manifest(bundle: Path, manifest: dict[str, Any]) -> None:
    """Replace the manifest (keys in the order of 02 §9)."""
    (bundle / MANIFEST).write_bytes(tomli_w.dumps(manifest).encode("utf-8"))


def reseal(bundle: Path) -> None:
    """Rewrite ``checksums.xxh3`` and the manifest's ``[contents]`` to match the tree."""
    files = canonical_files(bundle)
    lines = [f"{_digest(bundle / rel)}  {os.fsdecode(rel)}\n" for rel in files]
    raw = "".join(lines).encode("utf-8", "surrogateescape")
    (bundle / CHECKSUMS).write_bytes(raw)
    manifest = read_manifest(bundle)
    manifest["contents"] = {
        "files": len(files),
        "bytes": sum(os.lstat(bundle / rel).st_size for rel in files),
        "checksums": CHECKSUMS,
        "checksums_xxh3_128": xxhash.xxh3_128(raw).hexdigest(),
    }
    write_manifest(bundle, manifest)


def edit_manifest(bundle: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Change the manifest's data (``[contents]`` stays as it is)."""
    manifest = read_manifest(bundle)
    change(manifest)
    write_manifest(bundle, manifest)


def edit_config(bundle: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Change ``config.toml``'s data, then reseal."""
    data = tomlcompat.loads((bundle / "config.toml").read_text(encoding="utf-8"))
    change(data)
    (bundle / "config.toml").write_bytes(tomli_w.dumps(data).encode("utf-8"))
    reseal(bundle)


def write_config_text(bundle: Path, text: str | bytes) -> None:
    """Replace ``config.toml`` with raw text, then reseal."""
    (bundle / "config.toml").write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    reseal(bundle)


def recompute_flags(bundle: Path) -> None:
    """Set the manifest's ``risk_flags`` to what the fragment grants (after a config edit)."""
    from bundler.rules.risk import compute_risk_flags

    manifest = read_manifest(bundle)
    data = tomlcompat.loads((bundle / "config.toml").read_text(encoding="utf-8"))
    flags = compute_risk_flags(
        data, manifest.get("skill_bundles", []), manifest["format_version"], manifest["root_agent"]
    )
    manifest["risk_flags"] = [flag.as_dict() for flag in flags]
    write_manifest(bundle, manifest)


# --------------------------------------------------------------------------- the good bundle


def build_bundle(
    dest: Path, *, format_version: int = 1, config: dict[str, Any] | None = None
) -> Path:
    """Write a valid bundle of agent ``researcher`` at ``dest`` (which must not exist)."""
    from bundler.bundle.manifest import render_config
    from bundler.rules.risk import compute_risk_flags

    data = fragment() if config is None else config
    dest.mkdir(mode=0o755)
    (dest / "config.toml").write_bytes(render_config(data))  # the exporter's own rendering
    (dest / "workspace").mkdir()
    for rel, body in WORKSPACE_FILES.items():
        _write(dest / "workspace" / rel, body)
    for rel, body in SKILL_FILES.items():
        _write(dest / "skills" / SKILL_BUNDLE / rel, body, 0o755 if rel.endswith(".sh") else 0o644)
    if format_version == 2:
        _write_store(dest / "memory" / "brain.db")
        _write(dest / "memory" / "MEMORY_SNAPSHOT.md", b"# core memory\n")
    skill_bundles = [SKILL_BUNDLE]
    flags = compute_risk_flags(data, skill_bundles, format_version, ROOT_AGENT)
    manifest: dict[str, Any] = {
        "format_version": format_version,
        "root_agent": ROOT_AGENT,
        "required_secrets": list(REQUIRED_SECRETS),
        "skill_bundles": skill_bundles,
        "provenance": {"exporter": "bundler 0.3.0", "exported_at": "2026-11-29T14:00:00Z"},
        "contents": {},
        "dropped": []
        if format_version == 2
        else [
            {
                "path": "workspace/MEMORY_SNAPSHOT.md",
                "reason": "private_data",
                "detail": "always (format 1)",
            },
            {
                "path": "workspace/memory",
                "reason": "not_yet_portable",
                "detail": "always (format 1)",
            },
        ],
        "risk_flags": [flag.as_dict() for flag in flags],
    }
    if format_version == 2:
        manifest["memory"] = {
            "backend": "sqlite",
            "store": "memory/brain.db",
            "snapshot_at": "2026-11-29T14:00:00Z",
        }
    write_manifest(dest, manifest)
    reseal(dest)
    return dest


# --------------------------------------------------------------------------- an install to export


INSTALL_CONFIG = f"""\
# a small install: two agents, one exported
[agents.{ROOT_AGENT}]
model_provider = "anthropic.main"
risk_profile = "guarded"
runtime_profile = "fast"
skill_bundles = ["{SKILL_BUNDLE}"]
mcp_bundles = ["gh"]
channels = ["slack.team"]

[agents.other]
model_provider = "openai.backup"
risk_profile = "guarded"

[providers.models.anthropic.main]
api_key = "{INSTALL_SECRETS["anthropic"]}"
model = "claude-sonnet"
fallback = ["openai.backup"]

[providers.models.openai.backup]
api_key = "{INSTALL_SECRETS["openai"]}"
model = "gpt-4o"

[risk_profiles.guarded]
level = "supervised"
allowed_commands = ["git", "ls"]

[runtime_profiles.fast]
max_tool_iterations = 5

[skill_bundles.{SKILL_BUNDLE}]

[mcp_bundles.gh]
servers = ["github"]

[[mcp.servers]]
name = "github"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
env = {{ GITHUB_TOKEN = "{INSTALL_SECRETS["github"]}" }}

[channels.slack.team]
token = "xoxb-not-carried"
"""


def write_install(root: Path, *, memory: bool = False) -> Path:
    """An install whose agent ``researcher`` exports to the bundle :func:`build_bundle` writes."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.toml").write_text(INSTALL_CONFIG, encoding="utf-8")
    workspace = root / "agents" / ROOT_AGENT / "workspace"
    for rel, body in WORKSPACE_FILES.items():
        _write(workspace / rel, body)
    for rel, body in SKILL_FILES.items():
        _write(
            root / "shared" / "skills" / SKILL_BUNDLE / rel,
            body,
            0o755 if rel.endswith(".sh") else 0o644,
        )
    if memory:
        _write_store(workspace / "memory" / "brain.db")
        _write(workspace / "MEMORY_SNAPSHOT.md", b"# core memory\n")
    return root


WIDE_MODES = (0o644, 0o600, 0o755, 0o444)


def widen_workspace(install: Path, *, folders: int = 24, files: int = 6) -> None:
    """Give the agent of ``install`` a workspace of many folders of files (``folders`` *
    ``files`` notes in the modes of :data:`WIDE_MODES`), a file larger than a few megabytes and
    an empty one: enough files for an unpack to use its workers."""
    workspace = install / "agents" / ROOT_AGENT / "workspace"
    for folder in range(folders):
        for index in range(files):
            path = workspace / "notes" / f"f{folder:02}" / f"n{index}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"note {folder}.{index}\n" * (folder * 40 + index))
            path.chmod(WIDE_MODES[(folder + index) % len(WIDE_MODES)])
    (workspace / "big.bin").write_bytes(os.urandom((3 << 20) + 517))
    (workspace / "empty.txt").write_bytes(b"")


BIG = 48 << 20
"""The size of :func:`big_bundle`'s large workspace file: its layer is a long one."""


def big_bundle(tmp_path: Path, name: str, seed: bytes) -> Path:
    """A bundle ``tmp_path/name`` the real exporter made, with a workspace file of
    :data:`BIG` bytes repeating ``seed`` added and the bundle sealed again."""
    install = write_install(tmp_path / f"install-{name}")
    bundle = export_bundle(install, tmp_path / name)
    (bundle / "workspace" / "big.bin").write_bytes(seed * (BIG // len(seed)))
    reseal(bundle)
    return bundle


def export_bundle(install: Path, out: Path, *, include_memory: bool = False) -> Path:
    """Export ``researcher`` of ``install`` to ``out`` with the real exporter (in process)."""
    from bundler.bundle.export import export_agent

    export_agent(
        install,
        ROOT_AGENT,
        out,
        include_memory=include_memory,
        environ={"SOURCE_DATE_EPOCH": "1700000000"},
    )
    return out


# --------------------------------------------------------------------------- observing


def tree_snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry below ``root`` with its kind, mode, content or link target, mtime (folders'
    too), inode and size.

    Used to prove an operation changed nothing (not even a SQLite sidecar appeared).
    """
    return kit.tree_snapshot(root, mtimes=True, dir_mtimes=True, inodes=True, sizes=True)


def pack_bytes(bundle: Path) -> bytes:
    """The deterministic archive of the bundle folder ``bundle``, in memory (small bundles)."""
    from bundler.bundle.archive_write import bundle_members, write_tar
    from bundler.fs.durable import open_dir

    fd = open_dir(bundle, follow=False)
    try:
        out = io.BytesIO()
        write_tar(fd, bundle_members(fd), out)
        return out.getvalue()
    finally:
        os.close(fd)
