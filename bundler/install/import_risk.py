"""The risk an import grants, judged on the merged config, and the consent it asks for
(03 §3.1.7, 02 §6.2).

The flags are recomputed over what the imported agent reaches in the merged config, so a bound
local entry counts instead of the bundle's entry it replaces, and each flag carries its final
(namespaced) path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bundler.bundle import fragment
from bundler.bundle.verify_claims import zeroclaw_written
from bundler.bundle.verify_report import VerifyReport
from bundler.errors import PolicyRefused, withheld
from bundler.install import merge
from bundler.install.bind_secrets import Prompter
from bundler.rules import hints
from bundler.rules.names import escape_display
from bundler.rules.risk import DEFAULT_PROFILE, compute_risk_flags, effective_auto_approve
from bundler.rules.risk_zeroclaw import zeroclaw_risk_flags

UNPROVEN_INTEGRITY = (
    "its files are not covered by checksums (no checksums.xxh3), so nothing proves they are "
    "the ones the exporter wrote"
)


def consent(
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
    raise PolicyRefused(
        hints.Hinted(
            f"the bundle carries {what}; nothing changed; pass --accept-risks "
            "or answer y at a terminal once you have reviewed them",
            hints.command("bundle", "inspect", bundle),
        ),
        path="risk_flags" if flags else "checksums.xxh3",
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
