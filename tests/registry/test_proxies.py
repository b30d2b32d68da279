"""Registries reached through a real HTTP proxy (Debian's tinyproxy), as Go's
ProxyFromEnvironment decides: CONNECT for HTTPS, proxy credentials never shown, NO_PROXY
bypassing it.

Loopback is never proxied, so the registry must not be loopback to the client: the test makes
a network namespace joined to this one by a veth pair (10.200.N.0/30, addresses that exist only
between this machine's namespaces). The registry runs inside it, listening on every address:
on 10.201.N.1, an address of the namespace's own loopback interface that this side has no
route to (reached through the proxy alone), and on 10.200.N.2, the namespace's end of the
veth (reached directly). tinyproxy runs inside the namespace too, listening on 10.200.N.2.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.hostile_registry import PROXY_ANSWERS
from support.kit import one_error, run_cli
from support.registry_server import PASSWORD, USER, Registry, free_port, require_registry

PROXY_USER = "proxyuser"
PROXY_PASSWORD = "Proxy-Secret-7731"


@dataclass
class Net:
    name: str
    near: str  # this side's end of the veth
    far: str  # the namespace's end (the proxy and the directly reachable registry address)
    hidden: str  # inside the namespace only


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


@pytest.fixture
def net() -> Iterator[Net]:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tinyproxy") is None:
        pytest.fail("the proxy tests need root, iproute2 and tinyproxy")
    n = os.getpid() % 200 + 20
    name = f"bndl{os.getpid()}"
    near_if, far_if = f"bv{os.getpid()}a", f"bv{os.getpid()}b"
    net = Net(name, f"10.200.{n}.1", f"10.200.{n}.2", f"10.201.{n}.1")
    sh("ip", "netns", "add", name)
    try:
        sh("ip", "link", "add", near_if, "type", "veth", "peer", "name", far_if)
        sh("ip", "link", "set", far_if, "netns", name)
        sh("ip", "addr", "add", f"{net.near}/30", "dev", near_if)
        sh("ip", "link", "set", near_if, "up")
        inside = ("ip", "netns", "exec", name)
        sh(*inside, "ip", "addr", "add", f"{net.far}/30", "dev", far_if)
        sh(*inside, "ip", "link", "set", far_if, "up")
        sh(*inside, "ip", "link", "set", "lo", "up")
        sh(*inside, "ip", "addr", "add", f"{net.hidden}/32", "dev", "lo")
        yield net
    finally:
        subprocess.run(["ip", "link", "del", near_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.fixture
def registry_inside(net: Net, tmp_path: Path) -> Iterator[Registry]:
    require_registry()
    reg = Registry(
        tmp_path / "registry",
        tls=True,
        address=net.hidden,
        listen="0.0.0.0",
        also=net.far,
        netns=net.name,
    ).start()
    try:
        yield reg
    finally:
        reg.kill()


@dataclass
class Proxy:
    url: str
    log: Path

    def connects(self) -> int:
        return self.log.read_text(encoding="utf-8", errors="replace").count("CONNECT")


def start_proxy(
    net: Net, tmp_path: Path, registry_port: int, *, basic_auth: bool = False
) -> Iterator[Proxy]:
    port = free_port()
    folder = tmp_path / f"tinyproxy-{port}"
    folder.mkdir()
    log = folder / "tinyproxy.log"
    lines = [
        f"Port {port}",
        f"Listen {net.far}",
        "Timeout 30",
        f"Allow {net.near}",
        f"ConnectPort {registry_port}",
        f'LogFile "{log}"',
        "LogLevel Connect",
        "MaxClients 20",
    ]
    if basic_auth:
        lines.append(f"BasicAuth {PROXY_USER} {PROXY_PASSWORD}")
    config = folder / "tinyproxy.conf"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    log.touch()
    os.chmod(folder, 0o777)
    os.chmod(log, 0o666)
    proc = subprocess.Popen(
        ["ip", "netns", "exec", net.name, "tinyproxy", "-d", "-c", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection((net.far, port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield Proxy(f"http://{net.far}:{port}", log)
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def proxy(net: Net, registry_inside: Registry, tmp_path: Path) -> Iterator[Proxy]:
    yield from start_proxy(net, tmp_path, registry_inside.port)


@pytest.fixture
def guarded_proxy(net: Net, registry_inside: Registry, tmp_path: Path) -> Iterator[Proxy]:
    yield from start_proxy(net, tmp_path, registry_inside.port, basic_auth=True)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    install = bf.write_install(tmp_path / "install")
    return bf.export_bundle(install, tmp_path / "bundle")


def env_for(tmp_path: Path, registry: Registry, **extra: str) -> dict[str, str]:
    runtime = tmp_path / "run"
    (runtime / "containers").mkdir(parents=True, exist_ok=True)
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    auths = {
        registry.host: {"auth": token},
        f"{registry.also}:{registry.port}": {"auth": token},
    }
    (runtime / "containers" / "auth.json").write_text(json.dumps({"auths": auths}))
    env = {
        "HOME": str(tmp_path),
        "XDG_RUNTIME_DIR": str(runtime),
        "BUNDLER_REGISTRY_TIME_SCALE": "0.01",
    }
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        env[name] = ""
    env.update(extra)
    return env


def push_and_pull(
    registry: Registry, host: str, bundle: Path, tmp_path: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    ref = f"oci://{host}/agents/r:1"
    ca = ["--ca-file", str(registry.ca)]
    pushed = run_cli(["bundle", "push", str(bundle), ref, *ca], env=env, timeout=120)
    out = tmp_path / f"out-{time.monotonic_ns()}"
    pulled = run_cli(["bundle", "pull", ref, str(out), *ca], env=env, timeout=120)
    return pushed, pulled


def test_a_registry_reachable_only_through_the_proxy_is_pushed_to_and_pulled_from(
    registry_inside: Registry, proxy: Proxy, bundle: Path, tmp_path: Path
) -> None:
    env = env_for(tmp_path, registry_inside)
    direct = run_cli(
        ["bundle", "pull", registry_inside.ref("agents/r:1"), str(tmp_path / "x"), "--ca-file",
         str(registry_inside.ca)],
        env=env,
    )  # fmt: skip
    assert direct.returncode == 1 and one_error(direct.stderr), direct.stderr
    env["HTTPS_PROXY"] = proxy.url
    pushed, pulled = push_and_pull(registry_inside, registry_inside.host, bundle, tmp_path, env)
    assert pushed.returncode == 0, pushed.stderr
    assert pulled.returncode == 0, pulled.stderr
    assert proxy.connects() >= 2


def test_no_proxy_bypasses_the_proxy(
    registry_inside: Registry, proxy: Proxy, bundle: Path, tmp_path: Path
) -> None:
    near_host = f"{registry_inside.also}:{registry_inside.port}"
    env = env_for(tmp_path, registry_inside, HTTPS_PROXY=proxy.url)
    pushed, _ = push_and_pull(registry_inside, near_host, bundle, tmp_path, env)
    assert pushed.returncode == 0, pushed.stderr
    through = proxy.connects()
    assert through >= 1
    env["NO_PROXY"] = f"example.org,{registry_inside.also}"
    pushed, pulled = push_and_pull(registry_inside, near_host, bundle, tmp_path, env)
    assert pushed.returncode == 0 and pulled.returncode == 0, pushed.stderr + pulled.stderr
    assert proxy.connects() == through


def test_proxy_credentials_in_its_address_are_sent_and_never_shown(
    registry_inside: Registry, guarded_proxy: Proxy, bundle: Path, tmp_path: Path
) -> None:
    env = env_for(tmp_path, registry_inside)
    env["HTTPS_PROXY"] = guarded_proxy.url.replace(
        "http://", f"http://{PROXY_USER}:{PROXY_PASSWORD}@"
    )
    pushed, pulled = push_and_pull(registry_inside, registry_inside.host, bundle, tmp_path, env)
    assert pushed.returncode == 0, pushed.stderr
    assert pulled.returncode == 0, pulled.stderr
    env["HTTPS_PROXY"] = guarded_proxy.url.replace(
        "http://", f"http://{PROXY_USER}:wrong-{PROXY_PASSWORD}@"
    )
    refused, _ = push_and_pull(registry_inside, registry_inside.host, bundle, tmp_path, env)
    assert refused.returncode == 1 and one_error(refused.stderr), refused.stderr
    assert "asks for credentials" in refused.stderr and "***@" in refused.stderr
    assert PROXY_PASSWORD not in refused.stdout + refused.stderr


@pytest.mark.parametrize("case", PROXY_ANSWERS)
def test_a_proxy_that_refuses_the_tunnel_is_one_line(net: Net, tmp_path: Path, case: str) -> None:
    answer, words = PROXY_ANSWERS[case]
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def close_every_connection() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.recv(4096)
            if answer:
                conn.sendall(answer)
            conn.close()

    thread = threading.Thread(target=close_every_connection, daemon=True)
    thread.start()
    try:
        env = {
            "HOME": str(tmp_path),
            "HTTPS_PROXY": f"http://{PROXY_USER}:{PROXY_PASSWORD}@127.0.0.1:{port}",
            "NO_PROXY": "",
            "BUNDLER_REGISTRY_TIME_SCALE": "0.01",
        }
        done = run_cli(
            ["bundle", "pull", f"oci://{net.hidden}:5000/agents/r:1", str(tmp_path / "out")],
            env=env,
            timeout=60,
        )
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert words in done.stderr
    assert PROXY_PASSWORD not in done.stdout + done.stderr
