"""Config paths as ZeroClaw writes and reads them, through the real CLI.

* A secret map key holding a dot is written raw (``extra_headers.X-Org.Id``): ZeroClaw's
  ``config set`` has no quoting and takes the rest of the path as the key. bundler reads it the
  same way, and still reads the quoted form it wrote before (``extra_headers."X-Org.Id"``).
* A list position is written ``fallback[0]``; ``fallback.0`` is still read where a user types.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

from support.installs import make_install, opened_config, run_cli

from bundler.rules import tomlcompat

HEADERS = "providers.models.anthropic.main.extra_headers"
RAW = f"{HEADERS}.X-Org.Id"
QUOTED = f'{HEADERS}."X-Org.Id"'
ORG_SECRET = "org-secret-0000000000"

CONFIG = f"""\
[agents.researcher]
model_provider = "anthropic.main"
risk_profile = "default"

[providers.models.anthropic.main]
api_key = "sk-FAKE-minimal-0123456789abcdef"
model = "claude"
fallback = ["openai.backup"]

[providers.models.anthropic.main.extra_headers]
"X-Org.Id" = "{ORG_SECRET}"

[providers.models.openai.backup]
model = "gpt-4o"

[risk_profiles.default]
level = "supervised"
"""


def bundler(*args: str, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env={"SOURCE_DATE_EPOCH": "1700000000"}, input_text=input_text)


def export(install: Path, out: Path) -> Path:
    done = bundler("--install", str(install), "agents", "export", "researcher", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def headers_of(install: Path) -> object:
    config = opened_config(install)  # the values as ZeroClaw reads them (stored sealed)
    return config["providers"]["models"]["anthropic"]["main"].get("extra_headers")


def exported(tmp_path: Path) -> Path:
    return export(make_install(tmp_path, CONFIG, name="source"), tmp_path / "bundle")


def empty_install(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    target.mkdir()
    return target


# --- a secret map key holding a dot ------------------------------------------------------------


def test_export_writes_a_dotted_secret_map_key_raw_as_zeroclaw_config_set_takes_it(
    tmp_path: Path,
) -> None:
    bundle = exported(tmp_path)
    manifest = (bundle / "zeroclaw-agent.toml").read_text(encoding="utf-8")
    assert RAW in tomlcompat.loads(manifest)["required_secrets"]
    assert QUOTED not in manifest
    assert ORG_SECRET not in manifest


def test_config_set_hint_printed_by_import_sets_exactly_the_dotted_key(tmp_path: Path) -> None:
    bundle = exported(tmp_path)
    target = empty_install(tmp_path, "target")
    done = bundler("--install", str(target), "agents", "import", str(bundle), "--accept-risks")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    hint = next(line.strip() for line in lines if line.strip().endswith(f"config set {RAW}"))
    words = shlex.split(hint)
    assert words[0] == "bundler"
    pasted = bundler(*words[1:], input_text="org-new-value-1111\n")
    assert pasted.returncode == 0, pasted.stderr
    assert headers_of(target) == {"X-Org.Id": "org-new-value-1111"}


def test_dotted_secret_key_binds_with_the_raw_path_by_secret_and_secrets_file(
    tmp_path: Path,
) -> None:
    bundle = exported(tmp_path)
    template = bundler("bundle", "secrets-template", str(bundle))
    assert template.returncode == 0, template.stderr
    assert f'"{RAW}" = ""' in template.stdout.splitlines()

    by_argument = empty_install(tmp_path, "by-argument")
    done = bundler(
        "--install",
        str(by_argument),
        "agents",
        "import",
        str(bundle),
        "--accept-risks",
        "--secret",
        f"{RAW}=org-given-2222",
    )
    assert done.returncode == 0, done.stderr
    assert headers_of(by_argument) == {"X-Org.Id": "org-given-2222"}

    by_file = empty_install(tmp_path, "by-file")
    secrets = tmp_path / "secrets.toml"
    secrets.write_text(template.stdout.replace(f'"{RAW}" = ""', f'"{RAW}" = "org-file-3333"'))
    os.chmod(secrets, 0o600)
    done = bundler(
        "--install",
        str(by_file),
        "agents",
        "import",
        str(bundle),
        "--accept-risks",
        "--secrets-file",
        str(secrets),
    )
    assert done.returncode == 0, done.stderr
    assert headers_of(by_file) == {"X-Org.Id": "org-file-3333"}


def test_export_import_export_with_a_dotted_secret_key_is_byte_identical(tmp_path: Path) -> None:
    first = exported(tmp_path)
    target = empty_install(tmp_path, "target")
    done = bundler(
        "--install",
        str(target),
        "agents",
        "import",
        str(first),
        "--accept-risks",
        "--secret",
        f"{RAW}={ORG_SECRET}",
        "--secret",
        "providers.models.anthropic.main.api_key=sk-FAKE-minimal-0123456789abcdef",
    )
    assert done.returncode == 0, done.stderr
    second = export(target, tmp_path / "second")
    # the manifests differ in one dropped row only (delegate_same_risk_profile arrives false)
    for name in ("config.toml", "checksums.xxh3"):
        assert (second / name).read_bytes() == (first / name).read_bytes(), name
    manifests = [tomlcompat.loads((b / "zeroclaw-agent.toml").read_text()) for b in (first, second)]
    assert manifests[0]["required_secrets"] == manifests[1]["required_secrets"]
    assert RAW in manifests[1]["required_secrets"]


def test_config_get_set_unset_read_the_older_quoted_form_of_a_dotted_key(tmp_path: Path) -> None:
    install = make_install(tmp_path, CONFIG)
    got = bundler("--install", str(install), "config", "get", QUOTED, "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["path"] == RAW
    done = bundler("--install", str(install), "config", "set", QUOTED, "org-quoted-4444")
    assert done.returncode == 0, done.stderr
    assert headers_of(install) == {"X-Org.Id": "org-quoted-4444"}
    done = bundler("--install", str(install), "config", "unset", RAW)
    assert done.returncode == 0, done.stderr
    assert not headers_of(install)


# --- list positions ----------------------------------------------------------------------------


def test_validate_names_a_list_element_in_brackets(tmp_path: Path) -> None:
    text = CONFIG.replace(
        'level = "supervised"', 'level = "supervised"\nallowed_roots = ["/srv", "relative"]'
    ).replace('risk_profile = "default"', 'risk_profile = "default"\nchannels = ["nodot"]')
    install = make_install(tmp_path, text)
    wanted = ["risk_profiles.default.allowed_roots[1]", "agents.researcher.channels[0]"]
    done = bundler("--install", str(install), "config", "validate", "--json")
    assert done.returncode == 3, done.stderr
    assert sorted(e["path"] for e in json.loads(done.stdout)["errors"]) == sorted(wanted)
    text_out = bundler("--install", str(install), "config", "validate").stdout
    assert all(f" {path}: " in text_out for path in wanted), text_out
    assert "allowed_roots.1" not in text_out and "channels.0" not in text_out


def test_config_get_takes_a_list_position_in_brackets_and_in_the_dotted_form(
    tmp_path: Path,
) -> None:
    install = make_install(tmp_path, CONFIG)
    for typed in ("fallback[0]", "fallback.0"):
        got = bundler(
            "--install", str(install), "config", "get", f"providers.models.anthropic.main.{typed}"
        )
        assert got.returncode == 0, got.stderr
        assert got.stdout.strip() == "openai.backup"
    got = bundler(
        "--install",
        str(install),
        "config",
        "get",
        "providers.models.anthropic.main.fallback.0",
        "--json",
    )
    assert json.loads(got.stdout)["path"] == "providers.models.anthropic.main.fallback[0]"
