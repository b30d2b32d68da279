"""Output that reads well: no spec section numbers or system-call names in
human output (``--json`` keeps its machine fields), one size style (IEC units for people, exact
bytes in JSON), prose folded to a terminal's width with commands and paths never cut, and every
error about a file naming that file."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.hostile_zips import make_project
from support.installs import copy_example
from support.kit import clean_env, one_error, run_cli

from bundler.rules.units import human_size

# what a user should never have to read: the spec's section numbers and the kernel's vocabulary
SECTION = re.compile(r"§|\b\d\d §")
SYSCALLS = re.compile(
    r"\b(renameat2?|RENAME_EXCHANGE|RENAME_NOREPLACE|fsync|fdatasync|syncfs|O_NOFOLLOW|"
    r"O_DIRECTORY|O_TMPFILE|copy_file_range|flock|F_GETLK|F_SETLK|fcntl|EXDEV|ENOSYS|"
    r"openat|unlinkat|linkat|mkdirat|FICLONE|ioctl)\b"
)


def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env={"HOME": str(home)})


@pytest.fixture
def scene(tmp_path: Path) -> dict[str, Path]:
    """An install, a bundle of it, a bundle with a stray file, export leftovers, a project."""
    install = copy_example(tmp_path)
    bundle = tmp_path / "exports" / "researcher.bundle"
    bundle.parent.mkdir()
    done = cli(
        "--install", str(install), "agents", "export", "researcher", "--out", str(bundle),
        home=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    stray = tmp_path / "stray.bundle"
    shutil.copytree(bundle, stray)
    (stray / "extra.txt").write_text("not part of a bundle\n")
    leftovers = tmp_path / "leftovers"
    leftovers.mkdir()
    (leftovers / ".zeroclaw-export-Tok3nTok3nAB").mkdir()
    (leftovers / ".zeroclaw-export-Tok3nTok3nAB.target").write_bytes(b"gone.bundle\n")
    project, _ = make_project(tmp_path)
    return {
        "tmp": tmp_path,
        "install": install,
        "bundle": bundle,
        "stray": stray,
        "leftovers": leftovers,
        "project": project,
    }


def test_human_output_has_no_section_numbers_and_no_system_call_names(
    scene: dict[str, Path],
) -> None:
    tmp, install, bundle = scene["tmp"], str(scene["install"]), str(scene["bundle"])
    target = str(tmp / "target")
    project = str(scene["project"])
    backup = str(tmp / "home.zip")
    runs: list[list[str]] = [
        ["--install", install, "agents", "list"],
        ["--install", install, "agents", "export", "researcher", "--out", bundle, "--force"],
        ["--install", install, "agents", "export", "nobody", "--out", str(tmp / "x")],
        ["bundle", "verify", bundle],
        ["bundle", "verify", str(scene["stray"])],
        ["bundle", "verify", str(tmp / "missing.bundle")],
        ["bundle", "inspect", bundle],
        ["bundle", "secrets-template", bundle],
        ["--install", target, "agents", "import", bundle, "--dry-run"],
        ["--install", target, "agents", "import", bundle, "--accept-risks"],
        ["--install", target, "agents", "import", str(scene["stray"]), "--accept-risks"],
        ["--install", target, "agents", "imports"],
        ["--install", target, "agents", "import", "--undo", "last", "--dry-run"],
        ["--install", target, "config", "validate"],
        ["--install", target, "config", "get", "agents.researcher.model_provider"],
        ["--install", target, "config", "set", "agents.nope.x", "1"],
        ["recover", str(scene["leftovers"] / "gone.bundle"), "--dry-run"],
        ["recover", "--scan", str(scene["leftovers"])],
        ["recover", "--install", target],
        ["recover"],
        ["--install", install, "doctor", "--path", str(scene["leftovers"])],
        ["--install", install, "doctor", "--path", str(tmp / "nope")],
        ["--install", install, "doctor", "--project", project],
        ["home", "show", "--project", project],
        ["home", "backup", "--project", project, "--to", backup],
        ["home", "verify-backup", backup],
        ["home", "restore", backup, "--project", project],
        ["home", "verify-backup", bundle],
        ["bundle", "pack", bundle, str(tmp / "b.tar")],
        ["bundle", "pack", bundle, str(tmp / "b.tar")],
        ["bundle", "verify", str(tmp / "b.tar")],
        ["bundle", "unpack", str(tmp / "b.tar"), str(tmp / "unpacked")],
        ["agents", "nope"],
    ]
    runs += [[*words, "--help"] for words in _every_command()]
    seen = 0
    for args in runs:
        done = cli(*args, home=tmp)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        for stream in (done.stdout, done.stderr):
            assert not SECTION.search(stream), (args, SECTION.search(stream), stream)
            assert not SYSCALLS.search(stream), (args, SYSCALLS.search(stream), stream)
        seen += done.returncode == 0
    assert 0 < seen < len(runs)  # both the success and the failure paths were taken


def _every_command() -> list[list[str]]:
    from bundler.cli import HANDLERS

    return [[], *({words[:1] for words in HANDLERS}), *(list(words) for words in HANDLERS)]


def test_json_keeps_the_machine_fields_the_human_text_leaves_out(scene: dict[str, Path]) -> None:
    out = scene["tmp"] / "again.bundle"
    args = ["--install", str(scene["install"]), "agents", "export", "researcher", "--out", str(out)]
    document = json.loads(cli(*args, "--json", home=scene["tmp"]).stdout)
    assert document["publish_method"].startswith(("renameat2", "rename"))
    assert isinstance(document["bytes"], int)


def test_sizes_are_iec_units_for_people_and_exact_bytes_in_json(scene: dict[str, Path]) -> None:
    tmp, project = scene["tmp"], str(scene["project"])
    backup = tmp / "sized.zip"
    human = cli("home", "backup", "--project", project, "--to", str(backup), home=tmp)
    assert human.returncode == 0, human.stderr
    verified = cli("home", "verify-backup", str(backup), "--json", home=tmp)
    exact = json.loads(verified.stdout)["bytes"]
    assert isinstance(exact, int) and exact > 1024
    assert f"{human_size(exact)}" in human.stdout and "iB" in human.stdout
    shown = cli("home", "show", "--project", project, home=tmp).stdout
    sizes = json.loads(cli("home", "show", "--project", project, "--json", home=tmp).stdout)
    assert f"files/     {human_size(sizes['sizes']['files'])}" in shown
    exported = cli(
        "--install", str(scene["install"]), "agents", "export", "researcher",
        "--out", str(scene["bundle"]), "--force", home=tmp,
    )  # fmt: skip
    report = json.loads(cli("bundle", "verify", str(scene["bundle"]), "--json", home=tmp).stdout)
    assert human_size(report["bytes"]) in exported.stdout
    # a byte count of a KiB or more is never shown raw to a person
    for text in (human.stdout, shown, exported.stdout):
        raw = [int(n) for n in re.findall(r"\b(\d+) bytes\b", text)]
        assert all(n < 1024 for n in raw), text


def _on_a_terminal(
    args: list[str], *, columns: int, home: Path, stream: str = "stdout"
) -> tuple[str, subprocess.CompletedProcess[str]]:
    """Run the CLI with ``stream`` on a pseudo-terminal ``columns`` wide; the other is piped."""
    leader, follower = pty.openpty()
    env = clean_env({"HOME": str(home), "COLUMNS": str(columns), "LINES": "40"})
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, stream: follower}
    with subprocess.Popen(
        [sys.executable, "-m", "bundler", *args], env=env, text=True, **pipes
    ) as child:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        other = (child.stderr if stream == "stdout" else child.stdout).read()  # type: ignore[union-attr]
        child.wait(timeout=120)
    os.close(leader)
    shown = b"".join(chunks).decode().replace("\r\n", "\n")
    piped = subprocess.CompletedProcess(args, child.returncode, other, other)
    return shown, piped


def test_prose_is_folded_to_the_terminal_width_and_commands_are_never_cut(
    scene: dict[str, Path],
) -> None:
    args = [
        "--install", str(scene["install"]), "agents", "export", "researcher",
        "--out", str(scene["bundle"]), "--force", "--no-progress",
    ]  # fmt: skip
    shown, _ = _on_a_terminal(args, columns=50, home=scene["tmp"])
    piped = cli(*args, home=scene["tmp"]).stdout
    assert any(len(line) > 50 for line in piped.splitlines())  # there is something to fold
    commands = [line for line in piped.splitlines() if line.strip().startswith("bundler ")]
    assert commands and any(len(line) > 50 for line in commands)
    for line in shown.splitlines():
        if line in commands:
            continue
        # only a word longer than the terminal (a path) may overflow, alone on its line
        assert len(line) <= 50 or " " not in line.strip(), line
    assert all(command in shown.splitlines() for command in commands)
    # folding changed only where lines break: the same words in the same order
    assert shown.split() == piped.split()


def test_errors_are_folded_on_a_terminal_and_kept_whole_in_a_pipe(scene: dict[str, Path]) -> None:
    deep = scene["tmp"] / "a folder with a long name" / "and another one" / "x.bundle"
    args = ["bundle", "verify", str(deep)]
    shown, _ = _on_a_terminal(args, columns=40, home=scene["tmp"], stream="stderr")
    piped = cli(*args, home=scene["tmp"])
    assert one_error(piped.stderr) and len(piped.stderr.splitlines()[0]) > 40
    assert len(shown.splitlines()) > 1 and shown.split() == piped.stderr.split()
    assert shown.startswith("error: ")


def test_output_to_a_pipe_is_never_folded(scene: dict[str, Path]) -> None:
    args = ["--install", str(scene["install"]), "doctor", "--path", str(scene["leftovers"])]
    narrow = run_cli(args, env={"HOME": str(scene["tmp"]), "COLUMNS": "30"})
    wide = run_cli(args, env={"HOME": str(scene["tmp"]), "COLUMNS": "300"})
    assert narrow.stdout == wide.stdout and any(len(x) > 30 for x in narrow.stdout.splitlines())


def test_every_error_about_a_file_names_the_file(tmp_path: Path) -> None:
    install = copy_example(tmp_path)
    bundle = tmp_path / "b.bundle"
    assert cli(
        "--install", str(install), "agents", "export", "researcher", "--out", str(bundle),
        home=tmp_path,
    ).returncode == 0  # fmt: skip
    bad_config = copy_example(tmp_path / "bad")
    (bad_config / "config.toml").write_text("[agents\n")
    bad_bundle = tmp_path / "bad.bundle"
    shutil.copytree(bundle, bad_bundle)
    with open(bad_bundle / "zeroclaw-agent.toml", "a") as manifest:
        manifest.write("garbage = [\n")
    bad_secrets = tmp_path / "secrets.toml"
    bad_secrets.write_text("a = [\n")
    bad_secrets.chmod(0o600)
    open_secrets = tmp_path / "open-secrets.toml"
    open_secrets.write_text("")
    open_secrets.chmod(0o644)
    not_a_zip = tmp_path / "backup.zip"
    not_a_zip.write_text("not a zip\n")
    no_manifest = tmp_path / "empty.zip"
    with zipfile.ZipFile(no_manifest, "w") as archive:
        archive.writestr("files/a.txt", "a")
    a_folder = tmp_path / "folder.toml"
    a_folder.mkdir()
    config_folder = tmp_path / "folder-install"
    (config_folder / "config.toml").mkdir(parents=True)
    project, _ = make_project(tmp_path)
    target = str(tmp_path / "target")
    cases: list[tuple[list[str], Path]] = [
        (["--install", str(bad_config), "config", "validate"], bad_config / "config.toml"),
        (["--install", str(bad_config), "agents", "list"], bad_config / "config.toml"),
        (["bundle", "verify", str(bad_bundle)], bad_bundle),
        (["bundle", "inspect", str(bad_bundle)], bad_bundle),
        (["--install", target, "agents", "import", str(bad_bundle), "--dry-run"], bad_bundle),
        (
            [
                "--install",
                target,
                "agents",
                "import",
                str(bundle),
                "--secrets-file",
                str(bad_secrets),
                "--dry-run",
            ],
            bad_secrets,
        ),  # fmt: skip
        (
            [
                "--install",
                target,
                "agents",
                "import",
                str(bundle),
                "--secrets-file",
                str(open_secrets),
                "--dry-run",
            ],
            open_secrets,
        ),  # fmt: skip
        (
            [
                "--install",
                target,
                "agents",
                "import",
                str(bundle),
                "--secrets-file",
                str(a_folder),
                "--dry-run",
            ],
            a_folder,
        ),  # fmt: skip
        (["home", "verify-backup", str(not_a_zip)], not_a_zip),
        (["home", "verify-backup", str(no_manifest)], no_manifest),
        (["home", "restore", str(not_a_zip), "--project", str(project)], not_a_zip),
        (["--install", str(config_folder), "config", "validate"], config_folder / "config.toml"),
        (
            [
                "home",
                "skills",
                "save",
                "s2",
                "--description",
                "d",
                "--file",
                str(tmp_path / "missing.md"),
                "--project",
                str(project),
            ],
            tmp_path / "missing.md",
        ),  # fmt: skip
    ]
    for args, path in cases:
        done = cli(*args, home=tmp_path)
        assert done.returncode != 0, args
        first = next(x for x in done.stderr.splitlines() if x.startswith("error: "))
        assert str(path) in first, (args, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)


def test_a_fold_never_cuts_a_path_a_quoted_command_or_a_command_to_run() -> None:
    from bundler.cli.wrap import fold

    path = "/tmp/my agents/the researcher bundle"
    folded = fold(f"error: {path}: is not a bundle folder, so nothing was imported", 30)
    assert folded[0] == f"error: {path}:" and all(len(x) <= 30 for x in folded[1:])
    quoted = "'bundler recover /tmp/a b'"
    folded = fold(f"warning: an export was interrupted here; see {quoted} for it", 30)
    assert any(quoted in line for line in folded)
    command = "bundler --install /srv/x config set a.b.c"
    assert fold(f"error: a secret is missing; run: {command}", 30)[-1].endswith(command)
    assert fold(f"  {command} --and-more", 10) == [f"  {command} --and-more"]
    assert fold("a short line", None) == ["a short line"]


def test_values_tables_and_file_contents_are_never_folded(tmp_path: Path) -> None:
    long_name = "a model name long enough to be folded on a narrow terminal"
    install = copy_example(tmp_path)
    field = "providers.models.anthropic.main.model"
    set_it = cli("--install", str(install), "config", "set", field, long_name, home=tmp_path)
    assert set_it.returncode == 0, set_it.stderr
    for command in (
        ["--install", str(install), "config", "get", field],
        ["--install", str(install), "agents", "list"],
    ):
        shown, _ = _on_a_terminal(command, columns=30, home=tmp_path)
        assert shown == cli(*command, home=tmp_path).stdout
        assert any(len(line) > 30 for line in shown.splitlines())


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_output_to_a_stream_that_cannot_encode_a_character_escapes_it(
    tmp_path: Path, encoding: str
) -> None:
    """A terminal or pipe in a legacy encoding (PYTHONIOENCODING, an ISO-8859 locale): a value,
    a warning or an error holding a character it cannot encode ended in a UnicodeEncodeError
    traceback. Text now shows the character as an escape, and --json stays valid JSON."""
    install = copy_example(tmp_path)
    key = "providers.models.anthropic.main.model"
    assert run_cli(["--install", str(install), "config", "set", key, "claude-→-é"]).returncode == 0
    env = {"PYTHONIOENCODING": encoding}
    text = run_cli(["--install", str(install), "config", "get", key], env=env, errors="replace")
    assert text.returncode == 0, text.stderr
    assert "Traceback" not in text.stderr and "claude-" in text.stdout
    as_json = run_cli(
        ["--install", str(install), "--json", "config", "get", key], env=env, errors="replace"
    )
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["value"] == "claude-→-é"
    failed = run_cli(
        ["--install", str(install), "config", "get", "agents.naïve-→.enabled"],
        env=env,
        errors="replace",
    )
    assert failed.returncode != 0 and one_error(failed.stderr), failed.stderr
