"""The install's ``config.toml``: finding it, loading it, overriding it, editing it (01 §1, §6).

* :func:`find_install_root` and :func:`load_config` read; asking creates nothing.
* :func:`apply_overrides` folds ``ZEROCLAW_a__b__c`` variables into a loaded config.
* :func:`lookup`, :func:`redact` and :func:`parse_value` are the pure config-path helpers behind
  ``config get`` and ``config set``.
* :func:`config_lock`, :func:`read_config_snapshot`, :func:`stage_config_text`,
  :func:`commit_staged_config` and :func:`write_config_text` are the write protocol of 01 §6,
  shared by ``config set``, import and undo.
* :func:`set_config_value` is ``config set``: a comment-preserving edit, validated before it is
  saved.

No message built here contains a value from the config, the environment or the command line:
any of them may be a secret. Messages name config paths and variable names only.
"""

from __future__ import annotations

import copy
import fcntl
import getpass
import json
import os
import re
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import date, datetime, time, timezone
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.container import Container, OutOfOrderTableProxy
from tomlkit.items import AoT, Array, InlineTable, Item, Table

from bundler import layout, schema, tomlcompat
from bundler.configpath import format_path, parse_path
from bundler.durable import fsync_dir, open_dir, random_token
from bundler.errors import InvalidInput, Refused, UsageError
from bundler.validate import check_value, describe, validate

__all__ = [
    "AUDIT_RELATIVE_PATH",
    "LOCK_NAME",
    "ENV_PREFIX",
    "ConfigIdentity",
    "LoadedConfig",
    "StagedConfig",
    "append_audit",
    "apply_overrides",
    "commit_staged_config",
    "config_lock",
    "discard_staged_config",
    "effective_value",
    "GuardedChange",
    "find_install_root",
    "guarded_changes",
    "format_value",
    "to_jsonable",
    "load_config",
    "lookup",
    "memory_backend_locked",
    "parse_value",
    "read_config_snapshot",
    "redact",
    "set_config_value",
    "stage_config_text",
    "write_config_text",
]

ENV_PREFIX = "ZEROCLAW_"
CONFIG_DIR_VARIABLE = "ZEROCLAW_CONFIG_DIR"
LOCK_NAME = ".config.lock"
AUDIT_RELATIVE_PATH = ("data", "state", "config-audit.jsonl")
# a config this large is not a config; refusing it keeps a hostile file from exhausting memory
MAX_CONFIG_BYTES = 64 * 1024 * 1024
# how deep the memory-lock probe descends into <workspace>/memory before it assumes "locked"
_MEMORY_PROBE_DEPTH = 16

ConfigIdentity = tuple[int, int, int, int]
"""(device, inode, size, mtime_ns) of ``config.toml`` when it was read."""


# --- finding and reading -------------------------------------------------------------------------


def find_install_root(cli_install: str | None, environ: Mapping[str, str] | None = None) -> Path:
    """The install root (01 §1): ``--install``, else ``$ZEROCLAW_CONFIG_DIR``, else ``~/.zeroclaw``.

    Creates nothing and does not check that the folder exists.
    """
    env = os.environ if environ is None else environ
    if cli_install:
        chosen = cli_install
    elif env.get(CONFIG_DIR_VARIABLE):
        chosen = env[CONFIG_DIR_VARIABLE]
    else:
        home = env.get("HOME") or os.path.expanduser("~")
        return Path(os.path.abspath(os.path.join(home, ".zeroclaw")))
    if chosen.startswith("~"):
        chosen = os.path.expanduser(chosen)
    return Path(os.path.abspath(chosen))


def _config_target(install_root: Path) -> Path:
    """The real file behind ``<install>/config.toml`` (its symlink's target, if it is one)."""
    return Path(os.path.realpath(layout.config_file(install_root)))


def read_config_snapshot(
    install_root: Path, *, missing_ok: bool = False
) -> tuple[str, ConfigIdentity | None]:
    """Read ``config.toml``: its text and its identity, taken from the very descriptor read.

    A missing file raises ``Refused("no config.toml in <install>")`` unless ``missing_ok``, in
    which case the answer is ``("", None)`` (``agents import`` may create the file).
    """
    path = layout.config_file(install_root)
    try:
        # O_NONBLOCK: a FIFO planted as config.toml must fail the S_ISREG check, not hang open()
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        if missing_ok:
            return "", None
        raise Refused(f"no config.toml in {install_root}", path=str(path)) from None
    except OSError as err:
        raise Refused(f"cannot open {path}: {err.strerror}", path=str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{path} is not a regular file", path=str(path))
        if info.st_size > MAX_CONFIG_BYTES:
            raise Refused(f"{path} is larger than {MAX_CONFIG_BYTES} bytes", path=str(path))
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    except OSError as err:
        raise Refused(f"cannot read {path}: {err.strerror}", path=str(path)) from None
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InvalidInput(f"{path}: not UTF-8 at byte {err.start}", path=str(path)) from None
    return text, (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def parse_config_text(text: str, where: str) -> dict[str, Any]:
    """Parse config TOML; bad TOML is ``InvalidInput`` naming ``where`` with line and column.

    The parser's messages state a position and a reason, never the text found there.
    """
    try:
        return tomlcompat.loads(text)
    except tomlcompat.TOMLDecodeError as err:
        raise InvalidInput(f"{where}: invalid TOML: {_safe_toml_reason(err)}", path=where) from None
    except RecursionError:
        raise InvalidInput(f"{where}: invalid TOML: nested too deeply", path=where) from None


# the parser quotes the offending character ("Illegal character 'x'"), which could be a
# character of a secret; only quoted TOML punctuation is kept
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")
_TOML_PUNCTUATION = frozenset("=[]{},.#\"'")


def _safe_toml_reason(err: ValueError) -> str:
    def keep_punctuation(match: re.Match[str]) -> str:
        quoted = match.group(1)
        return match.group(0) if quoted and set(quoted) <= _TOML_PUNCTUATION else ""

    return " ".join(_QUOTED.sub(keep_punctuation, str(err)).split())


@dataclass
class LoadedConfig:
    """A loaded ``config.toml``: plain data (overrides applied), the file's text and identity."""

    install_root: Path
    data: dict[str, Any]
    text: str
    identity: ConfigIdentity | None
    overridden: set[str] = field(default_factory=set)
    """Config paths (formatted) whose value comes from an environment override."""
    override_vars: dict[str, str] = field(default_factory=dict)
    """Formatted config path -> the ``ZEROCLAW_*`` variable that set it."""
    file_data: dict[str, Any] = field(default_factory=dict)
    """The data as the file has it, before overrides."""


def load_config(
    install_root: Path,
    *,
    environ: Mapping[str, str] | None = None,
    apply_overrides: bool = True,
) -> LoadedConfig:
    """Load ``<install>/config.toml`` for use, with environment overrides unless told not to.

    Raises ``Refused`` when the file is missing or unreadable, ``InvalidInput`` for bad TOML or a
    bad override (naming the variable), ``Refused`` for an override that turns
    ``unrestricted_filesystem`` on or changes a locked memory backend.
    """
    text, identity = read_config_snapshot(install_root)
    data = parse_config_text(text, str(layout.config_file(install_root)))
    loaded = LoadedConfig(install_root, data, text, identity, file_data=data)
    if apply_overrides:
        _apply(loaded, os.environ if environ is None else environ)
    return loaded


# --- config paths on plain data ------------------------------------------------------------------


def canonical_segments(path: str) -> tuple[list[str], schema.Node | None, bool]:
    """Parse a config path and canonicalise its field names (``api-key`` -> ``api_key``)."""
    return schema.resolve(parse_path(path))


def lookup(data: Mapping[str, Any], segments: list[str]) -> tuple[bool, Any]:
    """The value at canonical ``segments``: ``(True, value)``, or ``(False, None)`` when absent.

    Keyed arrays (``mcp.servers``) are addressed by the ``name`` of their first matching entry;
    other arrays by index.
    """
    value: Any = data
    node: schema.Node | None = schema.config_schema()
    for segment in segments:
        if isinstance(value, Mapping):
            if segment not in value:
                return False, None
            value = value[segment]
        elif isinstance(value, list):
            index = _list_index(value, segment, node)
            if index is None:
                return False, None
            value = value[index]
        else:
            return False, None
        node = schema.child(node, segment)
    return True, value


def _list_index(items: list[Any], segment: str, node: schema.Node | None) -> int | None:
    key = node.get("x-keyed-by") if node else None
    if key:
        for index, entry in enumerate(items):
            if isinstance(entry, Mapping) and entry.get(key) == segment:
                return index
        return None
    if segment.isdigit() and int(segment) < len(items):
        return int(segment)
    return None


def schema_default(segments: list[str]) -> tuple[bool, Any]:
    """``(True, default)`` when the schema gives the path a default, else ``(False, None)``."""
    node = schema.resolve(segments)[1]
    return schema.has_default(node), schema.default_of(node)


def effective_value(data: Mapping[str, Any], segments: list[str]) -> tuple[str, Any]:
    """What ``config get`` answers: ``("set", v)``, ``("default", v)`` or ``("absent", None)``.

    A default answers only for a missing *field* of an entry that exists: the memory backend of
    an agent that is not in the config has no default, the agent is simply absent.
    """
    found, value = lookup(data, segments)
    if found:
        return "set", value
    node: schema.Node | None = schema.config_schema()
    for depth, segment in enumerate(segments):
        is_field = node is not None and segment in node.get("properties", {})
        if not is_field and not lookup(data, segments[: depth + 1])[0]:
            return "absent", None  # an alias or map key that does not exist
        node = schema.child(node, segment)
    has_default, default = schema_default(segments)
    return ("default", default) if has_default else ("absent", None)


def redact(value: Any, segments: list[str], *, secret: bool | None = None) -> Any:
    """``value`` (found at ``segments``) with every non-empty secret replaced by ``"***"``.

    Tables and arrays are walked, so ``config get mcp.servers.github`` masks its ``env``.
    """
    is_secret = schema.is_secret(segments) if secret is None else secret
    if is_secret and value not in ("", None) and not isinstance(value, (Mapping, list)):
        return "***"
    if isinstance(value, Mapping):
        return {
            key: redact(sub, [*segments, str(key)], secret=None if not is_secret else True)
            for key, sub in value.items()
        }
    if isinstance(value, list):
        node = schema.resolve(segments)[1]
        keyed = node.get("x-keyed-by") if node else None
        out = []
        for index, sub in enumerate(value):
            name = sub.get(keyed) if keyed and isinstance(sub, Mapping) else None
            label = name if isinstance(name, str) and name else str(index)
            out.append(redact(sub, [*segments, label], secret=True if is_secret else None))
        return out
    return value


def to_jsonable(value: Any) -> Any:
    """``value`` with TOML dates and times as RFC 3339 strings, so ``--json`` can print it."""
    if isinstance(value, dict):
        return {str(key): to_jsonable(sub) for key, sub in value.items()}
    if isinstance(value, list):
        return [to_jsonable(sub) for sub in value]
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    return value


def format_value(value: Any) -> str:
    """A value as ``config get`` prints it: strings bare, everything else as a TOML value."""
    if isinstance(value, str):
        return value
    return _to_item(value, inline=True).as_string()


def is_string_field(node: schema.Node | None) -> bool:
    """True when the schema says the value is a string, so ``config set`` takes it verbatim."""
    if node is None:
        return False
    if node.get("type") == "string":
        return True
    choices = node.get("enum")
    return isinstance(choices, list) and bool(choices) and all(isinstance(c, str) for c in choices)


def parse_value(raw: str, node: schema.Node | None, path: str) -> Any:
    """A ``config set`` VALUE typed by the schema: verbatim for strings, else one TOML value.

    Raises ``InvalidInput`` naming ``path`` (never the value) when it is not one TOML value.
    """
    if is_string_field(node):
        return raw
    try:
        parsed = tomlcompat.loads(f"value = {raw}\n")
    except (tomlcompat.TOMLDecodeError, RecursionError):
        parsed = {}
    # more keys than one means the text smuggled in a second line: not a single value
    if set(parsed) != {"value"}:
        expected = "a value" if node is None else describe(node)
        raise InvalidInput(f"{path}: the value is not a TOML value; expected {expected}", path=path)
    return parsed["value"]


# --- environment overrides -----------------------------------------------------------------------


def override_variables(environ: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    """The override variables in ``environ``, sorted: ``(name, raw segments)``.

    Only ``ZEROCLAW_`` names that contain ``__`` are overrides; ``ZEROCLAW_CONFIG_DIR`` is not.
    """
    found = []
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and "__" in name[len(ENV_PREFIX) :]:
            found.append((name, name[len(ENV_PREFIX) :].split("__")))
    return found


def apply_overrides(loaded: LoadedConfig, environ: Mapping[str, str]) -> None:
    """Fold the override variables of ``environ`` into ``loaded.data`` (never into the file)."""
    _apply(loaded, environ)


def _apply(loaded: LoadedConfig, environ: Mapping[str, str]) -> None:
    overrides = override_variables(environ)
    if not overrides:
        return
    data = copy.deepcopy(loaded.file_data)  # the file's data never sees an override
    touched: list[tuple[str, list[str]]] = []
    for name, raw_segments in overrides:
        if not all(raw_segments):
            raise InvalidInput(f"environment variable {name}: empty config path segment", path=name)
        segments, node, _secret = schema.resolve(raw_segments)
        path = format_path(segments)
        if node is None:
            raise InvalidInput(
                f"environment variable {name}: {path} is not a config field", path=name
            )
        try:
            value = parse_value(environ[name], node, path)
        except InvalidInput as err:
            raise InvalidInput(f"environment variable {name}: {err.message}", path=name) from None
        problems = check_value(node, value, segments)
        if problems:
            first = problems[0]
            raise InvalidInput(
                f"environment variable {name}: {first.path} {first.message}", path=name
            )
        _set_plain(data, segments, value, name)
        touched.append((name, segments))
        loaded.overridden.add(path)
        loaded.override_vars[path] = name
    _check_override_guards(loaded, data, touched)
    loaded.data = data


def _set_plain(data: dict[str, Any], segments: list[str], value: Any, variable: str) -> None:
    container: Any = data
    node: schema.Node | None = schema.config_schema()
    for depth, segment in enumerate(segments):
        last = depth == len(segments) - 1
        if isinstance(container, list):
            index = _list_index(container, segment, node)
            if index is None:
                raise InvalidInput(
                    f"environment variable {variable}: no entry "
                    f"{format_path(segments[: depth + 1])}",
                    path=variable,
                )
            if last:
                container[index] = value
                return
            container = container[index]
        elif isinstance(container, dict):
            if last:
                container[segment] = value
                return
            if segment not in container:
                child = schema.child(node, segment)
                container[segment] = [] if child and child.get("type") == "array" else {}
            container = container[segment]
        else:
            raise InvalidInput(
                f"environment variable {variable}: {format_path(segments[:depth])} is not a table",
                path=variable,
            )
        node = schema.child(node, segment)


def _effective(data: Mapping[str, Any], segments: list[str]) -> Any:
    found, value = lookup(data, segments)
    return value if found else schema_default(segments)[1]


_UNRESTRICTED = ("workspace", "unrestricted_filesystem")
_BACKEND = ("memory", "backend")


@dataclass(frozen=True)
class GuardedChange:
    """One agent's changed ``unrestricted_filesystem`` or ``memory.backend`` (effective)."""

    alias: str
    segments: tuple[str, ...]
    old: Any
    new: Any

    @property
    def path(self) -> str:
        """The config path of the changed field."""
        return format_path(self.segments)

    @property
    def is_unrestricted(self) -> bool:
        """True for ``workspace.unrestricted_filesystem``, False for ``memory.backend``."""
        return self.segments[2:] == _UNRESTRICTED


def guarded_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[GuardedChange]:
    """Every agent whose escape hatch or memory backend differs between two configs.

    Compared on effective values (schema defaults filled in) for every agent of either config,
    so a change made by replacing a whole table (``agents.a.workspace``, ``agents.a``) is
    caught as surely as one made at the field itself.
    """
    aliases: dict[str, None] = {}
    for config in (before, after):
        agents = config.get("agents")
        if isinstance(agents, dict):
            aliases.update(dict.fromkeys(agents))
    changes = []
    for alias in aliases:
        for field_name in (_UNRESTRICTED, _BACKEND):
            segments = ["agents", alias, *field_name]
            old, new = _effective(before, segments), _effective(after, segments)
            if old != new:
                changes.append(GuardedChange(alias, tuple(segments), old, new))
    return changes


def _backend_locked(change: GuardedChange, configs: list[Mapping[str, Any]], root: Path) -> bool:
    # the workspace may differ between the configs (a path changed alongside): ask both
    return any(memory_backend_locked(config, change.alias, root) for config in configs)


def _check_override_guards(
    loaded: LoadedConfig, after: Mapping[str, Any], touched: list[tuple[str, list[str]]]
) -> None:
    """Overrides may not open the filesystem escape hatch nor change a locked memory backend."""
    for change in guarded_changes(loaded.file_data, after):
        variable = next(
            (
                name
                for name, segments in touched
                if tuple(segments) == change.segments[: len(segments)]
            ),
            touched[0][0],
        )
        if change.is_unrestricted and change.new is True:
            raise Refused(
                f"environment variable {variable}: an override may not turn {change.path} on; "
                "use 'bundler config set' (audited)",
                path=variable,
            )
        if not change.is_unrestricted and _backend_locked(
            change, [loaded.file_data, after], loaded.install_root
        ):
            raise Refused(
                f"environment variable {variable}: memory backend is locked: agent "
                f"{format_path([change.alias])} has written memory",
                path=variable,
            )


# --- the memory backend lock ---------------------------------------------------------------------


def memory_backend_locked(config: Mapping[str, Any], alias: str, install_root: Path) -> bool:
    """True once ``<workspace>/memory/`` of agent ``alias`` holds a non-empty regular file.

    Read without following symbolic links below the workspace. What cannot be examined (an
    unreadable or symlinked ``memory``, a tree deeper than the probe) counts as locked: a wrong
    "locked" only refuses a change, a wrong "unlocked" would orphan the agent's memory.
    """
    workspace = layout.workspace_dir(config, alias, install_root)
    try:
        workspace_fd = open_dir(workspace, follow=True)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    try:
        try:
            memory_fd = open_dir("memory", dir_fd=workspace_fd)
        except FileNotFoundError:
            return False
        except OSError:
            return True
        return _holds_data(memory_fd, 0)
    finally:
        os.close(workspace_fd)


def _holds_data(dir_fd: int, depth: int) -> bool:
    """Closes ``dir_fd``; True when a non-empty regular file lies below it (or it is unsure)."""
    try:
        if depth > _MEMORY_PROBE_DEPTH:
            return True
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and info.st_size > 0:
                    return True
                if stat.S_ISDIR(info.st_mode):
                    try:
                        sub = open_dir(entry.name, dir_fd=dir_fd)
                    except OSError:
                        return True
                    if _holds_data(sub, depth + 1):
                        return True
        return False
    except OSError:
        return True
    finally:
        os.close(dir_fd)


# --- the write protocol (01 §6) ------------------------------------------------------------------


@contextmanager
def config_lock(install_root: Path) -> Iterator[None]:
    """Hold the exclusive ``flock`` on ``<install>/.config.lock`` that every writer takes."""
    path = install_root / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as err:
        raise Refused(
            f"cannot open the config lock {path}: {err.strerror}", path=str(path)
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@dataclass(frozen=True)
class StagedConfig:
    """A new ``config.toml`` written durably under a temporary name beside the real file."""

    directory: Path
    temp_name: str
    target_name: str


def stage_config_text(install_root: Path, new_text: str) -> StagedConfig:
    """Write ``new_text`` to a temporary file beside the real ``config.toml`` and fsync it.

    The file is created 0600 (it may hold secrets) and only then given the original's owner
    and mode, so it is never readable more widely than the file it replaces.
    """
    target = _config_target(install_root)
    try:
        original: os.stat_result | None = os.stat(target, follow_symlinks=False)
    except FileNotFoundError:
        original = None
    temp_name = f".{target.name}.tmp-{random_token()}"
    dir_fd = _open_config_dir(target)
    try:
        fd = os.open(
            temp_name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dir_fd,
        )
        try:
            try:
                view = memoryview(new_text.encode("utf-8"))
                while view:
                    view = view[os.write(fd, view) :]
                if original is not None:
                    _copy_owner_and_mode(fd, original)
                os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            _unlink_quietly(temp_name, dir_fd)
            raise
    except OSError as err:
        raise Refused(f"cannot write beside {target}: {err.strerror}", path=str(target)) from None
    finally:
        os.close(dir_fd)
    return StagedConfig(target.parent, temp_name, target.name)


def _open_config_dir(target: Path) -> int:
    try:
        return open_dir(target.parent, follow=True)
    except OSError as err:
        raise Refused(
            f"cannot open {target.parent}: {err.strerror}", path=str(target.parent)
        ) from None


def _copy_owner_and_mode(fd: int, original: os.stat_result) -> None:
    info = os.fstat(fd)
    if (info.st_uid, info.st_gid) != (original.st_uid, original.st_gid):
        # not ours to give away when unprivileged: the file then stays ours, with the same mode
        with suppress(PermissionError):
            os.fchown(fd, original.st_uid, original.st_gid)
    os.fchmod(fd, stat.S_IMODE(original.st_mode))


def _unlink_quietly(name: str, dir_fd: int) -> None:
    with suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)


def _identity_now(target: Path) -> ConfigIdentity | None:
    try:
        info = os.stat(target, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def commit_staged_config(
    install_root: Path, staged: StagedConfig, expected_identity: ConfigIdentity | None
) -> None:
    """Rename a staged config over the real one (the commit point), then fsync the folder.

    Refused (exit 1, the staged file removed) when ``config.toml`` changed since it was read:
    ``expected_identity`` None means it must still be absent.
    """
    target = staged.directory / staged.target_name
    dir_fd = _open_config_dir(target)
    try:
        if _identity_now(target) != expected_identity:
            _unlink_quietly(staged.temp_name, dir_fd)
            raise Refused(
                f"{layout.config_file(install_root)} changed since it was read; nothing was "
                "written, run the command again",
                path=str(target),
            )
        try:
            os.rename(staged.temp_name, staged.target_name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError as err:
            _unlink_quietly(staged.temp_name, dir_fd)
            raise Refused(f"cannot replace {target}: {err.strerror}", path=str(target)) from None
        fsync_dir(dir_fd)
    finally:
        os.close(dir_fd)


def discard_staged_config(staged: StagedConfig) -> None:
    """Remove a staged config that will not be committed."""
    with suppress(FileNotFoundError):
        os.unlink(staged.directory / staged.temp_name)


def write_config_text(
    install_root: Path, new_text: str, expected_identity: ConfigIdentity | None
) -> None:
    """Replace ``config.toml`` atomically and durably; the caller holds :func:`config_lock`."""
    staged = stage_config_text(install_root, new_text)
    commit_staged_config(install_root, staged, expected_identity)


# --- the audit trail -----------------------------------------------------------------------------


def append_audit(install_root: Path, path: str, old: Any, new: Any, via: str) -> None:
    """Append one JSON line to ``<install>/data/state/config-audit.jsonl`` and make it durable."""
    record = {
        "time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "path": path,
        "old": old,
        "new": new,
        "user": _login_name(),
        "via": via,
    }
    line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    audit = install_root.joinpath(*AUDIT_RELATIVE_PATH)
    try:
        dir_fd = open_dir(install_root, follow=True)
        try:
            for name in AUDIT_RELATIVE_PATH[:-1]:
                dir_fd = _enter_or_create(dir_fd, name)
            fd = os.open(
                AUDIT_RELATIVE_PATH[-1],
                os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=dir_fd,
            )
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as err:
        raise Refused(f"cannot append to {audit}: {err.strerror}", path=str(audit)) from None


def _enter_or_create(dir_fd: int, name: str) -> int:
    """Open child folder ``name`` of ``dir_fd`` (created 0700 if absent); closes ``dir_fd``."""
    try:
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
            fsync_dir(dir_fd)
        except FileExistsError:
            pass
        return open_dir(name, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


# --- config set ----------------------------------------------------------------------------------


def set_config_value(install_root: Path, path: str, raw_value: str, *, via: str) -> str:
    """``config set``: set ``path`` to ``raw_value`` in ``config.toml``; returns the canonical path.

    The value is typed by the schema; every other byte of the file is kept. The edited file is
    validated alone (no overrides) before it is saved; an invalid result raises ``InvalidInput``
    listing the errors and leaves the file byte-identical. Changing a locked memory backend is
    refused; a change of ``unrestricted_filesystem`` is audited.
    """
    segments, node, _secret = canonical_segments(path)
    canonical = format_path(segments)
    if node is None:
        raise UsageError(
            f"{canonical} is not a config field bundler knows; edit config.toml by hand",
            path=canonical,
        )
    value = parse_value(raw_value, node, canonical)
    config_path = layout.config_file(install_root)
    if not os.path.lexists(config_path):
        # checked before taking the lock, whose file would otherwise be created in a non-install
        raise Refused(f"no config.toml in {install_root}", path=str(config_path))
    with config_lock(install_root):
        text, identity = read_config_snapshot(install_root)
        before = parse_config_text(text, str(config_path))
        document = _parse_document(text, str(config_path))
        _set_in_document(document, segments, value, canonical)
        new_text = document.as_string()
        after = parse_config_text(new_text, str(config_path))
        changes = guarded_changes(before, after)
        for change in changes:
            if not change.is_unrestricted and _backend_locked(
                change, [before, after], install_root
            ):
                raise Refused(
                    f"{change.path}: memory backend is locked: the workspace's memory/ folder "
                    "holds this agent's memory; export it first or keep the backend",
                    path=change.path,
                )
        errors, _warnings = validate(after, install_root)
        if errors:
            shown = "; ".join(finding.line() for finding in errors[:5])
            more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
            raise InvalidInput(
                f"config set {canonical} refused, the result would be invalid: {shown}{more}",
                path=canonical,
            )
        if new_text == text:
            return canonical
        write_config_text(install_root, new_text, identity)
        for change in changes:
            if change.is_unrestricted:
                append_audit(install_root, change.path, change.old, change.new, via)
    return canonical


def _parse_document(text: str, where: str) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(text)
    except Exception as err:  # tomlkit has no single error base; the text already parsed above
        raise InvalidInput(
            f"{where}: cannot edit this TOML: {type(err).__name__}", path=where
        ) from None


def _set_in_document(
    document: tomlkit.TOMLDocument, segments: list[str], value: Any, canonical: str
) -> None:
    """Set ``segments`` to ``value`` in a tomlkit document, creating only what is missing.

    Missing tables become dotted keys inside the deepest existing table (or a new ``[table]``
    directly under a super-table or the root), and nested inline tables inside inline tables
    and array-of-tables entries, so the new key lands where TOML says it belongs.
    """
    container: Any = document
    node: schema.Node | None = schema.config_schema()
    for depth, segment in enumerate(segments):
        rest = segments[depth:]
        if isinstance(container, (list, AoT, Array)):
            index = _list_index(list(container), segment, node)
            if index is None:
                raise Refused(
                    f"{canonical}: no entry {format_path(segments[: depth + 1])}; add it to "
                    "config.toml first",
                    path=canonical,
                )
            if len(rest) == 1:
                if not _replace_table_contents(container[index], value):
                    container[index] = _to_item(value, inline=True)
                return
            container = container[index]
        elif isinstance(container, (Container, Table, InlineTable, OutOfOrderTableProxy)):
            if segment in container and len(rest) > 1:
                container = container[segment]
            elif segment in container and _replace_table_contents(container[segment], value):
                return
            else:
                _add_missing(container, rest, value)
                return
        else:
            raise Refused(
                f"{canonical}: {format_path(segments[:depth])} is not a table", path=canonical
            )
        node = schema.child(node, segment)
    raise UsageError(f"{canonical}: empty config path", path=canonical)  # pragma: no cover


def _replace_table_contents(table: Any, value: Any) -> bool:
    """Give a ``[table]`` (or ``[[array]]`` entry) exactly ``value``'s keys, key by key.

    Replacing the table object instead would drop its header's comments and the comments and
    blank lines that follow it in the file. Returns False (nothing done) unless both are tables.
    """
    if not isinstance(table, Table) or not isinstance(value, Mapping):
        return False
    for key in [key for key in table if key not in value]:
        del table[key]
    for key, sub in value.items():
        if not (key in table and _replace_table_contents(table[key], sub)):
            table[key] = _to_item(sub, inline=True)
    return True


def _add_missing(container: Any, rest: list[str], value: Any) -> None:
    if len(rest) == 1:
        inline = isinstance(container, InlineTable)
        container[rest[0]] = _to_item(value, inline=inline or isinstance(value, Mapping))
        return
    if isinstance(container, (InlineTable, OutOfOrderTableProxy)):
        nested: Any = value
        for segment in reversed(rest[1:]):
            nested = {segment: nested}
        container[rest[0]] = _to_item(nested, inline=True)
        return
    if isinstance(container, tomlkit.TOMLDocument) or (
        isinstance(container, Table) and container.is_super_table()
    ):
        # a key-value appended to the root or a super-table would land after other tables
        # and belong to them; a new [table] section is where TOML puts it unambiguously
        table = tomlkit.table()
        container[rest[0]] = table
        _add_missing(table, rest[1:], value)
        return
    container.append(tomlkit.key(rest), _to_item(value, inline=True))


def _to_item(value: Any, *, inline: bool) -> Item:
    """A tomlkit item for a plain value; tables inline so they stay where they are put."""
    if isinstance(value, Mapping):
        table = tomlkit.inline_table() if inline else tomlkit.table()
        for key, sub in value.items():
            table[key] = _to_item(sub, inline=True)
        return table
    if isinstance(value, list):
        array = tomlkit.array()
        for sub in value:
            array.append(_to_item(sub, inline=True))
        return array
    item: Item = tomlkit.item(value)
    return item
