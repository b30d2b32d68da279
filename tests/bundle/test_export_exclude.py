"""``agents export --exclude/--exclude-from`` and ``.bundlerignore``, and the
refuse-mode sweep that reports every hit of the run before it refuses. All through the real CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.export_kit import (
    API_KEY,
    GITHUB_TOKEN,
    OPENAI_KEY,
    SECRETS,
    bundler,
    check_bundle,
    export_cmd,
    hidden_leftovers,
    make_install,
    run,
    secret_forms,
    workspace,
)
from support.kit import one_error

from bundler.rules.exclusions import MAX_PATTERN_FILE_BYTES

# every workspace file the pattern tests look at (beside what make_install writes)
TREE = (
    "top.md",
    "notes/top.md",
    "a.log",
    "notes/b.log",
    "keep.log",
    "cache/x.bin",
    "cache/deep/y.bin",
    "notes/cache",
    "notes/draft.md",
    "notes/a/b/draft.md",
    "f1.tmp",
    "f10.tmp",
    "a.txt",
    "b.txt",
    "c.txt",
)


@pytest.fixture
def install(tmp_path: Path) -> Path:
    root = make_install(tmp_path / "install", files=2)
    ws = workspace(root)
    for rel in TREE:
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(f"{rel}\n")
    return root


def _export(install: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run(export_cmd(install, out, *extra))


def _carried(bundle: Path) -> set[str]:
    ws = bundle / "workspace"
    return {str(p.relative_to(ws)) for p in ws.rglob("*") if p.is_file()}


def _dropped(bundle: Path) -> list[dict[str, str]]:
    rows = check_bundle(bundle)["dropped"]
    assert isinstance(rows, list)
    return rows


def _excluded_rows(bundle: Path) -> dict[str, str]:
    return {
        row["path"]: row["detail"]
        for row in _dropped(bundle)
        if row["reason"] == "private_data" and "excluded by" in row["detail"]
    }


# one case per gitignore form: (patterns, paths excluded, paths that must still travel)
FORMS: dict[str, tuple[list[str], set[str], set[str]]] = {
    "star": (["*.log"], {"a.log", "notes/b.log", "keep.log"}, {"top.md"}),
    "negation": (["*.log", "!keep.log"], {"a.log", "notes/b.log"}, {"keep.log"}),
    "folder-only": (["cache/"], {"cache"}, {"notes/cache"}),
    "anchored": (["/top.md"], {"top.md"}, {"notes/top.md"}),
    "double-star": (["notes/**/draft.md"], {"notes/draft.md", "notes/a/b/draft.md"}, {"top.md"}),
    "question-mark": (["f?.tmp"], {"f1.tmp"}, {"f10.tmp"}),
    "character-class": (["[ab].txt"], {"a.txt", "b.txt"}, {"c.txt"}),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_each_gitignore_pattern_form_excludes_exactly_what_git_would(
    install: Path, tmp_path: Path, form: str
) -> None:
    patterns, excluded, kept = FORMS[form]
    out = tmp_path / "bundle"
    args = [arg for pattern in patterns for arg in ("--exclude", pattern)]
    done = _export(install, out, *args, "--json")
    assert done.returncode == 0, done.stderr
    carried = _carried(out)
    for rel in kept:
        assert rel in carried, (form, rel)
    for rel in excluded:
        assert not any(path == rel or path.startswith(rel + "/") for path in carried), rel
    rows = _excluded_rows(out)
    assert set(rows) == {f"workspace/{rel}" for rel in excluded}
    payload = json.loads(done.stdout)
    assert {row["path"] for row in payload["dropped"]} >= set(rows)


def test_an_excluded_folder_is_one_dropped_row_naming_the_pattern(
    install: Path, tmp_path: Path
) -> None:
    out = tmp_path / "bundle"
    done = _export(install, out, "--exclude", "cache/")
    assert done.returncode == 0, done.stderr
    rows = _excluded_rows(out)
    assert list(rows) == ["workspace/cache"]
    assert "'cache/'" in rows["workspace/cache"] and "--exclude" in rows["workspace/cache"]
    assert "workspace/cache (private_data)" in done.stdout


def test_exclude_from_reads_a_pattern_file_with_comments_and_blank_lines(
    install: Path, tmp_path: Path
) -> None:
    patterns = tmp_path / "exclusions.txt"
    patterns.write_text("# scratch files\n\n*.log\n   \n!keep.log\n\\#literal\n")
    (workspace(install) / "#literal").write_text("a file named with a hash\n")
    out = tmp_path / "bundle"
    done = _export(install, out, "--exclude-from", str(patterns))
    assert done.returncode == 0, done.stderr
    rows = _excluded_rows(out)
    assert set(rows) == {"workspace/a.log", "workspace/notes/b.log", "workspace/#literal"}
    assert f"{patterns} line 3" in rows["workspace/a.log"]
    assert "keep.log" in _carried(out)


def test_command_line_patterns_come_after_the_files_so_they_win(
    install: Path, tmp_path: Path
) -> None:
    (workspace(install) / ".bundlerignore").write_text("*.log\n")
    patterns = tmp_path / "more.txt"
    patterns.write_text("*.txt\n")
    out = tmp_path / "bundle"
    done = _export(
        install,
        out,
        "--exclude-from",
        str(patterns),
        "--exclude",
        "!keep.log",
        "--exclude",
        "!c.txt",
    )
    assert done.returncode == 0, done.stderr
    carried = _carried(out)
    assert {"keep.log", "c.txt"} <= carried
    assert not {"a.log", "a.txt"} & carried


def test_bundlerignore_at_the_workspace_root_is_read_by_default_and_travels(
    install: Path, tmp_path: Path
) -> None:
    (workspace(install) / ".bundlerignore").write_text("# kept private\ncache/\n")
    # only the root's is read: a nested one is an ordinary file (no per-folder files as in git)
    (workspace(install) / "notes" / ".bundlerignore").write_text("*.md\n")
    out = tmp_path / "bundle"
    done = _export(install, out)
    assert done.returncode == 0, done.stderr
    assert list(_excluded_rows(out)) == ["workspace/cache"]
    assert ".bundlerignore line 2" in _excluded_rows(out)["workspace/cache"]
    # it travels, so the receiver's next export of the agent keeps the same things private
    assert {".bundlerignore", "notes/.bundlerignore", "notes/top.md"} <= _carried(out)


def test_a_bundlerignore_that_excludes_itself_stays_behind(install: Path, tmp_path: Path) -> None:
    (workspace(install) / ".bundlerignore").write_text("cache/\n/.bundlerignore\n")
    out = tmp_path / "bundle"
    assert _export(install, out).returncode == 0
    assert ".bundlerignore" not in _carried(out)
    assert set(_excluded_rows(out)) == {"workspace/cache", "workspace/.bundlerignore"}


def test_patterns_apply_to_the_workspace_only_not_to_skills(install: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    done = _export(install, out, "--exclude", "*.sh", "--exclude", "SKILL.md")
    assert done.returncode == 0, done.stderr
    assert (out / "skills" / "research_tools" / "search" / "scripts" / "run.sh").is_file()
    assert (out / "skills" / "research_tools" / "search" / "SKILL.md").is_file()


def test_a_bundle_with_excluded_rows_verifies_and_imports(install: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    assert _export(install, out, "--exclude", "cache/", "--exclude", "*.log").returncode == 0
    verified = bundler("bundle", "verify", str(out), "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    inspected = bundler("bundle", "inspect", str(out), "--json")
    assert inspected.returncode == 0, inspected.stderr
    assert "workspace/cache" in inspected.stdout
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.toml").write_text("")
    imported = bundler(
        "--install",
        str(target),
        "agents",
        "import",
        str(out),
        "--accept-risks",
        *(
            arg
            for path in (
                "providers.models.anthropic.main.api_key",
                "providers.models.openai.backup.api_key",
                "mcp.servers.github.env.GITHUB_TOKEN",
            )
            for arg in ("--secret", f"{path}=fake-value-for-the-test")
        ),
        "--json",
    )
    assert imported.returncode == 0, imported.stdout + imported.stderr
    carried = target / "agents" / "researcher" / "workspace"
    assert (carried / "top.md").is_file() and not (carried / "cache").exists()


# --- the sweep and exclusions ----------------------------------------------------------------


def test_a_secret_in_an_excluded_file_does_not_refuse_the_export(
    install: Path, tmp_path: Path
) -> None:
    ws = workspace(install)
    (ws / "private").mkdir()
    (ws / "private" / "keys.env").write_text(f"ANTHROPIC={API_KEY}\n")
    (ws / "session.log").write_text(f"Authorization: {OPENAI_KEY}\n")
    out = tmp_path / "bundle"
    refused = _export(install, out)
    assert refused.returncode == 1 and not out.exists()
    done = _export(install, out, "--exclude", "private/", "--exclude", "*.log", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["secret_hits"] == []
    for form in (f for secret in SECRETS for f in secret_forms(secret)):
        for path in out.rglob("*"):
            if path.is_file():
                assert form not in path.read_bytes(), path


def test_a_secret_in_an_excluded_file_name_stays_out_of_the_manifest(
    install: Path, tmp_path: Path
) -> None:
    (workspace(install) / f"{API_KEY}.txt").write_text("harmless\n")
    out = tmp_path / "bundle"
    done = _export(install, out, "--exclude", "sk-*.txt")
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = (out / "zeroclaw-agent.toml").read_bytes()
    assert API_KEY.encode() not in manifest and b"name withheld" in manifest
    assert API_KEY not in done.stdout + done.stderr


def test_refuse_reports_every_hit_of_the_run_then_refuses(install: Path, tmp_path: Path) -> None:
    ws = workspace(install)
    (ws / "one.txt").write_text(f"key {API_KEY}\n")
    (ws / "notes" / "two.txt").write_text(f"key {OPENAI_KEY}\n")
    (ws / "cache" / "three.txt").write_text(f"token {GITHUB_TOKEN}\n")
    out = tmp_path / "bundle"
    human = _export(install, out)
    assert human.returncode == 1
    assert human.stderr.startswith("error: ") and human.stderr.count("error:") == 1
    assert "3 " in human.stderr.splitlines()[0]
    for rel, secret_path in (
        ("workspace/one.txt", "providers.models.anthropic.main.api_key"),
        ("workspace/notes/two.txt", "providers.models.openai.backup.api_key"),
        ("workspace/cache/three.txt", "mcp.servers.github.env.GITHUB_TOKEN"),
    ):
        assert any(rel in line and secret_path in line for line in human.stderr.splitlines()), (
            rel,
            human.stderr,
        )
    machine = _export(install, out, "--json")
    assert machine.returncode == 1
    error = json.loads(machine.stdout)["error"]
    assert error["code"] == 1
    assert {(hit["file"], hit["secret_path"]) for hit in error["secret_hits"]} == {
        ("workspace/one.txt", "providers.models.anthropic.main.api_key"),
        ("workspace/notes/two.txt", "providers.models.openai.backup.api_key"),
        ("workspace/cache/three.txt", "mcp.servers.github.env.GITHUB_TOKEN"),
    }
    for done in (human, machine):
        for form in (f for secret in SECRETS for f in secret_forms(secret)):
            assert form.decode() not in done.stdout + done.stderr
    assert not out.exists()
    assert hidden_leftovers(tmp_path) == []


def test_refuse_names_a_secret_in_a_file_name_among_the_hits(install: Path, tmp_path: Path) -> None:
    ws = workspace(install)
    (ws / f"{API_KEY}.txt").write_text("harmless\n")
    (ws / "two.txt").write_text(f"key {OPENAI_KEY}\n")
    done = _export(install, tmp_path / "bundle")
    assert done.returncode == 1
    assert "the name of workspace/<name withheld" in done.stderr and "rename it" in done.stderr
    assert "workspace/two.txt contains" in done.stderr
    assert API_KEY not in done.stderr


# --- errors in patterns ----------------------------------------------------------------------


def test_a_bad_pattern_file_is_one_error_line_naming_the_file_and_line(
    install: Path, tmp_path: Path
) -> None:
    patterns = tmp_path / "bad-patterns.txt"
    patterns.write_text("*.log\n!\n")
    out = tmp_path / "bundle"
    done = _export(install, out, "--exclude-from", str(patterns))
    assert done.returncode == 3, done.stderr
    assert one_error(done.stderr), done.stderr
    assert f"{patterns} line 2" in done.stderr
    assert not out.exists() and hidden_leftovers(tmp_path) == []


def test_a_missing_pattern_file_is_one_error_line_naming_it(install: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    done = _export(install, tmp_path / "bundle", "--exclude-from", str(missing))
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert str(missing) in done.stderr


def test_a_bad_bundlerignore_is_one_error_line_naming_it(install: Path, tmp_path: Path) -> None:
    (workspace(install) / ".bundlerignore").write_text("ok.txt\nbad\\\n")
    done = _export(install, tmp_path / "bundle")
    assert done.returncode == 3 and one_error(done.stderr), done.stderr
    assert ".bundlerignore line 2" in done.stderr


def test_a_symlinked_bundlerignore_refuses_instead_of_being_ignored(
    install: Path, tmp_path: Path
) -> None:
    patterns = tmp_path / "elsewhere.txt"
    patterns.write_text("cache/\n")
    (workspace(install) / ".bundlerignore").symlink_to(patterns)
    out = tmp_path / "bundle"
    done = _export(install, out)
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert ".bundlerignore is a symbolic link" in done.stderr
    assert not out.exists() and hidden_leftovers(tmp_path) == []


def test_a_bad_exclude_option_is_a_usage_error(install: Path, tmp_path: Path) -> None:
    done = _export(install, tmp_path / "bundle", "--exclude", "!")
    assert done.returncode == 2 and one_error(done.stderr), done.stderr
    assert "--exclude" in done.stderr


def test_export_help_documents_the_exclusion_options() -> None:
    done = bundler("agents", "export", "--help")
    assert done.returncode == 0
    for word in ("--exclude PATTERN", "--exclude-from FILE", ".bundlerignore"):
        assert word in done.stdout, word
    assert "--exclude" in done.stdout.split("examples:")[1]


def test_a_pattern_of_any_length_works_on_the_command_line_and_in_bundlerignore(
    install: Path, tmp_path: Path
) -> None:
    """With Hyperscan installed, pathspec compiled patterns with it, which refuses a long one
    ("Pattern length exceeds limit"): a traceback, from an --exclude or a workspace's own
    .bundlerignore. The patterns are compiled with pathspec's own regular expressions."""
    long = "A" * 20_000  # Hyperscan's limit is about 16,000
    (workspace(install) / ".bundlerignore").write_text(f"{long}\ncache/\n")
    out = tmp_path / "bundle"
    done = _export(install, out, "--exclude", f"{long}/*")
    assert done.returncode == 0, done.stderr
    assert list(_excluded_rows(out)) == ["workspace/cache"]


@pytest.mark.parametrize("kind", ["fifo", "oversize"])
def test_a_bundlerignore_that_is_not_a_small_file_refuses_at_once(
    install: Path, tmp_path: Path, kind: str
) -> None:
    """A FIFO must not make the export wait for a writer; an oversize file is not a list of
    patterns. Either refuses, naming the file, before anything is written."""
    ignore = workspace(install) / ".bundlerignore"
    if kind == "fifo":
        os.mkfifo(ignore)
    else:
        ignore.write_bytes(b"# padding\n" * (MAX_PATTERN_FILE_BYTES // 10 + 1))
    out = tmp_path / "bundle"
    done = _export(install, out)
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert ".bundlerignore is " in done.stderr
    assert not out.exists() and hidden_leftovers(tmp_path) == []
