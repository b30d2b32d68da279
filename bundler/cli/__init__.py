"""The command line (05): argument parsing, output and exit codes. No logic lives here.

Each command is a handler ``(args, out) -> Result`` in a module of this package; the handler
calls the library and says what to print. Errors are :class:`bundler.errors.BundlerError`
raised anywhere below and printed here on one line (or as the ``--json`` envelope).
"""

from __future__ import annotations

import argparse
import importlib
import json
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any, NoReturn

from bundler import __version__
from bundler.cli.output import Output, Result
from bundler.errors import BundlerError, Interrupted, UsageError
from bundler.rules.names import escape_display

# command words -> "module:function" of its handler
HANDLERS: dict[tuple[str, ...], str] = {
    ("agents", "list"): "bundler.cli.config_cmds:agents_list",
    ("agents", "export"): "bundler.cli.export_cmds:export",
    ("agents", "import"): "bundler.cli.import_cmds:import_bundle",
    ("agents", "imports"): "bundler.cli.import_cmds:imports",
    ("bundle", "verify"): "bundler.cli.bundle_cmds:verify",
    ("bundle", "inspect"): "bundler.cli.bundle_cmds:inspect",
    ("bundle", "secrets-template"): "bundler.cli.bundle_cmds:secrets_template",
    ("recover",): "bundler.cli.recover_cmds:recover",
    ("config", "validate"): "bundler.cli.config_cmds:validate",
    ("config", "get"): "bundler.cli.config_cmds:get",
    ("config", "set"): "bundler.cli.config_cmds:set_value",
    ("config", "unset"): "bundler.cli.config_cmds:unset_value",
    ("home", "init"): "bundler.cli.home_cmds:init",
    ("home", "show"): "bundler.cli.home_cmds:show",
    ("home", "volumes"): "bundler.cli.home_cmds:volumes",
    ("home", "skills"): "bundler.cli.home_cmds:skills",
    ("home", "backup"): "bundler.cli.backup_cmds:backup",
    ("home", "verify-backup"): "bundler.cli.backup_cmds:verify_backup",
    ("home", "restore"): "bundler.cli.backup_cmds:restore",
    ("doctor",): "bundler.cli.doctor_cmds:doctor",
}


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises :class:`UsageError` instead of printing and exiting 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _global_options(suppress: bool) -> argparse.ArgumentParser:
    """The global options; on subcommands they default to SUPPRESS so either position works."""
    parent = argparse.ArgumentParser(add_help=False)
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}
    parent.add_argument(
        "--install",
        metavar="DIR",
        help="install root (else $ZEROCLAW_CONFIG_DIR, else ~/.zeroclaw)",
        **default,
    )
    parent.add_argument(
        "--json", action="store_true", help="print exactly one JSON object on stdout", **default
    )
    parent.add_argument(
        "--quiet", action="store_true", help="print only errors and the result", **default
    )
    parent.add_argument("--no-progress", action="store_true", help="never draw progress", **default)
    return parent


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree of 05 §1."""
    sub_globals = _global_options(suppress=True)
    parser = _Parser(
        prog="bundler",
        description=(
            "Move AI agents between installations without losing data or leaking credentials."
        ),
        parents=[_global_options(suppress=False)],
    )
    parser.add_argument("--version", action="version", version=f"bundler {__version__}")
    groups = parser.add_subparsers(dest="group", metavar="COMMAND", parser_class=_Parser)

    def command(
        subs: Any, name: str, help_text: str, *extra: argparse.ArgumentParser
    ) -> argparse.ArgumentParser:
        made: argparse.ArgumentParser = subs.add_parser(
            name, help=help_text, description=help_text, parents=[sub_globals, *extra]
        )
        return made

    agents = command(groups, "agents", "list, export and import agents").add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_Parser
    )
    command(agents, "list", "list the install's agents")
    export = command(agents, "export", "export an agent to a portable bundle")
    export.add_argument("alias", metavar="ALIAS")
    export.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="the bundle folder to create (or replace with --force)",
    )
    export.add_argument(
        "--force", action="store_true", help="replace an existing bundle (never another folder)"
    )
    export.add_argument(
        "--include-memory", action="store_true", help="carry the agent's SQLite memory (format 2)"
    )
    export.add_argument(
        "--scan-secrets",
        choices=["refuse", "warn", "off"],
        default="refuse",
        help="what a known secret found in a carried file does (default refuse)",
    )
    imp = command(agents, "import", "import a bundle into this install, transactionally")
    imp.add_argument("bundle", nargs="?", metavar="BUNDLE")
    imp.add_argument(
        "--undo",
        metavar="RECEIPT",
        help="remove exactly what the import with this receipt added ('last': the newest one "
        "not yet undone; see 'agents imports')",
    )
    imp.add_argument(
        "--as", dest="as_alias", metavar="ALIAS", help="import the agent under this alias"
    )
    imp.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="PATH=LOCAL",
        help="use a local entry instead of importing one",
    )
    imp.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="fill a required secret (visible to other users: prefer --secrets-file)",
    )
    imp.add_argument(
        "--secrets-file",
        metavar="FILE",
        help="TOML table of required secret paths to values (mode 0600)",
    )
    imp.add_argument(
        "--accept-risks",
        action="store_true",
        help="accept the bundle's risk flags without a prompt",
    )
    imp.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    imp.add_argument(
        "--force",
        action="store_true",
        help="with --undo: remove entries edited since the import, saving their values first",
    )
    command(agents, "imports", "list the import receipts, newest first, with their state")

    bundle = command(groups, "bundle", "verify and inspect bundles").add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_Parser
    )
    command(bundle, "verify", "check a bundle completely, changing nothing").add_argument(
        "dir", metavar="DIR"
    )
    command(bundle, "inspect", "show what a bundle holds and grants").add_argument(
        "dir", metavar="DIR"
    )
    template = command(
        bundle, "secrets-template", "write the bundle's required secrets as a --secrets-file"
    )
    template.add_argument("dir", metavar="BUNDLE", help="the bundle folder")
    template.add_argument(
        "--out", metavar="FILE", help="create FILE (mode 0600) instead of printing"
    )
    template.add_argument("--force", action="store_true", help="replace an existing FILE")

    recover = command(
        groups, "recover", "repair what an interrupted export, import or restore left"
    )
    recover.add_argument("dest", nargs="?", metavar="DEST", help="an export destination")
    recover.add_argument("--home", metavar="DIR", help="a data home with an interrupted restore")
    recover.add_argument(
        "--scan", metavar="DIR", help="list leftovers among DIR's children, changing nothing"
    )
    recover.add_argument("--dry-run", action="store_true", help="say what would be done")

    config = command(groups, "config", "validate, read and edit config.toml").add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_Parser
    )
    command(config, "validate", "print every error and warning of the config")
    get = command(config, "get", "print a config value (secrets masked)")
    get.add_argument("path", metavar="PATH")
    get.add_argument("--reveal", action="store_true", help="print secret values")
    set_ = command(config, "set", "set a config value, keeping the file's formatting")
    set_.add_argument("path", metavar="PATH")
    set_.add_argument(
        "value", nargs="?", metavar="VALUE", help="omit to read it from standard input (no echo)"
    )
    unset = command(config, "unset", "remove a config value, keeping the file's formatting")
    unset.add_argument("path", metavar="PATH", help="the config path to remove")

    home = command(groups, "home", "data homes: show, volumes, skills, backups").add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_Parser
    )
    project = argparse.ArgumentParser(add_help=False)
    project.add_argument(
        "--project", metavar="DIR", default=".", help="the folder holding Agent.yaml (default: .)"
    )
    for name, text in (
        ("init", "create the data home as a first start does"),
        ("show", "show the data home, sizes and volumes"),
        ("volumes", "list the agent's volumes"),
    ):
        command(home, name, text, project)
    skills = command(home, "skills", "list skills, or save one", project)
    skills.add_argument(
        "action", nargs="?", choices=["save"], help="save a skill of the agent's own"
    )
    skills.add_argument("name", nargs="?", metavar="NAME")
    skills.add_argument("--description", metavar="TEXT")
    skills.add_argument("--file", metavar="FILE")
    skills.add_argument(
        "--force", action="store_true", help="save over an agent skill of the same name"
    )
    backup = command(home, "backup", "back up the data home to one zip", project)
    backup.add_argument(
        "--to",
        metavar="FILE",
        help="the zip to create (never replaced), or an existing folder for a timestamped zip",
    )
    command(home, "verify-backup", "check a backup zip, changing nothing").add_argument(
        "file", metavar="FILE"
    )
    restore = command(home, "restore", "restore a backup zip into the data home", project)
    restore.add_argument("file", metavar="FILE")
    restore.add_argument(
        "--home", dest="target_home", metavar="DIR", help="restore into this data home instead"
    )
    restore.add_argument(
        "--force",
        action="store_true",
        help="restore even though chat.db looks in use or DIR is not a data home",
    )

    doctor = command(
        groups, "doctor", "check the install, leftovers, the filesystem and the data home"
    )
    doctor.add_argument("--project", metavar="DIR", help="also check this project's data home")
    doctor.add_argument(
        "--path", metavar="DIR", help="check that RENAME_EXCHANGE works where DIR is"
    )
    return parser


def _handler(words: tuple[str, ...]) -> Any:
    target = HANDLERS.get(words)
    if target is None:
        raise UsageError(f"unknown command {' '.join(words)} (see 'bundler --help')")
    module_name, function_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as missing:
        if missing.name != module_name:
            raise
        raise BundlerError(f"'bundler {' '.join(words)}' is not implemented yet") from None
    return getattr(module, function_name)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(f"interrupted by {signal.Signals(signum).name}; cleaned up")


def _wants_json(argv: Sequence[str]) -> bool:
    return "--json" in argv


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code of 05 §2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    out = Output(json_mode=_wants_json(argv))
    # a closed terminal (SIGHUP) and kill (SIGTERM) clean up like Ctrl-C: no staging left behind
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _on_signal)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        for option in ("install", "json", "quiet", "no_progress"):
            if not hasattr(args, option):
                setattr(args, option, None if option == "install" else False)
        out.configure(json_mode=args.json, quiet=args.quiet, progress=not args.no_progress)
        if args.group is None:
            parser.print_help(sys.stderr)
            raise UsageError("a command is required (see 'bundler --help')")
        words: tuple[str, ...] = (
            (args.group,)
            if args.group in ("recover", "doctor")
            else (args.group, getattr(args, "command", None) or "")
        )
        if words[-1] == "":
            raise UsageError(
                f"'bundler {args.group}' needs a command (see 'bundler {args.group} --help')"
            )
        result: Result = _handler(words)(args, out)
        return out.emit(result)
    except BundlerError as err:
        return out.fail(err)
    except KeyboardInterrupt:
        return out.fail(Interrupted("interrupted; cleaned up"))
    except BrokenPipeError:
        return 1


__all__ = ["main", "build_parser", "HANDLERS", "escape_display", "json"]
