"""The API's config operations (``bundler.api``): validate, get, set, unset and the agents of a
real install, each answering as the command line does for ``--json``, and never holding a
secret it was not asked to reveal (01 §6, 05 §3)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from support.installs import MINIMAL_CONFIG, encrypt_install, make_install, run_cli

import bundler
from bundler import api

PATH = "providers.models.anthropic.main.api_key"
PLAIN = "sk-FAKE-minimal-0123456789abcdef"  # MINIMAL_CONFIG's key
NEW = "sk-FAKE-set-through-the-api-0123456789"
FIELD = "providers.models.anthropic.main.timeout_secs"


def _cli_json(root: Path, *args: str) -> dict[str, object]:
    done = run_cli(["--install", str(root), *args, "--json"])
    payload: dict[str, object] = json.loads(done.stdout)
    return payload


def test_a_value_set_through_the_api_is_read_back_and_printed_as_the_cli_prints_it(
    tmp_path: Path,
) -> None:
    root = make_install(tmp_path)
    edit = bundler.set_config(root, FIELD.replace("_", "-"), "90")
    assert (edit.path, edit.changed, edit.secret) == (FIELD, True, False)
    assert edit.as_json() == {"path": FIELD}
    got = bundler.get_config(root, FIELD)
    assert got.value == 90 and not got.default and not got.secret
    cli = _cli_json(root, "config", "get", FIELD)
    assert got.as_json() | {"ok": True} == cli
    removed = bundler.unset_config(root, FIELD)
    assert removed.as_json() == {"path": FIELD, "removed": True}
    again = bundler.unset_config(root, FIELD[:-1])
    assert (again.changed, again.closest) == (False, FIELD)
    with pytest.raises(api.NotFound):
        bundler.get_config(root, FIELD)


def test_a_secret_is_set_sealed_and_read_as_stars_unless_revealed(tmp_path: Path) -> None:
    root = make_install(tmp_path)
    edit = bundler.set_config(root, PATH, NEW)
    assert edit.secret and NEW not in repr(edit) and NEW not in json.dumps(edit.as_json())
    assert NEW not in (root / "config.toml").read_text()  # sealed as enc2: (the default)
    hidden = bundler.get_config(root, PATH)
    assert hidden.value == "***" and hidden.secret
    assert hidden.as_json() | {"ok": True} == _cli_json(root, "config", "get", PATH)
    shown = bundler.get_config(root, PATH, api.ConfigGetOptions(reveal=True))
    assert shown.value == NEW and shown.text() == NEW
    assert NEW not in repr(shown)


def test_an_encrypted_install_never_gives_its_plain_value_unless_revealed(tmp_path: Path) -> None:
    root = make_install(tmp_path)
    plain = encrypt_install(root)
    assert plain[PATH] == PLAIN
    whole = bundler.get_config(root, "providers.models.anthropic.main")
    alone = bundler.get_config(root, PATH)
    for report in (whole, alone):
        said = json.dumps(report.as_json()) + repr(report) + report.text()
        assert PLAIN not in said and "enc2:" not in said
    assert alone.value == "***" and whole.value["api_key"] == "***"
    revealed = bundler.get_config(root, PATH, api.ConfigGetOptions(reveal=True))
    assert revealed.value == PLAIN
    agents = bundler.list_agents(root)
    assert agents.as_json() == {
        "agents": [{"alias": "researcher", "enabled": True, "model_provider": "anthropic.main"}]
    }
    assert agents.as_json() | {"ok": True} == _cli_json(root, "agents", "list")


def test_validate_reports_as_the_cli_and_names_the_install_in_its_fixes(tmp_path: Path) -> None:
    root = make_install(tmp_path, MINIMAL_CONFIG.replace('level = "supervised"', "level = 7"))
    report = bundler.validate_config(root)
    assert not report.ok and report.config_file == root / "config.toml"
    assert [finding.path for finding in report.errors] == ["risk_profiles.default.level"]
    done = run_cli(["--install", str(root), "config", "validate", "--json"])
    assert done.returncode == 3
    assert report.as_json() | {"ok": False} == {
        k: v for k, v in json.loads(done.stdout).items() if k != "error"
    }
    fine = bundler.validate_config(make_install(tmp_path, name="fine"))
    assert fine.ok and fine.error_lines() == []


def test_the_value_config_set_reads_drops_one_line_end_and_refuses_nothing(
    tmp_path: Path,
) -> None:
    assert bundler.read_config_value("agents.x.model-provider", io.BytesIO(b"a.b\r\n")) == "a.b"
    assert bundler.read_config_value(PATH, io.BytesIO(b"v\n\n")) == "v\n"
    options = api.ConfigOptions(named_install=str(tmp_path))
    with pytest.raises(api.UsageError) as empty:
        bundler.read_config_value(PATH, io.BytesIO(b"\n"), options)
    assert f"--install {tmp_path} config unset {PATH}" in str(empty.value)
    with pytest.raises(api.NoAnswer):
        bundler.read_config_value(PATH, None)
    secret = "sk-FAKE-\xff-not-utf8".encode("latin-1")
    with pytest.raises(api.InvalidInput) as bad:
        bundler.read_config_value(PATH, io.BytesIO(secret))
    assert "FAKE" not in str(bad.value) and "FAKE" not in repr(bad.value)


def test_a_refused_edit_leaves_the_file_byte_identical_and_its_fix_names_the_install(
    tmp_path: Path,
) -> None:
    root = make_install(tmp_path)
    before = (root / "config.toml").read_bytes()
    with pytest.raises(api.InvalidInput):
        bundler.set_config(root, "agents.researcher.model_provider", "no.such.provider")
    with pytest.raises(api.UsageError) as empty:
        bundler.set_config(root, PATH, "", api.ConfigOptions(named_install=str(root)))
    assert f"--install {root} config unset {PATH}" in str(empty.value)
    assert (root / "config.toml").read_bytes() == before
