"""ZeroClaw-written bundles import (03 §1.1, §3): into an empty install and into the example.

Through the real CLI in a real process. The merged config is checked by ``config validate``.
The hand-written bundles of ``tests/fixtures/zeroclaw/`` run from any clone; the kit's golden
ones where ``../shared`` is present.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.installs import copy_example, opened_config, run_cli
from support.zeroclaw_golden import NAMES, golden_copy

from bundler.rules import tomlcompat


def validate_ok(install: Path) -> None:
    result = run_cli(["--install", str(install), "config", "validate"])
    assert result.returncode == 0, result.stdout + result.stderr


def import_into(install: Path, bundle: Path, *extra: str) -> str:
    result = run_cli(["--install", str(install), "agents", "import", str(bundle), *extra])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout + result.stderr


def config_of(install: Path) -> dict:  # type: ignore[type-arg]
    return tomlcompat.loads((install / "config.toml").read_text(encoding="utf-8"))


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "zeroclaw"
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def fixture_copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return target


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_bundle_imports_into_an_empty_install_and_validates(
    name: str, tmp_path: Path
) -> None:
    install = tmp_path / "install"
    import_into(install, fixture_copy(name, tmp_path), "--accept-risks")
    validate_ok(install)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_bundle_imports_beside_existing_agents_and_validates(
    name: str, tmp_path: Path
) -> None:
    install = copy_example(tmp_path)
    import_into(install, fixture_copy(name, tmp_path), "--accept-risks", "--as", "imported")
    validate_ok(install)


@pytest.mark.parametrize("name", NAMES)
def test_zeroclaw_bundle_imports_into_an_empty_install_and_validates(
    name: str, tmp_path: Path
) -> None:
    bundle = golden_copy(name, tmp_path)
    install = tmp_path / "install"
    import_into(install, bundle, "--accept-risks")
    validate_ok(install)


@pytest.mark.parametrize("name", NAMES)
def test_zeroclaw_bundle_imports_into_the_example_install_and_validates(
    name: str, tmp_path: Path
) -> None:
    bundle = golden_copy(name, tmp_path)
    install = copy_example(tmp_path)
    # the example already has agents (a writer among them): import under a fresh alias
    import_into(install, bundle, "--accept-risks", "--as", "imported")
    validate_ok(install)


def test_unproven_integrity_needs_consent_without_a_terminal(tmp_path: Path) -> None:
    """c carries no risk flag: only the missing checksums need consent, and nobody gave it."""
    bundle = golden_copy("c-fallbacks", tmp_path)
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text('[risk_profiles.mine]\nlevel = "readonly"\n')
    before = (install / "config.toml").read_bytes()
    result = run_cli(["--install", str(install), "agents", "import", str(bundle)])
    assert result.returncode == 1, result.stderr
    assert "integrity cannot be proven" in result.stderr
    assert "--accept-risks" in result.stderr
    assert (install / "config.toml").read_bytes() == before
    assert sorted(p.name for p in install.iterdir() if p.name != ".config.lock") == ["config.toml"]


def test_dangling_fallback_is_removed_not_bound_to_a_same_named_target_provider(
    tmp_path: Path,
) -> None:
    bundle = golden_copy("c-fallbacks", tmp_path)
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text(
        '[providers.models.deepseek.fifth]\nmodel = "deepseek-chat"\napi_key = ""\n'
    )
    err = import_into(install, bundle, "--accept-risks")
    assert "providers.models.mistral.fourth.fallback[0]: removed 'deepseek.fifth'" in err
    models = config_of(install)["providers"]["models"]
    assert "fallback" not in models["mistral"]["fourth"]  # emptied: dropped like ZeroClaw does
    # edges that resolve inside the bundle stay, the cycle included
    assert models["groq"]["third"]["fallback"] == ["mistral.fourth", "anthropic.primary"]
    validate_ok(install)


def test_unknown_mcp_server_name_is_removed_not_granting_a_same_named_target_server(
    tmp_path: Path,
) -> None:
    bundle = golden_copy("d-mcp-missing-server", tmp_path)
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text(
        '[[mcp.servers]]\nname = "gone"\ncommand = "sh"\nargs = ["-c", "id"]\n'
    )
    err = import_into(install, bundle, "--accept-risks")
    assert "mcp_bundles.web.servers[2]: removed 'gone'" in err
    config = config_of(install)
    assert config["mcp_bundles"]["web"]["servers"] == ["fetch", "search"]
    validate_ok(install)


def test_dotted_skill_alias_travels_and_unsafe_ones_land_without_content(tmp_path: Path) -> None:
    bundle = golden_copy("g-skill-aliases", tmp_path)
    install = tmp_path / "install"
    import_into(install, bundle, "--accept-risks")
    config = config_of(install)
    assert set(config["skill_bundles"]) == {"research.tools", "con", "notes."}
    skills = install / "shared" / "skills"
    assert (skills / "research.tools" / "summarise" / "SKILL.md").is_file()
    assert sorted(p.name for p in skills.iterdir()) == ["research.tools"]
    validate_ok(install)


def test_consent_shows_the_recomputed_flags_not_the_manifest_wording(tmp_path: Path) -> None:
    """The manifest's detail is ZeroClaw's; what the user reads is bundler's recomputation."""
    bundle = golden_copy("a-minimal", tmp_path)
    manifest = bundle / "zeroclaw-agent.toml"
    text = manifest.read_text()
    manifest.write_text(text.replace('detail = "npx -y', 'detail = "harmless, trust me: npx -y'))
    install = tmp_path / "install"
    err = import_into(install, bundle, "--accept-risks")
    assert "harmless" not in err
    assert "process_spawn mcp.servers.github.command: starts a local process" in err


@pytest.mark.parametrize(
    "given",
    ["mcp.servers.search.headers.X-Org.Id", 'mcp.servers.search.headers."X-Org.Id"'],
    ids=["raw-as-zeroclaw-writes-it", "quoted-as-bundler-wrote-it"],
)
def test_zeroclaw_raw_dotted_secret_path_imports_and_takes_a_secret(
    given: str, tmp_path: Path
) -> None:
    bundle = golden_copy("d-mcp-missing-server", tmp_path)
    config = bundle / "config.toml"
    config.write_text(config.read_text().replace('Authorization = ""', '"X-Org.Id" = ""'))
    manifest = bundle / "zeroclaw-agent.toml"
    manifest.write_text(manifest.read_text().replace("headers.Authorization", "headers.X-Org.Id"))
    install = tmp_path / "install"
    import_into(
        install,
        bundle,
        "--accept-risks",
        "--secret",
        f"{given}=org-value-1",
    )
    # stored under the install's policy (enc2: by default): read as ZeroClaw reads it
    servers = opened_config(install)["mcp"]["servers"]
    search = next(s for s in servers if s["name"] == "search")
    assert search["headers"] == {"X-Org.Id": "org-value-1"}
    validate_ok(install)


def test_contentless_skill_alias_folder_of_a_local_bundle_refuses_import(tmp_path: Path) -> None:
    """``con`` travels without content, so no folder is made; but the folder its alias names
    may not be one a local skill bundle owns, or the agent would load that bundle's skills."""
    bundle = golden_copy("g-skill-aliases", tmp_path)
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text(
        '[skill_bundles.mine]\ndirectory = "shared/skills/con/inner"\n'
    )
    before = (install / "config.toml").read_bytes()
    result = run_cli(["--install", str(install), "agents", "import", str(bundle), "--accept-risks"])
    assert result.returncode == 1, result.stdout + result.stderr
    assert "skill_bundles.con" in result.stderr
    assert "overlaps the folder of skill_bundles.mine" in result.stderr
    assert (install / "config.toml").read_bytes() == before


def test_a_removed_dangling_name_never_echoes_a_given_secret(tmp_path: Path) -> None:
    """c's fallback 'deepseek.fifth' is removed on import and reported; when a value given with
    --secret happens to spell it, the warning withholds it (nothing a user typed is echoed)."""
    bundle = golden_copy("c-fallbacks", tmp_path)
    install = tmp_path / "install"
    secret = "deepseek.fifth"
    result = run_cli(
        [
            "--install",
            str(install),
            "agents",
            "import",
            str(bundle),
            "--accept-risks",
            "--secret",
            f"providers.models.anthropic.primary.api_key={secret}",
        ]
    )
    assert result.returncode == 0, result.stderr
    assert "removed" in result.stdout + result.stderr
    assert secret not in result.stdout + result.stderr
