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
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import xxhash

from bundler.bundle import fragment as fragment_rules
from bundler.bundle.checksum_check import ChecksumReader
from bundler.bundle.fragment import Problem
from bundler.bundle.manifest import (
    CHECKSUMS_NAME,
    CONFIG_NAME,
    KNOWN_FORMATS,
    MANIFEST_NAME,
    MAX_CHECKSUMS_BYTES,
    MAX_MANIFEST_BYTES,
    MEMORY_STORE,
)
from bundler.bundle.rootfile import open_bundle_root, open_root_file, parse_toml, read_root_file
from bundler.bundle.sealed import MAX_SEALED_BYTES, SEALED_NAME, check_sealed
from bundler.bundle.verify_claims import (
    add_fragment_warnings,
    compare_contents,
    identity_paths,
    no_checksums,
    read_fragment,
    read_manifest,
    read_raw_secret_paths,
    recompute,
    withhold_smuggled,
)
from bundler.bundle.verify_report import VerifyReport, unique_problems
from bundler.bundle.walk import BundleTree, BundleWalker, KnownDigests
from bundler.errors import EnvironmentFailure, NotABundle
from bundler.rules.config_view import table_at
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress, known_total

if TYPE_CHECKING:
    from bundler.bundle.archive_listing import ListedMember


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
    known_digests: KnownDigests | None = None,
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

    ``known_digests`` (bundle path -> (size, XXH3-128 hex), asked in walk order: a dict, or
    :class:`bundler.bundle.archive_spill.SpilledDigests`) is only for a folder bundler itself
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
    root_fd = open_bundle_root(path)
    try:
        with _private_dir() as private:
            _verify_open(root_fd, report, private, progress, known_digests, listed, per_file)
    except EnvironmentFailure as exc:
        # the entry is named within the bundle: name the bundle as well
        shown = escape_display(str(path))
        raise exc.restated(f"{shown}: {exc.message}") from exc
    finally:
        os.close(root_fd)
        if progress is not None:
            progress.stop()
    return report


def verify_deferring_workspace(
    path: Path, *, progress: Progress | None = None, per_file: bool = False
) -> VerifyReport:
    """:func:`verify_bundle` for a caller that reads every workspace file itself and judges
    those bytes (import's staging copies them, push archives them;
    :func:`bundler.bundle.verify_report.confirm_read`): every other rule is checked here, and
    the workspace is read once, by the caller.

    A bundle found unsound is verified once more in full, so that the refusal names everything
    at fault, workspace files whose contents explain the rest included.
    """
    report = verify_bundle(path, progress=progress, defer_workspace_digests=True, per_file=per_file)
    if not report.ok:
        report = verify_bundle(path, progress=progress, per_file=per_file)
    return report


def _verify_open(
    root_fd: int,
    report: VerifyReport,
    private: Callable[[], Path],
    progress: Progress | None,
    known_digests: KnownDigests | None = None,
    listed_members: Sequence[ListedMember] = (),
    per_file: bool = False,
) -> None:
    checksums_fd, checksums_problem = open_root_file(root_fd, CHECKSUMS_NAME, MAX_CHECKSUMS_BYTES)
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
    known_digests: KnownDigests | None,
    listed_members: Sequence[ListedMember],
    per_file: bool,
    checksums_fd: int | None,
    checksums_problem: Problem | None,
) -> None:
    raw_manifest, problem = read_root_file(root_fd, MANIFEST_NAME, MAX_MANIFEST_BYTES)
    manifest: dict[str, Any] | None = None
    if problem is not None:
        report.errors.append(problem)
    elif raw_manifest is None:
        report.errors.append(Problem(MANIFEST_NAME, "missing: not a bundle", NotABundle))
    else:
        legacy = checksums_fd is None and checksums_problem is None
        report.manifest_digest = xxhash.xxh3_128(raw_manifest).hexdigest()
        manifest, problems = read_manifest(raw_manifest, legacy=legacy)
        report.errors += problems
    if manifest is not None:
        report.manifest = manifest
        version = manifest.get("format_version")
        if isinstance(version, int) and version not in KNOWN_FORMATS:
            return  # a newer format: its rules are unknown, nothing more can be judged
    version = report.format_version or 1

    checksums: ChecksumReader | None = None
    if checksums_problem is not None:
        report.errors.append(checksums_problem)
    elif checksums_fd is None:
        no_checksums(report, manifest or {}, version)
    else:
        read = ChecksumReader(checksums_fd, tuple(f"{top}/" for top in report.not_here))
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
        claims = table_at(manifest, "contents")
        progress.start(
            "verifying", known_total(claims.get("files")), known_total(claims.get("bytes"))
        )
    defer = "workspace/" if report.workspace_digests_deferred else ""
    config: list[tuple[dict[str, Any] | None, Problem | None]] = []

    def on_config(raw: bytes) -> list[str]:
        """Parse the fragment once, as it is read; the identity file it names is watched."""
        config.append(parse_toml(CONFIG_NAME, raw))
        return identity_paths(config[-1][0], manifest)

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
        checksums.finish(report.errors, walked_all=not tree.stopped)
    if "workspace" not in report.not_here and _carries_ignore(root_fd):
        report.warnings += _carried_ignore_warnings(root_fd)
    if manifest is not None:
        compare_contents(report, manifest)
    _check_sealed(root_fd, report, manifest, tree)

    fragment = read_fragment(report, tree, config[0] if config else None)
    if (
        fragment is not None
        and manifest is not None
        and isinstance(manifest.get("root_agent"), str)
    ):
        report.fragment = fragment
        root = manifest["root_agent"]
        report.errors += fragment_rules.check_form(fragment, root)
        read_raw_secret_paths(manifest, fragment)
        recompute(report, tree, manifest, fragment)
        add_fragment_warnings(report, fragment, root)
    if version == 2 and not tree.stopped and "memory" not in report.not_here:
        _check_store(report, tree)
    report.errors = unique_problems(report.errors)
    if fragment is not None:
        withhold_smuggled(report, fragment)


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
        raw, problem = read_root_file(root_fd, SEALED_NAME, MAX_SEALED_BYTES)
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
