"""The manifest's and the fragment's claims, recomputed from the bundle and compared (03 §1).

Everything that decides safety (risk flags, carried skill bundles, the secrets a bundle needs)
is recomputed from the bundle's contents; what the manifest says is only compared with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bundler.bundle import fragment as fragment_rules
from bundler.bundle.fragment import Problem, display_path
from bundler.bundle.manifest import CHECKSUMS_NAME, CONFIG_NAME, MANIFEST_NAME, parse_manifest
from bundler.bundle.rootfile import parse_toml
from bundler.bundle.verify_report import VerifyReport
from bundler.bundle.walk import BundleTree
from bundler.errors import InvalidInput, Tampered
from bundler.rules.config_view import array, array_of_tables, strings, table
from bundler.rules.names import escape_display, is_portable_skill_alias
from bundler.rules.secrets import sweep_targets

# An "empty install" for validate(): validate is pure, so this path is never touched.
_EMPTY_INSTALL = Path("/nonexistent/bundler-verify-empty-install")


def _manifest_error(exc: InvalidInput) -> Problem:
    message = exc.message.removeprefix(f"{MANIFEST_NAME}: ")
    return Problem(MANIFEST_NAME, message, type(exc))


def read_manifest(raw: bytes, *, legacy: bool) -> tuple[dict[str, Any] | None, list[Problem]]:
    """The manifest as a table, and what is wrong with it (02 §9, §10).

    The schema, the format and format 2's ``[memory]`` are checked by
    :func:`bundler.bundle.manifest.parse_manifest`; when it refuses, the raw table is still returned
    so that the rest of the bundle can be checked and every failure reported. ``legacy`` (no
    ``checksums.xxh3`` in the bundle) lets a format 1 manifest omit the checksums keys, as
    older exporters wrote it (03 §1).
    """
    table, problem = parse_toml(MANIFEST_NAME, raw)
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


def compare_contents(report: VerifyReport, manifest: Mapping[str, Any]) -> None:
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
    claimed_flags = array_of_tables(manifest.get("risk_flags"))
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


def recompute(
    report: VerifyReport, tree: BundleTree, manifest: Mapping[str, Any], fragment: dict[str, Any]
) -> None:
    """Skill bundles, risk flags and required secrets from the fragment and the tree (03 §1)."""
    from bundler.rules.risk import compute_risk_flags
    from bundler.rules.risk_zeroclaw import zeroclaw_risk_flags
    from bundler.rules.validate import validate

    root = str(manifest.get("root_agent", ""))
    version = report.format_version or 1
    agent = fragment_rules.agent_of(fragment, root)
    named = strings(agent.get("skill_bundles"))
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
            include = array(table(entry).get("include"))
            exclude = array(table(entry).get("exclude"))
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


def withhold_smuggled(report: VerifyReport, fragment: dict[str, Any]) -> None:
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
    report.errors = [Problem(scrub(p.path), scrub(p.message), p.concept) for p in report.errors]
    report.warnings = [Problem(scrub(p.path), scrub(p.message), p.concept) for p in report.warnings]


def read_raw_secret_paths(manifest: dict[str, Any], fragment: dict[str, Any]) -> None:
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


def add_fragment_warnings(report: VerifyReport, fragment: dict[str, Any], root: str) -> None:
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
        for alias in array(named)
        if isinstance(alias, str) and not is_portable_skill_alias(alias)
    ]


INTEGRITY_UNPROVEN = (
    "absent: the integrity of the bundle's files cannot be proven (ZeroClaw's exporter and "
    "older ones write no checksums); import asks for consent to that like a risk"
)


def no_checksums(report: VerifyReport, manifest: Mapping[str, Any], version: int) -> None:
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
        report.errors.append(Problem(CHECKSUMS_NAME, "missing", Tampered))
    elif promised:
        report.errors.append(
            Problem(
                CHECKSUMS_NAME,
                "missing, though the manifest's [contents] names it and its digest",
                Tampered,
            )
        )
    else:
        report.integrity_unproven = True
        report.warnings.append(Problem(CHECKSUMS_NAME, INTEGRITY_UNPROVEN))


def read_fragment(
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


def identity_paths(
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
