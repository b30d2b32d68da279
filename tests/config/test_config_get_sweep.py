"""A seeded sweep of changed install configs through ``config get``: no value the secret sweep
counts as the install's (02 §5.3: secret fields, and values under a secret-looking key where
the schema does not describe it) is ever printed without ``--reveal``.

A throwaway fuzzer that moved lines of the example config between tables found ``config get``
printing an ``api_key`` that had landed under ``[agents.researcher.workspace]``; this keeps it.
Lines are moved, copied and dropped, and table headers added, but no key is renamed: a value
is a secret by where it stands and what it is called, and both are what is tested here.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from support.e2e_helpers import bundler_cli
from support.faultinject import slow_sample_count
from support.installs import copy_example

from bundler.rules.secrets import sweep_targets
from bundler.rules.tomlcompat import TOMLDecodeError, loads

TABLE_HEADERS = [
    "[agents.researcher.workspace]",
    "[agents.researcher.memory]",
    "[channels.slack.ops]",
    "[channels.telegram.home]",
    "[unknown_table.inner]",
    "[providers.models.openai.main]",
    "[mcp]",
]


def _changed(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    for _ in range(rng.randint(1, 4)):
        index = rng.randrange(len(lines))
        choice = rng.randrange(4)
        if choice == 0:
            lines.insert(rng.randrange(len(lines)), lines.pop(index))  # moved
        elif choice == 1:
            lines.insert(rng.randrange(len(lines)), lines[index])  # copied
        elif choice == 2:
            del lines[index]
        else:
            lines.insert(index, rng.choice(TABLE_HEADERS))
    return "\n".join(lines)


@pytest.mark.slow
def test_config_get_of_a_changed_config_prints_no_value_the_sweep_counts_secret(
    tmp_path: Path,
) -> None:
    count = slow_sample_count() or 40
    root = copy_example(tmp_path)
    config = root / "config.toml"
    original = config.read_text(encoding="utf-8")
    tried = 0
    for seed in range(count * 5):  # a change that leaves no valid TOML is not a try
        if tried == count:
            break
        text = _changed(original, random.Random(seed))
        try:
            data = loads(text)
        except TOMLDecodeError:
            continue
        secrets = [target.value for target in sweep_targets(data)[0]]
        tops = [key for key, value in data.items() if isinstance(value, dict)]
        if not secrets or not tops:
            continue
        tried += 1
        config.write_text(text, encoding="utf-8")
        extra = ["--json"] if tried % 2 else []  # both outputs redact alike: take turns
        for top in tops:
            done = bundler_cli(["--install", str(root), "config", "get", top, *extra])
            shown = done.stdout + done.stderr
            assert "Traceback" not in shown, f"seed {seed}, {top}: {shown[-400:]}"
            leaked = [value for value in secrets if value in shown]
            assert not leaked, f"seed {seed}: config get {top} {extra} printed a secret"
    assert tried == count, "too few changes left valid TOML"
