"""``config validate|get|set`` and ``agents list``: thin handlers over the config layer."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bundler.api import display
from bundler.api.display import escape_display
from bundler.cli.output import Output, Result
from bundler.config.file import find_install_root
from bundler.config.store import load_config, set_config_value
from bundler.errors import EXIT_INVALID, NoAnswer, NotFound, UsageError
from bundler.install.receipts import unfilled_secrets
from bundler.rules import layout
from bundler.rules.config_view import table
from bundler.rules.findings import Finding
from bundler.rules.paths import format_path
from bundler.rules.secrets import sweep_targets
from bundler.rules.tomlcompat import decode_utf8
from bundler.rules.validate import validate as validate_config
from bundler.rules.values import (
    canonical_segments,
    closest_path,
    effective_value,
    format_value,
    is_withheld,
    not_text,
    redact,
    redact_name,
    to_jsonable,
)


def _override_note(path: str, override_vars: dict[str, str]) -> str | None:
    """The variable overriding ``path``, a table holding it, or a value below it, if any."""
    for overridden, variable in override_vars.items():
        if path == overridden or path.startswith((overridden + ".", overridden + '."')):
            return variable
        if overridden.startswith((path + ".", path + '."')):
            return variable
    return None


def validate(args: argparse.Namespace, out: Output) -> Result:
    """``config validate``: every error and warning, one per line; exit 3 on any error."""
    root = find_install_root(args.install)
    loaded = load_config(root)
    errors, warnings = validate_config(loaded.data, root)

    def line(finding: Finding) -> str:
        variable = _override_note(finding.path, loaded.override_vars)
        suffix = f" (value from environment variable {variable})" if variable else ""
        return escape_display(finding.line() + suffix)

    # --quiet: errors only; warnings change nothing a script must act on
    text = [line(finding) for finding in errors]
    if not out.quiet:
        text += [f"warning: {line(finding)}" for finding in warnings]
    payload: dict[str, list[dict[str, str]]] = {
        "errors": [finding.as_dict() for finding in errors],
        "warnings": [finding.as_dict() for finding in warnings],
    }
    for path, agent in unfilled_secrets(root, loaded.data):
        fix = display.command("config", "set", path, install=args.install)
        message = f"required secret left empty by the import of agent {escape_display(agent)}"
        payload["warnings"].append(
            {"kind": "required_secret_empty", "path": path, "message": message, "fix": fix}
        )
        if not out.quiet:
            text += [
                f"warning: required_secret_empty {escape_display(path)}: {message}; run:",
                f"  {fix}",
            ]
    config_file = layout.config_file(root)
    if not errors:
        count = len(payload["warnings"])
        noted = f"{count} warning{'' if count == 1 else 's'}" if count else "no warnings"
        verdict = [] if out.quiet else [f"config valid ({noted}): {config_file}"]
        return Result(payload=payload, text=text + verdict)
    return Result(
        payload=payload,
        text=text,
        code=EXIT_INVALID,
        error_message=f"{len(errors)} error(s) in {config_file}",
        error_path=str(config_file),
    )


def _did_you_mean(data: dict[str, Any], segments: list[str]) -> str:
    """``"; did you mean PATH?"`` for a path close to a mistyped one, else ``""``."""
    close = closest_path(data, segments)
    return f"; did you mean {escape_display(close)}?" if close else ""


def get(args: argparse.Namespace, out: Output) -> Result:
    """``config get PATH [--reveal]``: the value, secrets as ``***`` unless revealed."""
    root = find_install_root(args.install)
    loaded = load_config(root)
    segments, _node, secret = canonical_segments(args.path)
    path = format_path(segments)
    state, value = effective_value(loaded.data, segments)
    if state == "absent":
        close = _did_you_mean(loaded.data, segments)
        raise NotFound(f"{path} is not set in {layout.config_file(root)}{close}", path=path)
    is_default = state == "default"
    shown: Any = value
    if args.reveal:
        from bundler.config.secretkey import read_key_at
        from bundler.config.secretstore import reveal

        shown = reveal(value, read_key_at(root), path)
    else:
        # the file's values and the overridden ones are both the install's secrets
        targets, _encrypted = sweep_targets(loaded.file_data, loaded.data)
        shown = redact(value, segments, secret_values={target.value for target in targets})
    variable = _override_note(path, loaded.override_vars)
    warnings = [f"{path} is overridden by environment variable {variable}"] if variable else []
    empty_required = False
    if secret and value == "":
        left = dict(unfilled_secrets(root, loaded.data))
        if path in left:
            empty_required = True
            fix = display.command("config", "set", path, install=args.install)
            sentence = (
                f"{escape_display(path)} is a required secret and is still empty (the import "
                f"of agent {escape_display(left[path])} left it unfilled); fill it in"
            )
            warnings.append(display.Hinted(sentence, fix))
    payload = {
        "path": path,
        "value": to_jsonable(shown),
        "secret": is_withheld(segments),
        "default": is_default,
        "overridden_by": variable,
    }
    if secret:
        payload["empty_required_secret"] = empty_required
    # a value, not prose: never folded (it may be copied)
    text = [escape_display(format_value(shown))]
    return Result(payload=payload, text=text, warnings=warnings, verbatim=True)


def _read_value_from_stdin(path: str, args: argparse.Namespace, out: Output) -> str:
    """``config set`` VALUE from standard input: no echo on a terminal, one newline dropped.

    Nothing read is refused, not taken for an empty value: a cron job or a CI step started
    without input would otherwise erase the field and report success.
    """
    if "stdin" in out.closed:
        # its stand-in reads as empty, which would set the field to "" without a word
        raise NoAnswer(
            f"no value for {escape_display(path)}: standard input is closed; pipe the value "
            "in, or run the command at a terminal and type it",
            path=path,
        )
    if sys.stdin.isatty():
        # here, not at the top: only a value typed at a terminal needs the prompt's module
        from bundler.install.bind_secrets import ask_secret

        value = ask_secret(
            f"value for {path} (not echoed): ", path, "run config set again and type the value"
        )
    else:
        raw = decode_utf8(sys.stdin.buffer.read())
        if raw is None:
            raise not_text(escape_display(path), "the value read from standard input")
        value = raw[:-2] if raw.endswith("\r\n") else raw[:-1] if raw.endswith("\n") else raw
    if value == "":
        raise UsageError(
            display.Hinted(
                f"no value read from standard input, so {escape_display(path)} is unchanged; "
                "to clear the field, unset it",
                display.command("config", "unset", path, install=args.install),
            ),
            path=path,
        )
    return value


def set_value(args: argparse.Namespace, out: Output) -> Result:
    """``config set PATH [VALUE]``: a validated, comment-preserving, atomic edit."""
    root = find_install_root(args.install)
    path = format_path(canonical_segments(args.path)[0])
    raw = args.value if args.value is not None else _read_value_from_stdin(path, args, out)
    edit = set_config_value(root, args.path, raw, via="config set", install=args.install)
    path = edit.path
    warnings = list(edit.warnings)
    if args.value is not None and canonical_segments(args.path)[2]:
        warnings.append(
            f"the value of secret {path} was given on the command line, where other users and "
            "the shell history can see it; next time omit VALUE and type it when asked"
        )
    text = [] if out.quiet else [f"set {escape_display(path)}"]
    return Result(payload={"path": path}, text=text, warnings=warnings)


def unset_value(args: argparse.Namespace, out: Output) -> Result:
    """``config unset PATH``: remove a value (validated, comment-preserving, atomic)."""
    from bundler.config.store import unset_config_value
    from bundler.rules.paths import format_path

    root = find_install_root(args.install)
    path = format_path(canonical_segments(args.path)[0])
    edit = unset_config_value(root, args.path, via="config unset")
    line = f"unset {escape_display(path)}"
    if not edit.changed:
        close = _did_you_mean(load_config(root).data, canonical_segments(args.path)[0])
        line = f"{escape_display(path)} was not set{close}"
    return Result(
        payload={"path": path, "removed": edit.changed},
        text=[] if out.quiet else [line],
        warnings=edit.warnings,
    )


def agents_list(args: argparse.Namespace, out: Output) -> Result:
    """``agents list``: alias, enabled and model provider of every agent."""
    root = find_install_root(args.install)
    loaded = load_config(root)
    agents = loaded.data.get("agents")
    # an install secret copied into an alias or a provider name is still a secret (05 §3)
    targets, _encrypted = sweep_targets(loaded.file_data, loaded.data)
    held = {target.value for target in targets}
    rows: list[dict[str, Any]] = []
    for alias, raw_entry in table(agents).items():
        entry = table(raw_entry)
        provider = entry.get("model_provider", "")
        rows.append(
            {
                "alias": redact_name(alias, held),
                "enabled": entry.get("enabled", True),
                "model_provider": redact_name(provider, held)
                if isinstance(provider, str)
                else provider,
            }
        )
    width = max([len("ALIAS"), *(len(escape_display(str(row["alias"]))) for row in rows)])
    text = [f"{'ALIAS':<{width}}  ENABLED  MODEL PROVIDER"]
    for row in rows:
        enabled = "yes" if row["enabled"] is True else "no"
        text.append(
            f"{escape_display(str(row['alias'])):<{width}}  {enabled:<7}  "
            f"{escape_display(str(row['model_provider']))}"
        )
    return Result(payload={"agents": to_jsonable(rows)}, text=text, verbatim=True)
