"""System-call fault injection with strace, for black-box crash and I/O-fault tests (06 §2 R1/R2).

Reusable by every crash test of the project::

    reason = ptrace_unavailable()          # skip the test with this reason when not None
    calls = trace_calls(cmd, ["rename", "renameat2", "fsync"], env=env, relevant="/tmp/x")
    for call in calls:                     # one run per call index of each system call
        result = run_with_fault(cmd, call.syscall, call.index, "EIO", env=env)
        assert result.fired
    # the kill-at-every-step sweep, written once: reset, kill, check what was left
    kill_at_each(cmd, sample(calls, slow_sample_count()), check, reset=reset, env=env)

strace counts ``when=N`` per system call (not across the set) and per process, so a call is
addressed as (syscall, index-within-that-syscall) in the traced command's own process; calls of
its children (``ctypes.util.find_library`` runs ``ldconfig``, for one) are numbered apart and
left out. Runs must be deterministic for the indexes of
a clean traced run to hit the same calls under injection: set ``PYTHONDONTWRITEBYTECODE=1`` and a
fixed ``SOURCE_DATE_EPOCH`` in ``env``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

Fault = Literal["SIGKILL", "SIGINT", "EIO", "ENOSPC", "EMFILE", "EAGAIN"]

_LINE_RE = re.compile(r"^(?:(\d+)\s+)?([a-z_0-9]+)\(")
_CWD_RE = re.compile(r"AT_FDCWD<[^>]*>")


@dataclass(frozen=True)
class Call:
    """One traced system call: its name, its 1-based index among calls of that name, the line."""

    syscall: str
    index: int
    line: str


@dataclass(frozen=True)
class FaultRun:
    """The outcome of one run under injection."""

    returncode: int
    stdout: str
    stderr: str
    fired: bool
    killed: bool
    log: str


@cache
def ptrace_unavailable() -> str | None:
    """Why strace cannot be used here (a reason for ``pytest.skip``), or None when it can."""
    strace = shutil.which("strace")
    if strace is None:
        return "strace is not installed (apt install strace)"
    probe = subprocess.run(
        [strace, "-qq", "-e", "trace=none", "-e", "inject=getpid:error=EIO:when=1", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"ptrace is not permitted here: {probe.stderr.strip()[:200]}"
    return None


def _strace(log: str, trace: Sequence[str], extra: Sequence[str]) -> list[str]:
    strace = shutil.which("strace") or "strace"
    # -y: decode descriptors into paths, so callers can pick the calls on their own files;
    # execve: the command's own exec is the log's first line, which tells its pid from children's
    traced = ",".join(["execve", *trace])
    options = ["-f", "-qq", "-y", "-e", "signal=none", "-e", f"trace={traced}", "-o", log]
    return [strace, *options, *extra, "--"]


def _run(
    argv: list[str], env: Mapping[str, str] | None, cwd: str | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=None if env is None else dict(env),
        cwd=cwd,
        timeout=timeout,
    )


def parse_calls(log: str, syscalls: Sequence[str]) -> list[Call]:
    """The calls of ``syscalls`` made by the first process of an strace log, numbered per call."""
    counters: dict[str, int] = {}
    calls: list[Call] = []
    wanted = set(syscalls)
    main_pid: str | None = None
    for line in log.splitlines():
        match = _LINE_RE.match(line)
        if match is None:
            continue
        pid, name = match.groups()
        if main_pid is None:
            main_pid = pid
        if pid != main_pid or "resumed>" in line or name not in wanted:
            continue
        counters[name] = counters.get(name, 0) + 1
        calls.append(Call(name, counters[name], line))
    return calls


def trace_calls(
    cmd: Sequence[str],
    syscalls: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    relevant: str | None = None,
    timeout: float = 120,
) -> tuple[subprocess.CompletedProcess[str], list[Call]]:
    """Run ``cmd`` once under strace, without faults, and list its calls of ``syscalls``.

    With ``relevant``, only calls whose line names that path fragment (in an argument or a
    decoded descriptor, the working directory aside) are returned; their indexes still count
    every call, so they can be passed to :func:`run_with_fault` unchanged.
    """
    done, log = trace_log(cmd, syscalls, env=env, cwd=cwd, timeout=timeout)
    calls = parse_calls(log, syscalls)
    if relevant is not None:
        calls = [call for call in calls if relevant in _CWD_RE.sub("", call.line)]
    return done, calls


def trace_log(
    cmd: Sequence[str],
    syscalls: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout: float = 120,
    inject: str | None = None,
) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run ``cmd`` once under strace: its outcome and the whole log of its calls of
    ``syscalls``, every thread's and child's, in the order they happened.

    ``inject`` is an strace injection (``"syncfs:error=EIO:delay_enter=300000:when=1"``; none
    by default): a delay makes a race between threads go one way every time.
    """
    # --seccomp-bpf: only the traced calls stop the program, which otherwise runs at its own
    # speed (a delay injected into one thread is then long against what the others do)
    extra = ["--seccomp-bpf"] + ([] if inject is None else ["-e", f"inject={inject}"])
    with tempfile.TemporaryDirectory(prefix="faultinject-") as tmp:
        log_path = os.path.join(tmp, "log")
        done = _run([*_strace(log_path, syscalls, extra), *cmd], env, cwd, timeout)
        with open(log_path, encoding="utf-8", errors="replace") as handle:
            return done, handle.read()


def run_with_fault(
    cmd: Sequence[str],
    syscall: str,
    when: int,
    fault: Fault,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout: float = 120,
) -> FaultRun:
    """Run ``cmd`` with the ``when``-th call of ``syscall`` killed (SIGKILL), interrupted
    (SIGINT, as Ctrl-C: the call itself still runs, the program's handler after it) or failed
    (errno).

    ``fired`` says whether the injection happened (the program may have made fewer calls);
    ``killed`` whether the process died of SIGKILL.
    """
    action = f"signal={fault}" if fault.startswith("SIG") else f"error={fault}"
    inject = ["-e", f"inject={syscall}:{action}:when={when}"]
    if fault == "SIGINT":
        inject += ["-e", "signal=SIGINT"]  # its delivery is logged: strace marks no call for it
    with tempfile.TemporaryDirectory(prefix="faultinject-") as tmp:
        log_path = os.path.join(tmp, "log")
        done = _run([*_strace(log_path, [syscall], inject), *cmd], env, cwd, timeout)
        with open(log_path, encoding="utf-8", errors="replace") as handle:
            log = handle.read()
    killed = done.returncode in (-9, 128 + 9)
    lines = log.splitlines()
    main_pid = lines[0].split(" ", 1)[0] if lines else ""
    mark = "--- SIGINT {si_signo=SIGINT, si_code=SI_KERNEL" if fault == "SIGINT" else "(INJECTED)"
    fired = any(line.startswith(main_pid + " ") and mark in line for line in lines)
    fired = fired or (fault == "SIGKILL" and killed)
    return FaultRun(done.returncode, done.stdout, done.stderr, fired, killed, log)


def run_with_sigints(
    cmd: Sequence[str],
    at: Sequence[tuple[str, int]],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout: float = 120,
) -> FaultRun:
    """Run ``cmd`` with a SIGINT delivered after each ``(syscall, when)`` of ``at`` (the
    ``when``-th call of that system call, each its own): Ctrl-C pressed again and again at
    known moments. ``fired`` says whether every one of them was delivered."""
    inject: list[str] = []
    for syscall, when in at:
        inject += ["-e", f"inject={syscall}:signal=SIGINT:when={when}"]
    inject += ["-e", "signal=SIGINT"]
    traced = sorted({syscall for syscall, _ in at})
    with tempfile.TemporaryDirectory(prefix="faultinject-") as tmp:
        log_path = os.path.join(tmp, "log")
        done = _run([*_strace(log_path, traced, inject), *cmd], env, cwd, timeout)
        with open(log_path, encoding="utf-8", errors="replace") as handle:
            log = handle.read()
    lines = log.splitlines()
    main_pid = lines[0].split(" ", 1)[0] if lines else ""
    mark = "--- SIGINT {si_signo=SIGINT, si_code=SI_KERNEL"
    delivered = sum(1 for line in lines if line.startswith(main_pid + " ") and mark in line)
    return FaultRun(done.returncode, done.stdout, done.stderr, delivered == len(at), False, log)


def kill_at_each(
    cmd: Sequence[str],
    calls: Sequence[Call],
    check: Callable[[Call, FaultRun], None],
    *,
    reset: Callable[[], None],
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    every_kill_lands: bool = False,
) -> int:
    """Kill ``cmd`` (SIGKILL) at each of ``calls`` in turn; the number of runs the kill ended.

    ``reset`` puts the world back before every run, ``check(call, run)`` asserts what the run
    left (recovery is the caller's). A run the kill missed (this time the program made fewer
    calls) must have succeeded, and at least one kill must have landed: a sweep that killed
    nothing tested nothing. ``every_kill_lands`` asks that each one did.
    """
    killed = 0
    for call in calls:
        reset()
        run = run_with_fault(cmd, call.syscall, call.index, "SIGKILL", env=env, cwd=cwd)
        if every_kill_lands:
            assert run.fired, f"{call}: the kill never landed"
        if not run.killed:
            assert run.returncode == 0, f"{call}: not killed, yet failed: {run.stderr}"
        killed += run.killed
        check(call, run)
    assert killed, "no injected SIGKILL fired"
    return killed


def slow_sample_count() -> int | None:
    """How many call indexes a slow sweep tries: ``BUNDLER_SLOW_SAMPLE`` (CI), else all (None)."""
    raw = os.environ.get("BUNDLER_SLOW_SAMPLE")
    return int(raw) if raw else None


def sample(items: Sequence[Call], count: int | None) -> list[Call]:
    """An evenly spread sample of ``count`` items (all of them when ``count`` is None or larger)."""
    if count is None or count >= len(items):
        return list(items)
    if count <= 0:
        return []
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


# --- what a traced run read, from a trace_log(cmd, READS) log ---------------------------------

READS = ["read", "pread64", "readv"]
"""The calls that read a file: what :func:`bytes_read` counts in a :func:`trace_log` log."""
_END = r"(?:(<unfinished \.\.\.>)|= (-?\d+)(?: \w+ \(.*\))?)$"
_CALL = re.compile(r"^(\d+)\s+(read|pread64|readv)\((\d+)<([^>]*)>.*" + _END)
_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (read|pread64|readv) resumed>.*= (-?\d+)(?: \w+ \(.*\))?$")


def bytes_read_below(log: str, folder: Path) -> dict[str, int]:
    """Bytes read per file below ``folder`` (read, pread64, readv; every thread)."""
    totals: dict[str, int] = {}
    waiting: dict[str, str | None] = {}
    inside = f"{folder}/"
    for line in log.splitlines():
        call = _CALL.match(line)
        if call is not None:
            pid, _name, _fd, where, unfinished, result = call.groups()
            if unfinished:
                waiting[pid] = where if where.startswith(inside) else None
            elif where.startswith(inside) and int(result) > 0:
                totals[where] = totals.get(where, 0) + int(result)
            continue
        resumed = _RESUMED.match(line)
        if resumed is not None:
            where = waiting.pop(resumed[1], None)
            if where is not None and int(resumed[3]) > 0:
                totals[where] = totals.get(where, 0) + int(resumed[3])
    return totals


def bytes_read(log: str, path: Path) -> int:
    """The bytes every thread of an strace log read from ``path``."""
    return bytes_read_below(log, path.parent).get(str(path), 0)


def in_a_process_of_its_own(body: Callable[[], None]) -> None:
    """Run ``body`` in a child forked from this thread, where it is the only thread, and raise
    its failure here. For what holds of the command line's process and not of pytest's: its
    signal masks (a signal reaches a thread that does not block it), the threads it counts."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        os.close(read)
        code = 0
        try:
            body()
        except BaseException:
            os.write(write, traceback.format_exc().encode(errors="replace"))
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as said:
        failure = said.read().decode(errors="replace")
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, failure
