"""A bad exclusion pattern is one ``error:`` line wherever it is read, never a traceback.

The patterns are :data:`hostile_patterns.BAD_PATTERNS`. ``[z-a]`` passed pathspec's own check
and failed in :mod:`re` (``re.error``, which nothing caught): ``agents export`` ended in a
traceback for ``--exclude``, ``--exclude-from`` and a workspace's ``.bundlerignore`` alike, and
a bundle carrying such a ``.bundlerignore`` verified and imported without a word, so the
receiver's next export of the agent crashed. Now the export refuses, naming the pattern and its
file (exit 2 for an option, 3 for a file); ``bundle verify`` warns about a carried one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.export_kit import bundler, export_cmd, hidden_leftovers, make_install, run, workspace
from support.hostile_patterns import BAD_PATTERNS
from support.kit import one_error


@pytest.fixture
def install(tmp_path: Path) -> Path:
    return make_install(tmp_path / "install", files=2)


def _refused(done_stderr: str, pattern: str) -> None:
    assert one_error(done_stderr), done_stderr
    assert "Traceback" not in done_stderr
    assert repr(pattern) in done_stderr and "not a valid gitignore pattern" in done_stderr


@pytest.mark.parametrize("name", sorted(BAD_PATTERNS))
def test_a_bad_exclude_option_is_a_usage_error_naming_it(
    name: str, install: Path, tmp_path: Path
) -> None:
    pattern = BAD_PATTERNS[name]
    out = tmp_path / "bundle"
    done = run(export_cmd(install, out, "--exclude", pattern))
    assert done.returncode == 2, done.stderr
    _refused(done.stderr, pattern)
    assert "--exclude" in done.stderr
    assert not out.exists() and hidden_leftovers(tmp_path) == []


@pytest.mark.parametrize("name", sorted(BAD_PATTERNS))
def test_a_bad_line_of_an_exclude_from_file_is_invalid_input_naming_file_and_line(
    name: str, install: Path, tmp_path: Path
) -> None:
    pattern = BAD_PATTERNS[name]
    patterns = tmp_path / "patterns.txt"
    patterns.write_text(f"# keep these private\n*.log\n{pattern}\n")
    out = tmp_path / "bundle"
    done = run(export_cmd(install, out, "--exclude-from", str(patterns)))
    assert done.returncode == 3, done.stderr
    _refused(done.stderr, pattern)
    assert f"{patterns} line 3" in done.stderr
    assert not out.exists() and hidden_leftovers(tmp_path) == []


@pytest.mark.parametrize("name", sorted(BAD_PATTERNS))
def test_a_bad_line_of_the_workspace_bundlerignore_is_invalid_input_naming_it(
    name: str, install: Path, tmp_path: Path
) -> None:
    pattern = BAD_PATTERNS[name]
    (workspace(install) / ".bundlerignore").write_text(f"{pattern}\n")
    out = tmp_path / "bundle"
    done = run(export_cmd(install, out))
    assert done.returncode == 3, done.stderr
    _refused(done.stderr, pattern)
    assert ".bundlerignore line 1" in done.stderr
    assert not out.exists() and hidden_leftovers(tmp_path) == []


def test_a_pattern_re_only_warns_about_prints_no_python_warning(
    install: Path, tmp_path: Path
) -> None:
    """``[[a]`` is a valid pattern whose regular expression ``re`` compiles with a
    FutureWarning printed on stderr: noise the user can do nothing about."""
    done = run(export_cmd(install, tmp_path / "bundle", "--exclude", "[[a]"))
    assert done.returncode == 0, done.stderr
    assert "FutureWarning" not in done.stderr


def _carrying(install: Path, tmp_path: Path, ignore: str) -> Path:
    """A bundle of ``install`` whose workspace carries ``ignore`` as its ``.bundlerignore``,
    sealed as an exporter that did not check it would (the export now refuses one)."""
    bundle = tmp_path / "bundle"
    done = run(export_cmd(install, bundle))
    assert done.returncode == 0, done.stderr
    (bundle / "workspace" / ".bundlerignore").write_text(ignore)
    bf.reseal(bundle)
    return bundle


def test_verify_warns_about_a_carried_bundlerignore_that_does_not_compile(
    install: Path, tmp_path: Path
) -> None:
    bad = sorted(BAD_PATTERNS.values())
    bundle = _carrying(install, tmp_path, "".join(f"{pattern}\n" for pattern in ["*.log", *bad]))
    done = bundler("bundle", "verify", str(bundle), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    warnings = [
        w for w in json.loads(done.stdout)["warnings"] if w["path"] == "workspace/.bundlerignore"
    ]
    # every bad line, by its number; the good first line is not one of them
    assert [w["message"].split(":")[0] for w in warnings] == [
        f"line {n}" for n in range(2, len(bad) + 2)
    ]
    assert all("an export of this agent" in w["message"] for w in warnings)
    human = bundler("bundle", "verify", str(bundle))
    assert human.returncode == 0 and "Traceback" not in human.stderr
    assert "warning: workspace/.bundlerignore: line 2:" in human.stdout + human.stderr


def test_verify_says_nothing_of_a_carried_bundlerignore_that_compiles(
    install: Path, tmp_path: Path
) -> None:
    bundle = _carrying(install, tmp_path, "*.log\n!keep.log\n[a-z]*.tmp\n")
    done = bundler("bundle", "verify", str(bundle), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ".bundlerignore" not in done.stdout


def test_after_importing_such_a_bundle_the_next_export_is_one_error_line(
    install: Path, tmp_path: Path
) -> None:
    bundle = _carrying(install, tmp_path, "[z-a]\n")
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.toml").write_text("")
    secrets = (
        "providers.models.anthropic.main.api_key",
        "providers.models.openai.backup.api_key",
        "mcp.servers.github.env.GITHUB_TOKEN",
    )
    imported = bundler(
        "--install",
        str(target),
        "agents",
        "import",
        str(bundle),
        "--accept-risks",
        *(arg for path in secrets for arg in ("--secret", f"{path}=fake-value-for-the-test")),
    )
    assert imported.returncode == 0, imported.stderr
    again = run(export_cmd(target, tmp_path / "again"))
    assert again.returncode == 3, again.stderr
    _refused(again.stderr, "[z-a]")
    assert ".bundlerignore line 1" in again.stderr
