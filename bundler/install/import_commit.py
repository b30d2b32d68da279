"""The import's transaction (03 §3.2, steps 1-5): stage the bundle's folders, write the journal
with the receipt it will publish, commit, and roll back whatever fails before the commit."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import tomli_w

from bundler.bundle.verify_report import VerifyReport
from bundler.config.guards import UNRESTRICTED
from bundler.config.secretstore import replace_sealed
from bundler.errors import BundlerError, RecoveryNeeded, os_failure
from bundler.fs import copytree, durable
from bundler.install import merge
from bundler.install.files import entry_digest, field_digests, lstat_rel, missing_parents, xxh
from bundler.install.import_types import ImportReport, ImportRun
from bundler.install.journal import RECEIPT_FORMAT, Journal
from bundler.install.receipt_files import STAGED_NAME as STAGED_LISTING
from bundler.install.receipt_files import ListingWriter
from bundler.install.stage import ListedChecksums, Staged, stage_folder
from bundler.install.transaction import Transaction, complete_transaction
from bundler.rules import hints
from bundler.rules.paths import format_path
from bundler.rules.progress import phase


def _receipt_stamp(now: datetime) -> str:
    return now.strftime("%Y%m%dT%H%M%SZ")


def _receipt_text(
    run: ImportRun,
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


def transact(run: ImportRun, result: ImportReport, new_text: str, staged: list[Staged]) -> None:
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
                raise RecoveryNeeded(
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
                raise os_failure(
                    f"import failed ({reason}); nothing changed", err, path=str(install_root)
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
