"""``bundler agents import``: verify, plan, stage, commit, receipt; undo; recovery (03 §3, §4, §6).

The import is one transaction whose commit point is the atomic replacement of ``config.toml``:

1. the workspace, skill and memory copies are staged in ``<install>/.bundler-import-<token>/``
   (0700) next to a ``journal.toml`` naming every target, the digests of the current and the new
   config and the receipt's text, and made durable;
2. the merged config is written to a temporary file beside ``config.toml`` and fsynced;
3. the staged folders are renamed into their targets (each re-checked absent or empty just
   before), each recorded in the journal;
4. the temporary config is renamed over ``config.toml`` — the commit — and the folder fsynced;
5. the receipt is written under ``data/state/imports/`` and the staging folder removed.

Undo is the same transaction run the other way (folders move *into* staging, the config loses the
entries), and :func:`recover_install` finishes or rolls back either kind after a crash by
comparing ``config.toml`` with the journal's two digests. Deciding is pure (:mod:`bundler.merge`);
this module only orchestrates, through descriptors and without following links.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import functools
import getpass
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ParamSpec, Protocol, TypeVar

import tomli_w
import tomlkit
import xxhash

from bundler import copytree, durable, fragment, layout, merge, safefs, schema, tomlcompat
from bundler.config import LOCK_NAME, append_audit, config_lock
from bundler.configpath import format_path, parse_path
from bundler.errors import BundlerError, InvalidInput, Refused, UsageError
from bundler.manifest import parse_checksums
from bundler.names import escape_display
from bundler.validate import validate
from bundler.verify import CHECKSUMS, VerifyReport, verify_bundle

STAGING_PREFIX = ".bundler-import-"
JOURNAL = "journal.toml"
CONFIG = "config.toml"
RECEIPTS = ("data", "state", "imports")
AUDIT = ("data", "state", "config-audit.jsonl")
UNRESTRICTED = ("workspace", "unrestricted_filesystem")
RECEIPT_FORMAT = 1
_DIR_MODE = 0o755
_FORBIDDEN_MODE_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | 0o022
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


class Prompter(Protocol):
    """The terminal side of an import: secret entry without echo, and consent."""

    def secret(self, path: str, endpoint: str) -> str:
        """A value for the secret at ``path`` (sent to ``endpoint``); ``""`` leaves it unfilled."""

    def confirm(self, question: str) -> bool:
        """True when the user typed yes."""


@dataclass
class ImportReport:
    """What an import did (or, with ``dry_run``, would do). Holds no secret value."""

    bundle: str
    plan: merge.MergePlan
    risk_flags: list[dict[str, str]]
    dry_run: bool
    workspace_target: str
    skill_targets: dict[str, str] = field(default_factory=dict)
    skills_differ: list[str] = field(default_factory=list)
    missing_commands: list[str] = field(default_factory=list)
    endpoints: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    receipt: str = ""

    @property
    def agent(self) -> str:
        """The alias the agent has in this install."""
        return self.plan.agent

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` payload of 05 §3 plus the plan's details."""
        return {
            **self.plan.summary(),
            "risk_flags": self.risk_flags,
            "receipt": self.receipt,
            "dry_run": self.dry_run,
            "workspace": self.workspace_target,
            "skill_targets": self.skill_targets,
            "skills_differ": self.skills_differ,
            "reused_with_secrets": self.plan.reused_with_secrets,
            "secrets_filled": self.plan.secrets_filled,
            "secret_endpoints": self.endpoints,
            "mcp_commands_missing": self.missing_commands,
            "notes": self.notes,
            "unused": self.plan.unused,
        }


@dataclass
class UndoReport:
    """What :func:`undo_import` removed."""

    agent: str
    receipt: str
    removed_entries: list[str] = field(default_factory=list)
    removed_folders: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` payload of ``agents import --undo``."""
        return {
            "agent": self.agent,
            "receipt": self.receipt,
            "removed": self.removed_entries,
            "removed_folders": self.removed_folders,
        }


P = ParamSpec("P")
R = TypeVar("R")


def _io_errors_refused(action: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Turn an unexpected I/O error (EIO, ENOSPC, EACCES…) into a one-line refusal (05 §3).

    Failures inside a transaction are handled there (rollback, or a warning after the commit);
    this covers reading the bundle, the config and the targets before anything changes.
    """

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return function(*args, **kwargs)
            except OSError as err:
                reason = os.strerror(err.errno) if err.errno else str(err)
                where = escape_display(os.fsdecode(err.filename)) if err.filename else ""
                at = f" at {where}" if where else ""
                raise Refused(
                    f"{action} failed{at} ({reason}); nothing was committed", path=where
                ) from None

        return wrapper

    return decorate


# ---------------------------------------------------------------------------------------------
# small pure helpers


def xxh(data: bytes) -> str:
    """XXH3-128 hex digest of ``data``."""
    return xxhash.xxh3_128(data).hexdigest()


def entry_digest(value: Any, segments: Sequence[str]) -> str:
    """Digest of a config entry with every ``x-secret`` value removed (undo compares these)."""

    def strip(node: Any, path: list[str]) -> Any:
        if isinstance(node, dict):
            return {
                k: strip(v, [*path, k]) for k, v in node.items() if not schema.is_secret([*path, k])
            }
        return node

    canonical = json.dumps(strip(value, list(segments)), sort_keys=True, default=str)
    return xxh(canonical.encode("utf-8"))


def tree_digest(files: Iterable[tuple[str, int, str]]) -> str:
    """Digest of a folder's regular files: ``(path inside it, size, XXH3-128)`` in walk order."""
    hasher = xxhash.xxh3_128()
    for rel, size, digest in files:
        hasher.update(f"{rel}\0{size}\0{digest}\n".encode("utf-8", "surrogateescape"))
    return hasher.hexdigest()


def split_assignment(text: str, option: str, *, secret: bool = False) -> tuple[str, str]:
    """``PATH=VALUE`` split at the first ``=`` outside a quoted path segment.

    With ``secret`` (always for ``--secret``) an argument that does not split is never shown,
    not even in part: when ``PATH=`` was forgotten, the whole argument is the secret value.
    """
    quoted = escaped = False
    for index, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "=" and not quoted:
            return text[:index], text[index + 1 :]
    if secret or option == "--secret":
        raise UsageError(
            f"{option}: expected PATH=VALUE (the argument is not shown: it may be a secret)",
            path=option,
        )
    shown = escape_display(text)
    raise UsageError(f"{option} {shown}: expected PATH=VALUE", path=shown)


def flatten_secrets(table: Mapping[str, Any], prefix: Sequence[str] = ()) -> dict[str, str]:
    """A secrets file's table as ``{config path: value}``.

    Top-level keys are config paths (``"providers.models.openai.main.api_key" = "…"``); nested
    tables spell the same path as TOML tables. Values must be strings; the error names the path.
    """
    out: dict[str, str] = {}
    for key, value in table.items():
        segments = [*prefix, key] if prefix else parse_path(key)
        if isinstance(value, dict):
            out.update(flatten_secrets(value, segments))
        elif isinstance(value, str):
            out[format_path(segments)] = value
        else:
            path = format_path(segments)
            raise InvalidInput(f"secrets file: {escape_display(path)} must be a string", path=path)
    return out


def endpoint_of(config: Mapping[str, Any], path: str) -> str:
    """Where the secret at ``path`` will be sent: the provider's ``uri`` or its family's default,
    the MCP server's ``url`` or command (escaped for display)."""
    located = merge.split_entry_path(parse_path(path))
    if located is None:
        return "unknown"
    kind, name, _ = located
    entry = next((e for n, e in merge.iter_entries(config, kind) if n == name), {})
    if kind == "mcp.servers":
        if entry.get("url"):
            return escape_display(str(entry["url"]))
        return escape_display(
            " ".join([str(entry.get("command", "")), *map(str, entry.get("args", []))]).strip()
        )
    if entry.get("uri"):
        return escape_display(str(entry["uri"]))
    family = name.split(".", 1)[0]
    default = fragment.family_default_endpoint(kind.split(".", 1)[1], family, entry)
    if default is None:
        return f"the default endpoint of {escape_display(family)}"
    return escape_display(default)


def _receipt_stamp(now: datetime) -> str:
    return now.strftime("%Y%m%dT%H%M%SZ")


def _rel(path: Path, root: Path) -> str:
    return os.path.relpath(layout.normalise(path), layout.normalise(root))


# ---------------------------------------------------------------------------------------------
# install-side file access, all descriptor-relative


@contextlib.contextmanager
def _install_fd(install_root: Path, *, create: bool) -> Iterator[int]:
    """The install root opened as a folder (links above it are the operator's and followed).

    With ``create`` a missing install folder is made (an empty install is valid, 01 §1); when
    the import then fails, the folder (and the lock file made in it) is removed again.
    """
    created = False
    if create:
        try:
            os.mkdir(install_root, _DIR_MODE)
            created = True
        except FileExistsError:
            pass
    try:
        fd = os.open(install_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Refused(
            f"install folder {install_root} does not exist", path=str(install_root)
        ) from None
    except NotADirectoryError:
        raise Refused(f"{install_root} is not a folder", path=str(install_root)) from None
    try:
        yield fd
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                os.unlink(LOCK_NAME, dir_fd=fd)
            with contextlib.suppress(OSError):
                os.rmdir(install_root)
        raise
    finally:
        os.close(fd)


@dataclass
class ConfigFile:
    """``config.toml`` as read under the lock: text, identity, and where its real file lives."""

    text: str
    exists: bool
    identity: tuple[int, int, int, int] | None
    mode: int
    uid: int
    gid: int
    dir_fd: int  # the folder holding the real file (the install, or a symlink's target folder)
    name: str

    @property
    def digest(self) -> str:
        """XXH3-128 of the bytes, or ``absent``."""
        return xxh(self.text.encode("utf-8")) if self.exists else "absent"


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def read_config(install_fd: int, stack: contextlib.ExitStack) -> ConfigFile:
    """Read ``config.toml`` (a symlinked one through its target's folder); absent is allowed."""
    dir_fd, name = install_fd, CONFIG
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISLNK(os.stat(CONFIG, dir_fd=install_fd, follow_symlinks=False).st_mode):
            real = Path(os.path.realpath(f"/proc/self/fd/{install_fd}/{CONFIG}"))
            dir_fd = os.open(real.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            stack.callback(os.close, dir_fd)
            name = real.name
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return ConfigFile("", False, None, 0o600, os.getuid(), os.getgid(), dir_fd, name)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused("config.toml is not a regular file", path=CONFIG)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("config.toml is not valid UTF-8", path=CONFIG) from None
    return ConfigFile(
        text, True, _identity(st), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, dir_fd, name
    )


def parse_config(text: str) -> dict[str, Any]:
    """The config's data; a config that does not parse is invalid input (exit 3)."""
    try:
        return tomlcompat.loads(text)
    except tomlcompat.TOMLDecodeError as err:
        raise InvalidInput(
            f"config.toml does not parse ({err}); fix it first", path=CONFIG
        ) from None


def _check_unchanged(config: ConfigFile) -> None:
    try:
        st = os.stat(config.name, dir_fd=config.dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    now = _identity(st) if st is not None else None
    if now != config.identity:
        raise Refused(
            "config.toml changed while this command ran; nothing changed, run it again", path=CONFIG
        )


def _write_temp_config(config: ConfigFile, tmp_name: str, text: str) -> None:
    """Create the new config beside the real one: 0600, then the original's mode and owner."""
    fd = os.open(
        tmp_name,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=config.dir_fd,
    )
    try:
        view = memoryview(text.encode("utf-8"))
        while view:
            view = view[os.write(fd, view) :]
        if config.exists:
            with contextlib.suppress(PermissionError):
                os.fchown(fd, config.uid, config.gid)
        os.fchmod(fd, config.mode)
        os.fsync(fd)
    finally:
        os.close(fd)


def _ensure_dirs(install_fd: int, rel: str) -> tuple[int, list[str]]:
    """Open ``rel`` below the install, creating missing folders 0755; (fd, created rel paths)."""
    created: list[str] = []
    fd = os.dup(install_fd)
    done: list[str] = []
    try:
        for part in [p for p in rel.split("/") if p]:
            done.append(part)
            try:
                os.mkdir(part, _DIR_MODE, dir_fd=fd)
                created.append("/".join(done))
                durable.fsync_dir(fd)
            except FileExistsError:
                pass
            child = safefs.open_dir_nofollow(fd, part)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd, created


def _lstat_rel(install_fd: int, rel: str) -> os.stat_result | None:
    """lstat of ``rel`` below the install without following a link on the way (None: absent)."""
    head, _, name = rel.rpartition("/")
    try:
        parent = safefs.open_beneath(install_fd, head) if head else os.dup(install_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(
                f"{escape_display(head)} is a symbolic link or not a folder: import refuses to "
                "write through it",
                path=head,
            ) from None
        raise
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(parent)


def _target_state(install_fd: int, rel: str) -> str:
    """``absent``, ``empty`` (an empty real folder) or ``occupied`` for an import target."""
    st = _lstat_rel(install_fd, rel)
    if st is None:
        return "absent"
    if not stat.S_ISDIR(st.st_mode):
        return "occupied"
    fd = safefs.open_beneath(install_fd, rel)
    try:
        return "occupied" if os.listdir(fd) else "empty"
    finally:
        os.close(fd)


def _missing_parents(install_fd: int, rel: str) -> list[str]:
    """The ancestors of ``rel`` (install-relative) that do not exist yet, outermost first."""
    parts = rel.split("/")[:-1]
    missing: list[str] = []
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        if missing or _lstat_rel(install_fd, prefix) is None:
            missing.append(prefix)
    return missing


def _hash_tree(dir_fd: int) -> str:
    """:func:`tree_digest` of a folder on disk, read through descriptors without following."""
    files: list[tuple[str, int, str]] = []
    buf = bytearray(copytree.BUFFER_SIZE)

    def refuse(kind: safefs.SkipKind, path: str) -> None:
        files.append((f"\0skipped:{kind.value}:{path}", 0, ""))

    for entry in safefs.walk(dir_fd, on_skip=refuse):
        if entry.kind == "file":
            size, digest = copytree.digest_fd(entry.fd, relpath=entry.relpath, buffer=buf)
            files.append((entry.rel, size, digest))
    return tree_digest(files)


def _tree_at(install_fd: int, rel: str) -> str | None:
    """Digest of the folder ``rel`` below the install, or None when it is not a real folder."""
    try:
        fd = safefs.open_beneath(install_fd, rel)
    except OSError:
        return None
    try:
        return _hash_tree(fd)
    finally:
        os.close(fd)


def _rename_rel(install_fd: int, src: str, dst: str, *, replace_empty: bool) -> None:
    """Rename install-relative ``src`` to ``dst``, never over anything but an empty folder."""
    src_head, _, src_name = src.rpartition("/")
    dst_head, _, dst_name = dst.rpartition("/")
    src_fd = safefs.open_beneath(install_fd, src_head) if src_head else os.dup(install_fd)
    try:
        dst_fd = safefs.open_beneath(install_fd, dst_head) if dst_head else os.dup(install_fd)
        try:
            if replace_empty:
                # rename(2) replaces a folder only when it is empty: the kernel re-checks it
                os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            else:
                try:
                    durable.renameat2(src_fd, src_name, dst_fd, dst_name, durable.RENAME_NOREPLACE)
                except OSError as exc:
                    if exc.errno not in durable.UNSUPPORTED_ERRNOS:
                        raise
                    if os.path.lexists(f"/proc/self/fd/{dst_fd}/{dst_name}"):
                        raise OSError(errno.EEXIST, "target appeared", dst) from None
                    os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            durable.fsync_dir(dst_fd)
            if src_head != dst_head:
                durable.fsync_dir(src_fd)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)


def _rmdir_rel(install_fd: int, rel: str) -> bool:
    """Remove the folder ``rel`` when it is empty; True when it is gone."""
    head, _, name = rel.rpartition("/")
    try:
        fd = safefs.open_beneath(install_fd, head) if head else os.dup(install_fd)
    except OSError:
        return False
    try:
        os.rmdir(name, dir_fd=fd)
        durable.fsync_dir(fd)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _mkdir_rel(install_fd: int, rel: str, mode: int) -> None:
    head, _, name = rel.rpartition("/")
    fd = safefs.open_beneath(install_fd, head) if head else os.dup(install_fd)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=fd)
            os.chmod(name, mode, dir_fd=fd)
            durable.fsync_dir(fd)
    finally:
        os.close(fd)


def partial_name(stem: str) -> str:
    """The temporary name a receipt is written under before it gets its real name."""
    return f".{stem}.partial"


def _write_new_file(dir_fd: int, stem: str, suffix: str, data: bytes) -> str:
    """Write ``data`` durably under ``stem + suffix`` or ``stem-2 + suffix``…; never replaces.

    The bytes go to :func:`partial_name` first and are fsynced; only a complete file is linked
    to its real name, so a reader (and recovery) never meets a torn receipt.
    """
    tmp = partial_name(stem)
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=dir_fd,
    )
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        counter = 1
        while True:
            name = f"{stem}{suffix}" if counter == 1 else f"{stem}-{counter}{suffix}"
            try:
                os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
                break
            except FileExistsError:
                counter += 1
        os.unlink(tmp, dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    durable.fsync_dir(dir_fd)
    return name


# ---------------------------------------------------------------------------------------------
# the journal and the transaction shared by import, undo and recovery


@dataclass
class Journal:
    """``journal.toml``: everything recovery needs to finish or roll back, and no secret.

    ``moves`` are install-relative ``{src, dst, tree}``; ``parents`` are folders this transaction
    creates before its moves (removed again on rollback when empty); ``emptied`` are empty
    target folders a move replaced (``{path, mode}``, re-created on rollback); ``after`` holds
    what completes a committed transaction (the receipt to write, folders to tidy).
    """

    kind: str
    token: str
    old_config: str
    new_config: str
    config_tmp: str
    config_dir: str  # for a person reading the journal; recovery opens config.toml anew
    moves: list[dict[str, str]] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    emptied: list[dict[str, Any]] = field(default_factory=list)
    receipt_stem: str = ""
    receipt_text: str = ""
    restore_empty: list[dict[str, Any]] = field(default_factory=list)
    remove_parents: list[str] = field(default_factory=list)
    audit: list[dict[str, Any]] = field(default_factory=list)

    def dumps(self) -> bytes:
        """The journal as TOML bytes."""
        return tomli_w.dumps({key: value for key, value in self.__dict__.items()}).encode("utf-8")

    @classmethod
    def loads(cls, raw: bytes) -> Journal:
        """Parse a journal; raises ``ValueError`` when it is not one this version wrote."""
        data = tomlcompat.loads(raw.decode("utf-8"))
        known = {name for name in cls.__dataclass_fields__}
        if not isinstance(data, dict) or not {"kind", "token", "old_config", "new_config"} <= set(
            data
        ):
            raise ValueError("not a journal")
        return cls(**{key: value for key, value in data.items() if key in known})


def staging_name(token: str) -> str:
    """``.bundler-import-<token>``."""
    return f"{STAGING_PREFIX}{token}"


def _write_journal(staging_fd: int, journal: Journal) -> None:
    durable.atomic_write(staging_fd, JOURNAL, journal.dumps())


class _Transaction:
    """One journaled change of an install: moves, then the config rename as the commit."""

    def __init__(self, install_fd: int, config: ConfigFile, journal: Journal) -> None:
        self.install_fd = install_fd
        self.config = config
        self.journal = journal
        self.staging = staging_name(journal.token)
        self.staging_fd = -1
        self.committed = False
        self.created_staging = False
        self.after_commit_error: OSError | None = None

    def open_staging(self) -> int:
        os.mkdir(self.staging, 0o700, dir_fd=self.install_fd)
        self.created_staging = True
        durable.fsync_dir(self.install_fd)
        self.staging_fd = safefs.open_dir_nofollow(self.install_fd, self.staging)
        return self.staging_fd

    def write_journal(self) -> None:
        _write_journal(self.staging_fd, self.journal)

    def run(self, new_text: str | None) -> None:
        """Steps 2-4 of 03 §3.2 (the journal is already durable); None removes config.toml."""
        if new_text is not None:
            _write_temp_config(self.config, self.journal.config_tmp, new_text)
            durable.fsync_dir(self.config.dir_fd)
        for parent in self.journal.parents:
            _mkdir_rel(self.install_fd, parent, _DIR_MODE)
        for move in self.journal.moves:
            state = _target_state(self.install_fd, move["dst"])
            if state == "occupied":
                raise Refused(
                    f"{escape_display(move['dst'])} appeared or was filled meanwhile; nothing "
                    "changed",
                    path=move["dst"],
                )
            _rename_rel(self.install_fd, move["src"], move["dst"], replace_empty=state == "empty")
            self.journal.moved.append(move["dst"])
            self.write_journal()
        _check_unchanged(self.config)
        if new_text is None:
            # undo of an import into an empty install: before it there was no config.toml
            os.unlink(self.config.name, dir_fd=self.config.dir_fd)
        else:
            os.rename(
                self.journal.config_tmp,
                self.config.name,
                src_dir_fd=self.config.dir_fd,
                dst_dir_fd=self.config.dir_fd,
            )
        self.committed = True
        try:
            durable.fsync_dir(self.config.dir_fd)
            if self.config.dir_fd != self.install_fd:
                durable.fsync_dir(self.install_fd)
        except OSError as err:
            # after the commit nothing can be undone: the caller reports it as a warning
            self.after_commit_error = err

    def rollback(self) -> list[str]:
        """Undo everything before the commit; returns what could not be undone."""
        if self.staging_fd >= 0:
            os.close(self.staging_fd)
            self.staging_fd = -1
        if not self.created_staging:
            return []
        return _roll_back(self.install_fd, self.config.dir_fd, self.journal, dry_run=False)

    def close(self) -> None:
        if self.staging_fd >= 0:
            os.close(self.staging_fd)
            self.staging_fd = -1


def _roll_back(
    install_fd: int, config_dir_fd: int, journal: Journal, *, dry_run: bool
) -> list[str]:
    """Put back what an uncommitted transaction moved or created; returns the actions taken."""
    actions: list[str] = []
    for move in reversed(journal.moves):
        if (
            _lstat_rel(install_fd, move["src"]) is not None
            or _lstat_rel(install_fd, move["dst"]) is None
        ):
            continue  # never moved (or already moved back)
        if _tree_at(install_fd, move["dst"]) != move["tree"]:
            actions.append(f"left {move['dst']}: it changed since the import staged it")
            continue
        actions.append(f"moved {move['dst']} back")
        if not dry_run:
            _rename_rel(install_fd, move["dst"], move["src"], replace_empty=False)
    for empty in journal.emptied:
        if _lstat_rel(install_fd, empty["path"]) is None:
            actions.append(f"re-created empty folder {empty['path']}")
            if not dry_run:
                _mkdir_rel(install_fd, empty["path"], int(empty["mode"]))
    for parent in reversed(journal.parents):
        if _lstat_rel(install_fd, parent) is not None:
            actions.append(f"removed folder {parent}")
            if not dry_run:
                _rmdir_rel(install_fd, parent)
    with contextlib.suppress(FileNotFoundError):
        os.stat(journal.config_tmp, dir_fd=config_dir_fd, follow_symlinks=False)
        actions.append(f"removed {journal.config_tmp}")
        if not dry_run:
            os.unlink(journal.config_tmp, dir_fd=config_dir_fd)
    actions.append(f"removed {staging_name(journal.token)}")
    if not dry_run:
        safefs.rmtree_at(install_fd, staging_name(journal.token))
        durable.fsync_dir(install_fd)
    return actions


def _complete(
    install_root: Path, install_fd: int, journal: Journal, *, dry_run: bool
) -> tuple[list[str], str]:
    """Finish a committed transaction: receipt, audit, tidy folders, remove staging (last, so
    that a failure or crash on the way leaves the journal for ``recover --install``).

    Returns the actions and the receipt's install-relative path (``""`` for an undo). An audit
    line may be written twice when a crash hits between it and the staging removal: a repeated
    line is better than a lost one.
    """
    actions: list[str] = []
    receipt = ""
    if journal.receipt_text:
        _remove_partial_receipt(install_fd, journal, actions, dry_run=dry_run)
        name = _receipt_present(install_fd, journal)
        if name is None:
            actions.append("wrote the import receipt")
            if not dry_run:
                receipt = write_receipt(install_fd, journal)
        else:
            receipt = "/".join([*RECEIPTS, name])
    for line in journal.audit:
        actions.append(f"audited {line['path']}")
        if not dry_run:
            append_audit(install_root, line["path"], line["old"], line["new"], line["via"])
    for empty in journal.restore_empty:
        if _lstat_rel(install_fd, empty["path"]) is None:
            actions.append(f"re-created empty folder {empty['path']}")
            if not dry_run:
                _mkdir_rel(install_fd, empty["path"], int(empty["mode"]))
    for parent in reversed(journal.remove_parents):
        if (
            _lstat_rel(install_fd, parent) is not None
            and _target_state(install_fd, parent) == "empty"
        ):
            actions.append(f"removed empty folder {parent}")
            if not dry_run:
                _rmdir_rel(install_fd, parent)
    actions.append(f"removed {staging_name(journal.token)}")
    if not dry_run:
        safefs.rmtree_at(install_fd, staging_name(journal.token))
        durable.fsync_dir(install_fd)
    return actions, receipt


def _remove_partial_receipt(
    install_fd: int, journal: Journal, actions: list[str], *, dry_run: bool
) -> None:
    """Remove a receipt a crash left half-written under its temporary name."""
    try:
        fd = safefs.open_beneath(install_fd, "/".join(RECEIPTS))
    except OSError:
        return
    try:
        os.stat(partial_name(journal.receipt_stem), dir_fd=fd, follow_symlinks=False)
        actions.append("removed a half-written receipt")
        if not dry_run:
            os.unlink(partial_name(journal.receipt_stem), dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def _receipt_present(install_fd: int, journal: Journal) -> str | None:
    try:
        fd = safefs.open_beneath(install_fd, "/".join(RECEIPTS))
    except OSError:
        return None
    try:
        for name in sorted(os.listdir(fd)):
            if name.startswith(journal.receipt_stem) and name.endswith(".toml"):
                with contextlib.suppress(OSError):
                    file_fd = os.open(name, _READ_FLAGS, dir_fd=fd)
                    try:
                        if os.read(file_fd, 1 << 24) == journal.receipt_text.encode("utf-8"):
                            return name
                    finally:
                        os.close(file_fd)
        return None
    finally:
        os.close(fd)


def write_receipt(install_fd: int, journal: Journal) -> str:
    """Write the journal's receipt under ``data/state/imports/``; returns its install path."""
    dir_fd, _ = _ensure_dirs(install_fd, "/".join(RECEIPTS))
    try:
        name = _write_new_file(
            dir_fd, journal.receipt_stem, ".toml", journal.receipt_text.encode("utf-8")
        )
    finally:
        os.close(dir_fd)
    return "/".join([*RECEIPTS, name])


# ---------------------------------------------------------------------------------------------
# import


@dataclass
class _Staged:
    """One folder to stage: where it comes from in the bundle and where it goes."""

    label: str  # name inside staging
    sources: list[tuple[str, str]]  # (bundle folder, subfolder inside the staged folder)
    target: str  # install-relative


def _collect_secrets(
    secret_args: Sequence[str], secrets_file: Path | None
) -> tuple[dict[str, str], list[str]]:
    """Secrets from ``--secret`` and ``--secrets-file``; returns (values, warnings)."""
    values: dict[str, str] = {}
    warnings: list[str] = []
    if secrets_file is not None:
        values.update(load_secrets_file(secrets_file))
    if secret_args:
        warnings.append(
            "--secret values are visible to other users of this machine (ps, shell history); "
            "prefer --secrets-file"
        )
    for raw in secret_args:
        path, value = split_assignment(raw, "--secret", secret=True)
        values[path] = value
    return values, warnings


def load_secrets_file(path: Path) -> dict[str, str]:
    """A ``--secrets-file``: a TOML table of secret paths; refused when group/others can read it."""
    shown = escape_display(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise Refused(
            f"cannot read secrets file {shown} ({os.strerror(exc.errno or errno.EIO)})",
            path=str(path),
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"secrets file {shown} is not a regular file", path=str(path))
        if st.st_mode & 0o044:
            raise Refused(
                f"secrets file {shown} is readable by group or others; chmod 600 it", path=str(path)
            )
        raw = b""
        while chunk := os.read(fd, 1 << 20):
            raw += chunk
            if len(raw) > 16 << 20:
                raise InvalidInput(f"secrets file {shown} is larger than 16 MiB", path=str(path))
    finally:
        os.close(fd)
    try:
        table = tomlcompat.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomlcompat.TOMLDecodeError):
        # the parser's message may quote a line of the file, which holds secrets: say only where
        raise InvalidInput(
            f'secrets file {shown} is not a TOML table of path = "value"', path=str(path)
        ) from None
    return flatten_secrets(table)


def _read_checksums(bundle_fd: int, expected_digest: str) -> dict[str, str] | None:
    """The verified checksums again; a file changed since verification is refused."""
    try:
        fd = os.open(CHECKSUMS, _READ_FLAGS, dir_fd=bundle_fd)
    except FileNotFoundError:
        if expected_digest:
            raise InvalidInput(
                "checksums.xxh3 vanished after verification; verify the bundle again",
                path=CHECKSUMS,
            ) from None
        return None
    try:
        raw = b""
        while chunk := os.read(fd, 1 << 20):
            raw += chunk
    finally:
        os.close(fd)
    if xxh(raw) != expected_digest:
        raise InvalidInput(
            "checksums.xxh3 changed after verification; verify the bundle again", path=CHECKSUMS
        )
    return {path: digest for digest, path in parse_checksums(raw)}


def _refuse_skip(kind: safefs.SkipKind, path: str) -> None:
    raise InvalidInput(
        f"{path}: appeared in the bundle after verification ({kind.value}); verify it again",
        path=path,
    )


def _stage_folder(
    bundle_fd: int,
    staging_fd: int,
    staged: _Staged,
    listed: dict[str, str] | None,
    copied: set[str],
) -> str:
    """Copy one staged folder's sources, check every digest, fix modes; returns its tree digest."""
    os.mkdir(staged.label, 0o700, dir_fd=staging_fd)
    root_fd = safefs.open_dir_nofollow(staging_fd, staged.label)
    files: list[tuple[str, int, str]] = []
    try:
        for source, sub in staged.sources:
            try:
                src_fd = safefs.open_beneath(bundle_fd, source)
            except OSError:
                raise InvalidInput(
                    f"{escape_display(source)}: missing or not a folder in the bundle; verify "
                    "it again",
                    path=source,
                ) from None
            try:
                if sub:
                    os.mkdir(sub, 0o700, dir_fd=root_fd)
                dst_fd = safefs.open_beneath(root_fd, sub) if sub else os.dup(root_fd)
                modes: list[tuple[str, int]] = []

                def note(
                    rel: str, st: os.stat_result, modes: list[tuple[str, int]] = modes
                ) -> bool:
                    modes.append((rel, st.st_mode))
                    return False

                try:
                    for item in copytree.copy_tree(
                        src_fd, dst_fd, prefix=f"{source}/", exclude=note, on_skip=_refuse_skip
                    ):
                        if listed is not None and listed.get(item.relpath) != item.xxh3_128:
                            raise InvalidInput(
                                f"{escape_display(item.relpath)}: does not match its verified "
                                "checksum; verify the bundle again",
                                path=item.relpath,
                            )
                        copied.add(item.relpath)
                        inner = item.relpath[len(source) + 1 :]
                        files.append((f"{sub}/{inner}" if sub else inner, item.size, item.xxh3_128))
                    _fix_modes(dst_fd, modes)
                    os.fchmod(dst_fd, _DIR_MODE)  # a sub-folder made here (memory/)
                finally:
                    os.close(dst_fd)
            finally:
                os.close(src_fd)
        os.fchmod(root_fd, _DIR_MODE)
    finally:
        os.close(root_fd)
    files.sort(key=lambda item: os.fsencode(item[0]))
    return tree_digest(files)


def _fix_modes(root_fd: int, modes: Iterable[tuple[str, int]]) -> None:
    """Folders 0755; files without group/other write (03 §3.1 point 9; copy kept the rest)."""
    for rel, mode in modes:
        head, _, name = rel.rpartition("/")
        is_dir = stat.S_ISDIR(mode)
        if not is_dir and not mode & _FORBIDDEN_MODE_BITS:
            continue
        parent = safefs.open_beneath(root_fd, head) if head else os.dup(root_fd)
        try:
            flags = (os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW) if is_dir else _READ_FLAGS
            fd = os.open(name, flags | os.O_CLOEXEC, dir_fd=parent)
            try:
                os.fchmod(fd, _DIR_MODE if is_dir else stat.S_IMODE(mode) & 0o755)
            finally:
                os.close(fd)
        finally:
            os.close(parent)


def _listed_under(listed: dict[str, str] | None, prefixes: Sequence[str]) -> set[str]:
    if listed is None:
        return set()
    return {path for path in listed if any(path.startswith(prefix) for prefix in prefixes)}


def _missing_commands(plan: merge.MergePlan) -> list[str]:
    missing = []
    for new in plan.new_entries:
        if new.kind == "mcp.servers" and new.value.get("transport", "stdio") == "stdio":
            command = new.value.get("command", "")
            if isinstance(command, str) and command and shutil.which(command) is None:
                missing.append(f"{new.path}.command: {escape_display(command)}")
    return missing


def _skills_differ(
    bundle_fd: int,
    install_fd: int,
    install_root: Path,
    plan: merge.MergePlan,
    listed: dict[str, str] | None,
    carried: Sequence[str],
) -> list[str]:
    """Reused skill bundles whose carried skills differ from the local folder's."""
    differ: list[str] = []
    for placement in plan.skills:
        if placement.action != "reused" or placement.source_alias not in carried:
            continue
        local = layout.skill_bundle_dir(plan.merged, placement.target_alias, install_root)
        prefix = f"skills/{placement.source_alias}/"
        digests = listed or {}
        bundle_files = sorted(
            ((path[len(prefix) :], digests[path]) for path in digests if path.startswith(prefix)),
            key=lambda item: os.fsencode(item[0]),
        )
        local_files: list[tuple[str, str]] = []
        rel = _rel(local, install_root)
        try:
            fd = safefs.open_beneath(install_fd, rel) if not rel.startswith("..") else -1
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                for entry in safefs.walk(fd):
                    if entry.kind == "file" and entry.rel.split("/")[0] in {
                        p.split("/")[0] for p, _ in bundle_files
                    }:
                        local_files.append(
                            (entry.rel, copytree.digest_fd(entry.fd, relpath=entry.rel)[1])
                        )
            finally:
                os.close(fd)
        if bundle_files != local_files:
            differ.append(f"skill_bundles.{placement.target_alias}")
    return differ


def _consent(
    flags: Sequence[Mapping[str, str]], accept_risks: bool, prompter: Prompter | None
) -> None:
    if not flags or accept_risks:
        return
    lines = [
        f"{escape_display(f['kind'])} {escape_display(f['path'])}: "
        f"{escape_display(f.get('detail', ''))}"
        for f in flags
    ]
    question = "This bundle grants:\n  " + "\n  ".join(lines) + "\nImport it? Type yes to accept"
    if prompter is not None and prompter.confirm(question):
        return
    raise Refused(
        f"the bundle carries {len(flags)} risk flag(s); review them ('bundler bundle inspect') "
        "and pass --accept-risks or answer yes at a terminal; nothing changed",
        path="risk_flags",
    )


@_io_errors_refused("import")
def import_bundle(
    install_root: Path,
    bundle: Path,
    *,
    as_alias: str | None = None,
    binds: Mapping[str, str] | None = None,
    secrets: Sequence[str] = (),
    secrets_file: Path | None = None,
    accept_risks: bool = False,
    dry_run: bool = False,
    prompt: Prompter | None = None,
) -> ImportReport:
    """Import the bundle folder ``bundle`` into the install at ``install_root`` (03 §3).

    ``binds`` maps fragment entry paths to local references; ``secrets`` are ``PATH=VALUE``
    strings as given to ``--secret``; ``prompt`` (a terminal) asks for missing secrets and for
    consent. Raises :class:`InvalidInput` (exit 3) when the bundle fails verification or the
    merged config is invalid, :class:`Refused` (exit 1) for refusals and failures before the
    commit (the install is then byte-identical to before), :class:`UsageError` for malformed
    options. With ``dry_run`` nothing is changed or created.
    """
    install_root = Path(os.path.abspath(install_root))
    report = verify_bundle(bundle)
    if not report.ok:
        # one line naming the first few entries at fault; 'bundle verify' lists every one
        shown = "; ".join(str(problem) for problem in report.errors[:3])
        rest = len(report.errors) - 3
        more = f" (and {rest} more; see 'bundler bundle verify')" if rest > 0 else ""
        raise InvalidInput(f"bundle failed verification: {shown}{more}", path=report.errors[0].path)
    manifest = report.manifest or {}
    required = [p for p in manifest.get("required_secrets", []) if isinstance(p, str)]
    given, warnings = _collect_secrets(secrets, secrets_file)

    with (
        _install_fd(
            install_root, create=not dry_run and not os.path.exists(install_root)
        ) as install_fd,
        contextlib.ExitStack() as stack,
    ):
        if dry_run:
            config = read_config(install_fd, stack)
            return _plan(
                install_fd,
                install_root,
                bundle,
                report,
                config,
                required,
                given,
                as_alias,
                binds,
                warnings,
                prompt,
                dry_run=True,
            )[0]
        stack.enter_context(config_lock(install_root))
        config = read_config(install_fd, stack)
        result, new_text, staged = _plan(
            install_fd,
            install_root,
            bundle,
            report,
            config,
            required,
            given,
            as_alias,
            binds,
            warnings,
            prompt,
            dry_run=False,
        )
        _consent(report.risk_flags, accept_risks, prompt)
        _transact(install_fd, install_root, bundle, report, config, result, new_text, staged)
        return result


def _plan(
    install_fd: int,
    install_root: Path,
    bundle: Path,
    report: VerifyReport,
    config: ConfigFile,
    required: list[str],
    given: dict[str, str],
    as_alias: str | None,
    binds: Mapping[str, str] | None,
    warnings: list[str],
    prompt: Prompter | None,
    *,
    dry_run: bool,
) -> tuple[ImportReport, str, list[_Staged]]:
    target = parse_config(config.text)
    plan = merge.plan_merge(
        target, report.fragment or {}, required, as_alias=as_alias, binds=binds, secrets=given
    )
    if plan.secrets_missing and prompt is not None and not dry_run:
        asked = dict(given)
        for final in plan.secrets_missing:
            value = prompt.secret(final, endpoint_of(plan.merged, final))
            if value:
                asked[plan.secret_sources[final]] = value
        if len(asked) > len(given):
            plan = merge.plan_merge(
                target,
                report.fragment or {},
                required,
                as_alias=as_alias,
                binds=binds,
                secrets=asked,
            )
    errors, _ = validate(plan.merged, install_root)
    if errors:
        shown = "; ".join(f.line() for f in errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        raise InvalidInput(
            f"the merged config would be invalid: {shown}{more}; nothing changed",
            path=errors[0].path,
        )
    new_text, notes = merge.render_config_text(config.text, plan)

    workspace = _rel(layout.workspace_dir(plan.merged, plan.agent, install_root), install_root)
    version = report.format_version or 1
    sources = [("workspace", "")]
    if version == 2:
        sources.append(("memory", "memory"))
    staged = [_Staged("workspace", sources, workspace)]
    result = ImportReport(
        str(bundle), plan, list(report.risk_flags), dry_run, str(install_root / workspace)
    )
    carried = list(report.skill_bundles)
    for placement in plan.skills:
        if placement.action in ("added", "renamed") and placement.source_alias in carried:
            folder = _rel(
                layout.skill_bundle_dir(plan.merged, placement.target_alias, install_root),
                install_root,
            )
            if folder.startswith(".."):
                raise Refused(
                    f"skill_bundles.{escape_display(placement.target_alias)}: its folder is "
                    "outside the install",
                    path=f"skill_bundles.{placement.target_alias}",
                )
            staged.append(
                _Staged(
                    f"skill-{placement.target_alias}",
                    [(f"skills/{placement.source_alias}", "")],
                    folder,
                )
            )
            result.skill_targets[placement.target_alias] = str(install_root / folder)
    for item in staged:
        if _target_state(install_fd, item.target) == "occupied":
            raise Refused(
                f"{escape_display(str(install_root / item.target))} exists and is not empty; "
                "nothing changed (import with --as, or move it away)",
                path=str(install_root / item.target),
            )
    result.notes = notes
    result.warnings = warnings
    result.missing_commands = _missing_commands(plan)
    result.endpoints = {path: endpoint_of(plan.merged, path) for path in plan.secrets_missing}
    bundle_fd = os.open(bundle, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        listed = (
            _read_checksums(bundle_fd, report.checksums_digest) if report.checksums_digest else None
        )
        result.skills_differ = _skills_differ(
            bundle_fd, install_fd, install_root, plan, listed, carried
        )
    finally:
        os.close(bundle_fd)
    return result, new_text, staged


def _receipt_text(
    result: ImportReport,
    report: VerifyReport,
    config: ConfigFile,
    new_text: str,
    journal: Journal,
    staged: list[_Staged],
    trees: dict[str, str],
    emptied: list[dict[str, Any]],
    parents: list[str],
) -> str:
    plan = result.plan
    entries = [
        {"path": new.path, "digest": entry_digest(new.value, new.segments)}
        for new in plan.new_entries
    ]
    agent_segments = ["agents", plan.agent]
    entries.append(
        {
            "path": format_path(agent_segments),
            "digest": entry_digest(plan.agent_entry, agent_segments),
        }
    )
    document = {
        "format": RECEIPT_FORMAT,
        "token": journal.token,
        "agent": plan.agent,
        "source_agent": plan.source_agent,
        "imported_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "bundle": str(result.bundle),
        "bundle_checksums_xxh3_128": report.checksums_digest,
        "old_config_xxh3_128": config.digest,
        "old_config_bytes": len(config.text.encode("utf-8")),
        "new_config_xxh3_128": xxh(new_text.encode("utf-8")),
        "append_only": not result.notes,
        "added": plan.added,
        "reused": plan.reused,
        "renamed": plan.renamed,
        "bound": plan.bound,
        "secrets_missing": plan.secrets_missing,
        "accepted_risk_flags": result.risk_flags,
        "entries": entries,
        "folders": [{"path": item.target, "tree": trees[item.label]} for item in staged],
        "emptied": emptied,
        "created_parents": parents,
    }
    return tomli_w.dumps(document)


def _transact(
    install_fd: int,
    install_root: Path,
    bundle: Path,
    report: VerifyReport,
    config: ConfigFile,
    result: ImportReport,
    new_text: str,
    staged: list[_Staged],
) -> None:
    """03 §3.2, steps 1-5."""
    token = durable.random_token()
    journal = Journal(
        kind="import",
        token=token,
        old_config=config.digest,
        new_config=xxh(new_text.encode("utf-8")),
        config_tmp=f".{config.name}.bundler-{token}",
        config_dir=os.path.realpath(f"/proc/self/fd/{config.dir_fd}"),
        receipt_stem=f"{_receipt_stamp(datetime.now(timezone.utc))}-{result.plan.agent}",
    )
    txn = _Transaction(install_fd, config, journal)
    try:
        staging_fd = txn.open_staging()
        bundle_fd = os.open(bundle, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            listed = (
                _read_checksums(bundle_fd, report.checksums_digest)
                if report.checksums_digest
                else None
            )
            copied: set[str] = set()
            trees = {
                item.label: _stage_folder(bundle_fd, staging_fd, item, listed, copied)
                for item in staged
            }
            expected = _listed_under(
                listed, [f"{source}/" for item in staged for source, _ in item.sources]
            )
            if listed is not None and copied != expected:
                missing = sorted(expected - copied)[0]
                raise InvalidInput(
                    f"{escape_display(missing)}: vanished from the bundle after verification; "
                    "verify it again",
                    path=missing,
                )
        finally:
            os.close(bundle_fd)
        copytree.make_durable(staging_fd)
        parents: list[str] = []
        emptied: list[dict[str, Any]] = []
        for item in staged:
            for parent in _missing_parents(install_fd, item.target):
                if parent not in parents:
                    parents.append(parent)
            st = _lstat_rel(install_fd, item.target)
            if st is not None:
                emptied.append({"path": item.target, "mode": stat.S_IMODE(st.st_mode)})
        journal.moves = [
            {"src": f"{txn.staging}/{item.label}", "dst": item.target, "tree": trees[item.label]}
            for item in staged
        ]
        journal.parents = parents
        journal.emptied = emptied
        if merge.value_at(result.plan.agent_entry, UNRESTRICTED) is True:
            path = format_path(["agents", result.plan.agent, *UNRESTRICTED])
            journal.audit = [{"path": path, "old": False, "new": True, "via": "agents import"}]
        journal.receipt_text = _receipt_text(
            result, report, config, new_text, journal, staged, trees, emptied, parents
        )
        txn.write_journal()
        txn.run(new_text)
    except BaseException as err:
        if txn.committed:
            txn.close()
            raise
        try:
            leftovers = txn.rollback()
        except OSError:
            leftovers = ["(rollback failed)"]
        problems = [line for line in leftovers if line.startswith("left ") or line.startswith("(")]
        if problems:
            raise Refused(
                "import failed and could not be fully undone; run 'bundler recover --install "
                f"{install_root}'",
                path=str(install_root),
            ) from err
        if isinstance(err, BundlerError):
            raise
        if isinstance(err, OSError):
            reason = os.strerror(err.errno) if err.errno else str(err)
            raise Refused(
                f"import failed ({reason}); nothing changed", path=str(install_root)
            ) from err
        raise
    # committed: what follows cannot undo the import, so failures are warnings (02 §8.4)
    txn.close()
    failure = str(txn.after_commit_error) if txn.after_commit_error is not None else ""
    try:
        result.receipt = str(
            install_root / _complete(install_root, install_fd, journal, dry_run=False)[1]
        )
    except (OSError, BundlerError) as err:
        failure = failure or str(err)
    if failure:
        result.warnings.append(
            f"imported, but finishing failed ({failure}); run 'bundler recover --install "
            f"{install_root}'"
        )


# ---------------------------------------------------------------------------------------------
# undo


def _load_receipt(receipt: Path) -> dict[str, Any]:
    shown = escape_display(str(receipt))
    try:
        raw = Path(receipt).read_bytes()
    except OSError as exc:
        raise Refused(
            f"cannot read receipt {shown} ({os.strerror(exc.errno or errno.EIO)})",
            path=str(receipt),
        ) from None
    try:
        data = tomlcompat.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomlcompat.TOMLDecodeError):
        raise InvalidInput(f"{shown} is not an import receipt", path=str(receipt)) from None
    if data.get("format") != RECEIPT_FORMAT or not isinstance(data.get("entries"), list):
        raise InvalidInput(
            f"{shown} is not an import receipt this version understands", path=str(receipt)
        )
    return data


def _find_entry(config: Mapping[str, Any], path: str) -> Any:
    segments = parse_path(path)
    located = merge.split_entry_path(segments)
    if located is not None:
        kind, name, _ = located
        return next(
            (entry for other, entry in merge.iter_entries(config, kind) if other == name), None
        )
    node: Any = config
    for part in segments:
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _remove_entries(config: dict[str, Any], paths: Iterable[str]) -> dict[str, Any]:
    out = copy.deepcopy(config)
    for path in paths:
        segments = parse_path(path)
        located = merge.split_entry_path(segments)
        if located is not None and located[0] == "mcp.servers":
            servers = out["mcp"]["servers"]
            index = next(
                i
                for i, s in enumerate(servers)
                if isinstance(s, dict) and s.get("name") == located[1]
            )
            del servers[index]
            continue
        node = out
        for part in segments[:-1]:
            node = node[part]
        del node[segments[-1]]
    return out


def _remove_from_text(text: str, paths: Sequence[str]) -> str:
    """``text`` without the entries at ``paths``, the rest kept through tomlkit."""
    doc = tomlkit.parse(text)
    for path in paths:
        segments = parse_path(path)
        located = merge.split_entry_path(segments)
        if located is not None and located[0] == "mcp.servers":
            servers: Any = doc["mcp"]["servers"]
            index = next(i for i, s in enumerate(servers) if s.get("name") == located[1])
            del servers[index]
            continue
        node: Any = doc
        for part in segments[:-1]:
            node = node[part]
        del node[segments[-1]]
    return tomlkit.dumps(doc)


def _pruned(value: Any) -> Any:
    """``value`` without empty tables or arrays: removing a map's last entry leaves one behind."""
    if isinstance(value, dict):
        out = {key: _pruned(sub) for key, sub in value.items()}
        return {key: sub for key, sub in out.items() if sub not in ({}, [])}
    return value


@_io_errors_refused("undo")
def undo_import(install_root: Path, receipt: Path) -> UndoReport:
    """Remove exactly what the import recorded in ``receipt`` added (03 §4), transactionally.

    Every added entry (compared by digest with ``x-secret`` values ignored) and every folder the
    import created (compared by content digest) must be unchanged; otherwise :class:`Refused`
    lists what changed and nothing is touched.
    """
    install_root = Path(os.path.abspath(install_root))
    data = _load_receipt(receipt)
    result = UndoReport(agent=str(data.get("agent", "")), receipt=str(receipt))
    with _install_fd(install_root, create=False) as install_fd, contextlib.ExitStack() as stack:
        stack.enter_context(config_lock(install_root))
        config = read_config(install_fd, stack)
        current = parse_config(config.text)
        changed: list[str] = []
        paths = [str(entry["path"]) for entry in data["entries"]]
        for entry in data["entries"]:
            value = _find_entry(current, entry["path"])
            if value is None:
                changed.append(f"{entry['path']} (removed)")
            elif entry_digest(value, parse_path(entry["path"])) != entry["digest"]:
                changed.append(f"{entry['path']} (changed)")
        folders = [folder for folder in data.get("folders", []) if isinstance(folder, dict)]
        for folder in folders:
            if _tree_at(install_fd, folder["path"]) != folder["tree"]:
                changed.append(f"{folder['path']} (changed or missing)")
        if changed:
            raise Refused(
                "cannot undo: changed since the import: "
                + ", ".join(escape_display(c) for c in changed),
                path=str(receipt),
            )
        new_text = _undone_text(config.text, current, paths, data)
        errors, _ = validate(parse_config(new_text or ""), install_root)
        if errors:
            raise InvalidInput(
                "cannot undo: the config without the imported entries would be invalid: "
                f"{errors[0].line()}",
                path=errors[0].path,
            )
        token = durable.random_token()
        journal = Journal(
            kind="undo",
            token=token,
            old_config=config.digest,
            new_config="absent" if new_text is None else xxh(new_text.encode("utf-8")),
            config_tmp=f".{config.name}.bundler-{token}",
            config_dir=os.path.realpath(f"/proc/self/fd/{config.dir_fd}"),
            restore_empty=list(data.get("emptied", [])),
            remove_parents=list(data.get("created_parents", [])),
        )
        agent_path = ["agents", result.agent, *UNRESTRICTED]
        if merge.value_at(current, agent_path) is True:
            # the entry goes away, so the flag is off again (false is its default)
            line = {"path": format_path(agent_path), "old": True, "new": False}
            journal.audit = [{**line, "via": "agents import --undo"}]
        txn = _Transaction(install_fd, config, journal)
        try:
            txn.open_staging()
            journal.moves = [
                {"src": folder["path"], "dst": f"{txn.staging}/{i}", "tree": folder["tree"]}
                for i, folder in enumerate(folders)
            ]
            txn.write_journal()
            txn.run(new_text)
        except BaseException as err:
            if txn.committed:
                txn.close()
                raise
            try:
                txn.rollback()
            except OSError:
                raise Refused(
                    f"undo failed; run 'bundler recover --install {install_root}'",
                    path=str(install_root),
                ) from err
            if isinstance(err, OSError):
                raise Refused(
                    f"undo failed ({os.strerror(err.errno or errno.EIO)}); nothing changed",
                    path=str(install_root),
                ) from err
            raise
        txn.close()
        failure = str(txn.after_commit_error) if txn.after_commit_error is not None else ""
        try:
            _complete(install_root, install_fd, journal, dry_run=False)
        except (OSError, BundlerError) as err:
            failure = failure or str(err)
        if failure:
            result.warnings.append(
                f"undone, but tidying up failed ({failure}); run 'bundler recover --install "
                f"{install_root}'"
            )
        result.removed_entries = paths
        result.removed_folders = [str(install_root / folder["path"]) for folder in folders]
    return result


def _undone_text(
    text: str, current: dict[str, Any], paths: Sequence[str], data: Mapping[str, Any]
) -> str | None:
    """The config text without the import's entries (None: there was no config.toml before).

    The import appended its entries, so whenever the file before them is unchanged the exact old
    bytes are its prefix; otherwise the entries are removed through tomlkit, keeping the rest.
    """
    expected = _pruned(_remove_entries(current, paths))
    raw = text.encode("utf-8")
    old_bytes = data.get("old_config_bytes")
    old_digest = data.get("old_config_xxh3_128")
    if data.get("append_only") and isinstance(old_bytes, int) and 0 <= old_bytes <= len(raw):
        prefix = raw[:old_bytes]
        if old_digest == "absent" and old_bytes == 0 and expected == {}:
            return None
        if xxh(prefix) == old_digest:
            with contextlib.suppress(UnicodeDecodeError, tomlcompat.TOMLDecodeError):
                candidate = prefix.decode("utf-8")
                if _pruned(tomlcompat.loads(candidate)) == expected:
                    return candidate
    candidate = _remove_from_text(text, paths)
    if _pruned(parse_config(candidate)) != expected:
        raise Refused(
            "cannot undo: config.toml could not be edited to remove exactly the imported entries",
            path=CONFIG,
        )
    return candidate


# ---------------------------------------------------------------------------------------------
# recovery


def _journal_of(install_fd: int, name: str) -> Journal | None:
    try:
        dir_fd = safefs.open_dir_nofollow(install_fd, name)
    except OSError:
        return None
    try:
        fd = os.open(JOURNAL, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    try:
        raw = os.read(fd, 1 << 26)
    finally:
        os.close(fd)
    try:
        return Journal.loads(raw)
    except (ValueError, UnicodeDecodeError, TypeError, tomlcompat.TOMLDecodeError):
        return None


def _temp_configs(dir_fd: int, token: str) -> list[str]:
    return [
        name
        for name in os.listdir(dir_fd)
        if name.startswith(".") and name.endswith(f".bundler-{token}")
    ]


@_io_errors_refused("recovery")
def recover_install(install_root: Path, dry_run: bool = False) -> list[str]:
    """Finish or roll back interrupted imports and undos of an install (03 §6).

    For each ``.bundler-import-<token>/`` folder: without a journal nothing outside it was
    touched, so it is removed; ``config.toml`` equal to the journal's old digest → not
    committed, rolled back (moved targets still identical to what was staged, and the parent
    folders created for them, are removed); equal to the new digest → committed, completed
    (receipt written if missing, leftovers removed); anything else → :class:`Refused` listing
    what was found. Returns the actions taken (with ``dry_run``, those it would take).
    """
    install_root = Path(os.path.abspath(install_root))
    actions: list[str] = []
    with _install_fd(install_root, create=False) as install_fd, contextlib.ExitStack() as stack:
        names = sorted(name for name in os.listdir(install_fd) if name.startswith(STAGING_PREFIX))
        if not names:
            return actions
        stack.enter_context(config_lock(install_root))
        config = read_config(install_fd, stack)
        for name in names:
            token = name[len(STAGING_PREFIX) :]
            journal = _journal_of(install_fd, name)
            if journal is None:
                # the journal is written before anything outside staging changes
                for tmp in _temp_configs(config.dir_fd, token):
                    actions.append(f"removed {tmp}")
                    if not dry_run:
                        os.unlink(tmp, dir_fd=config.dir_fd)
                actions.append(f"removed {name} (no journal: nothing else was changed)")
                if not dry_run:
                    safefs.rmtree_at(install_fd, name)
                    durable.fsync_dir(install_fd)
                continue
            digest = config.digest
            if digest == journal.old_config and digest != journal.new_config:
                actions.append(f"{name}: {journal.kind} was not committed; rolling back")
                actions += _roll_back(install_fd, config.dir_fd, journal, dry_run=dry_run)
            elif digest == journal.new_config:
                actions.append(f"{name}: {journal.kind} was committed; completing")
                for tmp in _temp_configs(config.dir_fd, token):
                    actions.append(f"removed {tmp}")
                    if not dry_run:
                        os.unlink(tmp, dir_fd=config.dir_fd)
                actions += _complete(install_root, install_fd, journal, dry_run=dry_run)[0]
            else:
                raise Refused(
                    f"{name}: config.toml matches neither the state before nor after this "
                    f"{journal.kind}; "
                    f"it lists targets {', '.join(m['dst'] for m in journal.moves) or 'none'}; "
                    "resolve by hand",
                    path=str(install_root / name),
                )
    return actions


def default_prompter() -> Prompter | None:
    """A :class:`Prompter` on the controlling terminal, or None when stdin is not a terminal."""
    import sys

    if not sys.stdin.isatty():
        return None

    class _Terminal:
        def secret(self, path: str, endpoint: str) -> str:
            return getpass.getpass(f"{path} (sent to {endpoint}; empty to skip): ")

        def confirm(self, question: str) -> bool:
            # ask where getpass asks: the terminal itself, not a redirected stderr
            try:
                fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
            except OSError:
                fd = -1
            if fd >= 0:
                try:
                    os.write(fd, (question + ": ").encode("utf-8", "replace"))
                    answer = b""
                    while not answer.endswith(b"\n") and (chunk := os.read(fd, 1024)):
                        answer += chunk
                    return answer.strip() == b"yes"
                finally:
                    os.close(fd)
            else:
                print(question, end=": ", file=sys.stderr, flush=True)
                return sys.stdin.readline().strip() == "yes"

    return _Terminal()
