"""Every command that reads a bundle takes each form of BUNDLE: a folder, an archive and an
``oci://`` reference, resolved once through the API's ``open_bundle`` (05 §1). Run through the
real CLI against a real distribution registry; each form must give the same answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.kit import run_cli
from support.registry_server import Registry

FORMS = ("folder", "archive", "reference")


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    install = bf.write_install(tmp_path / "install")
    return bf.export_bundle(install, tmp_path / "researcher.bundle")


def _given(form: str, bundle: Path, registry: Registry, tmp_path: Path) -> tuple[str, list[str]]:
    """BUNDLE in ``form``, and the options a reference needs (none for a local form)."""
    if form == "folder":
        return str(bundle), []
    if form == "archive":
        archive = tmp_path / "researcher.tar"
        done = run_cli(["bundle", "pack", str(bundle), str(archive)])
        assert done.returncode == 0, done.stderr
        return str(archive), []
    ref = registry.ref("agents/researcher:1")
    done = run_cli(["bundle", "push", str(bundle), ref, "--plain-http"])
    assert done.returncode == 0, done.stderr
    return ref, ["--plain-http"]


def _json(*args: str) -> dict[str, object]:
    done = run_cli(["--json", *args])
    assert done.returncode == 0, done.stderr
    document: dict[str, object] = json.loads(done.stdout)
    return document


@pytest.mark.parametrize("form", FORMS)
def test_verify_takes_every_form_of_bundle(
    form: str, bundle: Path, registry: Registry, tmp_path: Path
) -> None:
    given, extra = _given(form, bundle, registry, tmp_path)
    report = _json("bundle", "verify", given, *extra)
    assert report["ok"] is True and report["errors"] == []
    assert report["files"] == len(bf.canonical_files(bundle))


@pytest.mark.parametrize("form", FORMS)
def test_inspect_takes_every_form_of_bundle(
    form: str, bundle: Path, registry: Registry, tmp_path: Path
) -> None:
    given, extra = _given(form, bundle, registry, tmp_path)
    report = _json("bundle", "inspect", given, *extra)
    assert report["root_agent"] == bf.ROOT_AGENT
    listed = report["required_secrets"]
    assert isinstance(listed, list)
    assert [row["path"] for row in listed] == bf.read_manifest(bundle)["required_secrets"]


@pytest.mark.parametrize("form", FORMS)
def test_secrets_template_takes_every_form_of_bundle(
    form: str, bundle: Path, registry: Registry, tmp_path: Path
) -> None:
    given, extra = _given(form, bundle, registry, tmp_path)
    required = bf.read_manifest(bundle)["required_secrets"]
    assert required  # the bundle has secrets for the template to list
    out = tmp_path / "secrets.toml"
    report = _json("bundle", "secrets-template", given, "--out", str(out), *extra)
    assert report["required_secrets"] == required
    text = out.read_text(encoding="utf-8")
    assert all(f'"{path}" = ""' in text for path in required), text
    # the import command it prints names the bundle as it can be read again: a local one by
    # its absolute path, a registry artifact by its reference pinned to the digest read
    command = next(line for line in text.splitlines() if "agents import" in line)
    if form == "reference":
        assert f"{registry.ref('agents/researcher')}@sha256:" in command, command
    else:
        assert str(Path(given).resolve()) in command


@pytest.mark.parametrize("form", FORMS)
def test_import_and_its_dry_run_take_every_form_of_bundle(
    form: str, bundle: Path, registry: Registry, tmp_path: Path
) -> None:
    given, extra = _given(form, bundle, registry, tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    common = ["--install", str(target), "agents", "import", given, "--accept-risks", *extra]
    plan = _json(*common, "--dry-run")
    assert plan["dry_run"] is True and plan["agent"] == bf.ROOT_AGENT
    assert list(target.iterdir()) == []  # planned in full, nothing created
    done = _json(*common)
    assert done["dry_run"] is False and done["receipt"]
    assert (target / "agents" / bf.ROOT_AGENT / "workspace").is_dir()


@pytest.mark.parametrize("form", FORMS)
def test_push_takes_every_form_of_bundle_and_pushes_the_same_artifact(
    form: str, bundle: Path, registry: Registry, tmp_path: Path
) -> None:
    first = _json("bundle", "push", str(bundle), registry.ref("agents/first:1"), "--plain-http")
    given, extra = _given(form, bundle, registry, tmp_path)
    copy = _json("bundle", "push", given, registry.ref("agents/copy:1"), "--plain-http")
    assert copy["digest"] == first["digest"]
    assert extra == ([] if form != "reference" else ["--plain-http"])


@pytest.mark.parametrize("form", ("folder", "archive"))
def test_registry_options_with_a_local_bundle_are_refused(
    form: str, bundle: Path, registry: Registry, tmp_path: Path
) -> None:
    given, _ = _given(form, bundle, registry, tmp_path)
    done = run_cli(["bundle", "verify", given, "--plain-http"])
    assert done.returncode == 2
    assert f"go with an oci:// reference, not a bundle {form}" in done.stderr
