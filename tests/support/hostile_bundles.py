"""The hostile-bundle corpus (03 §5, 06 §3 S1), shared by the verify and import tests.

Each case is a function ``(bundle: Path) -> str``: it receives a fresh copy of a valid bundle
(:func:`bundlefactory.build_bundle`), turns it hostile **in place**, and returns a substring the
refusal must contain (the entry or config path at fault, as printed, escaped). Most cases
:func:`bundlefactory.reseal` afterwards, as an attacker would, so the checksums are consistent
and the case exercises the check it names rather than a checksum mismatch.

``CASES`` holds the fast cases; ``SLOW_CASES`` those that build a million entries.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support import bundlefactory as bf

Case = Callable[[Path], str]
CASES: dict[str, Case] = {}
SLOW_CASES: dict[str, Case] = {}


def case(function: Case) -> Case:
    """Register a fast case under its function name."""
    CASES[function.__name__] = function
    return function


def slow_case(function: Case) -> Case:
    """Register a case too expensive for every run."""
    SLOW_CASES[function.__name__] = function
    return function


def _agent(data: dict[str, Any]) -> dict[str, Any]:
    agent: dict[str, Any] = data["agents"][bf.ROOT_AGENT]
    return agent


# --------------------------------------------------------------------------- checksums and counts


@case
def swapped_checksums(bundle: Path) -> str:
    lines = (bundle / bf.CHECKSUMS).read_text().splitlines(keepends=True)
    first, second = (
        i for i, line in enumerate(lines) if line.endswith(("README.md\n", "today.md\n"))
    )
    digest_a, digest_b = lines[first][:32], lines[second][:32]
    lines[first], lines[second] = digest_b + lines[first][32:], digest_a + lines[second][32:]
    raw = "".join(lines).encode()
    (bundle / bf.CHECKSUMS).write_bytes(raw)
    bf.edit_manifest(bundle, lambda m: m["contents"].update(checksums_xxh3_128=_xxh(raw)))
    return "workspace/README.md"


def _xxh(raw: bytes) -> str:
    import xxhash

    return str(xxhash.xxh3_128(raw).hexdigest())


@case
def manifest_names_absent_file(bundle: Path) -> str:
    raw = (bundle / bf.CHECKSUMS).read_bytes() + b"0" * 32 + b"  workspace/ghost.txt\n"
    (bundle / bf.CHECKSUMS).write_bytes(raw)

    def change(manifest: dict[str, Any]) -> None:
        manifest["contents"]["checksums_xxh3_128"] = _xxh(raw)
        manifest["contents"]["files"] += 1

    bf.edit_manifest(bundle, change)
    return "workspace/ghost.txt"


@case
def file_not_in_checksums(bundle: Path) -> str:
    (bundle / "workspace" / "extra.txt").write_text("smuggled\n")
    return "workspace/extra.txt"


@case
def modified_file_content(bundle: Path) -> str:
    (bundle / "workspace" / "notes" / "today.md").write_text("changed after export\n")
    return "workspace/notes/today.md"


@case
def bad_checksums_digest(bundle: Path) -> str:
    bf.edit_manifest(bundle, lambda m: m["contents"].update(checksums_xxh3_128="0" * 32))
    return "checksums.xxh3"


@case
def malformed_checksums_line(bundle: Path) -> str:
    raw = (bundle / bf.CHECKSUMS).read_bytes() + b"not a digest line\n"
    (bundle / bf.CHECKSUMS).write_bytes(raw)
    bf.edit_manifest(bundle, lambda m: m["contents"].update(checksums_xxh3_128=_xxh(raw)))
    return "checksums.xxh3:"


@case
def files_count_mismatch(bundle: Path) -> str:
    bf.edit_manifest(bundle, lambda m: m["contents"].update(files=m["contents"]["files"] + 1))
    return "contents.files"


@case
def bytes_count_mismatch(bundle: Path) -> str:
    bf.edit_manifest(bundle, lambda m: m["contents"].update(bytes=m["contents"]["bytes"] - 1))
    return "contents.bytes"


@case
def checksums_missing_format_2(bundle: Path) -> str:
    _make_format_2(bundle)
    (bundle / bf.CHECKSUMS).unlink()
    return "checksums.xxh3"


# --------------------------------------------------------------------------- manifest


@case
def newer_format(bundle: Path) -> str:
    bf.edit_manifest(bundle, lambda m: m.update(format_version=3))
    return "newer tool"


@case
def manifest_missing(bundle: Path) -> str:
    (bundle / bf.MANIFEST).unlink()
    return "zeroclaw-agent.toml"


@case
def manifest_not_toml(bundle: Path) -> str:
    (bundle / bf.MANIFEST).write_text("format_version = = 1\n")
    return "zeroclaw-agent.toml"


@case
def manifest_is_symlink(bundle: Path) -> str:
    real = bundle.parent / f"{bundle.name}-real-manifest.toml"
    (bundle / bf.MANIFEST).rename(real)
    (bundle / bf.MANIFEST).symlink_to(real)
    return "zeroclaw-agent.toml"


@case
def root_agent_dotdot(bundle: Path) -> str:
    def change(data: dict[str, Any]) -> None:
        data["agents"] = {"../evil": data["agents"][bf.ROOT_AGENT]}

    bf.edit_config(bundle, change)
    bf.edit_manifest(bundle, lambda m: m.update(root_agent="../evil"))
    return "root_agent"


@case
def root_agent_not_portable(bundle: Path) -> str:
    def change(data: dict[str, Any]) -> None:
        data["agents"] = {"con": data["agents"][bf.ROOT_AGENT]}

    bf.edit_config(bundle, change)
    bf.edit_manifest(bundle, lambda m: m.update(root_agent="con"))
    return "root_agent"


@case
def risk_flags_omit_grant(bundle: Path) -> str:
    bf.edit_manifest(
        bundle,
        lambda m: m.update(risk_flags=[f for f in m["risk_flags"] if f["kind"] != "process_spawn"]),
    )
    return "process_spawn"


@case
def risk_flags_all_removed_after_granting_full(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: d["risk_profiles"]["guarded"].update(level="full"))
    return "full_autonomy"


@case
def skill_bundles_claims_absent(bundle: Path) -> str:
    shutil.rmtree(bundle / "skills")
    bf.reseal(bundle)
    return "skill_bundles"


def _claims_secret(path: str) -> Case:
    """A case whose manifest lists ``path`` in ``required_secrets``, the fragment as it was."""

    def plant(bundle: Path) -> str:
        bf.edit_manifest(bundle, lambda m: m["required_secrets"].append(path))
        return "required_secrets"

    return plant


# required_secrets must name x-secret fields of the fragment that hold "" (03 §1)
CASES["required_secret_not_secret"] = _claims_secret("providers.models.anthropic.main.model")
# a secret map's key is the rest of the path: GITHUB.TOKEN is one key, and not there
CASES["required_secret_raw_key_the_fragment_lacks"] = _claims_secret(
    "mcp.servers.github.env.GITHUB.TOKEN"
)
CASES["required_secret_absent"] = _claims_secret("providers.models.openai.nowhere.api_key")


@case
def required_secret_in_a_map_that_is_not_secret(bundle: Path) -> str:
    def plant(data: dict[str, Any]) -> None:
        data["providers"]["models"]["anthropic"]["main"]["pricing"] = {"in.put": 1.5}

    bf.edit_config(bundle, plant)
    return _claims_secret("providers.models.anthropic.main.pricing.in.put")(bundle)


@case
def format_2_without_memory_table(bundle: Path) -> str:
    _make_format_2(bundle)
    bf.edit_manifest(bundle, lambda m: m.pop("memory"))
    return "memory"


@case
def format_2_corrupt_store(bundle: Path) -> str:
    _make_format_2(bundle)
    store = bundle / "memory" / "brain.db"
    data = bytearray(store.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)
    store.write_bytes(bytes(data))
    bf.reseal(bundle)
    return "memory/brain.db"


def _make_format_2(bundle: Path) -> None:
    """Turn the format 1 copy into a valid format 2 bundle (then a case breaks one thing)."""
    bf._write_store(bundle / "memory" / "brain.db")
    (bundle / "memory" / "MEMORY_SNAPSHOT.md").write_text("# core memory\n")

    def change(manifest: dict[str, Any]) -> None:
        manifest["format_version"] = 2
        manifest["memory"] = {
            "backend": "sqlite",
            "store": "memory/brain.db",
            "snapshot_at": "2026-11-29T14:00:00Z",
        }
        manifest["dropped"] = []

    bf.edit_manifest(bundle, change)
    bf.recompute_flags(bundle)
    bf.reseal(bundle)


@case
def memory_folder_in_format_1(bundle: Path) -> str:
    (bundle / "memory").mkdir()
    (bundle / "memory" / "brain.db").write_bytes(b"SQLite format 3\x00")
    bf.reseal(bundle)
    return "memory"


@case
def extra_file_in_memory_folder(bundle: Path) -> str:
    _make_format_2(bundle)
    (bundle / "memory" / "brain.db-wal").write_bytes(b"\x00" * 32)
    bf.reseal(bundle)
    return "memory/brain.db-wal"


# --------------------------------------------------------------------------- tree


@case
def planted_memory_snapshot(bundle: Path) -> str:
    (bundle / "workspace" / "MEMORY_SNAPSHOT.md").write_text("planted core memory\n")
    bf.reseal(bundle)
    return "workspace/MEMORY_SNAPSHOT.md"


@case
def planted_workspace_memory(bundle: Path) -> str:
    (bundle / "workspace" / "memory").mkdir()
    (bundle / "workspace" / "memory" / "brain.db").write_bytes(b"SQLite format 3\x00")
    bf.reseal(bundle)
    return "workspace/memory"


@case
def fifo_in_workspace(bundle: Path) -> str:
    os.mkfifo(bundle / "workspace" / "pipe")
    return "workspace/pipe"


@case
def socket_in_workspace(bundle: Path) -> str:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cwd = os.getcwd()
    os.chdir(bundle / "workspace")  # a short relative name: socket paths are limited to ~107 bytes
    try:
        server.bind("sock")
    finally:
        os.chdir(cwd)
        server.close()
    return "workspace/sock"


def _can_make_devices() -> bool:
    """Device nodes need CAP_MKNOD (root outside a restricted container)."""
    folder = tempfile.mkdtemp()
    try:
        os.mknod(os.path.join(folder, "null"), stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except OSError:
        return False
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return True


def device_in_workspace(bundle: Path) -> str:
    os.mknod(bundle / "workspace" / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    return "workspace/null"


if _can_make_devices():  # registered only where a device node can really be made
    case(device_in_workspace)


@case
def hard_link_in_workspace(bundle: Path) -> str:
    os.link(bundle / "workspace" / "README.md", bundle / "workspace" / "hard")
    bf.reseal(bundle)
    return "hard link"


@case
def symlink_escaping(bundle: Path) -> str:
    (bundle / "workspace" / "passwd").symlink_to("/etc/passwd")
    return "workspace/passwd"


@case
def symlink_inside_bundle(bundle: Path) -> str:
    (bundle / "workspace" / "inner").symlink_to("README.md")
    return "workspace/inner"


@case
def symlinked_skill_folder(bundle: Path) -> str:
    skill = bundle / "skills" / bf.SKILL_BUNDLE / "search"
    shutil.rmtree(skill / "scripts")
    (skill / "scripts").symlink_to("/etc")
    bf.reseal(bundle)
    return "skills/research_tools/search/scripts"


@case
def symlinked_workspace_root(bundle: Path) -> str:
    real = bundle.parent / f"{bundle.name}-real-workspace"
    (bundle / "workspace").rename(real)
    (bundle / "workspace").symlink_to(real)
    bf.reseal(bundle)
    return "workspace"


@case
def skill_folder_con(bundle: Path) -> str:
    skills = bundle / "skills" / bf.SKILL_BUNDLE
    (skills / "search").rename(skills / "con")
    bf.reseal(bundle)
    return "skills/research_tools/con"


@case
def skill_without_skill_md(bundle: Path) -> str:
    (bundle / "skills" / bf.SKILL_BUNDLE / "loose").mkdir()
    (bundle / "skills" / bf.SKILL_BUNDLE / "loose" / "run.sh").write_text("echo\n")
    bf.reseal(bundle)
    return "skills/research_tools/loose"


@case
def loose_file_in_skill_bundle(bundle: Path) -> str:
    (bundle / "skills" / bf.SKILL_BUNDLE / "notes.txt").write_text("not a skill\n")
    bf.reseal(bundle)
    return "skills/research_tools/notes.txt"


@case
def skills_of_unnamed_bundle(bundle: Path) -> str:
    extra = bundle / "skills" / "other_tools" / "x"
    extra.mkdir(parents=True)
    (extra / "SKILL.md").write_text("smuggled skill\n")
    bf.reseal(bundle)
    return "skills/other_tools"


@case
def excluded_skill_carried(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: d["skill_bundles"][bf.SKILL_BUNDLE].update(exclude=["search"]))
    return "skills/research_tools/search"


@case
def control_character_in_name(bundle: Path) -> str:
    (bundle / "workspace" / "bad\x1bname").write_text("x\n")
    return "workspace/bad\\x1bname"


@case
def invalid_utf8_name(bundle: Path) -> str:
    os.close(
        os.open(
            os.path.join(os.fsencode(bundle / "workspace"), b"bad\xffname"),
            os.O_CREAT | os.O_WRONLY,
            0o644,
        )
    )
    return "workspace/bad\\xffname"


@case
def unexpected_root_entry(bundle: Path) -> str:
    (bundle / "install.sh").write_text("#!/bin/sh\nrm -rf ~\n")
    return "install.sh"


@case
def config_is_a_folder(bundle: Path) -> str:
    (bundle / "config.toml").unlink()
    (bundle / "config.toml").mkdir()
    bf.reseal(bundle)
    return "config.toml"


@case
def too_deep_tree(bundle: Path) -> str:
    # 257 levels below the bundle root, built relative to a descriptor (paths would grow long)
    fd = os.open(bundle / "workspace", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(257):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    return "levels"


@slow_case
def million_and_one_entries(bundle: Path) -> str:
    # Empty files in 1,001 folders: 1,000 * 1,000 + 1,001 folders + the bundle's own > 1,000,000
    root = bundle / "workspace" / "many"
    root.mkdir()
    for i in range(1001):
        folder = root / f"{i:04d}"
        folder.mkdir()
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for j in range(1000):
                os.close(os.open(str(j), os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
        finally:
            os.close(fd)
    return "more than 1000000 entries"


# --------------------------------------------------------------------------- config.toml


@case
def second_agent_hidden(bundle: Path) -> str:
    bf.edit_config(
        bundle,
        lambda d: d["agents"].update(
            intruder={"model_provider": "anthropic.main", "risk_profile": "guarded"}
        ),
    )
    return "agents.intruder"


@case
def reference_outside_fragment(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: _agent(d).update(runtime_profile="turbo"))
    return "agents.researcher.runtime_profile"


@case
def workspace_path_smuggled(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: _agent(d).update(workspace={"path": "/home/victim"}))
    return "agents.researcher.workspace.path"


@case
def workspace_access_smuggled(bundle: Path) -> str:
    bf.edit_config(
        bundle, lambda d: _agent(d).update(workspace={"access": {"other": "read_write"}})
    )
    return "agents.researcher.workspace.access"


@case
def channels_table_smuggled(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: d.update(channels={"slack": {"team": {"token": "x"}}}))
    return "channels"


@case
def cron_table_smuggled(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: d.update(cron={"nightly": {"schedule": "0 * * * *"}}))
    return "cron"


@case
def agent_channels_smuggled(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: _agent(d).update(channels=["slack.team"]))
    return "agents.researcher.channels"


@case
def agent_delegates_smuggled(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: _agent(d).update(delegates=["root"]))
    return "agents.researcher.delegates"


@case
def agent_a2a_smuggled(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: _agent(d).update(a2a={"published": True}))
    return "agents.researcher.a2a"


@case
def approval_route_smuggled(bundle: Path) -> str:
    bf.edit_config(
        bundle,
        lambda d: d["risk_profiles"]["guarded"].update(
            approval_route={"approver_channel": "slack.x"}
        ),
    )
    return "risk_profiles.guarded.approval_route"


@case
def delegate_same_risk_profile_true(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: _agent(d).update(delegate_same_risk_profile=True))
    return "agents.researcher.delegate_same_risk_profile"


@case
def enc2_in_non_secret_field(bundle: Path) -> str:
    bf.edit_config(
        bundle,
        lambda d: d["providers"]["models"]["anthropic"]["main"].update(model="enc2:deadbeef"),
    )
    return "providers.models.anthropic.main.model"


@case
def non_empty_secret(bundle: Path) -> str:
    bf.edit_config(
        bundle, lambda d: d["providers"]["models"]["anthropic"]["main"].update(api_key="sk-planted")
    )
    return "providers.models.anthropic.main.api_key"


@case
def non_empty_secret_map_value(bundle: Path) -> str:
    bf.edit_config(
        bundle, lambda d: d["mcp"]["servers"][0]["env"].update(GITHUB_TOKEN="ghp_planted")
    )
    return "mcp.servers.github.env.GITHUB_TOKEN"


@case
def unknown_key(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: _agent(d).update(nickname="r"))
    return "agents.researcher.nickname"


@case
def global_mcp_setting(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: d["mcp"].update(enabled=False))
    return "mcp.enabled"


@case
def server_not_granted(bundle: Path) -> str:
    bf.edit_config(
        bundle,
        lambda d: d["mcp"]["servers"].append(
            {"name": "evil", "command": "sh", "args": ["-c", "id"]}
        ),
    )
    return "mcp.servers.evil"


@case
def unreferenced_risk_profile(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: d["risk_profiles"].update(spare={"level": "full"}))
    return "risk_profiles.spare"


@case
def unreferenced_provider(bundle: Path) -> str:
    bf.edit_config(
        bundle, lambda d: d["providers"]["models"].update(groq={"spare": {"api_key": ""}})
    )
    return "providers.models.groq.spare"


@case
def identity_path_dotdot(bundle: Path) -> str:
    bf.edit_config(
        bundle,
        lambda d: _agent(d).update(identity={"format": "aieos", "aieos_path": "../../etc/passwd"}),
    )
    return "agents.researcher.identity.aieos_path"


@case
def identity_path_under_memory(bundle: Path) -> str:
    bf.edit_config(
        bundle,
        lambda d: _agent(d).update(identity={"format": "aieos", "aieos_path": "memory/brain.db"}),
    )
    return "agents.researcher.identity.aieos_path"


@case
def skill_directory_absolute(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: d["skill_bundles"][bf.SKILL_BUNDLE].update(directory="/etc"))
    return "skill_bundles.research_tools.directory"


@case
def invalid_value(bundle: Path) -> str:
    bf.edit_config(bundle, lambda d: d["risk_profiles"]["guarded"].update(level="godmode"))
    return "risk_profiles.guarded.level"


@case
def deep_toml_arrays(bundle: Path) -> str:
    bf.write_config_text(bundle, "x = " + "[" * 100 + "]" * 100 + "\n")
    return "config.toml"


@case
def deep_toml_dotted_keys(bundle: Path) -> str:
    bf.write_config_text(bundle, "[" + ".".join(f"k{i}" for i in range(80)) + "]\nv = 1\n")
    return "config.toml"


@case
def deep_toml_inline_tables(bundle: Path) -> str:
    bf.write_config_text(bundle, "x = " + "{a = " * 70 + "1" + "}" * 70 + "\n")
    return "config.toml"


@case
def config_not_toml(bundle: Path) -> str:
    bf.write_config_text(bundle, "[agents.researcher\nmodel_provider = \n")
    return "config.toml"


@case
def config_not_utf8(bundle: Path) -> str:
    bf.write_config_text(bundle, b'model = "\xff\xfe"\n')
    return "config.toml"


@case
def config_oversized(bundle: Path) -> str:
    text = (bundle / "config.toml").read_text() + "# " + "x" * (16 * 1024 * 1024) + "\n"
    bf.write_config_text(bundle, text)
    return "config.toml"


@case
def agent_missing_from_fragment(bundle: Path) -> str:
    bf.edit_manifest(bundle, lambda m: m.update(root_agent="someone_else"))
    return "agents.someone_else"


@case
def identity_path_names_no_file(bundle: Path) -> str:
    bf.edit_config(
        bundle,
        lambda d: _agent(d).update(
            identity={"format": "aieos", "aieos_path": "identity/aieos.json"}
        ),
    )
    return "agents.researcher.identity.aieos_path"


# --------------------------------------------------------------------------- skill directories
# A skill bundle's `directory` becomes a folder of the importing install: anything but one fresh
# portable folder under shared/skills/ is refused.


def _skill_directory(directory: str) -> Case:
    def make(bundle: Path) -> str:
        bf.edit_config(
            bundle, lambda d: d["skill_bundles"][bf.SKILL_BUNDLE].update(directory=directory)
        )
        return f"skill_bundles.{bf.SKILL_BUNDLE}.directory"

    return make


for _name, _directory in {
    "skill_directory_nul": "shared/skills/a\x00b",
    "skill_directory_newline": "shared/skills/a\nb",
    "skill_directory_escape": "shared/skills/a\x1bb",
    "skill_directory_del": "shared/skills/a\x7fb",
    "skill_directory_c1": "shared/skills/a\x85b",
    "skill_directory_control_in_head": "shared\t/skills/tools",
    "skill_directory_is_the_skills_root": "shared/skills",
    "skill_directory_is_shared": "shared",
    "skill_directory_dotdot_inside_shared": "shared/skills/../research_tools",
    "skill_directory_dotdot_back_into_skills": "shared/skills/../skills/research_tools",
    "skill_directory_nested": "shared/skills/a/b",
    "skill_directory_elsewhere_in_shared": "shared/custom/tools",
    "skill_directory_dot_component": "shared/skills/./research_tools",
    "skill_directory_double_slash": "shared//skills/research_tools",
    "skill_directory_trailing_slash": "shared/skills/research_tools/",
    "skill_directory_device_name": "shared/skills/con",
    "skill_directory_absolute_skills_folder": "/shared/skills/research_tools",
    "skill_directory_home": "~/shared/skills/research_tools",
    "skill_directory_backslash": "shared\\skills\\research_tools",
    "skill_directory_workspace": "agents/researcher/workspace",
    "skill_directory_empty_leaf_dot": "shared/skills/.",
}.items():
    CASES[_name] = _skill_directory(_directory)


@case
def skill_directory_of_another_bundle(bundle: Path) -> str:
    """A second bundle whose directory is the first one's default folder (existing folder)."""

    def change(data: dict[str, Any]) -> None:
        _agent(data)["skill_bundles"].append("extra")
        data["skill_bundles"]["extra"] = {"directory": f"shared/skills/{bf.SKILL_BUNDLE}"}

    bf.edit_config(bundle, change)
    return "skill_bundles.extra.directory"


@case
def skill_directory_inside_another_bundle(bundle: Path) -> str:
    def change(data: dict[str, Any]) -> None:
        _agent(data)["skill_bundles"].append("extra")
        data["skill_bundles"]["extra"] = {"directory": f"shared/skills/{bf.SKILL_BUNDLE}/inner"}

    bf.edit_config(bundle, change)
    return "skill_bundles.extra.directory"


# --------------------------------------------------------------------------- the tolerant reader
# ZeroClaw-written bundles may lack checksums and [contents], name zeroclaw_version, carry a
# nanosecond RFC 3339 time and dotted skill aliases (03 §1.1). Each case below aims at one of
# those tolerances: relaxed where ZeroClaw differs, still strict where it matters.


def _zeroclaw_style(bundle: Path) -> None:
    """Make the bundle look written by ZeroClaw: no checksums, no [contents], zeroclaw_version."""
    (bundle / bf.CHECKSUMS).unlink()

    def change(manifest: dict[str, Any]) -> None:
        del manifest["contents"]
        manifest["provenance"] = {
            "zeroclaw_version": "0.8.4",
            "exported_at": "2026-08-20T09:14:03.417902361+00:00",
        }

    bf.edit_manifest(bundle, change)


@case
def checksums_stripped_and_file_tampered(bundle: Path) -> str:
    (bundle / bf.CHECKSUMS).unlink()
    path = bundle / "workspace" / "README.md"
    raw = bytearray(path.read_bytes())
    raw[0] ^= 0x20  # same size: [contents] files/bytes still agree
    path.write_bytes(bytes(raw))
    return "checksums.xxh3"


@case
def no_checksums_config_grants_more_than_manifest(bundle: Path) -> str:
    _zeroclaw_style(bundle)
    text = (bundle / "config.toml").read_text()
    (bundle / "config.toml").write_text(text.replace('level = "supervised"', 'level = "full"'))
    return "full_autonomy"


@case
def zeroclaw_manifest_omits_a_zeroclaw_kind(bundle: Path) -> str:
    _zeroclaw_style(bundle)
    bf.edit_manifest(
        bundle,
        lambda m: m.update(risk_flags=[f for f in m["risk_flags"] if f["kind"] != "process_spawn"]),
    )
    return "omits process_spawn"


@case
def foreign_exporter_omits_a_bundler_kind(bundle: Path) -> str:
    """Any exporter name is held to every kind bundler knows: only zeroclaw_version is not."""

    def change(manifest: dict[str, Any]) -> None:
        manifest["provenance"]["exporter"] = "zeroclaw-ng 9.9"
        manifest["risk_flags"] = [
            f for f in manifest["risk_flags"] if f["kind"] != "command_allowlist"
        ]

    bf.edit_manifest(bundle, change)
    return "omits command_allowlist"


@case
def zeroclaw_manifest_claiming_bundler_kind_at_wrong_path(bundle: Path) -> str:
    """A flag listed where neither rule set raises it is a lie, whoever wrote the manifest."""
    _zeroclaw_style(bundle)

    def change(manifest: dict[str, Any]) -> None:
        for flag in manifest["risk_flags"]:
            if flag["kind"] == "command_allowlist":
                flag["path"] = "risk_profiles.guarded.level"

    bf.edit_manifest(bundle, change)
    return "lists command_allowlist at risk_profiles.guarded.level"


def _exported_at(value: str) -> Case:
    def make(bundle: Path) -> str:
        bf.edit_manifest(bundle, lambda m: m["provenance"].update(exported_at=value))
        return "provenance.exported_at"

    return make


for _name, _value in {
    "exported_at_fraction_then_junk": "2026-08-20T09:14:03.417902361+00:00junk",
    "exported_at_fraction_then_newline": "2026-08-20T09:14:03.417902361+00:00\n",
    "exported_at_fraction_without_digits": "2026-08-20T09:14:03.+00:00",
    "exported_at_month_13_with_fraction": "2026-13-20T09:14:03.5+00:00",
    "exported_at_31_april": "2026-04-31T09:14:03.5Z",
    "exported_at_offset_24_hours": "2026-08-20T09:14:03.5+24:00",
    "exported_at_offset_without_colon": "2026-08-20T09:14:03.5+0000",
    "exported_at_fraction_with_unicode_digits": "2026-08-20T09:14:03.\u0661\u0662Z",
}.items():
    CASES[_name] = _exported_at(_value)


def _rename_skill_bundle(bundle: Path, alias: str) -> None:
    """Give the carried skill bundle ``alias`` everywhere: folder, config, manifest, flag."""
    os.rename(bundle / "skills" / bf.SKILL_BUNDLE, bundle / "skills" / alias)

    def config(data: dict[str, Any]) -> None:
        data["skill_bundles"][alias] = data["skill_bundles"].pop(bf.SKILL_BUNDLE)
        _agent(data)["skill_bundles"] = [alias]

    bf.edit_config(bundle, config)

    def manifest(data: dict[str, Any]) -> None:
        data["skill_bundles"] = [alias]
        for flag in data["risk_flags"]:
            if flag["kind"] == "carried_skills":
                flag["path"] = f"skill_bundles.{alias}"

    bf.edit_manifest(bundle, manifest)


@case
def dotted_skill_alias_with_dotdot(bundle: Path) -> str:
    _rename_skill_bundle(bundle, "research..tools")
    return "skills/research..tools"


@case
def dotted_skill_alias_trailing_dot_with_content(bundle: Path) -> str:
    _rename_skill_bundle(bundle, "research.")
    return "skills/research."


@case
def dotted_skill_alias_reserved_stem_with_content(bundle: Path) -> str:
    _rename_skill_bundle(bundle, "con.tools")
    return "skills/con.tools"


@case
def dotted_skill_alias_leading_dot(bundle: Path) -> str:
    _rename_skill_bundle(bundle, ".tools")
    return "skills/.tools"


@case
def skill_alias_dotdot_without_content(bundle: Path) -> str:
    """``..`` as an alias: its folder would be shared/ itself."""

    def config(data: dict[str, Any]) -> None:
        data["skill_bundles"][".."] = {}
        _agent(data)["skill_bundles"].append("..")

    bf.edit_config(bundle, config)
    return 'skill_bundles.".."'


# --------------------------------------------------------------------------- sealed secrets.age
# Faults verify finds without an identity (02 §12). Those only an identity finds (a payload
# bound to another bundle, a path the manifest does not list, a wrong identity, a payload cut
# short) are in tests/bundle/test_sealed_handoff.py, which holds the identity.


def seal_bundle(bundle: Path, values: dict[str, str] | None = None) -> Any:
    """Seal ``values`` (default: a value for each required secret) into ``bundle`` as bundler
    does, to a fresh age key; returns its identity (a ``pyrage.x25519.Identity``)."""
    import pyrage

    from bundler.bundle.sealed import seal
    from bundler.fs.age import Recipient

    identity = pyrage.x25519.Identity.generate()
    manifest = bf.read_manifest(bundle)
    if values is None:
        values = {path: f"sealed-value-{i}" for i, path in enumerate(manifest["required_secrets"])}
    sealing = seal(manifest, values, [Recipient("x25519", str(identity.to_public()))])
    (bundle / "secrets.age").write_bytes(sealing.data)
    bf.edit_manifest(bundle, lambda m: m.update(sealed=sealing.table))
    return identity


def _rewrite_sealed(bundle: Path, data: bytes) -> None:
    """Put ``data`` in place of ``secrets.age`` with the manifest's sha256 rewritten to match."""
    import hashlib

    (bundle / "secrets.age").write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    bf.edit_manifest(bundle, lambda m: m["sealed"].update(sha256=digest))


@case
def sealed_sha256_disagrees(bundle: Path) -> str:
    seal_bundle(bundle)
    data = bytearray((bundle / "secrets.age").read_bytes())
    data[-1] ^= 1
    (bundle / "secrets.age").write_bytes(bytes(data))
    return "secrets.age"


@case
def sealed_bad_header(bundle: Path) -> str:
    seal_bundle(bundle)
    data = (bundle / "secrets.age").read_bytes()
    _rewrite_sealed(bundle, data.replace(b"age-encryption.org/v1", b"age-encryption.org/v2", 1))
    return "secrets.age"


@case
def sealed_truncated_in_its_header(bundle: Path) -> str:
    seal_bundle(bundle)
    data = (bundle / "secrets.age").read_bytes()
    _rewrite_sealed(bundle, data[: data.index(b"\n---")])
    return "secrets.age"


@case
def sealed_file_without_its_table(bundle: Path) -> str:
    seal_bundle(bundle)
    bf.edit_manifest(bundle, lambda m: m.pop("sealed"))
    return "secrets.age"


@case
def sealed_table_without_its_file(bundle: Path) -> str:
    seal_bundle(bundle)
    (bundle / "secrets.age").unlink()
    return "secrets.age"


@case
def sealed_table_names_a_path_not_required(bundle: Path) -> str:
    seal_bundle(bundle)
    bf.edit_manifest(bundle, lambda m: m["sealed"].update(paths=["gateway.paired_tokens"]))
    return "sealed"


@case
def sealed_counts_other_recipients(bundle: Path) -> str:
    seal_bundle(bundle)
    bf.edit_manifest(bundle, lambda m: m["sealed"].update(recipients=2))
    return "secrets.age"


@case
def sealed_file_is_a_folder(bundle: Path) -> str:
    seal_bundle(bundle)
    (bundle / "secrets.age").unlink()
    (bundle / "secrets.age").mkdir()
    return "secrets.age"
