"""Credentials where people already keep them, in the order podman and skopeo search them, and
``bundler login``/``logout`` writing them there: against a real registry behind TLS and
htpasswd basic auth, with a fake credential helper on PATH standing for someone's keyring."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.kit import one_error, run_cli
from support.registry_server import PASSWORD, USER, Registry


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    install = bf.write_install(tmp_path / "install")
    return bf.export_bundle(install, tmp_path / "bundle")


def home_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose every credentials location is under ``tmp_path`` and empty."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    runtime = tmp_path / "run"
    runtime.mkdir(exist_ok=True)
    return {
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "DOCKER_CONFIG": str(home / ".docker"),
        "REGISTRY_AUTH_FILE": "",
    }


def auth_entry(user: str = USER, password: str = PASSWORD) -> dict[str, str]:
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


def write_json(path: Path, value: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def leaks(text: str) -> bool:
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    return PASSWORD in text or token in text


def helper_on_path(tmp_path: Path, name: str, script: str) -> str:
    """A fake ``docker-credential-NAME`` in a folder put first on PATH; returns that PATH."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    helper = folder / f"docker-credential-{name}"
    helper.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    return f"{folder}:{os.environ['PATH']}"


def test_containers_auth_json_alone_lets_push_and_pull_in(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = home_env(tmp_path)
    write_json(
        tmp_path / "run" / "containers" / "auth.json", {"auths": {tls_registry.host: auth_entry()}}
    )
    ref = tls_registry.ref("agents/researcher:1")
    ca = ["--ca-file", str(tls_registry.ca)]
    pushed = run_cli(["bundle", "push", str(bundle), ref, *ca], env=env)
    assert pushed.returncode == 0, pushed.stderr
    pulled = run_cli(["bundle", "pull", ref, str(tmp_path / "out"), *ca], env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert not leaks(pushed.stdout + pushed.stderr + pulled.stdout + pulled.stderr)


def test_the_config_home_auth_json_is_read_too(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = home_env(tmp_path)
    write_json(
        tmp_path / "home" / ".config" / "containers" / "auth.json",
        {"auths": {tls_registry.host: auth_entry()}},
    )
    done = run_cli(
        ["bundle", "push", str(bundle), tls_registry.ref("agents/r:1"), "--ca-file",
         str(tls_registry.ca)],
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_auth_json_comes_before_the_docker_config_and_a_refusal_names_the_file_read(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = home_env(tmp_path)
    good = {"auths": {tls_registry.host: auth_entry()}}
    bad = {"auths": {tls_registry.host: auth_entry(password="wrong-password")}}
    write_json(tmp_path / "home" / ".docker" / "config.json", bad)
    auth_json = write_json(tmp_path / "run" / "containers" / "auth.json", good)
    args = ["bundle", "push", str(bundle), tls_registry.ref("agents/r:1"), "--ca-file",
            str(tls_registry.ca)]  # fmt: skip
    assert run_cli(args, env=env).returncode == 0
    write_json(auth_json, bad)
    refused = run_cli(args, env=env)
    assert refused.returncode == 1 and one_error(refused.stderr), refused.stderr
    assert f"refused the credentials from {auth_json}" in refused.stderr
    assert "wrong-password" not in refused.stderr


def test_no_credentials_anywhere_names_every_file_looked_in(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = home_env(tmp_path)
    env.pop("DOCKER_CONFIG")
    done = run_cli(
        ["bundle", "push", str(bundle), tls_registry.ref("agents/r:1"), "--ca-file",
         str(tls_registry.ca)],
        env=env,
    )  # fmt: skip
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert str(tmp_path / "run" / "containers" / "auth.json") in done.stderr
    assert str(tmp_path / "home" / ".docker" / "config.json") in done.stderr
    assert "$DOCKER_CONFIG" not in done.stderr
    assert "bundler login" in done.stderr


def test_registry_auth_file_is_the_only_file_read(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = home_env(tmp_path)
    write_json(
        tmp_path / "run" / "containers" / "auth.json", {"auths": {tls_registry.host: auth_entry()}}
    )
    env["REGISTRY_AUTH_FILE"] = str(tmp_path / "elsewhere.json")
    done = run_cli(
        ["bundle", "push", str(bundle), tls_registry.ref("agents/r:1"), "--ca-file",
         str(tls_registry.ca)],
        env=env,
    )  # fmt: skip
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "elsewhere.json" in done.stderr


def test_username_and_password_stdin_serve_one_command(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = home_env(tmp_path)
    args = ["bundle", "push", str(bundle), tls_registry.ref("agents/r:1"), "--ca-file",
            str(tls_registry.ca), "--username", USER, "--password-stdin"]  # fmt: skip
    done = run_cli(args, env=env, input_text=PASSWORD + "\n")
    assert done.returncode == 0, done.stderr
    assert not leaks(done.stdout + done.stderr)
    wrong = run_cli(args, env=env, input_text="not-the-password\n")
    assert wrong.returncode == 1 and one_error(wrong.stderr), wrong.stderr
    assert "--username/--password-stdin" in wrong.stderr
    assert not list((tmp_path / "run").iterdir())  # nothing was stored


def test_login_then_logout_round_trips(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = home_env(tmp_path)
    ca = ["--ca-file", str(tls_registry.ca)]
    logged = run_cli(
        ["login", tls_registry.host, "--username", USER, "--password-stdin", *ca],
        env=env,
        input_text=PASSWORD + "\n",
    )
    assert logged.returncode == 0, logged.stderr
    stored = tmp_path / "run" / "containers" / "auth.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert str(stored) in logged.stdout
    assert not leaks(logged.stdout + logged.stderr)
    ref = tls_registry.ref("agents/r:1")
    assert run_cli(["bundle", "push", str(bundle), ref, *ca], env=env).returncode == 0
    out = run_cli(["logout", tls_registry.host], env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(stored.read_text(encoding="utf-8"))["auths"] == {}
    after = run_cli(["bundle", "pull", ref, str(tmp_path / "out"), *ca], env=env)
    assert after.returncode == 1 and "none were found" in after.stderr


def test_login_writes_the_first_existing_file_so_it_is_never_shadowed(
    tls_registry: Registry, tmp_path: Path
) -> None:
    env = home_env(tmp_path)
    docker = write_json(
        tmp_path / "home" / ".docker" / "config.json",
        {"auths": {f"https://{tls_registry.host}": auth_entry(password="old")}, "keep": 1},
    )
    logged = run_cli(
        ["login", tls_registry.host, "--username", USER, "--password-stdin", "--ca-file",
         str(tls_registry.ca)],
        env=env,
        input_text=PASSWORD,
    )  # fmt: skip
    assert logged.returncode == 0, logged.stderr
    config = json.loads(docker.read_text(encoding="utf-8"))
    assert config["keep"] == 1
    assert config["auths"] == {tls_registry.host: auth_entry()}
    assert not (tmp_path / "run" / "containers").exists()
    assert stat.S_IMODE(docker.stat().st_mode) == 0o600


def test_a_refused_login_writes_nothing(tls_registry: Registry, tmp_path: Path) -> None:
    env = home_env(tmp_path)
    done = run_cli(
        ["login", tls_registry.host, "--username", USER, "--password-stdin", "--ca-file",
         str(tls_registry.ca)],
        env=env,
        input_text="not-the-password\n",
    )  # fmt: skip
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "refused the user name and password" in done.stderr
    assert not list((tmp_path / "run").iterdir())


def test_login_goes_through_the_credential_store_the_file_names(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = home_env(tmp_path)
    keyring = tmp_path / "keyring"
    env["PATH"] = helper_on_path(
        tmp_path,
        "fakering",
        f'case "$1" in\n  store) cat > "{keyring}" ;;\n'
        f'  get) [ -f "{keyring}" ] || exit 1; cat "{keyring}" ;;\n'
        f'  erase) rm -f "{keyring}" ;;\nesac\n',
    )
    auth_json = write_json(
        tmp_path / "run" / "containers" / "auth.json", {"credsStore": "fakering"}
    )
    ca = ["--ca-file", str(tls_registry.ca)]
    logged = run_cli(
        ["login", tls_registry.host, "--username", USER, "--password-stdin", *ca],
        env=env,
        input_text=PASSWORD,
    )
    assert logged.returncode == 0, logged.stderr
    assert json.loads(auth_json.read_text(encoding="utf-8"))["auths"] == {tls_registry.host: {}}
    assert PASSWORD not in auth_json.read_text(encoding="utf-8")
    assert json.loads(keyring.read_text(encoding="utf-8"))["Secret"] == PASSWORD
    pushed = run_cli(["bundle", "push", str(bundle), tls_registry.ref("agents/r:1"), *ca], env=env)
    assert pushed.returncode == 0, pushed.stderr
    assert run_cli(["logout", tls_registry.host], env=env).returncode == 0
    assert not keyring.exists()


def test_a_credential_helper_that_answers_without_end_is_cut_off(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = home_env(tmp_path)
    env["PATH"] = helper_on_path(tmp_path, "flood", "exec cat /dev/zero\n")
    write_json(tmp_path / "run" / "containers" / "auth.json", {"credsStore": "flood"})
    done = run_cli(
        ["bundle", "push", str(bundle), tls_registry.ref("agents/r:1"), "--ca-file",
         str(tls_registry.ca)],
        env=env,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "docker-credential-flood answered more than" in done.stderr


def test_push_help_and_the_man_page_say_where_credentials_come_from(tmp_path: Path) -> None:
    helped = run_cli(["bundle", "push", "--help"])
    assert "containers/auth.json" in helped.stdout and "bundler login" in helped.stdout
    page = run_cli(["man"])
    assert "containers/auth.json" in page.stdout and "login" in page.stdout
