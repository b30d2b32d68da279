"""No secret value in a carried name or a message, through the real CLI (02 §5.3, 01 §6, 05 §3,
06 §3 S4).

* every carried path component (folders, empty ones too, skill folders) is swept for the
  install's secret values, raw and encoded, not only file names;
* a secret holding a space (an MCP header ``Bearer sk-...``) never reaches an error message or
  ``error.path``: messages are scrubbed by exact value, not word by word;
* an environment override does not hide the key still stored in ``config.toml``: the sweep
  looks for the file's values and the overrides' values, both.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.e2e_helpers import bundler_cli, leaks_in, tree_leaks
from support.installs import copy_example
from support.kit import run_cli

from bundler.rules.names import escape_display

# every test here runs once per sweep engine
pytestmark = pytest.mark.usefixtures("each_sweep_engine")

ANTHROPIC_KEY = "sk-FAKE-anthropic-0000000000000000"  # examples/install, researcher's provider
KEY_PATH = "providers.models.anthropic.main.api_key"
BEARER = "Bearer sk-FAKE-search-999999999999"  # examples/install, the search server's header
BEARER_PATH = "mcp.servers.search.headers.Authorization"
EXAMPLE_SECRETS = [ANTHROPIC_KEY, BEARER, "ghp_FAKE888888888888888888"]
NOBODY = 65534


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def _no_leak(result: Any, secrets: list[str]) -> None:
    assert leaks_in(result.stdout, secrets) == [], result.stdout
    assert leaks_in(result.stderr, secrets) == [], result.stderr
    assert "Traceback" not in result.stderr


def _export(root: Path, alias: str, out: Path, *extra: str) -> tuple[Any, Any]:
    """Human and ``--json`` runs; the second writes ``<out>-json`` so both can publish."""
    args = ["--install", str(root), "agents", "export", alias, *extra]
    return (
        bundler_cli([*args, "--out", str(out)]),
        bundler_cli([*args, "--out", f"{out}-json", "--json"]),
    )


# --- 1. a folder named after a secret ---------------------------------------------------------

FOLDERS = {
    "empty-raw": ("researcher", "agents/researcher/workspace/" + ANTHROPIC_KEY),
    "empty-base64": ("researcher", "agents/researcher/workspace/" + _b64(ANTHROPIC_KEY)),
    "empty-base64-shifted": ("researcher", "agents/researcher/workspace/" + _b64("x" + BEARER)),
    "empty-url-encoded": (
        "researcher",
        "agents/researcher/workspace/" + urllib.parse.quote(BEARER, safe=""),
    ),
    "nested-empty": ("researcher", f"agents/researcher/workspace/a/b/{ANTHROPIC_KEY}/c/d"),
    "inside-a-skill": ("writer", f"shared/skills/writing_kit/outline/{ANTHROPIC_KEY}"),
    "skill-folder": ("writer", f"shared/skills/writing_kit/{ANTHROPIC_KEY}"),
}


@pytest.mark.parametrize("case", list(FOLDERS))
def test_folder_named_after_a_secret_refuses_export(tmp_path: Path, case: str) -> None:
    alias, rel = FOLDERS[case]
    root = copy_example(tmp_path)
    folder = root / rel
    folder.mkdir(parents=True)
    if case == "skill-folder":
        (folder / "SKILL.md").write_text("# a skill\n")
    out = tmp_path / "bundle"
    human, machine = _export(root, alias, out)
    for result in (human, machine):
        assert result.returncode == 1, result.stdout + result.stderr
        _no_leak(result, EXAMPLE_SECRETS)
    assert "withheld" in human.stderr
    assert "the name of " in human.stderr and "rename it" in human.stderr
    document = json.loads(machine.stdout)
    assert document["ok"] is False
    assert document["error"]["path"].split("/")[0] in ("workspace", "skills")
    assert not out.exists() and not Path(f"{out}-json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".zeroclaw-export-")]


def test_folder_named_after_a_secret_under_scan_warn_is_reported_by_path_never_by_value(
    tmp_path: Path,
) -> None:
    root = copy_example(tmp_path)
    (root / "agents/researcher/workspace" / ANTHROPIC_KEY).mkdir()
    human, machine = _export(root, "researcher", tmp_path / "bundle", "--scan-secrets", "warn")
    assert human.returncode == 0, human.stderr
    _no_leak(human, EXAMPLE_SECRETS)
    _no_leak(machine, EXAMPLE_SECRETS)
    hits = json.loads(machine.stdout)["secret_hits"]
    assert [hit["secret_path"] for hit in hits] == [KEY_PATH]
    assert hits[0]["file"] == "workspace/<name withheld: it holds a secret>"


def test_ordinary_empty_folder_still_travels(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    (root / "agents/researcher/workspace/empty-but-kept").mkdir()
    human, _machine = _export(root, "researcher", tmp_path / "bundle")
    assert human.returncode == 0, human.stderr
    assert (tmp_path / "bundle/workspace/empty-but-kept").is_dir()
    assert tree_leaks(tmp_path / "bundle", EXAMPLE_SECRETS) == []


# --- 3. an override does not hide the stored key ---------------------------------------------


@pytest.mark.parametrize("override", ["", "sk-OTHER-override-value-123456789"])
def test_sweep_looks_for_the_stored_key_when_an_override_replaces_it(
    tmp_path: Path, override: str
) -> None:
    root = copy_example(tmp_path)
    notes = root / "agents/researcher/workspace/notes"
    notes.mkdir(exist_ok=True)
    (notes / "pasted.txt").write_text(f"key = {ANTHROPIC_KEY}\n")
    env = {"ZEROCLAW_providers__models__anthropic__main__api_key": override}
    args = ["--install", str(root), "agents", "export", "researcher"]
    human = bundler_cli([*args, "--out", str(tmp_path / "b1")], env=env)
    machine = bundler_cli([*args, "--out", str(tmp_path / "b2"), "--json"], env=env)
    secrets = [*EXAMPLE_SECRETS, *([override] if override else [])]
    for result in (human, machine):
        assert result.returncode == 1, result.stdout + result.stderr
        _no_leak(result, secrets)
    assert "workspace/notes/pasted.txt" in human.stderr and KEY_PATH in human.stderr
    assert not (tmp_path / "b1").exists() and not (tmp_path / "b2").exists()


def test_sweep_looks_for_the_override_value_too(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    value = "sk-OTHER-override-value-123456789"
    (root / "agents/researcher/workspace/pasted.txt").write_text(_b64("k=" + value))
    env = {"ZEROCLAW_providers__models__anthropic__main__api_key": value}
    args = ["--install", str(root), "agents", "export", "researcher", "--out"]
    done = bundler_cli([*args, str(tmp_path / "b")], env=env)
    assert done.returncode == 1, done.stderr
    _no_leak(done, [*EXAMPLE_SECRETS, value])
    assert KEY_PATH in done.stderr


# --- 2. a secret holding a space in an error --------------------------------------------------


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder user 65534 can traverse (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="bundler-leaks-"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _as_nobody(args: list[str]) -> Any:
    """``bundler ARGS`` run by user 65534, so that a mode 000 entry cannot be read."""
    return run_cli(args, env={"SOURCE_DATE_EPOCH": "1700000000"}, cwd="/", as_nobody=True)


def _hand_to_nobody(base: Path) -> None:
    for folder, dirs, files in os.walk(base):
        for entry in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.chown(entry, NOBODY, NOBODY, follow_symlinks=False)


UNREADABLE = {
    "file-with-space": ("researcher", f"agents/researcher/workspace/{BEARER}", "file"),
    "folder-with-space": ("researcher", f"agents/researcher/workspace/{BEARER}", "dir"),
    "nested-folder": ("researcher", f"agents/researcher/workspace/x/{BEARER}/y", "dir"),
    "base64-name": ("researcher", f"agents/researcher/workspace/{_b64('ab' + BEARER)}", "file"),
    "json-escaped": ("researcher", "agents/researcher/workspace/" + json.dumps(BEARER), "file"),
    "in-a-skill": ("writer", f"shared/skills/writing_kit/outline/{BEARER}", "dir"),
}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop privileges to uid 65534")
@pytest.mark.parametrize("case", list(UNREADABLE))
@pytest.mark.parametrize("scan", ["refuse", "off"])
def test_secret_holding_a_space_never_appears_in_an_error(
    shared_tmp: Path, case: str, scan: str
) -> None:
    alias, rel, kind = UNREADABLE[case]
    root = copy_example(shared_tmp)
    entry = root / rel
    entry.parent.mkdir(parents=True, exist_ok=True)
    if kind == "dir":
        entry.mkdir()
        (entry / "inside.txt").write_text("harmless\n")
    else:
        entry.write_text("harmless\n")
    outdir = shared_tmp / "out"
    outdir.mkdir()
    _hand_to_nobody(shared_tmp)
    os.chmod(entry, 0)
    base = ["--install", str(root), "agents", "export", alias, "--scan-secrets", scan]
    human = _as_nobody([*base, "--out", str(outdir / "b1")])
    machine = _as_nobody([*base, "--out", str(outdir / "b2"), "--json"])
    for result in (human, machine):
        assert result.returncode == 1, result.stdout + result.stderr
        _no_leak(result, EXAMPLE_SECRETS)
    # refuse may stop at the folder's name before it tries to read what is inside
    expected = ("error: cannot read ",) if scan == "off" else ("error: cannot read ", "error: ")
    assert human.stderr.startswith(expected) and human.stderr.count("\n") == 1, human.stderr
    assert "withheld" in human.stderr
    error = json.loads(machine.stdout)["error"]
    assert leaks_in(error["message"] + error["path"], EXAMPLE_SECRETS) == []
    assert error["path"].startswith(("workspace/", "skills/"))
    assert list(outdir.iterdir()) == []


# --- verify: the name rules it can apply hold for folders as for files ------------------------


def test_verify_applies_the_name_rules_to_empty_folders_as_to_files(tmp_path: Path) -> None:
    """03 §1: verify cannot know the exporting install's secrets (a bundle carries none of
    their values), so the rule it can apply to a name is the portable-name rule, and it applies
    it to every folder, empty ones included, exactly as to files."""
    root = copy_example(tmp_path)
    bundle = tmp_path / "bundle"
    human, _machine = _export(root, "researcher", bundle)
    assert human.returncode == 0, human.stderr
    (bundle / "workspace" / "con").mkdir()
    (bundle / "skills" / "research_tools" / "aux").mkdir()
    (bundle / "skills" / "research_tools" / "citations" / "nul").mkdir()
    verified = bundler_cli(["bundle", "verify", str(bundle), "--json"])
    assert verified.returncode == 3, verified.stdout + verified.stderr
    document = json.loads(verified.stdout)
    errors = {problem["path"] for problem in document["errors"]}
    warnings = {problem["path"] for problem in document["warnings"]}
    assert "skills/research_tools/aux" in errors
    assert {"workspace/con", "skills/research_tools/citations/nul"} <= warnings


@pytest.mark.parametrize("where", ["file", "folder"])
def test_verify_never_prints_a_smuggled_secret_through_a_name(tmp_path: Path, where: str) -> None:
    """The one secret value verify can know is one a bundle smuggles into its own config.toml
    (refused: every x-secret value must be ""): verify withholds it from every path it lists,
    folders included, like export does, and import's refusal quotes none of it either."""
    root = copy_example(tmp_path)
    bundle = tmp_path / "bundle"
    human, _machine = _export(root, "researcher", bundle)
    assert human.returncode == 0, human.stderr
    config = bundle / "config.toml"
    text = config.read_text(encoding="utf-8")
    assert 'Authorization = ""' in text
    config.write_text(text.replace('Authorization = ""', f"Authorization = {json.dumps(BEARER)}"))
    entry = bundle / "workspace" / f"{BEARER}.txt"
    if where == "folder":
        (bundle / "workspace" / BEARER).mkdir()
        entry = bundle / "workspace" / BEARER / "x.txt"
    entry.write_text("not in the checksums\n")
    runs = [
        bundler_cli(["bundle", "verify", str(bundle)]),
        bundler_cli(["bundle", "verify", str(bundle), "--json"]),
        bundler_cli(["bundle", "inspect", str(bundle), "--json"]),
        bundler_cli(
            [
                "--install",
                str(tmp_path / "target"),
                "agents",
                "import",
                str(bundle),
                "--accept-risks",
                "--json",
            ]
        ),  # fmt: skip
    ]
    for result in runs:
        assert result.returncode == 3, result.stdout + result.stderr
        _no_leak(result, [BEARER])
    assert "withheld" in runs[0].stderr and "Authorization" in runs[0].stderr


# --- 4. a secret holding a control or bidi character, in a name shown escaped -----------------

CONTROL_SECRETS = {
    "tab": "sk-LEAK\tCANARY-c7-12345678",
    "newline": "sk-LEAK\nCANARY-c7-12345678",
    "escape": "sk-LEAK\x1bCANARY-c7-12345678",
    "bidi": "sk-LEAK\u202eCANARY-c7-12345678",
}


@pytest.mark.parametrize("scan", ["refuse", "warn"])
@pytest.mark.parametrize("case", list(CONTROL_SECRETS))
def test_a_secret_in_a_name_is_withheld_in_its_display_escaped_spelling_too(
    tmp_path: Path, case: str, scan: str
) -> None:
    """Names are escaped for display (``\\x09``, ``\\u202e``) where they are listed, before the
    report, warnings and errors are withheld: a secret holding such a character, in the name
    of a skipped link or FIFO or of a carried file, must not pass in that spelling."""
    secret = CONTROL_SECRETS[case]
    root = copy_example(tmp_path)
    config = root / "config.toml"
    text = config.read_text()
    assert json.dumps(ANTHROPIC_KEY) in text
    config.write_text(text.replace(json.dumps(ANTHROPIC_KEY), json.dumps(secret)))
    workspace = root / "agents" / "researcher" / "workspace"
    os.symlink("/etc/hostname", workspace / f"link-{secret}")
    os.mkfifo(workspace / f"fifo-{secret}")
    (workspace / f"file-{secret}").write_text("nothing secret inside\n")
    human, as_json = _export(root, "researcher", tmp_path / "out", "--scan-secrets", scan)
    spellings = [secret, escape_display(secret), json.dumps(secret)[1:-1], "CANARY"]
    for result in (human, as_json):
        shown = result.stdout + result.stderr
        # a name with a control character is skipped (not portable), one with a bidi control
        # travels and is refused under "refuse": either way its listing is what is checked
        assert result.returncode in (0, 1) and "Traceback" not in shown, shown
        assert [s for s in spellings if s in shown] == [], shown
        assert "withheld" in shown, shown
