"""The CLI as a real process, forked from an interpreter that has already imported the package.

Most of a test's CLI run used to be the interpreter starting and importing bundler. A server
process per test worker imports every command's modules once, then forks a child for each
run: the child is a process of its own, with its own pid, descriptors, environment, working
folder, umask and exit status, running what ``python -m bundler`` runs (``bundler.__main__``)
on pipes the test reads, as :func:`subprocess.run` would give it. Only the start-up is shared.

What start-up decides is not shared, so a run the server cannot stand for is started afresh by
the caller (:func:`usable`): an environment whose interpreter settings (``PYTHON*``, the
locale) differ from the server's, a run given its own stdin, or a second run while one is under
way (runs a test makes side by side must overlap, as processes would).

Run as a script, this module is the server: ``python cliserver.py FD`` serves the
``SOCK_SEQPACKET`` socket ``FD`` until its other end closes.
"""

from __future__ import annotations

import contextlib
import json
import locale
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

_STARTUP_KEYS = ("PYTHON", "LANG", "LC_", "LANGUAGE")
"""Variables the interpreter reads as it starts: a run whose values differ is started afresh."""
_UNREAD = frozenset({"PYTHONDONTWRITEBYTECODE"})
"""...except what changes only whether imports leave bytecode files behind."""


def _startup_settings(env: Mapping[str, str]) -> dict[str, str]:
    return {
        key: value
        for key, value in env.items()
        if key.startswith(_STARTUP_KEYS) and key not in _UNREAD
    }


class CliServer:
    """The test side: one server process, asked for one run at a time."""

    def __init__(self, env: Mapping[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.settings = _startup_settings(env)
        # pipes, as a run's are: the interpreter makes its standard streams for the kind of
        # file it finds (a pipe cannot seek, a terminal is line-buffered), and a child keeps
        # the server's streams over its own pipes
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            cwd="/",
        )
        assert self.process.stdin is not None
        self.process.stdin.close()
        theirs.close()
        self.sock = ours
        self.busy = threading.Lock()

    def usable(self, env: Mapping[str, str]) -> bool:
        """Whether a run in ``env`` starts as it would in an interpreter of its own."""
        return self.process.poll() is None and _startup_settings(env) == self.settings

    def run(
        self,
        argv: Sequence[str],
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        input_text: str | None,
        errors: str | None,
        timeout: float,
    ) -> subprocess.CompletedProcess[str]:
        """One run of the CLI with ``args`` (``argv``: the command it stands for, as reported)."""
        umask = os.umask(0o022)
        os.umask(umask)
        request = json.dumps({"args": list(args), "env": dict(env), "cwd": cwd, "umask": umask})
        pipes = [os.pipe() for _ in range(3)]
        child_ends = [pipes[0][0], pipes[1][1], pipes[2][1]]
        try:
            socket.send_fds(self.sock, [request.encode()], child_ends)
        finally:
            for fd in child_ends:
                os.close(fd)
        pid = int(self._answer()["pid"])
        deadline = time.monotonic() + timeout
        encoding = locale.getpreferredencoding(False)
        stdin = input_text.encode(encoding, errors or "strict") if input_text else b""
        out, err, timed_out = _exchange(pipes[0][1], pipes[1][0], pipes[2][0], stdin, deadline)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        status = int(self._answer()["status"])
        stdout, stderr = _text(out, encoding, errors), _text(err, encoding, errors)
        if timed_out:
            raise subprocess.TimeoutExpired(list(argv), timeout, stdout, stderr)
        return subprocess.CompletedProcess(
            list(argv), os.waitstatus_to_exitcode(status), stdout, stderr
        )

    def _answer(self) -> dict[str, int]:
        message = self.sock.recv(4096)
        if not message:
            code = self.process.wait()
            said = self.process.stderr.read() if self.process.stderr else b""
            raise RuntimeError(f"the CLI server ended (exit {code}): {said.decode()[-2000:]}")
        answer: dict[str, int] = json.loads(message)
        return answer


def _text(data: bytes, encoding: str, errors: str | None) -> str:
    # what subprocess.run(text=True) gives: decoded, universal newlines
    return data.decode(encoding, errors or "strict").replace("\r\n", "\n").replace("\r", "\n")


def _exchange(
    stdin: int, stdout: int, stderr: int, data: bytes, deadline: float
) -> tuple[bytes, bytes, bool]:
    """Write ``data`` to the child and read both its outputs to their end (or the deadline)."""
    chunks: dict[int, list[bytes]] = {stdout: [], stderr: []}
    pending = memoryview(data)
    with selectors.DefaultSelector() as selector:
        if pending:
            os.set_blocking(stdin, False)
            selector.register(stdin, selectors.EVENT_WRITE)
        else:
            os.close(stdin)
        for fd in (stdout, stderr):
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                for key in list(selector.get_map().values()):
                    selector.unregister(key.fd)
                    os.close(key.fd)
                return b"".join(chunks[stdout]), b"".join(chunks[stderr]), True
            for key, _events in selector.select(left):
                if key.fd == stdin:
                    try:
                        pending = pending[os.write(stdin, pending[: 1 << 16]) :]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(stdin)
                        os.close(stdin)
                    continue
                block = os.read(key.fd, 1 << 16)
                if block:
                    chunks[key.fd].append(block)
                else:
                    selector.unregister(key.fd)
                    os.close(key.fd)
    return b"".join(chunks[stdout]), b"".join(chunks[stderr]), False


def _preload() -> None:
    """Import what the commands import (each once, in the server), as the nobody start does. A
    module that cannot be imported here is left to the run that needs it, which then fails as
    a fresh one would."""
    import importlib

    import bundler.api
    import bundler.cli
    import bundler.cli.output  # noqa: F401
    from bundler.fs import interrupts  # noqa: F401

    modules = [target.split(":")[0] for target in bundler.cli.HANDLERS.values()]
    modules += [
        "bundler.bundle.manifest",
        "bundler.fs.snapshot",
        "bundler.rules.risk",
        "bundler.rules.schema",
        "bundler.rules.validate",
        "bundler.home.agentyaml",
        "jsonschema",
        "gettext",
    ]
    for module in modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    for name in bundler.api.__all__:
        with contextlib.suppress(ImportError, AttributeError):
            getattr(bundler.api, name)


def _child(sock: socket.socket, request: dict[str, object], fds: list[int]) -> None:
    """In the forked child: become the run asked for, then run ``python -m bundler``."""
    sock.close()
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.umask(int(request["umask"]))  # type: ignore[call-overload]
    os.chdir(str(request["cwd"]))
    os.environ.clear()
    os.environ.update(request["env"])  # type: ignore[arg-type]
    sys.path[0] = os.getcwd()  # as ``python -m`` puts the working folder first
    args = [str(arg) for arg in request["args"]]  # type: ignore[attr-defined]
    import bundler.__main__

    sys.argv = [bundler.__main__.__file__, *args]
    bundler.__main__.run()


def _serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    _preload()
    while True:
        message, fds, _flags, _addr = socket.recv_fds(sock, 1 << 22, 3)
        if not message:
            return
        pid = os.fork()
        if pid == 0:
            _child(sock, json.loads(message), fds)
            sys.exit(0)  # run() always exits; never reached
        for child_fd in fds:
            os.close(child_fd)
        sock.send(json.dumps({"pid": pid}).encode())
        _pid, status = os.waitpid(pid, 0)
        sock.send(json.dumps({"status": status}).encode())


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
