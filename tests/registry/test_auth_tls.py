"""Credentials as users already have them, against a real registry behind TLS with htpasswd
basic auth: ``$DOCKER_CONFIG/config.json`` (``auths`` with base64 ``auth``), a credential
helper, a CA file; and no credential in any output, whatever fails."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.kit import one_error, run_cli, tree_snapshot
from support.registry_server import PASSWORD, USER, Registry


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    install = bf.write_install(tmp_path / "install")
    return bf.export_bundle(install, tmp_path / "bundle")


def docker_config(folder: Path, host: str, user: str = USER, password: str = PASSWORD) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    (folder / "config.json").write_text(
        json.dumps({"auths": {f"https://{host}": {"auth": token}}}), encoding="utf-8"
    )
    return folder


def leaks(text: str, password: str = PASSWORD) -> bool:
    token = base64.b64encode(f"{USER}:{password}".encode()).decode()
    return password in text or token in text


def test_docker_config_auths_push_and_pull_over_tls(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = {"DOCKER_CONFIG": str(docker_config(tmp_path / "docker", tls_registry.host))}
    ref = tls_registry.ref("agents/researcher:1")
    ca = ["--ca-file", str(tls_registry.ca)]
    pushed = run_cli(["bundle", "push", str(bundle), ref, *ca], env=env)
    assert pushed.returncode == 0, pushed.stderr
    pulled = run_cli(["bundle", "pull", ref, str(tmp_path / "out"), *ca], env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(bundle)
    assert not leaks(pushed.stdout + pushed.stderr + pulled.stdout + pulled.stderr)


def test_a_credential_helper_is_run_for_its_host(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    helpers = tmp_path / "bin"
    helpers.mkdir()
    helper = helpers / "docker-credential-bundlertest"
    helper.write_text(
        "#!/bin/sh\nread host\n"
        f'[ "$host" = "{tls_registry.host}" ] || exit 1\n'
        f'printf \'{{"ServerURL":"%s","Username":"{USER}","Secret":"{PASSWORD}"}}\' "$host"\n',
        encoding="utf-8",
    )
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(
        json.dumps({"credHelpers": {tls_registry.host: "bundlertest"}}), encoding="utf-8"
    )
    env = {"DOCKER_CONFIG": str(config), "PATH": f"{helpers}:{os.environ['PATH']}"}
    done = run_cli(
        ["bundle", "push", str(bundle), tls_registry.ref("agents/r:1"), "--ca-file",
         str(tls_registry.ca)],
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not leaks(done.stdout + done.stderr)


def test_without_credentials_the_push_is_refused_in_one_line(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = {"DOCKER_CONFIG": str(tmp_path / "empty-docker")}
    done = run_cli(
        ["bundle", "push", str(bundle), tls_registry.ref("agents/r:1"), "--ca-file",
         str(tls_registry.ca)],
        env=env,
    )  # fmt: skip
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "bundler login" in done.stderr and str(tmp_path / "empty-docker") in done.stderr


def test_a_wrong_password_is_refused_and_never_shown(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    wrong = "Wrong-Pass-Never-Shown-4242"
    env = {"DOCKER_CONFIG": str(docker_config(tmp_path / "d", tls_registry.host, password=wrong))}
    for args in (
        ["bundle", "push", str(bundle), tls_registry.ref("agents/r:1")],
        ["bundle", "pull", tls_registry.ref("agents/r:1"), str(tmp_path / "o")],
        ["bundle", "inspect", tls_registry.ref("agents/r:1")],
    ):
        for extra in ([], ["--json"]):
            done = run_cli([*args, "--ca-file", str(tls_registry.ca), *extra], env=env)
            assert done.returncode == 1, done.stderr
            assert not leaks(done.stdout + done.stderr, wrong)
            assert "Traceback" not in done.stderr
            if not extra:
                assert one_error(done.stderr), done.stderr
    assert not (tmp_path / "o").exists()


def test_an_untrusted_certificate_names_the_ca_option(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = {"DOCKER_CONFIG": str(docker_config(tmp_path / "docker", tls_registry.host))}
    done = run_cli(["bundle", "push", str(bundle), tls_registry.ref("agents/r:1")], env=env)
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "--ca-file" in done.stderr
    assert not leaks(done.stdout + done.stderr)


def test_credentials_in_the_reference_are_refused_unechoed(bundle: Path) -> None:
    done = run_cli(["bundle", "push", str(bundle), f"oci://{USER}:{PASSWORD}@127.0.0.1:1/r:1"])
    assert done.returncode == 2 and one_error(done.stderr), done.stderr
    assert PASSWORD not in done.stdout + done.stderr
