"""The data home (04 §1): where it is, what the first start makes, how big it is.

:func:`resolve_home` only reads (Agent.yaml, the environment, whether ``data/chat.db``
exists); it never creates a file or folder. :func:`init_home` is the one function here that
writes, and it does so descriptor-relative below the home so a symbolic link planted among the
home's entries is refused rather than followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundler.errors import InvalidConfig, Locked, Refused, UnsuitablePath, os_failure
from bundler.fs.durable import fsync_dir, lock_now, open_dir, temporary_name, write_synced
from bundler.home.agentyaml import agent_name, load_agent_yaml
from bundler.rules.names import escape_display

DATABASE_NAME = "chat.db"
SIDECARS = ("-wal", "-shm", "-journal")
FOLDERS = ("files", "skills", "backups")
README_NAME = "README.md"
README_TEXT = """\
# Agent data home

This folder is an agent's data home: everything the agent keeps between runs.

- `chat.db`   conversations, the agent's memory of them, notes, access tokens, secrets and
              usage counts (SQLite; it holds secrets, so keep this folder private)
- `files/`    what the agent writes (its `files` volume)
- `skills/`   skills the agent saved
- `backups/`  backups written by `bundler home backup`

Back it up with `bundler home backup`; restore with `bundler home restore FILE`.
This file is written once and never overwritten.
"""

_SAFE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")
_NAME_MAX = 255

RULE_SOURCES = {
    1: "the environment variable BXAGENTS_HOME",
    2: "data.home in Agent.yaml",
    3: "the folder of BXAGENTS_DB",
    4: "data/ in the project, which already holds chat.db",
    5: "~/.bxagents/<agent name>, the convention",
    6: "data/ in the project, for an agent without a name",
}


@dataclass(frozen=True)
class HomeResolution:
    """Where the data home is and why.

    ``rule`` is the number (1-6) of the rule of 04 §1.1 that matched and ``source`` says it in
    words. ``database`` is ``$BXAGENTS_DB`` when set, else ``<home>/chat.db``. ``agent`` is the
    agent's name from Agent.yaml (None without one); ``project`` the project folder.
    """

    home: Path
    rule: int
    source: str
    database: Path
    agent: str | None = None
    project: Path | None = None


def safe_folder_name(name: str) -> str:
    """The agent name as a folder name (04 §1.1): ASCII letters, digits, ``.``, ``-`` and ``_``
    stay; every other code point becomes ``-``. A result of dots only, an empty name or a result
    longer than 255 bytes is :class:`InvalidInput`."""
    folder = "".join(ch if ch in _SAFE_CHARS else "-" for ch in name)
    if not folder:
        raise InvalidConfig("Agent.yaml: name: must not be empty", path="Agent.yaml:name")
    if set(folder) == {"."}:
        raise InvalidConfig(
            "Agent.yaml: name: a name made only of dots cannot be a folder name; "
            "choose another name or set data.home",
            path="Agent.yaml:name",
        )
    if len(folder) > _NAME_MAX:
        raise InvalidConfig(
            f"Agent.yaml: name: longer than {_NAME_MAX} characters; "
            "choose a shorter name or set data.home",
            path="Agent.yaml:name",
        )
    return folder


def user_home(environ: Mapping[str, str]) -> Path:
    """The user's home folder: ``$HOME`` when set (as ``Path.home()`` does), else the password
    database."""
    value = environ.get("HOME")
    if value:
        return Path(os.path.abspath(value))
    return Path(pwd.getpwuid(os.getuid()).pw_dir)


def expand_path(text: str, *, base: Path, home: Path, where: str) -> Path:
    """``text`` as an absolute path: ``~`` and ``~/x`` against ``home``, ``~user`` from the
    password database, a relative path against ``base``. Lexically normalised, not resolved."""
    if "\0" in text:
        raise InvalidConfig(f"{_shown(where)}: contains a NUL character", path=where)
    if text == "~" or text.startswith("~/"):
        path = str(home) + text[1:]
    elif text.startswith("~"):
        user, _, rest = text[1:].partition("/")
        try:
            path = os.path.join(pwd.getpwnam(user).pw_dir, rest)
        except KeyError:
            raise InvalidConfig(
                f"{_shown(where)}: no user named '{escape_display(user)}'",
                path=where,
            ) from None
    else:
        path = os.path.join(base, text)
    return Path(os.path.normpath(path))


def _shown(where: str) -> str:
    """``Agent.yaml:data.home`` as messages print it: ``Agent.yaml: data.home``."""
    return where.replace(":", ": ", 1) if where.startswith("Agent.yaml:") else where


def is_within(inner: Path, outer: Path) -> bool:
    """True when ``inner`` is ``outer`` or below it (both absolute and normalised)."""
    return inner == outer or outer in inner.parents


def home_problem(home: Path, user: Path) -> str | None:
    """Why ``home`` cannot be a data home, or None: it is ``/`` or equals or contains the user's
    home folder ``user``, lexically or by real path, so that neither ``..`` nor a symbolic link
    (on either side) smuggles one in."""
    users = {user, Path(os.path.realpath(user))}
    for candidate in (home, Path(os.path.realpath(home))):
        if candidate == Path("/"):
            return "the data home cannot be / (the whole disk)"
        for folder in users:
            if is_within(folder, candidate):
                return (
                    "the data home cannot be or contain the user's home folder "
                    f"{escape_display(str(folder))}"
                )
    return None


def _check_home(home: Path, user: Path, where: str) -> None:
    problem = home_problem(home, user)
    if problem is not None:
        raise InvalidConfig(f"{_shown(where)}: {problem}", path=where)


def _lexists(path: Path) -> bool:
    try:
        os.lstat(path)
    except OSError:
        return False
    return True


def resolve_home(project: Path, *, environ: Mapping[str, str] | None = None) -> HomeResolution:
    """Find the data home of ``project`` by the six rules of 04 §1.1, first match wins.

    Reads ``Agent.yaml`` (needed unless ``BXAGENTS_HOME`` or ``BXAGENTS_DB`` names the home)
    and the environment (``os.environ`` unless ``environ`` is given). Creates nothing.
    Raises :class:`InvalidInput` for a bad Agent.yaml, a name that cannot be a folder, or a home
    that is ``/`` or equals or contains the user's home folder.
    """
    return resolve_home_with_config(project, environ=environ)[0]


def resolve_home_with_config(
    project: Path, *, environ: Mapping[str, str] | None = None
) -> tuple[HomeResolution, dict[str, Any]]:
    """:func:`resolve_home` and the validated Agent.yaml it read (empty when absent), so
    callers that need both read the file once."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    project = Path(os.path.abspath(project))
    user = user_home(env)
    env_home = env.get("BXAGENTS_HOME", "")
    env_db = env.get("BXAGENTS_DB", "")
    env_db_names_chat = bool(env_db) and os.path.basename(env_db) == DATABASE_NAME
    document: dict[str, Any] = load_agent_yaml(
        project, required=not (env_home or env_db_names_chat)
    )
    name = agent_name(document)
    data = document.get("data")
    data_home = data.get("home") if isinstance(data, dict) else None
    cwd = Path.cwd()

    if env_home:
        rule, where = 1, "BXAGENTS_HOME"
        home = expand_path(env_home, base=cwd, home=user, where=where)
    elif isinstance(data_home, str):
        rule, where = 2, "Agent.yaml:data.home"
        home = expand_path(data_home, base=project, home=user, where=where)
    elif env_db_names_chat:
        rule, where = 3, "BXAGENTS_DB"
        home = expand_path(env_db, base=cwd, home=user, where=where).parent
    elif _lexists(project / "data" / DATABASE_NAME):
        rule, where = 4, "data/chat.db"
        home = project / "data"
    elif name is not None:
        rule, where = 5, "Agent.yaml:name"
        home = user / ".bxagents" / safe_folder_name(name)
    else:
        rule, where = 6, "data/"
        home = project / "data"
    _check_home(home, user, where)
    if env_db:
        database = expand_path(env_db, base=cwd, home=user, where="BXAGENTS_DB")
    else:
        database = home / DATABASE_NAME
    source = RULE_SOURCES[rule]
    if rule == 5 and name is not None:
        source = f"~/.bxagents/{safe_folder_name(name)}, the convention (agent name)"
    return HomeResolution(home, rule, source, database, name, project), document


def lock_home(home_fd: int, *, shared: bool = False) -> bool:
    """Take the home's lock, an ``flock`` on the home folder held until ``home_fd`` closes;
    False when another process holds it in a way that excludes this one.

    A restore and ``recover --home`` take it exclusively: one at a time, since a restore's
    staging folder exists, unlocked, between its ``mkdir`` and its own lock, and a second one
    must not take it for a dead one's then. A backup takes it shared: backups run side by
    side, but never beside a restore (whose swap would put half of one state and half of the
    other in the zip) nor beside a recovery (which would remove the temporaries of a backup
    it took for dead)."""
    return lock_now(home_fd, shared=shared)


def home_busy(home: Path) -> Refused:
    """The refusal when :func:`lock_home` says another restore, recovery or backup runs."""
    shown = escape_display(str(home))
    return Locked(
        f"a restore, recovery or backup of {shown} is running; wait for it to finish", path=shown
    )


def _mkdir_private(parent_fd: int, name: str) -> bool:
    """Create ``name`` 0700 below ``parent_fd`` unless it exists as a real folder; True when
    made. A symbolic link or a non-folder in its place is refused."""
    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a folder"
            raise UnsuitablePath(
                f"data home: {escape_display(name)} is {kind}; move it away and run "
                "'bundler home init' again",
                path=name,
            ) from None
        return False
    # mkdir's mode is filtered by the umask; the home must be exactly private. fchmod on the
    # opened folder: chmod without following links is not portable (fchmodat NOFOLLOW)
    fd = open_dir(name, dir_fd=parent_fd)
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return True


def _make_home(home: Path) -> list[str]:
    """Create ``home`` and any missing ancestors, each 0700 and durable. Returns what it made."""
    missing: list[Path] = []
    probe = home
    while not _lexists(probe):
        missing.append(probe)
        probe = probe.parent
    made: list[str] = []
    for folder in reversed(missing):
        parent_fd = open_dir(folder.parent, follow=True)
        try:
            if _mkdir_private(parent_fd, folder.name):
                made.append(f"created {escape_display(str(folder))} (0700)")
            fsync_dir(parent_fd)
        finally:
            os.close(parent_fd)
    return made


def _remove_stale_temporaries(dir_fd: int, name: str) -> None:
    """Remove ``.<name>.tmp-*`` regular files a killed earlier :func:`_write_once` left."""
    prefix = f".{name}.tmp-"
    with os.scandir(dir_fd) as entries:
        stale = [
            e.name
            for e in entries
            if e.name.startswith(prefix) and e.is_file(follow_symlinks=False)
        ]
    for entry in stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry, dir_fd=dir_fd)


def _write_once(dir_fd: int, name: str, data: bytes) -> bool:
    """Write ``name`` durably unless it exists; never replaces (a link, not a rename, puts it in
    place, so a file made meanwhile by someone else wins). True when written."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return False
    except FileNotFoundError:
        pass
    tmp = temporary_name(name)
    try:
        write_synced(dir_fd, tmp, data)
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            written = True
        except FileExistsError:
            written = False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
    fsync_dir(dir_fd)
    return written


def init_home(resolution: HomeResolution) -> list[str]:
    """The first start (04 §1.2): the home (0700), ``files/``, ``skills/``, ``backups/``
    (0700) and ``README.md`` when absent (never overwritten). Returns what it did, one line per
    action; an empty list when everything was already there."""
    home = resolution.home
    try:
        actions = _make_home(home)
        home_fd = open_dir(home, follow=True)
    except NotADirectoryError:
        raise UnsuitablePath(
            f"data home {escape_display(str(home))} is not a folder", path=str(home)
        ) from None
    except OSError as err:
        raise os_failure(
            f"cannot create data home {escape_display(str(home))}: "
            f"{os.strerror(err.errno or errno.EIO)}",
            err,
            path=str(home),
        ) from None
    try:
        for folder in FOLDERS:
            if _mkdir_private(home_fd, folder):
                actions.append(f"created {folder}/ (0700)")
        _remove_stale_temporaries(home_fd, README_NAME)
        if _write_once(home_fd, README_NAME, README_TEXT.encode("utf-8")):
            actions.append(f"wrote {README_NAME}")
        fsync_dir(home_fd)
    except OSError as err:
        raise os_failure(
            f"cannot initialise data home {escape_display(str(home))}: "
            f"{os.strerror(err.errno or errno.EIO)}",
            err,
            path=str(home),
        ) from None
    finally:
        os.close(home_fd)
    return actions


def _file_size(path: Path) -> int:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


def tree_size(parent_fd: int, name: str) -> int:
    """Bytes of the regular files below ``name`` (a folder under ``parent_fd``), never
    following a symbolic link; 0 when it is absent or not a folder."""
    try:
        root = open_dir(name, dir_fd=parent_fd)
    except OSError:
        return 0
    total = 0
    pending = [root]
    while pending:
        fd = pending.pop()
        try:
            subfolders: list[str] = []
            with os.scandir(fd) as entries:
                for entry in entries:
                    info = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(info.st_mode):
                        total += info.st_size
                    elif stat.S_ISDIR(info.st_mode):
                        subfolders.append(entry.name)
            for sub in subfolders:
                try:
                    pending.append(open_dir(sub, dir_fd=fd))
                except OSError:
                    continue  # vanished or replaced by a link since the scan: not counted
        finally:
            os.close(fd)
    return total


def looks_like_data_home(names: set[str], readme_head: bytes) -> bool:
    """Whether a folder's entries (``names``) are a data home's (04 §1.2, §5.3): a database,
    ``files/`` with ``skills/``, the first start's ``README.md`` (``readme_head`` is its first
    bytes), or what a restore leaves. An empty folder is not one (it needs no check)."""
    if DATABASE_NAME in names or {"files", "skills"} <= names:
        return True
    if README_NAME in names and readme_head.startswith(README_TEXT.splitlines()[0].encode()):
        return True
    return any(name.endswith(".before-restore") or name.startswith(".restore-") for name in names)


def home_sizes(resolution: HomeResolution) -> dict[str, int]:
    """Sizes in bytes (05 §3 ``home show``): ``database``, ``database_wal``, ``files``,
    ``skills``, ``backups``; 0 for what does not exist. Reads only."""
    sizes = {
        "database": _file_size(resolution.database),
        "database_wal": _file_size(Path(f"{resolution.database}-wal")),
    }
    try:
        home_fd = open_dir(resolution.home, follow=True)
    except OSError:
        return {**sizes, **{folder: 0 for folder in FOLDERS}}
    try:
        for folder in FOLDERS:
            sizes[folder] = tree_size(home_fd, folder)
    finally:
        os.close(home_fd)
    return sizes


def is_writable(home: Path) -> bool:
    """Whether the home can be written (or, when absent, created), without creating anything:
    ``os.access`` on the home, or on its nearest existing ancestor."""
    probe = home
    while not _lexists(probe):
        if probe.parent == probe:
            return False
        probe = probe.parent
    if not probe.is_dir():
        return False
    return os.access(probe, os.W_OK | os.X_OK)


def open_home_dir(home: Path) -> int:
    """A descriptor on the data home folder (a symlinked home is followed: the user chose it);
    :class:`Refused` naming the home when it cannot be opened."""
    try:
        return open_dir(home, follow=True)
    except OSError as exc:
        shown = escape_display(str(home))
        raise os_failure(
            f"cannot open the data home {shown} ({os.strerror(exc.errno or 0)})", exc, path=shown
        ) from None
