"""Interactive ``agents import`` on a real terminal (03 §3.1): the warning about
``--secret`` first, then what the bundle grants and the question (``y``/``yes`` in any case),
then the secrets, typed without echo; a refusal asks for no secret and changes nothing."""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path

import pexpect  # the test extra installs it
import pytest
from support import bundlefactory as bf
from support.installs import opened_config
from support.kit import clean_env, cli_command

TYPED = "sk-TYPED-at-the-terminal-0123456789"
GIVEN = "sk-ant-GIVEN-on-the-command-line-987"


def phrase(text: str) -> str:
    """``text`` as a pattern that also matches it folded to the terminal's width (prose is)."""
    return r"\s+".join(re.escape(word) for word in text.split())


def spawn(
    install: Path, bundle: Path, *extra: str, home: Path
) -> tuple[pexpect.spawn, io.StringIO]:
    env = clean_env({"HOME": str(home), "COLUMNS": "40", "LINES": "24", "TERM": "xterm"})
    python, *start = cli_command()
    child = pexpect.spawn(
        python,
        [*start, "--install", str(install), "agents", "import", str(bundle), *extra],
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(24, 40),
    )
    seen = io.StringIO()
    child.logfile_read = seen
    return child, seen


def test_consent_comes_first_y_is_accepted_secrets_are_not_echoed(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    install = tmp_path / "target"
    child, seen = spawn(
        install,
        bundle,
        "--secret",
        f"providers.models.anthropic.main.api_key={GIVEN}",
        home=tmp_path,
    )
    child.expect(phrase("--secret values are visible to other users"))
    child.expect(phrase("After this import the agent may:"))
    child.expect(r"Import it\? \[y/N\]")
    assert "api_key (sent to" not in seen.getvalue()  # no secret was asked for yet
    child.sendline("y")
    child.expect(r"mcp\.servers\.github\.env\.GITHUB_TOKEN \(sent to ")
    child.expect("empty to skip\\): ")
    child.sendline("")
    child.expect(r"providers\.models\.openai\.backup\.api_key \(sent to https://api\.openai\.com")
    child.expect("empty to skip\\): ")
    child.sendline(TYPED)
    child.expect("receipt: ")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, seen.getvalue()
    transcript = seen.getvalue()
    assert TYPED not in transcript and GIVEN not in transcript
    config = opened_config(install)  # stored sealed: opened as ZeroClaw reads it
    assert config["providers"]["models"]["openai"]["backup"]["api_key"] == TYPED
    assert config["providers"]["models"]["anthropic"]["main"]["api_key"] == GIVEN
    # the warning came once, before the question; the undo hint survives a 40-column terminal
    flat = " ".join(transcript.split())
    assert flat.count("--secret values are visible") == 1
    assert flat.index("--secret values") < flat.index("After this import the agent may")
    receipt = next((install / "data" / "state" / "imports").glob("*.toml"))
    undo = shlex.join(
        ["bundler", "--install", str(install), "agents", "import", "--undo", str(receipt)]
    )
    assert undo in [line.strip() for line in transcript.splitlines()]


@pytest.mark.parametrize("answer", ["YES", "Y"])
def test_yes_in_any_case_is_consent(tmp_path: Path, answer: str) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    install = tmp_path / "target"
    child, seen = spawn(install, bundle, home=tmp_path)
    child.expect(r"Import it\? \[y/N\]")
    child.sendline(answer)
    for _ in range(3):
        child.expect("empty to skip\\): ")
        child.sendline("")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, seen.getvalue()
    assert (install / "config.toml").exists()


def test_refusal_asks_for_no_secret_and_leaves_no_trace(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    install = tmp_path / "target"
    install.mkdir()
    child, seen = spawn(install, bundle, home=tmp_path)
    child.expect(r"Import it\? \[y/N\]")
    child.sendline("n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert "empty to skip" not in seen.getvalue()
    assert "error: " in seen.getvalue()
    # not even the config lock: the folder is still no install
    assert list(install.iterdir()) == []
