"""Shell completion and the man page: both generated from the parser, each
printed by one command. The bash script is run in a real bash and asked to complete; zsh and
fish scripts are syntax-checked where those shells exist; the man page is rendered by man/groff.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support.kit import run_cli

from bundler.cli import HANDLERS


def script(shell: str) -> str:
    done = run_cli(["completion", shell])
    assert done.returncode == 0, done.stderr
    return done.stdout


def complete_in_bash(tmp_path: Path, *words: str) -> list[str]:
    """What bash's completion offers for ``words`` (the last one being completed)."""
    path = tmp_path / "bundler.bash"
    path.write_text(script("bash"))
    quoted = " ".join(f"'{word}'" for word in words)
    program = (
        f"source {path}\n"
        "complete -p bundler\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))\n"
        'COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}\n'
        "_bundler\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "complete -F _bundler bundler"
    return lines[1:]


def test_bash_completion_script_is_valid_bash(tmp_path: Path) -> None:
    path = tmp_path / "bundler.bash"
    path.write_text(script("bash"))
    checked = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_bash_completes_a_command_and_its_subcommands(tmp_path: Path) -> None:
    assert complete_in_bash(tmp_path, "bundler", "ag") == ["agents"]
    assert complete_in_bash(tmp_path, "bundler", "agents", "") == [
        "list",
        "export",
        "import",
        "imports",
    ]
    # global options and their values are skipped, wherever they are
    assert complete_in_bash(tmp_path, "bundler", "--install", "/tmp", "home", "rest") == ["restore"]


def test_bash_completes_options_choices_and_folders_from_the_parser(tmp_path: Path) -> None:
    offered = complete_in_bash(tmp_path, "bundler", "agents", "export", "--")
    assert {"--out", "--force", "--include-memory", "--scan-secrets", "--json"} <= set(offered)
    assert complete_in_bash(tmp_path, "bundler", "agents", "export", "--scan-secrets", "") == [
        "refuse",
        "warn",
        "off",
    ]
    (tmp_path / "out-folder").mkdir()
    (tmp_path / "out-file").write_text("")
    assert complete_in_bash(tmp_path, "bundler", "agents", "export", "a", "--out", "out-") == [
        "out-folder"
    ]
    assert complete_in_bash(tmp_path, "bundler", "completion", "") == ["bash", "zsh", "fish"]


def test_every_command_is_in_every_completion_script() -> None:
    words = {word for command in HANDLERS for word in command}
    for shell in ("bash", "zsh", "fish"):
        text = script(shell)
        missing = [word for word in words if word not in text]
        assert not missing, (shell, missing)


def test_a_command_added_to_the_parser_appears_with_no_list_to_keep() -> None:
    import argparse

    from bundler.cli.completion import bash_script, fish_script
    from bundler.cli.manpage import man_page
    from bundler.cli.parsertree import read_tree

    parser = argparse.ArgumentParser(prog="bundler", description="d")
    sub = parser.add_subparsers(dest="group")
    brand_new = sub.add_parser("brand-new", help="a new command", description="a new command")
    brand_new.add_argument("--shiny-option", metavar="FILE", help="shiny")
    tree = read_tree(parser)
    for text in (bash_script(tree), fish_script(tree), man_page(tree)):
        assert "brand" in text and "shiny" in text


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_parse_in_their_shell(shell: str, tmp_path: Path) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed here; the text check above still covers it")
    path = tmp_path / f"bundler.{shell}"
    path.write_text(script(shell))
    checked = subprocess.run([shell, "-n", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_unknown_shell_is_a_usage_error() -> None:
    done = run_cli(["completion", "tcsh"])
    assert done.returncode == 2 and done.stderr.startswith("error: ")


def test_man_page_is_roff_with_every_command_option_example_and_exit_code() -> None:
    done = run_cli(["man"])
    assert done.returncode == 0, done.stderr
    page = done.stdout
    assert page.startswith(".TH BUNDLER 1 ")
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "GLOBAL OPTIONS", "COMMANDS", "EXIT STATUS"):
        assert f"\n.SH {section}\n" in page
    for command in HANDLERS:
        assert f"\n.SS bundler {' '.join(command)}\n" in page.replace("\\-", "-")
    for flag in ("--scan-secrets", "--secrets-file", "--accept-risks", "--reveal", "--path"):
        assert flag.replace("-", "\\-") in page
    assert "bundler agents export researcher \\-\\-out ./researcher.bundle" in page
    for code in ("0", "1", "2", "3", "130"):
        assert f".TP\n\\fB{code}\\fR\n" in page
    # no text line starts with a dot or quote roff would take for a request
    for line in page.splitlines():
        if line.startswith((".", "'")):
            assert line.split()[0] in {
                ".TH",
                ".SH",
                ".SS",
                ".PP",
                ".TP",
                ".nf",
                ".fi",
                ".RS",
                ".RE",
            }


def test_man_renders_without_warnings(tmp_path: Path) -> None:
    if shutil.which("groff") is None:
        pytest.skip("groff is not installed; the roff structure test covers the page")
    page = tmp_path / "bundler.1"
    page.write_text(run_cli(["man"]).stdout)
    rendered = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww", "-z", str(page)], capture_output=True, text=True
    )
    assert rendered.returncode == 0 and rendered.stderr == "", rendered.stderr
    if shutil.which("man") is not None:
        shown = subprocess.run(
            ["man", "--warnings", "-l", str(page)],
            capture_output=True,
            text=True,
            env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin", "MANPAGER": "cat", "PAGER": "cat"},
        )
        assert shown.returncode == 0 and shown.stderr == "", shown.stderr
        assert "bundler agents export" in shown.stdout


def test_completion_and_man_with_json_carry_the_text() -> None:
    import json

    document = json.loads(run_cli(["completion", "bash", "--json"]).stdout)
    assert document["ok"] and "complete -F _bundler bundler" in document["script"]
    assert json.loads(run_cli(["man", "--json"]).stdout)["man"].startswith(".TH")


def test_fish_completes_a_command_and_its_subcommands(tmp_path: Path) -> None:
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed here; the text check above still covers it")
    path = tmp_path / "bundler.fish"
    path.write_text(script("fish"))

    def offered(line: str) -> list[str]:
        done = subprocess.run(
            ["fish", "--no-config", "-c", f"source {path}; complete -C '{line}'"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return [row.split("\t")[0] for row in done.stdout.splitlines()]

    assert offered("bundler ag") == ["agents"]
    assert sorted(offered("bundler agents ")) == ["export", "import", "imports", "list"]
    assert sorted(offered("bundler --install /tmp agents export --scan-secrets ")) == [
        "off",
        "refuse",
        "warn",
    ]
