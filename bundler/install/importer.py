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
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tomli_w

from bundler.bundle import fragment
from bundler.bundle.sealed import MAX_SEALED_BYTES, SEALED_NAME, open_sealed, sealed_summary
from bundler.bundle.verify import verify_bundle, verify_deferring_workspace
from bundler.bundle.verify_claims import zeroclaw_written
from bundler.bundle.verify_report import VerifyReport
from bundler.config.file import ConfigFile, read_config_file
from bundler.config.guards import UNRESTRICTED
from bundler.config.secretstore import SecretWriter, replace_sealed
from bundler.config.write import LOCK_NAME, config_lock
from bundler.errors import (
    BundlerError,
    InvalidInput,
    Refused,
    UsageError,
    withheld,
    withholding,
)
from bundler.fs import age, copytree, durable
from bundler.fs.age import AskPassphrase
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.install import merge
from bundler.install.bind_secrets import (
    Prompter,
    collect_secrets,
    endpoint_of,
    split_assignment,
)
from bundler.install.files import (
    CONFIG,
    entry_digest,
    field_digests,
    io_errors_refused,
    lstat_rel,
    missing_parents,
    open_install,
    relative_to_install,
    target_state,
    xxh,
)
from bundler.install.journal import (
    RECEIPT_FORMAT,
    Journal,
    Transaction,
    clear_abandoned,
    complete_transaction,
)
from bundler.install.receipt_files import STAGED_NAME as STAGED_LISTING
from bundler.install.receipt_files import ListingWriter
from bundler.install.stage import (
    ListedChecksums,
    Staged,
    differing_skills,
    stage_folder,
)
from bundler.rules import hints, layout
from bundler.rules.names import escape_display
from bundler.rules.paths import format_path
from bundler.rules.progress import Progress, phase
from bundler.rules.risk import DEFAULT_PROFILE, compute_risk_flags, effective_auto_approve
from bundler.rules.risk_zeroclaw import zeroclaw_risk_flags
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


@dataclass
class ImportReport:
    """What an import did (or, with ``dry_run``, would do). Holds no secret value."""

    bundle: str
    plan: merge.MergePlan
    risk_flags: list[dict[str, str]]
    dry_run: bool
    workspace_target: str
    also_found: list[dict[str, str]] = field(default_factory=list)
    approval_changes: list[str] = field(default_factory=list)
    skill_targets: dict[str, str] = field(default_factory=dict)
    skills_differ: list[str] = field(default_factory=list)
    missing_commands: list[str] = field(default_factory=list)
    endpoints: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    receipt: str = ""
    sealed_filled: list[str] = field(default_factory=list)
    """The bundle paths whose secret came from its sealed ``secrets.age``."""

    @property
    def agent(self) -> str:
        """The alias the agent has in this install."""
        return self.plan.agent

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` payload of 05 §3 plus the plan's details."""
        return {
            **self.plan.summary(),
            "risk_flags": self.risk_flags,
            # of risk_flags, those the bundle's exporter's own rules do not raise (02 §6.2)
            "also_found_by_bundler": self.also_found,
            "approval_changes": self.approval_changes,
            "receipt": self.receipt,
            "dry_run": self.dry_run,
            "workspace": self.workspace_target,
            "skill_targets": self.skill_targets,
            "skills_differ": self.skills_differ,
            "reused_with_secrets": self.plan.reused_with_secrets,
            "secrets_filled": self.plan.secrets_filled,
            "secrets_from_seal": list(self.sealed_filled),
            "secret_endpoints": self.endpoints,
            "mcp_commands_missing": self.missing_commands,
            "notes": self.notes,
            "unused": self.plan.unused,
        }


def _receipt_stamp(now: datetime) -> str:
    return now.strftime("%Y%m%dT%H%M%SZ")


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


UNPROVEN_INTEGRITY = (
    "its files are not covered by checksums (no checksums.xxh3), so nothing proves they are "
    "the ones the exporter wrote"
)


def _consent(
    flags: Sequence[Mapping[str, str]],
    accept_risks: bool,
    prompter: Prompter | None,
    bundle: str,
    *,
    integrity_unproven: bool = False,
    also_found: Sequence[Mapping[str, str]] = (),
) -> None:
    """Ask for consent to the recomputed flags and to unproven integrity, like one risk list.

    ``also_found`` (of ``flags``) are marked: the exporter's own rules did not raise them.
    """
    if (not flags and not integrity_unproven) or accept_risks:
        return
    extra = {(f["path"], f["kind"]) for f in also_found}
    lines = [
        f"{escape_display(f['kind'])} {escape_display(f['path'])}: "
        f"{escape_display(f.get('detail', ''))}"
        + (" (also found by bundler)" if (f["path"], f["kind"]) in extra else "")
        for f in flags
    ]
    if integrity_unproven:
        lines.append(f"unproven_integrity checksums.xxh3: {UNPROVEN_INTEGRITY}")
    question = "After this import the agent may:\n  " + "\n  ".join(lines) + "\nImport it? [y/N]"
    if prompter is not None and prompter.confirm(question):
        return
    parts = [f"{len(flags)} risk flag(s)"] if flags else []
    if integrity_unproven:
        parts.append("no checksums (its integrity cannot be proven)")
    what = " and ".join(parts)
    raise Refused(
        hints.Hinted(
            f"the bundle carries {what}; nothing changed; pass --accept-risks "
            "or answer y at a terminal once you have reviewed them",
            hints.command("bundle", "inspect", bundle),
        ),
        path="risk_flags" if flags else "checksums.xxh3",
    )


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


@dataclass(frozen=True)
class ImportOptions:
    """What the caller asked of an import: the options of ``agents import``.

    ``binds`` maps fragment entry paths to local references; ``secrets`` are ``PATH=VALUE``
    strings as given to ``--secret``; ``prompt`` (a terminal) asks for missing secrets and for
    consent. With ``dry_run`` nothing is changed or created. ``progress`` sees two phases,
    ``verifying`` and ``copying``, stopped before anything is asked and after the copy.
    """

    as_alias: str | None = None
    binds: Mapping[str, str] | None = None
    secrets: Sequence[str] = ()
    secrets_file: Path | None = None
    accept_risks: bool = False
    dry_run: bool = False
    prompt: Prompter | None = None
    progress: Progress | None = None
    environ: Mapping[str, str] | None = None
    """Where ``ZEROCLAW_secrets__encrypt`` is looked up (a warning when it disagrees with the
    file's policy); ``os.environ`` when None."""
    age_identities: Sequence[Path] = ()
    """Identity files (age, or SSH private keys) that open the bundle's sealed ``secrets.age``:
    its values fill the required secrets not given with ``secrets``/``secrets_file``."""
    age_passphrase: AskPassphrase | None = None
    """Asks, without echo, for the passphrase of a protected SSH key among ``age_identities``;
    None: such a key is refused (there is no terminal to ask on)."""
    source: Path | str | None = None
    """The bundle as the user named it when the folder read is not it (an unpacked archive, or
    as a ``str`` a registry reference pinned to its digest, pulled into a private folder):
    reports, the receipt and the commands they suggest name this instead."""

    def shown(self, bundle: Path) -> Path | str:
        """The bundle to name to the user."""
        return self.source if self.source is not None else bundle

    def argument(self, bundle: Path) -> str:
        """The bundle as a suggested command's argument: a reference as it is, a path absolute."""
        shown = self.shown(bundle)
        return shown if isinstance(shown, str) else os.path.abspath(shown)


@dataclass(frozen=True)
class _Run:
    """One import's fixed inputs, handed to each step instead of a dozen parameters."""

    install_fd: int
    install_root: Path
    bundle: Path
    report: VerifyReport
    config: ConfigFile
    required: list[str]
    options: ImportOptions
    store: SecretWriter
    """What each secret value given becomes under the install's policy and key."""
    sealed: frozenset[str] = frozenset()
    """The bundle paths whose value came from ``secrets.age``."""


@io_errors_refused("import")
def import_bundle(
    install_root: Path, bundle: Path, options: ImportOptions | None = None, **fields: Any
) -> ImportReport:
    """Import the bundle folder ``bundle`` into the install at ``install_root`` (03 §3).

    ``options`` says what was asked (:class:`ImportOptions`); its fields may also be given as
    keywords (``accept_risks=True``), which replace those of ``options``. Raises
    :class:`InvalidInput` (exit 3) when the bundle fails verification or the merged config is
    invalid, :class:`Refused` (exit 1) for refusals and failures before the commit (the
    install is then byte-identical to before), :class:`UsageError` for malformed options.
    """
    chosen = replace(options or ImportOptions(), **fields)
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
        raise InvalidInput(
            f"bundle {where} failed verification: {shown}{more}", path=report.errors[0].path
        )
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
        raise InvalidInput(
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
        run = _Run(
            install_fd, install_root, bundle, report, config, required, chosen, store, sealed
        )
        result, new_text, staged = _plan(run, given, warnings)
        if dry_run:
            return result
        _transact(run, result, new_text, staged)
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
        raise InvalidInput(
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
            raise Refused(
                f"{escape_display(path)}: its folder {escape_display(directory)} {reason}; "
                "nothing changed (move or rename the local entry, or bind this one to it)",
                path=path,
            )


def _effective_fragment(plan: merge.MergePlan) -> dict[str, Any]:
    """What the imported agent reaches in the merged config, as a fragment."""
    effective: dict[str, Any] = {}
    for key in sorted(fragment.reached_entries(plan.merged, plan.agent)):
        if key[:2] == ("mcp", "servers"):
            server = next(
                (v for n, v in merge.iter_entries(plan.merged, "mcp.servers") if n == key[2]),
                None,
            )
            if server is not None:
                effective.setdefault("mcp", {}).setdefault("servers", []).append(server)
            continue
        found, value = fragment.lookup(plan.merged, key)
        if found:
            node = effective
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = value
    return effective


def _landing(plan: merge.MergePlan, carried_skill_bundles: Sequence[str]) -> list[str]:
    """The bundle's skill bundles with content whose content lands (added or namespaced)."""
    return [
        p.target_alias
        for p in plan.skills
        if p.action in ("added", "renamed") and p.source_alias in carried_skill_bundles
    ]


def effective_risk_flags(
    plan: merge.MergePlan, carried_skill_bundles: Sequence[str], format_version: int
) -> list[dict[str, str]]:
    """The risk flags of the imported agent as the merged config grants them (03 §3.1.7).

    Computed by :func:`bundler.rules.risk.compute_risk_flags` over what the agent reaches in the
    merged config, so a bound local entry counts instead of the bundle's entry it replaces,
    and flags carry the final (namespaced) paths. ``carried_skill_bundles`` are the bundle's
    skill bundles with content; only those whose content lands (added or namespaced) count.
    Each detail is shown and recorded with the secrets of the active withholding scopes
    withheld (a bound local entry's detail is the install's own text).
    """
    landing = _landing(plan, carried_skill_bundles)
    flags = compute_risk_flags(_effective_fragment(plan), landing, format_version, plan.agent)
    return [{**flag.as_dict(), "detail": withheld(flag.detail)} for flag in flags]


def approval_changes(plan: merge.MergePlan) -> list[str]:
    """What a namespaced ``default`` risk profile stops approving (02 §6.1, 03 §3.1).

    ZeroClaw merges its default auto-approved tools into the profile named ``default`` only
    (``ensure_default_auto_approve``), so renaming the bundle's ``default`` profile narrows what
    it approves without asking: the plan names the tools that will be asked about.
    """
    out = []
    source = merge.entry_path("risk_profiles", DEFAULT_PROFILE)
    final = plan.renamed.get(source)
    for new in plan.new_entries:
        if final is None or new.kind != "risk_profiles" or new.path != final:
            continue
        after = effective_auto_approve(new.name, new.value)
        lost = [n for n in effective_auto_approve(DEFAULT_PROFILE, new.value) if n not in after]
        if lost:
            out.append(
                f"{source} is imported as {final}: ZeroClaw merges its default auto-approved "
                f"tools only into a profile named {DEFAULT_PROFILE}, so {final} will ask before "
                f"using: {escape_display(', '.join(lost))}"
            )
    return out


def also_found_by_bundler(
    report: VerifyReport,
    plan: merge.MergePlan,
    carried_skill_bundles: Sequence[str],
    flags: Sequence[Mapping[str, str]],
) -> list[dict[str, str]]:
    """Of ``flags``, those the rules of the exporter that wrote the bundle do not raise (02 §6.2).

    For a bundle ZeroClaw wrote, bundler's findings beyond ZeroClaw's ``collect_risk_flags``
    (computed over the same merged closure, so paths are the final ones); for bundler's own
    bundles, none. They are consented to like the rest, and listed apart in the report.
    """
    if not zeroclaw_written(report.manifest or {}):
        return []
    landing = _landing(plan, carried_skill_bundles)
    raised = {
        (flag.path, flag.kind)
        for flag in zeroclaw_risk_flags(_effective_fragment(plan), landing, plan.agent)
    }
    return [dict(flag) for flag in flags if (flag["path"], flag["kind"]) not in raised]


def _plan(
    run: _Run, given: dict[str, str], warnings: list[str]
) -> tuple[ImportReport, str, list[Staged]]:
    """Plan the merge, ask for consent then for missing secrets, lay out the result, probe."""
    target = run.config.parse()
    # what the import shows and records (the risk flags of a bound local entry, warnings,
    # errors, the receipt) withholds the install's own secrets, as an export does its source's
    with withholding(withholder(sweep_targets(target)[0])):
        return _plan_withholding(run, target, given, warnings)


def _plan_withholding(
    run: _Run, target: dict[str, Any], given: dict[str, str], warnings: list[str]
) -> tuple[ImportReport, str, list[Staged]]:
    _check_target(target, run.install_root)
    plan = _merge(run, target, given)
    if not run.options.dry_run:
        # once the options are known to be sound, and before any secret is asked for: a
        # refusal must not throw away what the user typed. The flags are those the merged
        # config grants (a bound local entry counts instead of the bundle's).
        carried = list(run.report.skill_bundles)
        flags = effective_risk_flags(plan, carried, run.report.format_version or 1)
        _consent(
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


def _merge(run: _Run, target: dict[str, Any], secrets: Mapping[str, str]) -> merge.MergePlan:
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


def _lay_out(run: _Run, plan: merge.MergePlan) -> tuple[ImportReport, str, list[Staged]]:
    """Pure: the merged config validated and rendered, and where each staged folder goes."""
    install_root = run.install_root
    errors, _ = validate(plan.merged, install_root)
    if errors:
        shown = "; ".join(f.line() for f in errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        raise InvalidInput(
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
                raise Refused(
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


def _probe(run: _Run, result: ImportReport, staged: list[Staged]) -> None:
    """What the disk says: occupied targets (refused), missing MCP commands, differing skills."""
    install_root = run.install_root
    for item in staged:
        if target_state(run.install_fd, item.target) == "occupied":
            raise Refused(
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


def _receipt_text(
    run: _Run,
    result: ImportReport,
    new_text: str,
    journal: Journal,
    staged: list[Staged],
    trees: dict[str, str],
    listed: dict[str, int],
    listing: tuple[str, int],
) -> str:
    """The receipt undo reads (03 §4); ``journal`` already holds the moves it records.

    Its files' ``[path inside the folder, size, XXH3-128]`` are in the listing published beside
    it (:mod:`bundler.install.receipt_files`), which ``[listing]`` names by digest and size
    (``listing``) and each folder by its number of lines (``listed``): an undo removes the
    files still as imported and keeps every other. The text stays small whatever the number of
    files, and so does the journal that holds it."""
    plan = result.plan
    config = run.config
    entries = [
        {
            "path": new.path,
            "digest": entry_digest(new.value, new.segments),
            "fields": field_digests(new.value, new.segments),
        }
        for new in plan.new_entries
    ]
    agent_segments = ["agents", plan.agent]
    entries.append(
        {
            "path": format_path(agent_segments),
            "digest": entry_digest(plan.agent_entry, agent_segments),
            "fields": field_digests(plan.agent_entry, agent_segments),
        }
    )
    document = {
        "format": RECEIPT_FORMAT,
        "token": journal.token,
        "agent": plan.agent,
        "source_agent": plan.source_agent,
        "imported_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "bundle": str(result.bundle),
        "bundle_checksums_xxh3_128": run.report.checksums_digest,
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
        "folders": [
            {
                "path": item.target,
                "tree": trees[item.label],
                "listed": listed[item.label],
            }
            for item in staged
        ],
        "listing": {
            "xxh3_128": listing[0],
            "bytes": listing[1],
            "lines": sum(listed.values()),
        },
        "emptied": journal.emptied,
        "created_parents": journal.parents,
    }
    return tomli_w.dumps(document)


def _staged_totals(report: VerifyReport, staged: Sequence[Staged]) -> tuple[int, int]:
    """The files and bytes the staged folders copy, from what verification found."""
    sources = {source for item in staged for source, _ in item.sources}
    totals = [report.totals.get(source, [0, 0]) for source in sources]
    return sum(files for files, _ in totals), sum(size for _, size in totals)


def _transact(run: _Run, result: ImportReport, new_text: str, staged: list[Staged]) -> None:
    """03 §3.2, steps 1-5."""
    install_fd, install_root, bundle, report, config = (
        run.install_fd,
        run.install_root,
        run.bundle,
        run.report,
        run.config,
    )
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
    txn = Transaction(install_fd, config, journal)
    try:
        staging_fd = txn.open_staging()
        bundle_fd = os.open(bundle, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            listed = (
                ListedChecksums(bundle_fd, report.checksums_digest)
                if report.checksums_digest
                else None
            )
            writer: ListingWriter | None = None
            trees: dict[str, str] = {}
            counts: dict[str, int] = {}
            try:
                writer = ListingWriter(staging_fd)
                progress = run.options.progress
                with phase(progress, "copying", *_staged_totals(report, staged)):
                    for item in staged:
                        before = writer.lines
                        trees[item.label] = stage_folder(
                            bundle_fd, staging_fd, item, listed, progress, writer
                        )
                        counts[item.label] = writer.lines - before
                listing = writer.finish()
            finally:
                if writer is not None:
                    writer.close()
                if listed is not None:
                    listed.close()
        finally:
            os.close(bundle_fd)
        copytree.make_durable(staging_fd)
        parents: list[str] = []
        emptied: list[dict[str, Any]] = []
        for item in staged:
            for parent in missing_parents(install_fd, item.target):
                if parent not in parents:
                    parents.append(parent)
            st = lstat_rel(install_fd, item.target)
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
        # the key the staged config needs is on disk before that file exists; a key made here
        # stays whatever becomes of the import (ZeroClaw may already use it)
        journal.key_created, replacements = run.store.publish()
        if replacements:  # another process's key won: the values are sealed again under it
            new_text = replace_sealed(new_text, replacements)
            journal.new_config = xxh(new_text.encode("utf-8"))
        journal.receipt_text = _receipt_text(
            run, result, new_text, journal, staged, trees, counts, listing
        )
        journal.receipt_files = STAGED_LISTING
        txn.write_journal()
        txn.run(new_text)
    except BaseException as err:
        if not txn.committed:
            try:
                leftovers = txn.rollback()
            except OSError:
                leftovers = ["(rollback failed)"]
            problems = [
                line for line in leftovers if line.startswith("left ") or line.startswith("(")
            ]
            if problems:
                raise Refused(
                    hints.Hinted(
                        "import failed and could not be fully undone",
                        hints.command("recover", "--install", str(install_root)),
                    ),
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
        txn.close()
        raise
    # committed: what follows cannot undo the import, so failures are warnings (02 §8.4)
    txn.close()
    failure = str(txn.after_commit_error) if txn.after_commit_error is not None else ""
    try:
        result.receipt = str(
            install_root / complete_transaction(install_root, install_fd, journal, dry_run=False)[1]
        )
    except (OSError, BundlerError) as err:
        failure = failure or str(err)
    if failure:
        result.warnings.append(
            hints.Hinted(
                f"imported, but finishing failed ({failure})",
                hints.command("recover", "--install", str(install_root)),
            )
        )
