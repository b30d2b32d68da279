"""``bundler agents import``: verify, plan, stage, commit, receipt (03 §3).

The import is one transaction whose commit point is the atomic replacement of ``config.toml``
(:mod:`bundler.install.journal` runs it and says what is durable after each step). Deciding is
pure (:mod:`bundler.install.merge`); this module orchestrates: verify the bundle, plan the merge,
ask for consent and secrets (:mod:`bundler.install.bind_secrets`), stage the folders
(:mod:`bundler.install.stage`), validate the merged config, then commit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from bundler.bundle import fragment
from bundler.bundle.sealed import MAX_SEALED_BYTES, SEALED_NAME, open_sealed, sealed_summary
from bundler.bundle.verify import verify_bundle, verify_deferring_workspace
from bundler.bundle.verify_report import VerifyReport
from bundler.config.file import read_config_file
from bundler.config.secretstore import SecretWriter
from bundler.config.write import LOCK_NAME, config_lock
from bundler.errors import (
    DestinationExists,
    InvalidConfig,
    Tampered,
    UnsuitablePath,
    UsageError,
    withheld,
    withholding,
)
from bundler.fs import age
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.install import merge
from bundler.install.bind_secrets import collect_secrets, endpoint_of, split_assignment
from bundler.install.files import (
    CONFIG,
    io_errors_refused,
    lstat_rel,
    open_install,
    relative_to_install,
    target_state,
)
from bundler.install.import_commit import transact
from bundler.install.import_risk import (
    also_found_by_bundler,
    approval_changes,
    consent,
    effective_risk_flags,
)
from bundler.install.import_types import ImportOptions, ImportReport, ImportRun
from bundler.install.recovery import clear_abandoned
from bundler.install.stage import ListedChecksums, Staged, differing_skills
from bundler.rules import hints, layout
from bundler.rules.names import escape_display
from bundler.rules.paths import format_path
from bundler.rules.schemacheck import schema_findings
from bundler.rules.secrets import sweep_targets, value_targets
from bundler.rules.skillfolder import (
    SKILLS_ROOT,
    overlap_problem,
    skill_folder_problem,
    used_folders,
)
from bundler.rules.sweeper import withholder
from bundler.rules.validate import validate


def _missing_commands(plan: merge.MergePlan) -> list[str]:
    missing = []
    for new in plan.new_entries:
        if new.kind == "mcp.servers" and new.value.get("transport", "stdio") == "stdio":
            command = new.value.get("command", "")
            if isinstance(command, str) and command and shutil.which(command) is None:
                missing.append(f"{new.path}.command: {escape_display(command)}")
    return missing


# keys naming a file or folder of the host that ZeroClaw needs before it can build the entry:
# key -> (what it must be, what ZeroClaw then does)
_HOST_PATHS = {
    "tls_ca_cert_path": (stat.S_ISREG, "a file", "cannot make TLS connections with it"),
    "working_directory": (stat.S_ISDIR, "a folder", "will not build this provider"),
}


def _missing_host_paths(plan: merge.MergePlan) -> list[str]:
    """Warnings for the imported entries' host paths that do not exist here (02 §6: host_path).

    A provider's or MCP server's ``tls_ca_cert_path`` and a CLI provider's
    ``working_directory`` (``grok_cli``) name the exporting host's files; the entry travels, and
    ZeroClaw will not use it on this host until the path exists here.
    """
    found = []
    for new in plan.new_entries:
        for key, (is_kind, what, effect) in _HOST_PATHS.items():
            value = new.value.get(key)
            if not isinstance(value, str) or not value:
                continue
            try:
                mode: int | None = os.stat(value).st_mode
            except (OSError, ValueError):
                mode = None
            if mode is None or not is_kind(mode):
                found.append(
                    f"{format_path([*new.segments, key])}: {escape_display(value)} is not "
                    f"{what} on this host; ZeroClaw {effect} until it is"
                )
    return found


def _drop_unresolved(report: VerifyReport) -> list[str]:
    """Remove fallback edges and MCP server names that resolve nowhere in the bundle.

    Kept, they would bind to whatever same-named provider or server the target has: an
    endpoint, credentials or tools the bundle never described. Returns what was removed.
    """
    carried = report.fragment
    root = (report.manifest or {}).get("root_agent")
    if carried is None or not isinstance(root, str):
        return []
    report.fragment, removed = fragment.without_unresolved(carried, root)
    return [
        f"{item.path}: removed {escape_display(str(item.ref))!r}, which the bundle does not "
        "carry (it is never bound to a same-named entry of this install)"
        for item in removed
    ]


@io_errors_refused("import")
def import_bundle(
    install_root: Path, bundle: Path, options: ImportOptions | None = None
) -> ImportReport:
    """Import the bundle folder ``bundle`` into the install at ``install_root`` (03 §3).

    ``options`` says what was asked (:class:`ImportOptions`; None: the defaults). Raises
    :class:`InvalidInput` (exit 3) when the bundle fails verification or the merged config is
    invalid, :class:`Refused` (exit 1) for refusals and failures before the commit (the
    install is then byte-identical to before), :class:`UsageError` for malformed options.
    """
    chosen = options or ImportOptions()
    install_root = Path(os.path.abspath(install_root))
    given, warnings = collect_secrets(chosen.secrets, chosen.secrets_file)
    # every error made from here on withholds the given values (a bundle path may hold one)
    with withholding(withholder(value_targets(given))):
        report = _import(install_root, bundle, chosen, given, warnings)
        # warnings are printed too: a bundle's names (a dangling fallback) may spell a value
        report.warnings = [withheld(warning) for warning in report.warnings]
        return report


def _import(
    install_root: Path,
    bundle: Path,
    chosen: ImportOptions,
    given: dict[str, str],
    warnings: list[str],
) -> ImportReport:
    """The body of :func:`import_bundle`, once the given secrets are known."""
    # staging compares the digest of every workspace file it copies with the checksums, so a
    # real import need not read the workspace twice; a dry run copies nothing and reads it here
    if chosen.dry_run:
        report = verify_bundle(bundle, progress=chosen.progress)
    else:
        report = verify_deferring_workspace(bundle, progress=chosen.progress)
    if not report.ok:
        # one line naming the first few entries at fault; 'bundle verify' lists every one
        shown = "; ".join(str(problem) for problem in report.errors[:3])
        rest = len(report.errors) - 3
        every = hints.command("bundle", "verify", chosen.argument(bundle))
        more = f" (and {rest} more; every one: {every})" if rest > 0 else ""
        where = escape_display(str(bundle))
        # the first fault says what kind of refusal this is (tampered, hostile...)
        raise report.errors[0].error(f"bundle {where} failed verification: {shown}{more}")
    manifest = report.manifest or {}
    sealed = _unseal(bundle, report, chosen)
    # given values win; a sealed value fills only what was not given (as if given itself)
    filled = {path: value for path, value in sealed.items() if path not in given}
    with withholding(withholder(value_targets(sealed))):
        result = _import_verified(
            install_root, bundle, chosen, {**filled, **given}, warnings, report, frozenset(filled)
        )
        result.sealed_filled = sorted(filled)
        summary = sealed_summary(manifest)
        if summary is not None and not chosen.age_identities:
            result.notes.append(
                f"the bundle holds secrets sealed to {summary[0]} recipient(s) in secrets.age "
                f"({len(summary[1])} path(s)); to fill them, import with --age-identity FILE"
            )
        return result


def _unseal(bundle: Path, report: VerifyReport, chosen: ImportOptions) -> dict[str, str]:
    """The values of the verified bundle's ``secrets.age`` opened with ``chosen``'s identities
    (:func:`bundler.bundle.sealed.open_sealed`); empty without identities. ``UsageError`` when
    identities are given for a bundle that seals nothing."""
    if not chosen.age_identities:
        return {}
    identities = age.load_identities(
        list(chosen.age_identities), "--age-identity", chosen.age_passphrase
    )
    manifest = report.manifest or {}
    if sealed_summary(manifest) is None:
        raise UsageError(
            f"--age-identity: {escape_display(str(chosen.shown(bundle)))} holds no sealed "
            "secrets.age; import it without --age-identity",
            path="--age-identity",
        )
    try:
        data = read_small_file(bundle / SEALED_NAME, MAX_SEALED_BYTES, follow=False)
    except (OSError, NotSmallFile):
        raise Tampered(
            f"{SEALED_NAME}: cannot be read again after verification; nothing changed",
            path=SEALED_NAME,
        ) from None
    return open_sealed(data, manifest, report.checksums_digest, identities)


def _import_verified(
    install_root: Path,
    bundle: Path,
    chosen: ImportOptions,
    given: dict[str, str],
    warnings: list[str],
    report: VerifyReport,
    sealed: frozenset[str],
) -> ImportReport:
    """The import of the verified bundle, once every secret given is known."""
    manifest = report.manifest or {}
    required = [p for p in manifest.get("required_secrets", []) if isinstance(p, str)]
    # before the merge plan: a dangling name is removed, never bound to a same-named local entry
    warnings = [*_drop_unresolved(report), *warnings]
    dry_run = chosen.dry_run

    with (
        open_install(
            install_root, create=not dry_run and not os.path.exists(install_root)
        ) as install_fd,
        contextlib.ExitStack() as stack,
    ):
        if not dry_run:
            # a dry run writes nothing, so it need not wait for (or block) a writer
            stack.enter_context(_import_lock(install_root, install_fd))
        config = read_config_file(install_fd, install_root, stack, missing_ok=True)
        if not dry_run:
            warnings += clear_abandoned(install_root, install_fd, config.dir_fd)
        store = SecretWriter(
            install_fd,
            install_root,
            config.parse(),
            os.environ if chosen.environ is None else chosen.environ,
            owner=(config.uid, config.gid) if config.exists else None,
        )
        run = ImportRun(
            install_fd, install_root, bundle, report, config, required, chosen, store, sealed
        )
        result, new_text, staged = _plan(run, given, warnings)
        if dry_run:
            return result
        transact(run, result, new_text, staged)
        return result


@contextlib.contextmanager
def _import_lock(install_root: Path, install_fd: int) -> Iterator[None]:
    """The config lock (01 §6); a lock file this import made is removed if the import fails.

    A refused import leaves the install as it was, lock file included. The file is removed while
    still locked: a writer that waited on it finds, once it holds it, that the path no longer
    names the file it locked, and takes the lock again (:func:`bundler.config.store.config_lock`).
    """
    made = lstat_rel(install_fd, LOCK_NAME) is None
    with config_lock(install_root):
        try:
            yield
        except BaseException:
            if made:
                with contextlib.suppress(OSError):
                    os.unlink(LOCK_NAME, dir_fd=install_fd)
            raise


def _check_target(target: Mapping[str, Any], install_root: Path) -> None:
    """Refuse (exit 3, naming the file) a target config that breaks the schema's types.

    Merging walks and extends its tables, so a table that is a number or a list cannot be
    merged into; and an import never changes existing entries, so the merged config would
    carry the same errors and fail validation anyway.
    """
    findings = schema_findings(target)
    if findings:
        shown = escape_display(str(install_root / CONFIG))
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        raise InvalidConfig(
            f"{shown} is invalid: {findings[0].line()}{more}; fix it first "
            "('bundler config validate' lists every error); nothing changed",
            path=str(install_root / CONFIG),
        )


def _check_skill_folders(
    plan: merge.MergePlan, install_root: Path, with_content: Collection[str]
) -> None:
    """Every added or namespaced skill bundle's folder is a fresh child of the skills root.

    The rule verify applies to a bundle's ``directory`` (:mod:`bundler.rules.skillfolder`), asked
    here of the merged config: the folder after namespacing (or the default one), against the
    folders of every other skill bundle and workspace of the install. A bundle carried without
    content (``with_content`` lists the others) under its own alias and default folder is one
    ZeroClaw keeps although the alias is no portable folder name (``con``, ``notes.``): no
    folder is made for it, so only another entry's folder is refused.
    """
    bundles = plan.merged.get("skill_bundles")
    for placement in plan.skills:
        if placement.action not in ("added", "renamed") or not isinstance(bundles, dict):
            continue
        alias = placement.target_alias
        entry = bundles.get(alias)
        directory = entry.get("directory") if isinstance(entry, dict) else None
        contentless = placement.source_alias not in with_content
        if not isinstance(directory, str) or not directory:
            directory = f"{SKILLS_ROOT}/{alias}"
        else:
            contentless = False
        used = used_folders(plan.merged, install_root, except_bundle=alias)
        if contentless and placement.action == "added":
            reason = overlap_problem(directory, used)
        else:
            reason = skill_folder_problem(directory, used)
        if reason is not None:
            path = format_path(["skill_bundles", alias])
            raise DestinationExists(
                f"{escape_display(path)}: its folder {escape_display(directory)} {reason}; "
                "nothing changed (move or rename the local entry, or bind this one to it)",
                path=path,
            )


def _plan(
    run: ImportRun, given: dict[str, str], warnings: list[str]
) -> tuple[ImportReport, str, list[Staged]]:
    """Plan the merge, ask for consent then for missing secrets, lay out the result, probe."""
    target = run.config.parse()
    # what the import shows and records (the risk flags of a bound local entry, warnings,
    # errors, the receipt) withholds the install's own secrets, as an export does its source's
    with withholding(withholder(sweep_targets(target)[0])):
        return _plan_withholding(run, target, given, warnings)


def _plan_withholding(
    run: ImportRun, target: dict[str, Any], given: dict[str, str], warnings: list[str]
) -> tuple[ImportReport, str, list[Staged]]:
    _check_target(target, run.install_root)
    plan = _merge(run, target, given)
    if not run.options.dry_run:
        # once the options are known to be sound, and before any secret is asked for: a
        # refusal must not throw away what the user typed. The flags are those the merged
        # config grants (a bound local entry counts instead of the bundle's).
        carried = list(run.report.skill_bundles)
        flags = effective_risk_flags(plan, carried, run.report.format_version or 1)
        consent(
            flags,
            run.options.accept_risks,
            run.options.prompt,
            run.options.argument(run.bundle),
            integrity_unproven=run.report.integrity_unproven,
            also_found=also_found_by_bundler(run.report, plan, carried, flags),
        )
    asked = _ask_for_secrets(plan, given, run.options)
    values = asked if asked is not None else given
    # stored as ZeroClaw's save stores them: sealed under the install's key by default
    stored = {path: run.store.store(value, path) for path, value in values.items()}
    if asked is not None or stored != values:
        plan = _merge(run, target, stored)
    result, new_text, staged = _lay_out(run, plan)
    result.warnings = [withheld(warning) for warning in [*warnings, *run.store.warnings]]
    _probe(run, result, staged)
    return result, new_text, staged


def _merge(run: ImportRun, target: dict[str, Any], secrets: Mapping[str, str]) -> merge.MergePlan:
    """The pure merge plan of the bundle's fragment into ``target``."""
    # a path not given with --secret came from the secrets file: its errors name the file
    from_arguments = {
        split_assignment(raw, "--secret", secret=True)[0] for raw in run.options.secrets
    }
    file = run.options.secrets_file
    origins = {
        path: f"secrets file {escape_display(str(file))}"
        for path in secrets
        if file is not None and path not in from_arguments
    }
    origins.update({path: SEALED_NAME for path in run.sealed if path in secrets})
    return merge.plan_merge(
        target,
        run.report.fragment or {},
        run.required,
        as_alias=run.options.as_alias,
        binds=run.options.binds,
        secrets=dict(secrets),
        secret_origins=origins,
        install_root=str(run.install_root),
    )


def _ask_for_secrets(
    plan: merge.MergePlan, given: Mapping[str, str], options: ImportOptions
) -> dict[str, str] | None:
    """The secrets with those a terminal gave for the missing ones; None when none was given."""
    if not plan.secrets_missing or options.prompt is None or options.dry_run:
        return None
    asked = dict(given)
    for final in plan.secrets_missing:
        value = options.prompt.secret(final, endpoint_of(plan.merged, final))
        if value:
            asked[plan.secret_sources[final]] = value
    return asked if len(asked) > len(given) else None


def _lay_out(run: ImportRun, plan: merge.MergePlan) -> tuple[ImportReport, str, list[Staged]]:
    """Pure: the merged config validated and rendered, and where each staged folder goes."""
    install_root = run.install_root
    errors, _ = validate(plan.merged, install_root)
    if errors:
        shown = "; ".join(f.line() for f in errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        raise InvalidConfig(
            f"the merged config would be invalid: {shown}{more}; nothing changed",
            path=errors[0].path,
        )
    _check_skill_folders(plan, install_root, run.report.skill_bundles)
    new_text, notes = merge.render_config_text(run.config.text, plan)

    workspace = relative_to_install(
        layout.workspace_dir(plan.merged, plan.agent, install_root), install_root
    )
    sources = [("workspace", "")]
    if (run.report.format_version or 1) == 2:
        # staging holds the files of every source but the last (stage_folder): the workspace,
        # which may have a million, goes last
        sources.insert(0, ("memory", "memory"))
    staged = [Staged("workspace", sources, workspace)]
    carried = list(run.report.skill_bundles)
    flags = effective_risk_flags(plan, carried, run.report.format_version or 1)
    result = ImportReport(
        str(run.options.shown(run.bundle)),
        plan,
        flags,
        run.options.dry_run,
        str(install_root / workspace),
    )
    result.also_found = also_found_by_bundler(run.report, plan, carried, flags)
    result.approval_changes = approval_changes(plan)
    for placement in plan.skills:
        if placement.action in ("added", "renamed") and placement.source_alias in carried:
            folder = relative_to_install(
                layout.skill_bundle_dir(plan.merged, placement.target_alias, install_root),
                install_root,
            )
            if folder.startswith(".."):
                raise UnsuitablePath(
                    f"skill_bundles.{escape_display(placement.target_alias)}: its folder is "
                    "outside the install",
                    path=f"skill_bundles.{placement.target_alias}",
                )
            staged.append(
                Staged(
                    f"skill-{placement.target_alias}",
                    [(f"skills/{placement.source_alias}", "")],
                    folder,
                )
            )
            result.skill_targets[placement.target_alias] = str(install_root / folder)
    result.notes = notes
    result.endpoints = {path: endpoint_of(plan.merged, path) for path in plan.secrets_missing}
    return result, new_text, staged


def _probe(run: ImportRun, result: ImportReport, staged: list[Staged]) -> None:
    """What the disk says: occupied targets (refused), missing MCP commands, differing skills."""
    install_root = run.install_root
    for item in staged:
        if target_state(run.install_fd, item.target) == "occupied":
            raise DestinationExists(
                f"{escape_display(str(install_root / item.target))} exists and is not empty; "
                "nothing changed (import with --as, or move it away)",
                path=str(install_root / item.target),
            )
    result.missing_commands = _missing_commands(result.plan)
    result.warnings += [withheld(warning) for warning in _missing_host_paths(result.plan)]
    checksums_digest = run.report.checksums_digest
    bundle_fd = os.open(run.bundle, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        listed = ListedChecksums(bundle_fd, checksums_digest) if checksums_digest else None
        try:
            result.skills_differ = differing_skills(
                bundle_fd,
                run.install_fd,
                install_root,
                result.plan,
                listed,
                list(run.report.skill_bundles),
            )
        finally:
            if listed is not None:
                listed.close()
    finally:
        os.close(bundle_fd)
