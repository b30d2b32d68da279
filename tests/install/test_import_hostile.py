"""Import against hostile skill directories and hostile targets, through the real CLI.

* A skill bundle's folder is one fresh portable folder under ``shared/skills/`` (03 §1, §3.1.4):
  verify refuses any other ``directory``, and import refuses a folder another entry of the
  target already uses, with one rule (:mod:`bundler.rules.skillfolder`).
* A wrongly typed target ``config.toml`` is invalid input (exit 3, the file named), for every
  command that reads one.
* The risk flags shown and consented to are those in effect after the import: a bound local
  entry replaces the bundle's (03 §3.1.7).
* A refused import leaves nothing behind, not even the lock file it created.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support import bundlefactory as bf
from support.faultinject import ptrace_unavailable, run_with_fault
from support.hostile_configs import BASE_SECRETS, CANARY, WRONGLY_TYPED, hostile_configs
from support.installs import one_error, run_cli
from support.kit import clean_env, cli_command

from bundler.rules import tomlcompat

CONFIGS = {case.name: case for case in hostile_configs()}
BRIEF_CASES = [
    "agents_not_a_table",
    "mcp_not_a_table",
    "skill_bundles_not_a_table",
    "providers_not_a_table",
    "provider_models_not_a_table",
    "risk_profiles_not_a_table",
]


def run_import(install: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["--install", str(install), "agents", "import", *args])


def everything(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry below ``root``, the lock file included: a refusal must leave none behind."""
    return bf.tree_snapshot(root) if root.exists() else {}


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    assert one_error(result.stderr), result.stderr
    return result.stderr.splitlines()[0]


@pytest.fixture
def empty_install(tmp_path: Path) -> Path:
    root = tmp_path / "target"
    root.mkdir()
    return root


def bundle_with(tmp_path: Path, change: Any, name: str = "bundle") -> Path:
    bundle = bf.build_bundle(tmp_path / name)
    bf.edit_config(bundle, change)
    bf.recompute_flags(bundle)
    bf.reseal(bundle)
    return bundle


# --------------------------------------------------------------------------- item 5


@pytest.mark.parametrize(
    "directory", ["shared/skills/a\x00b", "shared/skills/a\nb", "shared/skills/a\x85b"]
)
def test_skill_directory_with_a_control_character_refused_by_verify_and_import(
    directory: str, tmp_path: Path, empty_install: Path
) -> None:
    bundle = bundle_with(
        tmp_path, lambda d: d["skill_bundles"][bf.SKILL_BUNDLE].update(directory=directory)
    )
    verified = run_cli(["bundle", "verify", str(bundle)])
    assert verified.returncode == 3, verified.stdout
    assert "skill_bundles.research_tools.directory" in verified.stdout + verified.stderr
    result = run_import(empty_install, str(bundle), "--accept-risks")
    assert result.returncode == 3, result.stderr
    assert "skill_bundles.research_tools.directory" in one_error_line(result)
    assert os.listdir(empty_install) == []  # no folder "a\nb", no .config.lock


def test_skill_directory_that_is_the_skills_root_is_refused(
    tmp_path: Path, empty_install: Path
) -> None:
    """``shared/skills`` would make this bundle the parent of every later default folder."""
    bundle = bundle_with(
        tmp_path, lambda d: d["skill_bundles"][bf.SKILL_BUNDLE].update(directory="shared/skills")
    )
    result = run_import(empty_install, str(bundle), "--accept-risks")
    assert result.returncode == 3, result.stderr
    assert "skill_bundles.research_tools.directory" in one_error_line(result)
    assert os.listdir(empty_install) == []


@pytest.mark.parametrize(
    ("local", "other"),
    [
        ("shared/skills", "the skills root itself"),
        (f"shared/skills/{bf.SKILL_BUNDLE}/inner", "inside the new folder"),
    ],
)
def test_skill_folder_overlapping_an_existing_bundles_folder_is_refused(
    local: str, other: str, tmp_path: Path
) -> None:
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text(f'[skill_bundles.mine]\ndirectory = "{local}"\n')
    before = everything(install)
    bundle = bf.build_bundle(tmp_path / "bundle")
    result = run_import(install, str(bundle), "--accept-risks")
    assert result.returncode == 1, (other, result.stderr)
    line = one_error_line(result)
    assert "skill_bundles.research_tools" in line and "skill_bundles.mine" in line
    assert everything(install) == before  # no skill folder, no lock file
    dry = run_import(install, str(bundle), "--dry-run")
    assert dry.returncode == 1 and "skill_bundles.mine" in one_error_line(dry)


def test_skill_folder_used_by_a_local_workspace_is_refused(tmp_path: Path) -> None:
    install = tmp_path / "install"
    (install / "shared" / "skills" / bf.SKILL_BUNDLE).mkdir(parents=True)  # empty: "free"
    (install / "config.toml").write_text(
        '[agents.lead]\nmodel_provider = "openai.prod"\nrisk_profile = "strict"\n'
        f'workspace = {{ path = "shared/skills/{bf.SKILL_BUNDLE}" }}\n\n'
        '[providers.models.openai.prod]\nmodel = "gpt"\n\n'
        '[risk_profiles.strict]\nlevel = "readonly"\n'
    )
    before = everything(install)
    result = run_import(install, str(bundle_with(tmp_path, lambda d: None)), "--accept-risks")
    assert result.returncode == 1, result.stderr
    assert "agents.lead.workspace" in one_error_line(result)
    assert everything(install) == before


def test_export_keeps_only_a_skill_directory_verify_accepts(tmp_path: Path) -> None:
    """A folder elsewhere under shared/ names the source's layout: removed, content carried."""
    install = bf.write_install(tmp_path / "source")
    config = install / "config.toml"
    config.write_text(
        config.read_text().replace(
            f"[skill_bundles.{bf.SKILL_BUNDLE}]\n",
            f'[skill_bundles.{bf.SKILL_BUNDLE}]\ndirectory = "shared/custom/tools"\n',
        )
    )
    (install / "shared" / "custom").mkdir()
    (install / "shared" / "skills" / bf.SKILL_BUNDLE).rename(
        install / "shared" / "custom" / "tools"
    )
    out = tmp_path / "bundle"
    exported = run_cli(
        ["--install", str(install), "agents", "export", "researcher", "--out", str(out)]
    )
    assert exported.returncode == 0, exported.stderr
    fragment = tomlcompat.loads((out / "config.toml").read_text())
    assert "directory" not in fragment["skill_bundles"][bf.SKILL_BUNDLE]
    manifest = bf.read_manifest(out)
    assert any(
        row["path"] == f"skill_bundles.{bf.SKILL_BUNDLE}.directory" for row in manifest["dropped"]
    )
    assert (out / "skills" / bf.SKILL_BUNDLE / "search" / "SKILL.md").exists()
    verified = run_cli(["bundle", "verify", str(out)])
    assert verified.returncode == 0, verified.stdout + verified.stderr


# --------------------------------------------------------------------------- refusals leave nothing


def test_refused_import_leaves_no_lock_file(tmp_path: Path, empty_install: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    no_consent = run_import(empty_install, str(bundle))
    assert no_consent.returncode == 1 and "--accept-risks" in one_error_line(no_consent)
    assert os.listdir(empty_install) == []
    (empty_install / "config.toml").write_text(
        f'[skill_bundles.mine]\ndirectory = "shared/skills/{bf.SKILL_BUNDLE}"\n'
    )
    invalid = run_import(empty_install, str(bundle), "--accept-risks")
    assert invalid.returncode == 3 and "would be invalid" in one_error_line(invalid)
    assert os.listdir(empty_install) == ["config.toml"]


def _open_files(pid: int) -> set[str]:
    """What the process ``pid`` has open now: a descriptor it closes while it is looked at is
    left out, not an error."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return found


def test_lock_file_removed_by_a_refusal_is_never_shared_by_two_writers(tmp_path: Path) -> None:
    """A writer that waited on a lock file a refused import removed must not run beside the
    writer that locks the file now at that path (01 §6: the lock serialises writers)."""
    import fcntl

    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text('[risk_profiles.mine]\nlevel = "readonly"\n')
    lock = install / ".config.lock"
    first = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(first, fcntl.LOCK_EX)  # we are the refusing import that created it
    env = clean_env()
    writer = subprocess.Popen(
        [*cli_command(), "--install", str(install), "config", "set",
         "risk_profiles.mine.level", "full"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while str(lock) not in _open_files(writer.pid):
            assert writer.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.2)  # let it reach flock on the file we are about to remove
        os.unlink(lock)
        third = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(third, fcntl.LOCK_EX)  # a third writer takes the lock at the path now
        os.close(first)
        time.sleep(2.0)
        assert writer.poll() is None, "the waiting writer ran while another held the lock"
        assert b"full" not in (install / "config.toml").read_bytes()
        os.close(third)
        _, err = writer.communicate(timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0, err


# --------------------------------------------------------------------------- item 7


@pytest.mark.parametrize("name", WRONGLY_TYPED)
def test_wrongly_typed_target_config_refuses_import_with_exit_3_naming_the_file(
    name: str, tmp_path: Path
) -> None:
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text(CONFIGS[name].text)
    before = everything(install)
    bundle = bf.build_bundle(tmp_path / "bundle")
    for extra in (["--accept-risks"], ["--dry-run"], ["--accept-risks", "--json"]):
        result = run_import(install, str(bundle), "--as", "imported", *extra)
        assert result.returncode == 3, (extra, result.stderr)
        if "--json" in extra:
            error = json.loads(result.stdout)["error"]
            assert error["code"] == 3 and error["path"] == str(install / "config.toml")
            shown = result.stdout
        else:
            shown = one_error_line(result)
            assert str(install / "config.toml") in shown
            assert CONFIGS[name].path in shown
        assert CANARY not in shown and not any(secret in shown for secret in BASE_SECRETS)
        assert everything(install) == before


def test_corpus_has_the_wrongly_typed_configs_of_the_issue() -> None:
    assert set(BRIEF_CASES) <= set(WRONGLY_TYPED)


@pytest.mark.parametrize("name", BRIEF_CASES)
def test_wrongly_typed_target_config_undo_and_doctor_refuse_without_traceback(
    name: str, tmp_path: Path, empty_install: Path
) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    done = run_import(empty_install, str(bundle), "--accept-risks")
    assert done.returncode == 0, done.stderr
    receipt = next((empty_install / "data" / "state" / "imports").glob("*.toml"))
    (empty_install / "config.toml").write_text(CONFIGS[name].text)
    before = everything(empty_install)
    undo = run_import(empty_install, "--undo", str(receipt))
    assert undo.returncode in (1, 3)
    one_error_line(undo)
    doctor = run_cli(["--install", str(empty_install), "doctor"])
    assert doctor.returncode == 3 and "Traceback" not in doctor.stderr
    assert CONFIGS[name].path in doctor.stdout
    recover = run_cli(["--install", str(empty_install), "recover", "--install", str(empty_install)])
    assert recover.returncode == 0 and "Traceback" not in recover.stderr
    assert everything(empty_install) == before


def test_wrongly_typed_config_after_an_interrupted_import_recover_refuses_in_one_line(
    tmp_path: Path, empty_install: Path
) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    bundle = bf.build_bundle(tmp_path / "bundle")
    cmd = [*cli_command(), "--install", str(empty_install), "agents", "import",
           str(bundle), "--accept-risks"]  # fmt: skip
    env = clean_env()
    killed = run_with_fault(cmd, "renameat2", 1, "SIGKILL", env=env)
    assert killed.fired and killed.killed
    assert [n for n in os.listdir(empty_install) if n.startswith(".bundler-import-")]
    (empty_install / "config.toml").write_text(CONFIGS["mcp_not_a_table"].text)
    recover = run_cli(["--install", str(empty_install), "recover", "--install", str(empty_install)])
    # the config matches neither side of the journal: recovery refuses to guess, in one line
    assert recover.returncode == 1
    assert "resolve by hand" in one_error_line(recover)
    assert (empty_install / "config.toml").read_text() == CONFIGS["mcp_not_a_table"].text


# --------------------------------------------------------------------------- item 10


def test_risk_flags_shown_and_accepted_are_those_of_the_bound_local_profile(
    tmp_path: Path,
) -> None:
    def careful(data: dict[str, Any]) -> None:
        data["risk_profiles"] = {"careful": data["risk_profiles"]["guarded"]}
        data["agents"][bf.ROOT_AGENT]["risk_profile"] = "careful"

    bundle = bundle_with(tmp_path, careful)
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text('[risk_profiles.careful]\nlevel = "full"\n')
    bind = ["--bind", "risk_profiles.careful=careful"]
    dry = run_import(install, str(bundle), *bind, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    shown = {(f["kind"], f["path"]) for f in json.loads(dry.stdout)["risk_flags"]}
    assert ("full_autonomy", "risk_profiles.careful.level") in shown
    assert ("command_allowlist", "risk_profiles.careful.allowed_commands") not in shown
    assert ("process_spawn", "mcp.servers.github.command") in shown
    text = run_import(install, str(bundle), *bind, "--dry-run")
    assert "risk full_autonomy risk_profiles.careful.level" in text.stdout
    refused = run_import(install, str(bundle), *bind)
    assert refused.returncode == 1 and "risk flag" in one_error_line(refused)
    done = run_import(install, str(bundle), *bind, "--accept-risks", "--json")
    assert done.returncode == 0, done.stderr
    receipt = tomlcompat.loads(Path(json.loads(done.stdout)["receipt"]).read_text())
    accepted = {(f["kind"], f["path"]) for f in receipt["accepted_risk_flags"]}
    assert accepted == shown


@pytest.mark.parametrize(
    ("kind", "code", "said"),
    [
        ("fifo", 1, "is not a regular file"),
        ("open to others", 1, "readable by group or others; chmod 600 it"),
        ("oversize", 3, "is larger than 16"),
    ],
)
def test_a_secrets_file_that_is_not_a_private_small_file_is_refused_unread(
    tmp_path: Path, empty_install: Path, kind: str, code: int, said: str
) -> None:
    """A FIFO is refused at once, not waited on; a file others can read is refused before a
    byte of it is read; an oversize one before it is parsed. Nothing is written."""
    bundle = bf.build_bundle(tmp_path / "bundle")
    secrets = tmp_path / "secrets.toml"
    if kind == "fifo":
        os.mkfifo(secrets, 0o600)
    else:
        secrets.write_bytes(b"#\n" * ((16 << 20) // 2 + 1) if kind == "oversize" else b"")
        secrets.chmod(0o644 if kind == "open to others" else 0o600)
    done = run_cli(
        ["--install", str(empty_install), "agents", "import", str(bundle), "--accept-risks",
         "--secrets-file", str(secrets)],
        timeout=30,
    )  # fmt: skip
    assert done.returncode == code and said in one_error_line(done), done.stderr
    assert os.listdir(empty_install) == []
