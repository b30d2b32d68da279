"""The shared test kit: run the real CLI, snapshot a tree, check the one-line error, syscall lists.

Every test file used to carry its own copy of these; they live here once so a change to how the
CLI is started (its environment, its privileges) or to what "nothing changed" means is made in
one place. Keep it free of assertions: callers state what they expect.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from support.cliserver import CliServer

# Variables the CLI reads (ZeroClaw's overrides and config dir, the agents directory): a test
# that wants one sets it in ``env``; one inherited from the shell running pytest must not leak in.
_FOREIGN_PREFIXES = ("ZEROCLAW_", "BXAGENTS_")

# The interpreter lives under /root (mode 0700 here), so the child starts as root, imports every
# handler and every name of the API (so the library modules the commands reach through it), loads
# the schemas and validators (package data, read lazily; Agent.yaml's validator imports more of
# the standard library) and what argparse imports lazily (gettext, locale), then drops to uid/gid
# 65534 before it runs: the command itself is unprivileged.
AS_NOBODY = """
import gettext, importlib, json, locale, os, shutil, sqlite3, sys, tempfile
from pathlib import Path
import bundler.api, bundler.cli, bundler.cli.output
for target in bundler.cli.HANDLERS.values():
    importlib.import_module(target.split(":")[0])
for name in bundler.api.__all__:  # the handlers reach the library through the API, lazily
    getattr(bundler.api, name)
import bundler.bundle.manifest, bundler.fs.snapshot, bundler.rules.risk, bundler.rules.schema
import bundler.bundle.archive_spill  # inspect's spill files (and the secrets module they name)
import bundler.rules.validate
import jsonschema  # it names the fault of an unsound Agent.yaml (home commands), imported lazily
bundler.rules.schema.config_schema()
bundler.rules.schema.load("bundle-manifest.schema.json")
bundler.rules.validate.validate({}, Path("/nonexistent"))
bundler.bundle.manifest._manifest_validator()
import bundler.errors, bundler.home.agentyaml
try:
    bundler.home.agentyaml.validate_agent_yaml({})
except bundler.errors.InvalidInput:
    pass
bundler.cli.build_parser()
os.setgroups([]); os.setgid(65534); os.setuid(65534)
sys.exit(bundler.cli.main(sys.argv[1:]))
"""


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``os.environ`` without ZEROCLAW_* and BXAGENTS_*, then ``extra`` added."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_PREFIXES)}
    env.update(extra or {})
    return env


def cli_command(*, as_nobody: bool = False) -> list[str]:
    """The argv prefix that starts the CLI (as uid 65534 when ``as_nobody``)."""
    if as_nobody:
        return [sys.executable, "-c", AS_NOBODY]
    return [sys.executable, "-m", "bundler"]


# The CLI, reporting its peak resident memory (VmHWM, in KiB) into the file its first argument
# names: the kernel counts it for the process's own address space, from its exec on. A child's
# ru_maxrss would not do: it starts at the parent's resident size when it was forked, which for
# pytest is more than the CLI ever uses.
PEAK_RSS = """
import atexit, runpy, sys
out = sys.argv.pop(1)
def peak():
    with open("/proc/self/status") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(out, "w") as sink:
        sink.write(kib)
atexit.register(peak)
sys.argv[0] = "bundler"
runpy.run_module("bundler", run_name="__main__", alter_sys=True)
"""


def run_cli_peak(
    args: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 600
) -> tuple[subprocess.CompletedProcess[str], float]:
    """:func:`run_cli` (without its options), and the command's peak resident memory in MiB."""
    import tempfile

    with tempfile.NamedTemporaryFile("r") as sink:
        proc = subprocess.run(
            [sys.executable, "-c", PEAK_RSS, sink.name, *args],
            capture_output=True,
            text=True,
            env=clean_env(env),
            timeout=timeout,
        )
        return proc, int(sink.read() or 0) / 1024


def run_cli(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    exact_env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    input_text: str | None = None,
    stdin: int | None = None,
    timeout: float = 120,
    as_nobody: bool = False,
    errors: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m bundler ARGS`` in a real process and capture its text output.

    ``env`` entries are added to :func:`clean_env`; ``exact_env`` is used as the whole
    environment instead (for helpers that build one themselves). ``as_nobody`` runs the command
    as uid/gid 65534 (the caller must be root); ``errors`` is passed to the decoder, for output
    that may not be UTF-8. The process is forked from :mod:`support.cliserver` when that stands
    for a fresh start, and started afresh otherwise.
    """
    full_env = dict(exact_env) if exact_env is not None else clean_env(env)
    argv = [*cli_command(as_nobody=as_nobody), *args]
    server = None if as_nobody or stdin is not None else _server()
    if server is not None and server.usable(full_env) and server.busy.acquire(blocking=False):
        try:
            where = os.fspath(cwd) if cwd is not None else os.getcwd()
            return server.run(argv, args, full_env, where, input_text, errors, timeout)
        finally:
            server.busy.release()
    return subprocess.run(
        argv,
        input=input_text,
        stdin=stdin,
        capture_output=True,
        text=True,
        errors=errors,
        env=full_env,
        cwd=cwd,
        timeout=timeout,
    )


_servers: list[CliServer] = []


def _server() -> CliServer | None:
    """This test process's CLI server, started on first use (again if it ended); None where
    ``BUNDLER_TEST_FRESH_CLI=1`` asks for a fresh interpreter every run."""
    if os.environ.get("BUNDLER_TEST_FRESH_CLI") == "1":
        return None
    if not _servers or _servers[0].process.poll() is not None:
        _servers[:] = [CliServer(clean_env())]
    return _servers[0]


def one_error(stderr: str) -> bool:
    """True when ``stderr`` is one ``error:`` line, optionally followed by the command that
    repairs the failure, alone and indented on the next line (05 §3). Warnings
    said before the command started (``--secret`` is visible to others) may precede it. A
    refusal that lists what it found (every secret hit of an export) says so
    on its one line, "(listed below)", and the list follows, one indented item a line."""
    lines = stderr.strip("\n").splitlines()
    while lines and lines[0].startswith("warning: "):
        lines.pop(0)
    if not lines or not lines[0].startswith("error: "):
        return False
    if len(lines) == 1:
        return True
    if "(listed below)" in lines[0]:
        return all(line.startswith("  ") and line.strip() for line in lines[1:])
    return len(lines) == 2 and lines[0].endswith("; run:") and lines[1].startswith("  bundler ")


Entry = tuple[Any, ...]


def tree_snapshot(
    root: Path,
    *,
    mtimes: bool = False,
    dir_mtimes: bool = False,
    inodes: bool = False,
    sizes: bool = False,
    include_root: bool = False,
) -> dict[str, Entry]:
    """Every entry below ``root`` (links not followed), keyed by its relative POSIX path:
    ``(kind, mode, content)`` where kind is file/dir/link/other and content the file's bytes,
    the link's target (str) or None; then ``mtime_ns`` when ``mtimes`` (folders' only with
    ``dir_mtimes``: adding or removing in them moves it), then ``st_ino`` when ``inodes`` (a
    file replaced by an identical copy is a change), then ``st_size`` when ``sizes`` (a folder
    that held a temporary entry may have grown). FIFOs and sockets are never opened.
    ``include_root`` records ``root`` itself as ``"."``.
    """
    found: dict[str, Entry] = {}
    paths = [root] if include_root else []
    for folder, dirs, files in os.walk(root):
        paths.extend(Path(folder) / name for name in dirs + files)
    for path in paths:
        st = os.lstat(path)
        content: bytes | str | None = None
        if stat.S_ISREG(st.st_mode):
            kind, content = "file", path.read_bytes()
        elif stat.S_ISLNK(st.st_mode):
            kind, content = "link", os.readlink(path)
        elif stat.S_ISDIR(st.st_mode):
            kind = "dir"
        else:
            kind = "other"
        entry: Entry = (kind, st.st_mode, content)
        if mtimes:
            entry += (st.st_mtime_ns if kind != "dir" or dir_mtimes else 0,)
        if inodes:
            entry += (st.st_ino,)
        if sizes:
            entry += (st.st_size,)
        found[path.relative_to(root).as_posix() if path != root else "."] = entry
    return found


# The calls a crash test kills the CLI at: every step of a swap or a removal and every flush
# that orders them (R1), and the calls a fault is injected into (R2: ENOSPC/EIO on write and
# flush, a refused rename, a refused open).
SWAP_SYSCALLS = [
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "rmdir",
    "fsync",
    "fdatasync",
    "syncfs",
]
FAULT_SYSCALLS = ["write", "fsync", "syncfs", "renameat2", "openat"]
RENAME_SYSCALLS = ["rename", "renameat", "renameat2"]


class Terminal:
    """The CLI run with a pseudo-terminal as its controlling terminal and stdin (stdout and
    stderr are pipes): for prompts, which getpass asks on the terminal. Type with
    :meth:`answer`, then :meth:`finish`. Use it as a context manager (it kills the process if a
    test fails midway)."""

    def __init__(self, args: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
        import fcntl
        import pty
        import termios

        self.master, slave = pty.openpty()

        def controlling_terminal() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.screen = b""
        self.proc = subprocess.Popen(
            [*cli_command(), *args],
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=controlling_terminal,
            env=clean_env(env),
        )
        os.close(slave)

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)

    def answer(self, prompt: bytes, typed: bytes) -> None:
        """Wait until ``prompt`` is on the screen, then type ``typed`` (getpass flushes pending
        input when it turns echo off: type only once asked)."""
        import select

        while prompt not in self.screen:
            ready, _, _ = select.select([self.master], [], [], 60)
            if not ready:
                raise TimeoutError(f"no prompt {prompt!r}; the screen: {self.screen!r}")
            self.screen += os.read(self.master, 65536)
        self.screen = self.screen.replace(prompt, b"<asked>", 1)
        os.write(self.master, typed)

    def finish(self, timeout: float = 120) -> tuple[int, bytes, bytes]:
        """Wait for the end: (exit status, stdout, stderr)."""
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err
