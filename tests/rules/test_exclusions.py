"""The exclusion rule means what git means: each pattern set is checked
against the real ``git check-ignore`` on the same tree, path by path, with the walk's rule that
nothing below an excluded folder is looked at (git's own rule for re-including)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bundler.errors import InvalidInput, UsageError
from bundler.rules.exclusions import Exclusions, parse_lines, parse_options

FILES = (
    "top.md",
    "notes/top.md",
    "a.log",
    "keep.log",
    "notes/keep.log",
    "cache/x.bin",
    "cache/keep.log",
    "notes/cache",
    "notes/draft.md",
    "notes/a/b/draft.md",
    "f1.tmp",
    "f10.tmp",
    "a.txt",
    "b.txt",
    "c.txt",
    "#hash",
    " lead",
    "deep/a/b/c/d.md",
)

PATTERN_SETS = {
    "star": ["*.log"],
    "negation": ["*.log", "!keep.log"],
    "negation-anchored": ["*.log", "!/keep.log"],
    "reinclude-inside-excluded-folder": ["cache/", "!cache/keep.log"],
    "folder-only": ["cache/"],
    "no-slash-matches-file-and-folder": ["cache"],
    "anchored": ["/top.md"],
    "middle-slash-anchors": ["notes/top.md"],
    "double-star-middle": ["notes/**/draft.md"],
    "double-star-leading": ["**/draft.md"],
    "double-star-trailing": ["deep/**"],
    "question-mark": ["f?.tmp"],
    "character-class": ["[ab].txt"],
    "negated-class": ["[!ab].txt"],
    "range": ["[a-b].*"],
    "escaped-hash": ["\\#hash"],
    "escaped-space": ["\\ lead"],
    "comments-and-blanks": ["# a comment", "", "*.md"],
    "last-match-wins": ["!a.log", "*.log"],
}


def _git_ignored(root: Path, patterns: list[str]) -> set[str]:
    (root / ".gitignore").write_text("\n".join(patterns) + "\n")
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=root,
        input="\n".join(FILES) + "\n",
        capture_output=True,
        text=True,
    )
    assert done.returncode in (0, 1), done.stderr
    return set(done.stdout.splitlines())


def _ours(patterns: list[str]) -> set[str]:
    rules = Exclusions(parse_lines(patterns, "test"))
    excluded = set()
    for path in FILES:
        parts = path.split("/")
        folders = ["/".join(parts[: i + 1]) for i in range(len(parts) - 1)]
        if any(rules.match(folder, is_dir=True) for folder in folders) or rules.match(
            path, is_dir=False
        ):
            excluded.add(path)
    return excluded


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("name", list(PATTERN_SETS))
def test_patterns_exclude_exactly_what_git_ignores(tmp_path: Path, name: str) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for rel in FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    patterns = PATTERN_SETS[name]
    expected = _git_ignored(tmp_path, patterns)
    assert expected, "every case excludes something"
    assert _ours(patterns) == expected


def test_a_match_names_its_pattern_and_line() -> None:
    rules = Exclusions(parse_lines(["# c", "*.log", "cache/"], "patterns.txt"))
    found = rules.match("cache", is_dir=True)
    assert found is not None and found.text == "cache/" and found.origin == "patterns.txt line 3"
    assert rules.match("cache", is_dir=False) is None


@pytest.mark.parametrize("bad", ["!", "trailing\\"])
def test_an_invalid_pattern_names_its_file_and_line(bad: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_lines(["ok", bad], "patterns.txt", shown="/home/u/patterns.txt")
    assert "/home/u/patterns.txt line 2" in raised.value.message
    with pytest.raises(UsageError) as usage:
        parse_options([bad])
    assert "--exclude" in usage.value.message
