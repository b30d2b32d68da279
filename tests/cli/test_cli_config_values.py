"""``config set`` values and ``config get`` of an empty secret, through the
real CLI: one typed rule, documented in the help with examples; a string bare or as a TOML
string; booleans and arrays in TOML form, with the expected form in the error."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.installs import copy_example, one_error, run_cli

from bundler.rules import tomlcompat


def _config(install: Path) -> dict[str, object]:
    return tomlcompat.loads((install / "config.toml").read_text(encoding="utf-8"))


def test_config_set_help_documents_the_value_rule_with_examples() -> None:
    done = run_cli(["config", "set", "--help"])
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "bare" in text and "TOML" in text
    for example in ("true", '["ls", "git"]', "groq.fast", '"groq.fast"'):
        assert example in text, text


@pytest.mark.parametrize("given", ["groq.fast", '"groq.fast"', "'groq.fast'"])
def test_config_set_takes_a_string_bare_or_as_a_toml_string(tmp_path: Path, given: str) -> None:
    install = copy_example(tmp_path)
    done = run_cli(
        ["--install", str(install), "config", "set", "agents.researcher.model_provider", given]
    )
    assert done.returncode == 0, done.stderr
    agents = _config(install)["agents"]
    assert isinstance(agents, dict)
    assert agents["researcher"]["model_provider"] == "groq.fast"


@pytest.mark.parametrize(
    ("path", "given", "form"),
    [
        ("agents.researcher.enabled", "yes", "true or false"),
        ("agents.researcher.enabled", "1", "true or false"),
        ("risk_profiles.default.allowed_commands", "ls", '["ls", "git"]'),
        ("risk_profiles.default.allowed_commands", '"ls"', '["ls", "git"]'),
    ],
)
def test_config_set_of_a_non_string_names_the_expected_toml_form(
    tmp_path: Path, path: str, given: str, form: str
) -> None:
    install = copy_example(tmp_path)
    before = (install / "config.toml").read_bytes()
    done = run_cli(["--install", str(install), "config", "set", path, given])
    assert done.returncode == 3, done.stderr
    assert one_error(done.stderr) and path in done.stderr
    assert "TOML form" in done.stderr and form in done.stderr, done.stderr
    assert (install / "config.toml").read_bytes() == before


def test_config_set_of_an_array_and_a_boolean_in_toml_form(tmp_path: Path) -> None:
    install = copy_example(tmp_path)
    for path, given in (
        ("risk_profiles.default.allowed_commands", '["ls", "git"]'),
        ("agents.researcher.enabled", "false"),
    ):
        done = run_cli(["--install", str(install), "config", "set", path, given])
        assert done.returncode == 0, done.stderr
    config = _config(install)
    assert config["risk_profiles"]["default"]["allowed_commands"] == ["ls", "git"]  # type: ignore[index]
    assert config["agents"]["researcher"]["enabled"] is False  # type: ignore[index]


def test_config_get_of_an_empty_required_secret_says_so(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    install = tmp_path / "install"
    imported = run_cli(
        ["--install", str(install), "agents", "import", str(bundle), "--accept-risks"]
    )
    assert imported.returncode == 0, imported.stderr
    path = "providers.models.openai.backup.api_key"
    done = run_cli(["--install", str(install), "config", "get", path])
    assert done.returncode == 0, done.stderr
    assert "required secret" in done.stderr and "empty" in done.stderr, done.stderr
    assert f"bundler --install {install} config set {path}" in done.stderr
    as_json = run_cli(["--install", str(install), "--json", "config", "get", path])
    assert '"empty_required_secret": true' in as_json.stdout


# --- edits that must change only their path (01 §6), whatever the file's layout ------------

CAREFUL = (
    '[risk_profiles.careful]\nlevel = "supervised"\nworkspace_only = true\n'
    'forbidden_paths = ["/etc", "~/.ssh"]\nshell_env_passthrough = ["LANG", "TZ"]\n'
)


def _reshaped(tmp_path: Path, head: str, careful: str) -> Path:
    install = copy_example(tmp_path)
    text = (install / "config.toml").read_text()
    assert CAREFUL in text
    (install / "config.toml").write_text(head + text.replace(CAREFUL, careful))
    return install


@pytest.mark.parametrize(
    ("head", "careful"),
    [
        ("", '[risk_profiles]\ncareful.level = "supervised"\nstrict.level = "readonly"\n'),
        ('risk_profiles.careful.level = "supervised"\ncron.weekly.schedule = "0 0 * * 0"\n', ""),
    ],
    ids=["dotted keys under a header", "dotted keys at the root"],
)
def test_config_set_under_a_table_of_dotted_keys_moves_no_other_entry(
    tmp_path: Path, head: str, careful: str
) -> None:
    """A missing table under one made by dotted keys became a [header] in the middle of its
    parent, and every key after it in the file changed owner (exit 0): 'strict' or 'cron'
    vanished from where they were, and the value did not land at its path either."""
    install = _reshaped(tmp_path, head, careful)
    before = _config(install)
    done = run_cli(
        ["--install", str(install), "config", "set",
         "risk_profiles.careful.delegation_policy.mode", "allow"]
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    after = _config(install)
    careful_after = after["risk_profiles"]["careful"]  # type: ignore[index]
    assert careful_after.pop("delegation_policy") == {"mode": "allow"}  # type: ignore[union-attr]
    assert after == before


def test_config_set_that_would_move_other_entries_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """Where the new key cannot be placed so that TOML reads it at its path alone, the edit is
    refused and the file kept byte for byte, never written with entries moved."""
    install = _reshaped(
        tmp_path,
        'risk_profiles.careful.delegation_policy.mode = "allow"\n'
        'cron.weekly.schedule = "0 0 * * 0"\n',
        "",
    )
    text = (install / "config.toml").read_bytes()
    done = run_cli(
        ["--install", str(install), "config", "set",
         "risk_profiles.careful.approval_route.timeout_secs", "30"]
    )  # fmt: skip
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "would also move or change other entries" in done.stderr
    assert (install / "config.toml").read_bytes() == text


def test_a_nan_elsewhere_in_the_config_blocks_neither_set_nor_import(tmp_path: Path) -> None:
    """TOML's nan is a value a file may hold (in a table bundler does not know, say); Python's
    is unequal to itself, so every comparison of the file with its reparsing failed: each
    import was refused ('the edited file would not equal the merged config')."""
    install = copy_example(tmp_path)
    with open(install / "config.toml", "a") as config:
        config.write('\n[cron.weird]\nschedule = "x"\nv = nan\n')
    done = run_cli(["--install", str(install), "config", "set", "agents.writer.enabled", "false"])
    assert done.returncode == 0, done.stderr
    source = copy_example(tmp_path / "source")
    bundle = tmp_path / "bundle"
    exported = run_cli(
        ["--install", str(source), "agents", "export", "writer", "--out", str(bundle)]
    )
    assert exported.returncode == 0, exported.stderr
    imported = run_cli(
        ["--install", str(install), "agents", "import", str(bundle), "--accept-risks",
         "--as", "w2", "--secret", "providers.models.groq.fast.api_key=gsk-x"]
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert "w2" in _config(install)["agents"]  # type: ignore[operator]


def test_a_nan_in_a_bounded_number_field_is_invalid(tmp_path: Path) -> None:
    """NaN is below and above nothing, so it passed every bound: temperature = nan validated
    and travelled in bundles."""
    install = copy_example(tmp_path)
    text = (install / "config.toml").read_text()
    assert "\ntemperature = 0.7\n" in text
    (install / "config.toml").write_text(
        text.replace("\ntemperature = 0.7\n", "\ntemperature = nan\n")
    )
    done = run_cli(["--install", str(install), "config", "validate"])
    assert done.returncode == 3 and "temperature" in done.stdout + done.stderr, done.stdout


def test_an_install_secret_used_as_an_alias_or_provider_name_is_never_printed(
    tmp_path: Path,
) -> None:
    """agents list printed an alias or model_provider holding one of the install's secrets,
    and config get printed such a key, though it masked such a value."""
    install = copy_example(tmp_path)
    key = "sk-FAKE-groq-444444444444444444"
    text = (install / "config.toml").read_text()
    assert key in text and '[agents.ops]\nmodel_provider = "groq.fast"\n' in text
    text = text.replace(
        '[agents.ops]\nmodel_provider = "groq.fast"\n',
        f'[agents.ops]\nmodel_provider = "groq.{key}"\n',
    )
    text += f'\n[agents."{key}"]\nmodel_provider = "groq.fast"\nrisk_profile = "permissive"\n'
    (install / "config.toml").write_text(text)
    for args in (["agents", "list"], ["agents", "list", "--json"], ["config", "get", "agents"],
                 ["config", "get", "agents", "--json"]):  # fmt: skip
        done = run_cli(["--install", str(install), *args])
        assert key not in done.stdout + done.stderr, (args, done.stdout)
        assert "***" in done.stdout, (args, done.stdout)


def test_config_set_puts_a_new_key_above_the_comments_that_head_the_next_section(
    tmp_path: Path,
) -> None:
    """A key appended to [agents.ops] landed under '# --- model providers ---' (tomlkit counts
    those lines as the table's); it goes right after the table's last entry."""
    install = copy_example(tmp_path)
    before = (install / "config.toml").read_text()
    done = run_cli(["--install", str(install), "config", "set", "agents.ops.a2a.published", "true"])
    assert done.returncode == 0, done.stderr
    after = (install / "config.toml").read_text()
    assert 'cron_jobs = ["nightly_cleanup"]\na2a.published = true\n\n# --- model providers' in after
    assert after.replace("a2a.published = true\n", "", 1) == before


def test_config_set_in_a_crlf_file_writes_crlf_lines(tmp_path: Path) -> None:
    install = copy_example(tmp_path)
    config = install / "config.toml"
    config.write_bytes(config.read_bytes().replace(b"\n", b"\r\n"))
    done = run_cli(["--install", str(install), "config", "set", "agents.ops.a2a.published", "true"])
    assert done.returncode == 0, done.stderr
    raw = config.read_bytes()
    assert b"a2a.published = true\r\n" in raw and raw.count(b"\n") == raw.count(b"\r\n")
