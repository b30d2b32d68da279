"""ZeroClaw-written bundles verify (03 §1.1), with the warnings each NOTES.md names.

The bundles come from ``../shared/interop/zeroclaw/bundles`` (see
``tests/support/zeroclaw_golden.py``);
the CLI runs in a real process.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.kit import run_cli
from support.zeroclaw_golden import GOLDEN, NAMES, NOT_IN_BUNDLE, golden_copy

from bundler.bundle.verify import verify_bundle
from bundler.rules.paths import parse_path


def run_verify(bundle: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(["bundle", "verify", str(bundle)])


def warnings_of(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning: ")]


@pytest.mark.parametrize("name", NAMES)
def test_zeroclaw_bundle_verifies_saying_once_that_integrity_cannot_be_proven(
    name: str, tmp_path: Path
) -> None:
    bundle = golden_copy(name, tmp_path)
    result = run_verify(bundle)
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr
    integrity = [w for w in warnings_of(result) if "checksums.xxh3" in w]
    assert len(integrity) == 1, result.stderr
    assert "cannot be proven" in integrity[0]


def test_a_golden_folder_as_shipped_is_refused_in_one_line_naming_its_notes_and_the_fix() -> None:
    """The golden folders hold NOTES.md and source-config.toml beside the bundle (03 §1 allows
    neither): verify refuses, in one line that names both and says how to get a bundle."""
    folder = GOLDEN / "a-minimal"
    # as a shell completes it, with a trailing slash, which the message leaves out
    result = run_cli(["bundle", "verify", f"{folder}/"])
    assert result.returncode == 3, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {folder}: "), result.stderr
    assert all(extra in lines[0] for extra in NOT_IN_BUNDLE), lines[0]
    assert "copy just those to a new folder" in lines[0], lines[0]
    assert "remove the rest" in lines[0], lines[0]


@pytest.mark.parametrize("name", NAMES)
def test_zeroclaw_risk_flags_are_recomputed_and_cover_the_manifest_by_kind_and_path(
    name: str, tmp_path: Path
) -> None:
    """Every flag ZeroClaw wrote is recomputed at the same (kind, path); detail is not compared."""
    report = verify_bundle(golden_copy(name, tmp_path))
    assert report.ok, report.errors
    recomputed = {(f["kind"], ".".join(parse_path(f["path"]))) for f in report.risk_flags}
    claimed = {(f["kind"], f["path"]) for f in (report.manifest or {})["risk_flags"]}
    assert claimed <= recomputed


def test_zeroclaw_fallback_chain_warns_dangling_cycle_and_depth(tmp_path: Path) -> None:
    result = run_verify(golden_copy("c-fallbacks", tmp_path))
    assert result.returncode == 0, result.stderr
    warnings = warnings_of(result)
    assert any(
        w.startswith("warning: providers.models.mistral.fourth.fallback[0]:")
        and "deepseek.fifth" in w
        for w in warnings
    ), warnings
    assert any(
        w.startswith("warning: providers.models.groq.third.fallback:") and "cycle" in w
        for w in warnings
    ), warnings
    assert any(
        w.startswith("warning: providers.models.mistral.fourth.fallback:")
        and "max_fallback_depth_exceeded" in w
        for w in warnings
    ), warnings


def test_zeroclaw_unknown_mcp_server_name_is_a_warning(tmp_path: Path) -> None:
    result = run_verify(golden_copy("d-mcp-missing-server", tmp_path))
    assert result.returncode == 0, result.stderr
    assert any(
        w.startswith("warning: mcp_bundles.web.servers[2]:") and "'gone'" in w
        for w in warnings_of(result)
    ), result.stderr


def test_zeroclaw_unsafe_skill_aliases_are_host_specific_warnings(tmp_path: Path) -> None:
    bundle = golden_copy("g-skill-aliases", tmp_path)
    result = run_verify(bundle)
    assert result.returncode == 0, result.stderr
    warnings = warnings_of(result)
    assert any(w.startswith("warning: skill_bundles.con: host_specific") for w in warnings)
    assert any(w.startswith('warning: skill_bundles."notes.": host_specific') for w in warnings)
    assert verify_bundle(bundle).skill_bundles == ["research.tools"]


def test_content_under_an_unsafe_zeroclaw_alias_is_refused(tmp_path: Path) -> None:
    """``con`` stays in the config without content: content under skills/con/ is smuggled."""
    bundle = golden_copy("g-skill-aliases", tmp_path)
    (bundle / "skills" / "con" / "evil").mkdir(parents=True)
    (bundle / "skills" / "con" / "evil" / "SKILL.md").write_text("run me\n")
    result = run_verify(bundle)
    assert result.returncode == 3
    assert f"error: {bundle}: skills/con:" in result.stderr


def test_zeroclaw_manifest_omitting_a_zeroclaw_kind_is_refused(tmp_path: Path) -> None:
    bundle = golden_copy("a-minimal", tmp_path)
    manifest = bundle / "zeroclaw-agent.toml"
    text = manifest.read_text()
    start = text.index("[[risk_flags]]")
    manifest.write_text(text[:start])
    result = run_verify(bundle)
    assert result.returncode == 3
    assert "omits process_spawn at mcp.servers.github.command" in result.stderr


def test_zeroclaw_manifest_without_bundler_only_kinds_is_no_omission(tmp_path: Path) -> None:
    """d's http server is remote_tools to bundler; ZeroClaw has no such kind (not an omission)."""
    report = verify_bundle(golden_copy("d-mcp-missing-server", tmp_path))
    assert report.ok, report.errors
    assert ("remote_tools", "mcp.servers.search.url") in {
        (f["kind"], f["path"]) for f in report.risk_flags
    }


def _dotted_header(bundle: Path) -> None:
    """d with its secret header named ``X-Org.Id``, written the way ZeroClaw writes it."""
    config = bundle / "config.toml"
    config.write_text(config.read_text().replace('Authorization = ""', '"X-Org.Id" = ""'))
    manifest = bundle / "zeroclaw-agent.toml"
    manifest.write_text(
        manifest.read_text().replace(
            "mcp.servers.search.headers.Authorization", "mcp.servers.search.headers.X-Org.Id"
        )
    )


def test_zeroclaw_raw_secret_path_with_a_dotted_map_key_is_read(tmp_path: Path) -> None:
    """ZeroClaw joins a secret map key raw (``headers.X-Org.Id``), as ``config set`` takes it."""
    bundle = golden_copy("d-mcp-missing-server", tmp_path)
    _dotted_header(bundle)
    report = verify_bundle(bundle)
    assert report.ok, report.errors
    assert "mcp.servers.search.headers.X-Org.Id" in (report.manifest or {})["required_secrets"]


def test_raw_secret_path_naming_no_secret_is_still_refused(tmp_path: Path) -> None:
    bundle = golden_copy("d-mcp-missing-server", tmp_path)
    _dotted_header(bundle)
    manifest = bundle / "zeroclaw-agent.toml"
    manifest.write_text(manifest.read_text().replace("headers.X-Org.Id", "headers.X-Org.Nope"))
    result = run_verify(bundle)
    assert result.returncode == 3
    assert "required_secrets" in result.stderr
