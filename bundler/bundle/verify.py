"""``bundler bundle verify`` (03 §1): check a bundle, changing nothing; ``inspect`` builds on it.

A bundle is untrusted input. Everything that decides safety is **recomputed** from the bundle's
contents (risk flags, carried skill bundles, the secrets it needs) and compared with what its
manifest claims; checksums only prove the files are the ones the manifest describes.

The tree is read once, through descriptors, never following a link (:func:`bundler.fs.safefs.walk`
with every skip turned into an error); each regular file is hashed in the same pass. Nothing is
written inside the bundle: the format 2 memory store is checked from a private copy opened
``immutable=1``, so not even a SQLite sidecar appears. Every failure is reported, not only the
first; strings taken from the bundle are escaped before they reach a message (05 §3).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import xxhash

from bundler.bundle import fragment as fragment_rules
from bundler.bundle.fragment import Problem, display_path
from bundler.bundle.manifest import (
    CHECKSUMS_NAME,
    CONFIG_NAME,
    KNOWN_FORMATS,
    MANIFEST_NAME,
    MEMORY_STORE,
    ChecksumLine,
    checksum_sort_text,
    checksums_by_path,
    iter_checksums,
    parse_manifest,
)
from bundler.bundle.sealed import MAX_SEALED_BYTES, SEALED_NAME, check_sealed
from bundler.bundle.walk import DEFERRED, BundleTree, BundleWalker
from bundler.errors import (
    BundlerError,
    EnvironmentFailure,
    InvalidInput,
    Refused,
    environment_failure,
)
from bundler.rules import hints, tomlcompat
from bundler.rules.names import (
    escape_display,
    is_portable_skill_alias,
)
from bundler.rules.progress import Progress, known_total
from bundler.rules.secrets import sweep_targets
from bundler.rules.tomlcompat import toml_error_reason
from bundler.rules.units import human_size

if TYPE_CHECKING:
    from bundler.bundle.archive_listing import ListedMember

MAX_MANIFEST_BYTES = 16 * 1024 * 1024
# 1,000,000 lines of "<32 hex>  <path>" with long paths fit comfortably
MAX_CHECKSUMS_BYTES = 512 * 1024 * 1024
# An "empty install" for validate(): validate is pure, so this path is never touched.
_EMPTY_INSTALL = Path("/nonexistent/bundler-verify-empty-install")
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


@dataclass
class VerifyReport:
    """The outcome of :func:`verify_bundle`.

    ``errors`` and ``warnings`` hold every finding. ``risk_flags`` and ``skill_bundles`` are
    recomputed from the bundle (``None``/empty when the fragment could not be read):
    ``risk_flags`` under both rule sets, ``also_found`` those of bundler's rules that the rules
    of the exporter which wrote the bundle do not raise and its manifest does not list; ``files``
    and ``bytes`` count the regular files found under ``config.toml``, ``workspace/``,
    ``skills/`` and ``memory/``, and ``sizes`` the size of each by its bundle path;
    ``checksums_digest`` is the XXH3-128 of ``checksums.xxh3`` and ``checksums`` the digests it
    lists, by bundle path (empty when it could not be read); ``manifest_digest`` is the
    XXH3-128 of the manifest as read; ``entries`` every folder and file the walk admitted,
    (name, is a folder) in checksum order: what an archive of a sound bundle holds
    (:func:`bundler.bundle.archive_write.archive_order`). ``workspace_digests_deferred``:
    the contents of ``workspace/`` were not compared with their digests (the caller does).
    ``not_here``: top folders that were not there to be read (see :func:`verify_bundle`).
    ``reference``: the registry reference pinned to its digest when ``path`` is a private pulled
    copy; the report names the bundle by it.
    """

    path: Path
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    fragment: dict[str, Any] | None = None
    risk_flags: list[dict[str, str]] = field(default_factory=list)
    also_found: list[dict[str, str]] = field(default_factory=list)
    skill_bundles: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    totals: dict[str, list[int]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    checksums_digest: str = ""
    checksums: dict[str, str] = field(default_factory=dict)
    manifest_digest: str = ""
    entries: list[tuple[str, bool]] = field(default_factory=list)
    integrity_unproven: bool = False
    per_file: bool = False
    workspace_digests_deferred: bool = False
    not_here: tuple[str, ...] = ()
    reference: str | None = None

    @property
    def ok(self) -> bool:
        """True when nothing is wrong (warnings allowed)."""
        return not self.errors

    @property
    def format_version(self) -> int | None:
        """The manifest's format, when it has a usable one."""
        value = (self.manifest or {}).get("format_version")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def as_json(self) -> dict[str, Any]:
        """The ``{"errors", "warnings", ...}`` payload of ``bundle verify --json`` (05 §3)."""
        named = {"bundle": self.reference, "reference": self.reference} if self.reference else {}
        return {
            "bundle": str(self.path),
            **named,
            "errors": [{"path": p.path, "message": p.message} for p in self.errors],
            "warnings": [{"path": p.path, "message": p.message} for p in self.warnings],
            "format_version": self.format_version,
            "root_agent": escape_display(str((self.manifest or {}).get("root_agent", ""))),
            "files": self.files,
            "bytes": self.bytes,
            "checksums_xxh3_128": self.checksums_digest,
            "also_found_by_bundler": self.also_found,
        }


# --------------------------------------------------------------------------- reading


def _open_root(path: Path) -> int:
    """Open the bundle folder itself without following a link (its ancestors are the user's)."""
    shown = escape_display(str(path))
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Refused(f"{shown}: no such bundle folder", path=str(path)) from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            if os.path.islink(path):
                message = f"{shown} is a symbolic link: verify the real folder"
            else:
                message = f"{shown} is not a folder: a bundle is a folder"
            raise InvalidInput(message, path=str(path)) from None
        failed = environment_failure("read", shown, exc)
        if failed is not None:
            raise failed from None
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise Refused(f"cannot read {shown} ({reason})", path=str(path)) from None


class _TooLarge(Exception):
    """A root file grew past its limit while it was read."""


def _open_root_file(root_fd: int, name: str, limit: int) -> tuple[int | None, Problem | None]:
    """Open a regular file at the bundle root for reading: (fd, None), (None, None) if absent,
    (None, problem) when it is no file a bundle may hold there or is larger than ``limit``."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=root_fd)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, Problem(name, "a symbolic link (a bundle holds none)")
        return None, _cannot_read(name, exc)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            problem = Problem(name, "not a regular file")
        elif st.st_nlink > 1:
            problem = Problem(name, "a hard link (a bundle holds none)")
        elif st.st_size > limit:
            problem = Problem(name, f"larger than {human_size(limit)}")
        else:
            return fd, None
    except OSError as exc:
        problem = _cannot_read(name, exc)
    os.close(fd)
    return None, problem


def _chunks(fd: int, limit: int, size: int = 1 << 20) -> Iterator[bytes]:
    """The file's bytes from its start in pieces of ``size``; raises :class:`_TooLarge` past
    ``limit`` and :class:`OSError` as the reads do."""
    offset = 0
    while chunk := os.pread(fd, size, offset):
        offset += len(chunk)
        if offset > limit:
            raise _TooLarge
        yield chunk


def _read_root_file(root_fd: int, name: str, limit: int) -> tuple[bytes | None, Problem | None]:
    """Read a small regular file at the bundle root: (bytes, None), (None, None) if absent."""
    fd, problem = _open_root_file(root_fd, name, limit)
    if fd is None:
        return None, problem
    try:
        return b"".join(_chunks(fd, limit)), None
    except _TooLarge:
        return None, Problem(name, f"larger than {human_size(limit)}")
    except OSError as exc:
        return None, _cannot_read(name, exc)
    finally:
        os.close(fd)


def _cannot_read(name: str, exc: OSError) -> Problem:
    """The finding for a root file that cannot be read; the system's own failure (no
    descriptor left, an I/O error) is raised instead, being none of the bundle's."""
    failed = environment_failure("read", name, exc)
    if failed is not None:
        raise failed from exc
    return Problem(name, f"cannot be read ({os.strerror(exc.errno or errno.EIO)})")


def _parse_toml(name: str, raw: bytes) -> tuple[dict[str, Any] | None, Problem | None]:
    """Parse TOML bytes after the raw-text nesting bound (03 §1: checked before parsing)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, Problem(name, "not valid UTF-8")
    depth = fragment_rules.nesting_depth(text)
    if depth > fragment_rules.MAX_NESTING:
        return None, Problem(
            name, f"nested {depth} levels deep (at most {fragment_rules.MAX_NESTING})"
        )
    try:
        return tomlcompat.loads(text), None
    except (tomlcompat.TOMLDecodeError, RecursionError) as exc:
        return None, Problem(name, f"not valid TOML ({escape_display(toml_error_reason(exc))})")


# --------------------------------------------------------------------------- manifest


def _manifest_error(exc: BundlerError) -> Problem:
    message = exc.message.removeprefix(f"{MANIFEST_NAME}: ")
    return Problem(MANIFEST_NAME, message)


def _read_manifest(raw: bytes, *, legacy: bool) -> tuple[dict[str, Any] | None, list[Problem]]:
    """The manifest as a table, and what is wrong with it (02 §9, §10).

    The schema, the format and format 2's ``[memory]`` are checked by
    :func:`bundler.bundle.manifest.parse_manifest`; when it refuses, the raw table is still returned
    so that the rest of the bundle can be checked and every failure reported. ``legacy`` (no
    ``checksums.xxh3`` in the bundle) lets a format 1 manifest omit the checksums keys, as
    older exporters wrote it (03 §1).
    """
    table, problem = _parse_toml(MANIFEST_NAME, raw)
    if table is None:
        return None, [problem] if problem is not None else []
    problems: list[Problem] = []
    manifest: dict[str, Any] = table
    contents = table.get("contents")
    filled: list[str] = []
    if legacy and table.get("format_version") == 1 and isinstance(contents, dict):
        placeholders = {"checksums": CHECKSUMS_NAME, "checksums_xxh3_128": "0" * 32}
        filled = [key for key in placeholders if key not in contents]
        contents.update({key: placeholders[key] for key in filled})
        import tomli_w  # only for such a legacy manifest: no other verify writes TOML

        raw = tomli_w.dumps(table).encode("utf-8")
    try:
        manifest = parse_manifest(raw).as_dict()
    except InvalidInput as exc:
        problems.append(_manifest_error(exc))
    for key in filled:  # placeholders for the schema only: the bundle never said them
        manifest["contents"].pop(key, None)
    root = manifest.get("root_agent")
    if isinstance(root, str) and root:
        problems += [
            Problem(f"{MANIFEST_NAME}: {p.path}", p.message)
            for p in fragment_rules.portable_alias_problems(root)
        ]
    return manifest, problems


def _read_checksums(raw: bytes) -> tuple[dict[str, str] | None, Problem | None]:
    """``{path: digest}`` of ``checksums.xxh3`` (02 §9.2), or the first line at fault."""
    try:
        return checksums_by_path(raw), None
    except InvalidInput as exc:
        return None, _checksums_problem(exc)


def _checksums_problem(exc: InvalidInput) -> Problem:
    where = exc.path or CHECKSUMS_NAME  # "checksums.xxh3:<line>"
    return Problem(where, exc.message.removeprefix(f"{where}: "))


def _not_matching(rel: str) -> Problem:
    return Problem(escape_display(rel), f"content does not match its digest in {CHECKSUMS_NAME}")


class _Checksums:
    """``checksums.xxh3``, read twice through one descriptor and never held whole (06 P4).

    :meth:`check` reads it before the walk: its XXH3-128 and every rule of its lines
    (:func:`bundler.bundle.manifest.iter_checksums`). :meth:`found` then takes each regular
    file the walk finds, in walk order, which is the file's order (02 §9.2), and reads the
    lines again beside it, as a merge of two sorted lists: a line before the file is listed but
    not found, the file's own line is compared, none is a file not listed. :meth:`finish`
    reads what is left and checks that the second reading was the file the first one checked.
    The findings are those of comparing two whole tables, in the same order: every file not
    listed or not matching, in walk order, then every listed path not found, in the file's.
    """

    def __init__(self, fd: int, elsewhere: tuple[str, ...]) -> None:
        self.fd = fd
        self.elsewhere = elsewhere  # listed paths here are looked for elsewhere, not reported
        self.digest = ""
        self.compared: list[Problem] = []  # not listed, or not matching
        self.missing: list[Problem] = []  # listed, not found
        self.problem: Problem | None = None  # the second reading differs from the first
        self._hasher = xxhash.xxh3_128()
        self._lines: Iterator[ChecksumLine] = iter(())
        self._next: ChecksumLine | None = None

    def _hashed(self) -> Iterator[bytes]:
        # 64 KiB (about 800 lines) at a time: the regex engine's state over a block of lines
        # grows with it (a 1 MiB block cost 28 MB of peak memory, 64 KiB 1.5 MB), and is faster
        for chunk in _chunks(self.fd, MAX_CHECKSUMS_BYTES, 1 << 16):
            self._hasher.update(chunk)
            yield chunk

    def check(self, keep: dict[str, str] | None, tops: set[str] | None) -> Problem | None:
        """Read the whole file: its digest (``self.digest``), and the first fault of its lines
        or of reading it. ``keep`` receives every line as {path: digest}, ``tops`` every top
        folder a path is listed under."""
        try:
            for _key, path, digest in iter_checksums(self._hashed()):
                if keep is not None:
                    keep[path] = digest
                if tops is not None:
                    tops.add(path.partition("/")[0])
        except InvalidInput as exc:
            problem: Problem | None = _checksums_problem(exc)
        except _TooLarge:
            return Problem(CHECKSUMS_NAME, f"larger than {human_size(MAX_CHECKSUMS_BYTES)}")
        except OSError as exc:
            return _cannot_read(CHECKSUMS_NAME, exc)
        else:
            problem = None
        self.digest = self._hasher.hexdigest()
        if problem is None:
            self._hasher = xxhash.xxh3_128()
            self._lines = iter_checksums(self._hashed())
            self._advance()
        return problem

    def _advance(self) -> None:
        if self.problem is not None:
            self._next = None
            return
        try:
            self._next = next(self._lines, None)
        except (InvalidInput, _TooLarge):
            self._changed()
        except OSError as exc:
            self.problem = _cannot_read(CHECKSUMS_NAME, exc)
            self._next = None

    def _changed(self) -> None:
        self.problem = Problem(CHECKSUMS_NAME, "changed while it was verified: verify again")
        self._next = None

    def _listed_not_found(self, path: str) -> None:
        if not (self.elsewhere and path.startswith(self.elsewhere)):
            self.missing.append(
                Problem(
                    escape_display(path),
                    f"listed in {CHECKSUMS_NAME} but not a regular file of the bundle",
                )
            )

    def found(self, rel: str, digest: str) -> None:
        """One regular file the walk found, with its digest (:data:`DEFERRED` when unread)."""
        # a walked path holds no control character and no lone surrogate
        key = checksum_sort_text(rel)
        while self._next is not None and self._next[0] < key:
            self._listed_not_found(self._next[1])
            self._advance()
        if self._next is not None and self._next[0] == key:
            expected = self._next[2]
            self._advance()
            if expected != digest and digest != DEFERRED:
                self.compared.append(_not_matching(rel))
        else:
            self.compared.append(Problem(escape_display(rel), f"not listed in {CHECKSUMS_NAME}"))

    def finish(self, report: VerifyReport, *, walked_all: bool) -> None:
        """Add the findings to ``report``; listed paths not found only when the walk saw the
        whole bundle (one stopped early found only part of it)."""
        while self._next is not None:
            self._listed_not_found(self._next[1])
            self._advance()
        if self.problem is None and self._hasher.hexdigest() != self.digest:
            self._changed()
        report.errors += self.compared
        if walked_all:
            report.errors += self.missing
        if self.problem is not None:
            report.errors.append(self.problem)


def _compare_contents(report: VerifyReport, manifest: Mapping[str, Any]) -> None:
    contents = manifest.get("contents")
    if not isinstance(contents, dict) or report.not_here:
        return
    for key, actual in (("files", report.files), ("bytes", report.bytes)):
        claimed = contents.get(key)
        if isinstance(claimed, int) and claimed != actual:
            report.errors.append(
                Problem(
                    f"{MANIFEST_NAME}: contents.{key}",
                    f"says {claimed} but the bundle's files give {actual}",
                )
            )


def zeroclaw_written(manifest: Mapping[str, Any]) -> bool:
    """True when ZeroClaw's own exporter wrote the manifest: ``zeroclaw_version``, no exporter.

    Any ``exporter`` name, bundler's or a stranger's, is held to every kind bundler knows.
    """
    provenance = manifest.get("provenance")
    return (
        isinstance(provenance, dict)
        and "exporter" not in provenance
        and isinstance(provenance.get("zeroclaw_version"), str)
    )


def _raw_joined(path: str) -> str:
    # ZeroClaw joins a flag's path segments with "." unquoted (skill_bundles.research.tools)
    from bundler.errors import UsageError
    from bundler.rules.paths import parse_path

    try:
        return ".".join(parse_path(path))
    except UsageError:
        return path


def _flag_key(flag: Mapping[str, Any], *, raw: bool) -> tuple[str, str]:
    path = str(flag.get("path", ""))
    return (_raw_joined(path) if raw else path), str(flag.get("kind", ""))


def _compare_flags(
    report: VerifyReport,
    manifest: Mapping[str, Any],
    bundler_flags: list[dict[str, str]],
    writer_flags: list[dict[str, str]],
) -> None:
    """The manifest's ``risk_flags`` against the writer's rule set, by (kind, path) only (02 §6.2).

    ``writer_flags`` are the flags the exporter that wrote the bundle raises under its own rules
    (bundler's, or ZeroClaw's for a manifest ZeroClaw wrote); one it leaves out is a lying
    manifest. A listed flag neither rule set raises is one too. What bundler's rules find beyond
    the writer's is no lie: it is kept in ``report.also_found`` and a warning, and import puts it
    to the operator with the rest. ``detail`` is wording for people and is never compared. Paths
    of a ZeroClaw-written manifest are compared as ZeroClaw joins them.
    """
    claimed = manifest.get("risk_flags", [])
    claimed_flags = [f for f in claimed if isinstance(f, dict)] if isinstance(claimed, list) else []
    raw = zeroclaw_written(manifest)
    claimed_by_key = {_flag_key(f, raw=raw): f for f in claimed_flags}
    writer_by_key = {_flag_key(f, raw=raw): f for f in writer_flags}
    bundler_by_key = {_flag_key(f, raw=raw): f for f in bundler_flags}
    where = f"{MANIFEST_NAME}: risk_flags"
    for key in writer_by_key:
        if key not in claimed_by_key:
            shown = f"{escape_display(key[1])} at {escape_display(key[0])}"
            report.errors.append(Problem(where, f"omits {shown}, which config.toml grants"))
    for key in claimed_by_key:
        if key not in writer_by_key and key not in bundler_by_key:
            report.errors.append(
                Problem(
                    where,
                    f"lists {escape_display(key[1])} at {escape_display(key[0])}, "
                    "which config.toml does not grant",
                )
            )
    report.also_found = [
        flag
        for key, flag in bundler_by_key.items()
        if key not in writer_by_key and key not in claimed_by_key
    ]
    report.warnings += [
        Problem(
            where,
            f"also found by bundler: {escape_display(flag['kind'])} at "
            f"{escape_display(flag['path'])} ({escape_display(flag['detail'])}); the exporter's "
            "rules do not raise it, import asks for consent to it with the rest",
        )
        for flag in report.also_found
    ]


def _recompute(
    report: VerifyReport, tree: BundleTree, manifest: Mapping[str, Any], fragment: dict[str, Any]
) -> None:
    """Skill bundles, risk flags and required secrets from the fragment and the tree (03 §1)."""
    from bundler.rules.risk import compute_risk_flags
    from bundler.rules.risk_zeroclaw import zeroclaw_risk_flags
    from bundler.rules.validate import validate

    root = str(manifest.get("root_agent", ""))
    version = report.format_version or 1
    agent = fragment_rules.agent_of(fragment, root)
    named = agent.get("skill_bundles", [])
    named = [n for n in named if isinstance(n, str)] if isinstance(named, list) else []
    with_skills = {bundle for (bundle, _skill), has in tree.skill_dirs.items() if has}
    for (bundle, skill), has in sorted(tree.skill_dirs.items()):
        if not has:
            report.errors.append(
                Problem(
                    escape_display(f"skills/{bundle}/{skill}"), "not a skill (no regular SKILL.md)"
                )
            )
        elif bundle not in named:
            continue
        else:
            entry = fragment_rules.lookup(fragment, ["skill_bundles", bundle])[1]
            include = entry.get("include", []) if isinstance(entry, dict) else []
            exclude = entry.get("exclude", []) if isinstance(entry, dict) else []
            include = include if isinstance(include, list) else []
            exclude = exclude if isinstance(exclude, list) else []
            if skill in exclude or (include and skill not in include):
                report.errors.append(
                    Problem(
                        escape_display(f"skills/{bundle}/{skill}"),
                        "excluded by its bundle's include/exclude filter",
                    )
                )
    for bundle in sorted({b for b, _ in tree.skill_dirs} | tree.skill_bundles):
        if bundle not in named:
            report.errors.append(
                Problem(
                    escape_display(f"skills/{bundle}"),
                    f"agents.{escape_display(root)} names no such skill bundle",
                )
            )
        elif bundle not in with_skills:
            report.errors.append(Problem(escape_display(f"skills/{bundle}"), "holds no skill"))
    report.skill_bundles = [b for b in named if b in with_skills]
    if manifest.get("skill_bundles") != report.skill_bundles:
        report.errors.append(
            Problem(
                f"{MANIFEST_NAME}: skill_bundles",
                f"says {_show_list(manifest.get('skill_bundles'))} "
                f"but skills/ carries {_show_list(report.skill_bundles)}",
            )
        )
    try:
        flags = compute_risk_flags(fragment, report.skill_bundles, version, root)
        bundler_flags = [flag.as_dict() for flag in flags]
        writer_flags = bundler_flags
        if zeroclaw_written(manifest):
            writer_flags = [
                flag.as_dict() for flag in zeroclaw_risk_flags(fragment, report.skill_bundles, root)
            ]
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        report.errors.append(
            Problem(CONFIG_NAME, f"risk flags cannot be computed ({type(exc).__name__})")
        )
    else:
        # what the operator sees and consents to: both rule sets' findings, one per path and kind
        union = {(f["path"], f["kind"]): f for f in [*writer_flags, *bundler_flags]}
        report.risk_flags = [union[key] for key in sorted(union)]
        _compare_flags(report, manifest, bundler_flags, writer_flags)
    secrets = manifest.get("required_secrets", [])
    if isinstance(secrets, list):
        report.errors += [
            Problem(f"{MANIFEST_NAME}: {p.path}", p.message)
            for p in fragment_rules.required_secret_problems(fragment, secrets)
        ]
    seen = {p.path for p in report.errors}
    errors, _warnings = validate(fragment, _EMPTY_INSTALL)
    for finding in errors:
        path = escape_display(finding.path)
        if path not in seen:
            report.errors.append(
                Problem(path, f"{finding.kind}: {escape_display(finding.message)}")
            )
    identity = fragment_rules.lookup(fragment, ["agents", root, "identity", "aieos_path"])[1]
    carried = f"workspace/{identity}" in tree.found
    if isinstance(identity, str) and identity and not tree.stopped and not carried:
        report.errors.append(
            Problem(
                display_path(["agents", root, "identity", "aieos_path"]),
                "names no file under workspace/ (an export drops a missing identity path)",
            )
        )
    if version == 2:
        backend = fragment_rules.lookup(fragment, ["agents", root, "memory", "backend"])
        if backend[0] and backend[1] != "sqlite":
            report.errors.append(
                Problem(
                    display_path(["agents", root, "memory", "backend"]),
                    'must be "sqlite" in a format 2 bundle',
                )
            )


def _show_list(value: Any) -> str:
    if not isinstance(value, list):
        return "nothing"
    return "[" + ", ".join(escape_display(str(v)) for v in value) + "]"


def _check_store(report: VerifyReport, tree: BundleTree) -> None:
    from bundler.fs.snapshot import ROLLBACK_VERSIONS, integrity_ok, journal_versions

    if MEMORY_STORE not in tree.found or tree.memory_copy is None:
        report.errors.append(Problem(MEMORY_STORE, "a format 2 bundle must carry its memory store"))
        return
    versions = journal_versions(tree.memory_copy)
    if versions is not None and versions != ROLLBACK_VERSIONS:
        # a WAL-mode store cannot be opened from read-only media or by a user who cannot write
        # its folder, and a read-only open elsewhere leaves -wal/-shm files in the bundle
        report.errors.append(
            Problem(
                MEMORY_STORE,
                f"is not in rollback-journal mode (header file format versions "
                f"{versions[0]}/{versions[1]}, not 1/1): export it again with this bundler",
            )
        )
        return
    if not integrity_ok(tree.memory_copy):
        report.errors.append(
            Problem(MEMORY_STORE, "fails PRAGMA integrity_check (not an intact SQLite database)")
        )


# --------------------------------------------------------------------------- verify


@contextlib.contextmanager
def _private_dir() -> Iterator[Callable[[], Path]]:
    """A private scratch folder in the temporary folder, made on first use (only a format 2
    bundle's memory store needs one, so most runs neither make nor remove one, nor import
    ``tempfile``), removed on exit; one a killed run left is removed by the next that makes
    one (:mod:`bundler.fs.scratch`)."""
    with contextlib.ExitStack() as stack:
        made: list[Path] = []

        def folder() -> Path:
            if not made:
                from bundler.fs.durable import open_dir
                from bundler.fs.scratch import (
                    VERIFY_PREFIX,
                    clear_dead_scratch,
                    scratch_folder,
                    temp_root,
                )

                where = temp_root()
                parent_fd = open_dir(where, follow=True)
                stack.callback(os.close, parent_fd)
                clear_dead_scratch(parent_fd, VERIFY_PREFIX)
                name, _fd = stack.enter_context(
                    scratch_folder(parent_fd, VERIFY_PREFIX, where=where)
                )
                made.append(Path(where) / name)
            return made[0]

        yield folder


def verify_bundle(
    path: Path,
    *,
    progress: Progress | None = None,
    defer_workspace_digests: bool = False,
    not_here: tuple[str, ...] = (),
    known_digests: Mapping[str, tuple[int, str]] | None = None,
    listed: Sequence[ListedMember] = (),
    per_file: bool = False,
) -> VerifyReport:
    """Check the bundle folder ``path`` completely (03 §1), changing nothing.

    Returns a :class:`VerifyReport` listing every error and warning. Raises :class:`Refused`
    when ``path`` does not exist or cannot be read, :class:`EnvironmentFailure` when the system
    fails a read (no descriptor or memory left, an I/O error: nothing is then known of the
    bundle) and :class:`InvalidInput` when it is a symbolic link or not a folder; everything
    wrong *inside* the bundle is a report error.
    ``progress`` sees one phase, ``verifying``, whose totals are the manifest's claims.

    With ``defer_workspace_digests`` every rule is checked except that the contents of the
    files under ``workspace/`` are not read: the caller copies them and compares the digest of
    each copy with the checksums (import's staging does), which is the check that counts, since
    it is made on the bytes that land; reading them here too would be a second full pass.

    ``not_here`` names top folders (``"workspace"``, ``"memory"``) that are not in ``path`` to
    be read: ``bundle inspect`` of a registry artifact leaves those layers in the registry. The
    files listed under them are not looked for, the manifest's totals and the memory store are
    not judged (``report.not_here`` says so), and every other rule holds as always.

    ``known_digests`` (bundle path -> (size, XXH3-128 hex)) is only for a folder bundler itself
    has just written into its private staging, with each digest computed from the bytes as they
    were written (:func:`bundler.bundle.archive_read.read_tar`'s ``digests``): a regular file
    listed there with that size is not read back, its recorded digest is compared with
    ``checksums.xxh3`` instead. Every other check is unchanged (the walk, the structure rules,
    files not listed, ``config.toml`` and the memory store, which are read for their content).

    ``listed`` are members of top folders that are not in ``path`` but held in an archive
    bundler has just read (:func:`bundler.bundle.archive_read.list_tar`), each file's digest in
    ``known_digests``: they are judged as if the folder held them, by the same walk.

    ``per_file`` keeps what the report says of each file (``sizes``, ``checksums``,
    ``entries``) for a caller that goes on to read the bundle by them (pack, push); without
    it verification holds nothing per file, and its memory does not grow with the bundle.
    """
    report = VerifyReport(path=Path(os.path.abspath(path)), per_file=per_file)
    report.workspace_digests_deferred = defer_workspace_digests
    report.not_here = tuple(sorted(not_here))
    root_fd = _open_root(path)
    try:
        with _private_dir() as private:
            _verify_open(root_fd, report, private, progress, known_digests, listed, per_file)
    except EnvironmentFailure as exc:
        # the entry is named within the bundle: name the bundle as well
        shown = escape_display(str(path))
        raise EnvironmentFailure(f"{shown}: {exc.message}", path=exc.path) from exc
    finally:
        os.close(root_fd)
        if progress is not None:
            progress.stop()
    return report


def verify_deferring_workspace(
    path: Path, *, progress: Progress | None = None, per_file: bool = False
) -> VerifyReport:
    """:func:`verify_bundle` for a caller that reads every workspace file itself and judges
    those bytes (import's staging copies them, push archives them; :func:`confirm_read`):
    every other rule is checked here, and the workspace is read once, by the caller.

    A bundle found unsound is verified once more in full, so that the refusal names everything
    at fault, workspace files whose contents explain the rest included.
    """
    report = verify_bundle(path, progress=progress, defer_workspace_digests=True, per_file=per_file)
    if not report.ok:
        report = verify_bundle(path, progress=progress, per_file=per_file)
    return report


def confirm_read(report: VerifyReport, read: Mapping[str, str]) -> None:
    """What a caller read of a verified bundle against what was verified, added to
    ``report.errors``; ``read`` holds the XXH3-128 of each file as the caller read it, by
    bundle path. This is the check :func:`verify_deferring_workspace` leaves to its caller for
    the workspace, whose contents it did not read: each file against ``checksums.xxh3``.
    ``report`` must have been made with ``per_file``.

    A workspace file verification found and the caller did not read, or read and verification
    never found, is an error, and so is any other file read whose digest is not the one
    verified: the folder changed in between, and the bytes read are not the verified bundle.
    """
    if not report.per_file:
        raise ValueError("confirm_read needs a report made with per_file")
    found = {rel for rel in report.sizes if rel.startswith("workspace/")}
    if report.workspace_digests_deferred:
        for rel in sorted(found ^ {rel for rel in read if rel.startswith("workspace/")}):
            report.errors.append(_changed_while_read(rel))
    for rel, digest in read.items():
        if rel == MANIFEST_NAME:
            expected: str | None = report.manifest_digest
        elif rel == CHECKSUMS_NAME:
            expected = report.checksums_digest
        else:
            expected = report.checksums.get(rel) if report.checksums else None
        if expected is None or expected == digest:
            continue
        in_workspace = rel in found and report.workspace_digests_deferred
        report.errors.append(_not_matching(rel) if in_workspace else _changed_while_read(rel))


def _changed_while_read(rel: str) -> Problem:
    return Problem(escape_display(rel), "changed while it was read: verify the bundle again")


def unsound(report: VerifyReport, source: str) -> InvalidInput:
    """The one-line refusal of a bundle that failed verification: its first error, how many
    more there are, and the command that lists every one."""
    first = report.errors[0]
    every = hints.command("bundle", "verify", os.path.abspath(source))
    more = len(report.errors) - 1
    tail = f" (and {more} more; every one: {every})" if more else ""
    return InvalidInput(
        f"{escape_display(source)} is not a sound bundle: {first}{tail}", path=first.path
    )


def _verify_open(
    root_fd: int,
    report: VerifyReport,
    private: Callable[[], Path],
    progress: Progress | None,
    known_digests: Mapping[str, tuple[int, str]] | None = None,
    listed_members: Sequence[ListedMember] = (),
    per_file: bool = False,
) -> None:
    checksums_fd, checksums_problem = _open_root_file(root_fd, CHECKSUMS_NAME, MAX_CHECKSUMS_BYTES)
    try:
        _verify_checksummed(
            root_fd,
            report,
            private,
            progress,
            known_digests,
            listed_members,
            per_file,
            checksums_fd,
            checksums_problem,
        )
    finally:
        if checksums_fd is not None:
            os.close(checksums_fd)


def _verify_checksummed(
    root_fd: int,
    report: VerifyReport,
    private: Callable[[], Path],
    progress: Progress | None,
    known_digests: Mapping[str, tuple[int, str]] | None,
    listed_members: Sequence[ListedMember],
    per_file: bool,
    checksums_fd: int | None,
    checksums_problem: Problem | None,
) -> None:
    raw_manifest, problem = _read_root_file(root_fd, MANIFEST_NAME, MAX_MANIFEST_BYTES)
    manifest: dict[str, Any] | None = None
    if problem is not None:
        report.errors.append(problem)
    elif raw_manifest is None:
        report.errors.append(Problem(MANIFEST_NAME, "missing: not a bundle"))
    else:
        legacy = checksums_fd is None and checksums_problem is None
        report.manifest_digest = xxhash.xxh3_128(raw_manifest).hexdigest()
        manifest, problems = _read_manifest(raw_manifest, legacy=legacy)
        report.errors += problems
    if manifest is not None:
        report.manifest = manifest
        version = manifest.get("format_version")
        if isinstance(version, int) and version not in KNOWN_FORMATS:
            return  # a newer format: its rules are unknown, nothing more can be judged
    version = report.format_version or 1

    checksums: _Checksums | None = None
    if checksums_problem is not None:
        report.errors.append(checksums_problem)
    elif checksums_fd is None:
        _no_checksums(report, manifest or {}, version)
    else:
        read = _Checksums(checksums_fd, tuple(f"{top}/" for top in report.not_here))
        tops: set[str] | None = set() if report.not_here else None
        problem = read.check(report.checksums if per_file else None, tops)
        if not read.digest:
            report.errors.append(problem or Problem(CHECKSUMS_NAME, "cannot be read"))
        else:
            report.checksums_digest = read.digest
            contents = (manifest or {}).get("contents")
            claimed = contents.get("checksums_xxh3_128") if isinstance(contents, dict) else None
            if claimed != report.checksums_digest:
                report.errors.append(
                    Problem(
                        CHECKSUMS_NAME,
                        "its digest does not match the manifest's contents.checksums_xxh3_128",
                    )
                )
            if problem is not None:
                report.errors.append(problem)
                report.checksums.clear()
            else:
                checksums = read
                if tops is not None:
                    # only a part that holds files was left anywhere
                    report.not_here = tuple(top for top in report.not_here if top in tops)
                    read.elsewhere = tuple(f"{top}/" for top in report.not_here)

    if progress is not None:
        # the manifest's claims, checked below: a lie only makes the bar wrong
        contents = (manifest or {}).get("contents")
        claims = contents if isinstance(contents, dict) else {}
        progress.start(
            "verifying", known_total(claims.get("files")), known_total(claims.get("bytes"))
        )
    defer = "workspace/" if report.workspace_digests_deferred else ""
    config: list[tuple[dict[str, Any] | None, Problem | None]] = []

    def on_config(raw: bytes) -> list[str]:
        """Parse the fragment once, as it is read; the identity file it names is watched."""
        config.append(_parse_toml(CONFIG_NAME, raw))
        return _identity_paths(config[-1][0], manifest)

    tree = BundleWalker(
        root_fd,
        version,
        report.errors,
        report.warnings,
        private,
        progress,
        known_digests,
        defer,
        listed_members,
        keep_files=per_file,
        on_file=checksums.found if checksums is not None else None,
        on_config=on_config,
    ).run()
    if per_file:
        report.sizes = {rel: size for rel, (size, _digest) in tree.digests.items()}
        report.entries = tree.entries
    report.files = tree.files
    report.bytes = tree.bytes
    report.totals = tree.totals
    if checksums is not None:
        checksums.finish(report, walked_all=not tree.stopped)
    if "workspace" not in report.not_here and _carries_ignore(root_fd):
        report.warnings += _carried_ignore_warnings(root_fd)
    if manifest is not None:
        _compare_contents(report, manifest)
    _check_sealed(root_fd, report, manifest, tree)

    fragment = _read_fragment(report, tree, config[0] if config else None)
    if (
        fragment is not None
        and manifest is not None
        and isinstance(manifest.get("root_agent"), str)
    ):
        report.fragment = fragment
        root = manifest["root_agent"]
        report.errors += fragment_rules.check_form(fragment, root)
        _read_raw_secret_paths(manifest, fragment)
        _recompute(report, tree, manifest, fragment)
        _fragment_warnings(report, fragment, root)
    if version == 2 and not tree.stopped and "memory" not in report.not_here:
        _check_store(report, tree)
    report.errors = _unique(report.errors)
    if fragment is not None:
        _withhold_smuggled(report, fragment)


_CARRIED_IGNORE = "workspace/.bundlerignore"


def _carries_ignore(root_fd: int) -> bool:
    """Whether the bundle carries a regular ``workspace/.bundlerignore`` (looked at without
    following a link and without loading the pattern code)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        workspace_fd = os.open("workspace", flags, dir_fd=root_fd)
    except OSError:
        return False
    try:
        name = _CARRIED_IGNORE.rsplit("/", 1)[1]
        return stat.S_ISREG(os.stat(name, dir_fd=workspace_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
    finally:
        os.close(workspace_fd)


def _check_sealed(
    root_fd: int, report: VerifyReport, manifest: dict[str, Any] | None, tree: BundleTree
) -> None:
    """``secrets.age`` against the manifest's ``[sealed]`` table (02 §12): the file's sha256
    and its age header's syntax; without an identity nothing more can be judged."""
    raw: bytes | None = None
    if tree.sealed:
        raw, problem = _read_root_file(root_fd, SEALED_NAME, MAX_SEALED_BYTES)
        if problem is not None:
            report.errors.append(problem)
    report.errors += check_sealed(manifest, raw, tree.sealed)


def _carried_ignore_warnings(root_fd: int) -> list[Problem]:
    """A carried ``.bundlerignore`` whose patterns do not compile, one warning a bad line.

    Not a fault of the bundle: nothing reads the file on import. But it travels into the
    receiver's workspace, where every export of the agent then refuses until it is mended, so
    the receiver is told before the import rather than at that export. Read through the
    bundle's descriptor, no-follow; an entry the walk could not read is the walk's finding.
    """
    # here, not at the top: pathspec is loaded only for a bundle that carries the file
    from bundler.fs.smallfile import NotSmallFile, read_small_file
    from bundler.rules.exclusions import MAX_PATTERN_FILE_BYTES, text_problems

    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        workspace_fd = os.open("workspace", flags, dir_fd=root_fd)
    except OSError:
        return []
    try:
        name = _CARRIED_IGNORE.rsplit("/", 1)[1]
        data = read_small_file(name, MAX_PATTERN_FILE_BYTES, dir_fd=workspace_fd, follow=False)
    except NotSmallFile as why:
        problems = [why.reason] if why.too_large else []
    except OSError:
        problems = []
    else:
        problems = text_problems(data)
    finally:
        os.close(workspace_fd)
    return [
        Problem(
            _CARRIED_IGNORE,
            f"{escape_display(problem)}: an export of this agent on the receiving install "
            "refuses until it is mended or removed",
        )
        for problem in problems
    ]


def _withhold_smuggled(report: VerifyReport, fragment: dict[str, Any]) -> None:
    """Keep secret values the fragment smuggles out of every finding (01 §6).

    A bundle carries no secret value (each must be ``""``, an error otherwise), so the only
    values verify can know are those; a name in the tree may spell one, raw or encoded, and
    the findings list names. The same exact-value rule as export's sweep withholds them.
    """
    targets, _ = sweep_targets(fragment)
    if not targets:
        return
    # the matcher is imported only here: a bundle holds no secret value unless it is refused
    from bundler.rules.sweeper import withholder

    scrub = withholder(targets)
    report.errors = [Problem(scrub(p.path), scrub(p.message)) for p in report.errors]
    report.warnings = [Problem(scrub(p.path), scrub(p.message)) for p in report.warnings]


def _read_raw_secret_paths(manifest: dict[str, Any], fragment: dict[str, Any]) -> None:
    """Rewrite a ZeroClaw manifest's raw ``required_secrets`` paths that name nothing as written.

    ZeroClaw joins every segment unquoted. A secret map's key needs nothing here (paths read it
    as the rest of the path, ``headers.X-Org.Id``, as ZeroClaw does); an entry alias holding a
    dot (``providers.models.openai.my.alias.api_key``) is matched against the fragment's keys.
    Only a path that does not already name a field is rewritten, and only to one that does, so
    the checks that follow are unchanged.
    """
    from bundler.errors import UsageError
    from bundler.rules.paths import format_path, parse_path

    secrets = manifest.get("required_secrets")
    if not zeroclaw_written(manifest) or not isinstance(secrets, list):
        return
    for index, path in enumerate(secrets):
        if not isinstance(path, str):
            continue
        with contextlib.suppress(UsageError):
            if fragment_rules.lookup(fragment, parse_path(path))[0]:
                continue
        segments = fragment_rules.resolve_raw_path(fragment, path)
        if segments is not None:
            secrets[index] = format_path(segments)


def _fragment_warnings(report: VerifyReport, fragment: dict[str, Any], root: str) -> None:
    """Warnings ZeroClaw's own ``collect_warnings`` gives on a fragment it would accept.

    Dangling fallback edges and MCP server names, fallback cycles and chains deeper than the
    runtime follows: a ZeroClaw-written bundle may carry them all, and none makes it unsafe.
    """
    from bundler.rules.findings import FALLBACK_CYCLE, FALLBACK_TOO_DEEP
    from bundler.rules.validate import validate

    report.warnings += fragment_rules.fragment_warnings(fragment, root)
    report.warnings += _contentless_skill_aliases(fragment, root)
    _errors, warnings = validate(fragment, _EMPTY_INSTALL)
    report.warnings += [
        Problem(escape_display(w.path), f"{w.kind}: {escape_display(w.message)}")
        for w in warnings
        if w.kind in (FALLBACK_CYCLE, FALLBACK_TOO_DEEP)
    ]


def _contentless_skill_aliases(fragment: dict[str, Any], root: str) -> list[Problem]:
    """Skill bundles the agent names whose alias is no portable folder name (``con``, ``notes.``).

    ZeroClaw keeps them in the config and carries no content for them (verify refuses content
    under such a folder), so on the target they name folders that do not exist yet.
    """
    named = fragment_rules.agent_of(fragment, root).get("skill_bundles", [])
    return [
        Problem(
            display_path(["skill_bundles", alias]),
            "host_specific: configured without content (the alias is not a portable folder "
            "name); rename or re-bind it on the target",
        )
        for alias in (named if isinstance(named, list) else [])
        if isinstance(alias, str) and not is_portable_skill_alias(alias)
    ]


INTEGRITY_UNPROVEN = (
    "absent: the integrity of the bundle's files cannot be proven (ZeroClaw's exporter and "
    "older ones write no checksums); import asks for consent to that like a risk"
)


def _no_checksums(report: VerifyReport, manifest: Mapping[str, Any], version: int) -> None:
    """A bundle without ``checksums.xxh3``: said once, and refused where the manifest needs it.

    Format 1 may omit checksums (ZeroClaw never writes them): one warning, and import asks for
    consent. A manifest that names ``contents.checksums`` or its digest promised the file, so
    its absence means the file was removed (and the files can no longer be trusted): refused.
    """
    contents = manifest.get("contents")
    promised = isinstance(contents, dict) and (
        "checksums" in contents or "checksums_xxh3_128" in contents
    )
    if version != 1:
        report.errors.append(Problem(CHECKSUMS_NAME, "missing"))
    elif promised:
        report.errors.append(
            Problem(
                CHECKSUMS_NAME, "missing, though the manifest's [contents] names it and its digest"
            )
        )
    else:
        report.integrity_unproven = True
        report.warnings.append(Problem(CHECKSUMS_NAME, INTEGRITY_UNPROVEN))


def _read_fragment(
    report: VerifyReport,
    tree: BundleTree,
    parsed: tuple[dict[str, Any] | None, Problem | None] | None,
) -> dict[str, Any] | None:
    """The fragment the walk read and parsed (``parsed``), its problem added to the report."""
    if tree.config is None or parsed is None:
        if CONFIG_NAME not in tree.found and not any(p.path == CONFIG_NAME for p in report.errors):
            report.errors.append(Problem(CONFIG_NAME, "missing"))
        return None
    fragment, problem = parsed
    if problem is not None:
        report.errors.append(problem)
    return fragment


def _identity_paths(
    fragment: dict[str, Any] | None, manifest: Mapping[str, Any] | None
) -> list[str]:
    """The workspace file the root agent's ``identity.aieos_path`` names, as a bundle path."""
    root = (manifest or {}).get("root_agent")
    if fragment is None or not isinstance(root, str):
        return []
    try:
        identity = fragment_rules.lookup(fragment, ["agents", root, "identity", "aieos_path"])[1]
    except (TypeError, ValueError, AttributeError, KeyError):
        return []  # a malformed fragment: check_form names what is wrong with it
    return [f"workspace/{identity}"] if isinstance(identity, str) and identity else []


def _unique(problems: Sequence[Problem]) -> list[Problem]:
    seen: set[Problem] = set()
    out: list[Problem] = []
    for problem in problems:
        if problem not in seen:
            seen.add(problem)
            out.append(problem)
    return out
