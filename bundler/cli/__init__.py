"""The command line (05): argument parsing, output and exit codes. No logic lives here.

Each command is a handler ``(args, out) -> Result`` in a module of this package; the handler
calls the library and says what to print. Errors are :class:`bundler.errors.BundlerError`
raised anywhere below and printed here on one line (or as the ``--json`` envelope).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import io
import json
import os
import re
import signal
import sys
from collections.abc import Container, Sequence
from types import FrameType
from typing import Any, NoReturn

from bundler import __version__
from bundler.cli.output import (
    Output,
    Result,
    escape_what_cannot_be_encoded,
    stand_in_for_closed_streams,
)
from bundler.cli.registry_args import (
    CREDENTIALS_HELP,
    add_authfile_option,
    add_cache_option,
    add_connection_options,
    add_registry_options,
)
from bundler.cli.shells import SHELLS
from bundler.errors import (
    BundlerError,
    EnvironmentFailure,
    Interrupted,
    Refused,
    UsageError,
    environment_hint,
    os_failure,
)
from bundler.fs import interrupts
from bundler.rules import hints
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
    ("bundle", "push"): "bundler.cli.registry_cmds:push",
    ("bundle", "pull"): "bundler.cli.registry_cmds:pull",
    ("bundle", "tags"): "bundler.cli.registry_cmds:tags",
    ("bundle", "cache"): "bundler.cli.registry_cmds:cache",
    ("bundle", "pack"): "bundler.cli.bundle_cmds:pack",
    ("bundle", "unpack"): "bundler.cli.bundle_cmds:unpack",
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
    ("home", "backups"): "bundler.cli.backup_cmds:list_backups",
    ("home", "prune"): "bundler.cli.backup_cmds:prune",
    ("doctor",): "bundler.cli.doctor_cmds:doctor",
    ("completion",): "bundler.cli.completion:completion",
    ("man",): "bundler.cli.manpage:man",
    ("login",): "bundler.cli.registry_cmds:login",
    ("logout",): "bundler.cli.registry_cmds:logout",
}

# commands that are one word, with no sub-command
SINGLE_WORD = ("recover", "doctor", "completion", "man", "login", "logout")


# per command: example argument lists, printed under "examples:" in its help (05 §1)
EXAMPLES: dict[tuple[str, ...], list[list[str]]] = {
    ("agents", "list"): [[], ["--json"]],
    ("agents", "export"): [
        ["researcher", "--out", "./researcher.bundle"],
        ["researcher", "--out", "./researcher.tar"],
        ["researcher", "--out", "./researcher.bundle", "--force", "--include-memory"],
        ["researcher", "--out", "./researcher.bundle", "--exclude", "*.log", "--exclude", "cache/"],
        ["researcher", "--out", "./researcher.bundle", "--exclude-from", "private-patterns.txt"],
        ["researcher", "--out", "./researcher.bundle", "--seal-to", "@receiver.pub"],
    ],
    ("agents", "import"): [
        ["./researcher.bundle", "--dry-run"],
        ["./researcher.tar"],
        ["./researcher.bundle", "--as", "researcher2", "--secrets-file", "secrets.toml"],
        ["./researcher.bundle", "--age-identity", "~/.ssh/id_ed25519"],
        ["oci://registry.example/agents/researcher@sha256:<digest>", "--accept-risks"],
        ["--undo", "last", "--dry-run"],
    ],
    ("agents", "imports"): [[], ["--json"]],
    ("bundle", "verify"): [
        ["./researcher.bundle"],
        ["./researcher.tar"],
        ["oci://registry.example/agents/researcher:1"],
    ],
    ("bundle", "inspect"): [
        ["./researcher.bundle"],
        ["./researcher.tar"],
        ["oci://registry.example/agents/researcher:1"],
    ],
    ("bundle", "pack"): [["./researcher.bundle", "./researcher.tar"]],
    ("bundle", "unpack"): [["./researcher.tar", "./researcher.bundle"]],
    ("bundle", "push"): [
        ["./researcher.bundle", "oci://registry.example/agents/researcher:1"],
        ["./researcher.bundle", "oci://localhost:5000/agents/researcher:1", "--plain-http"],
    ],
    ("bundle", "pull"): [
        ["oci://registry.example/agents/researcher@sha256:<digest>", "./researcher.bundle"],
    ],
    ("bundle", "cache"): [[], ["--prune"], ["--prune", "--max-size", "500MiB", "--json"]],
    ("bundle", "tags"): [
        ["oci://registry.example/agents/researcher"],
        ["oci://localhost:5000/agents/r", "--plain-http", "--json"],
    ],
    ("bundle", "secrets-template"): [
        ["./researcher.bundle"],
        ["./researcher.bundle", "--out", "secrets.toml"],
    ],
    ("recover",): [["./researcher.bundle", "--dry-run"], ["--scan", "."], ["--home", "DIR"]],
    ("config", "validate"): [[], ["--json"]],
    ("config", "get"): [["agents.researcher.model_provider"], ["providers.models", "--json"]],
    ("config", "set"): [
        ["agents.researcher.model_provider", "groq.fast"],
        ["agents.researcher.enabled", "false"],
        ["risk_profiles.default.allowed_commands", '["ls", "git"]'],
        ["providers.models.openai.main.api_key"],
    ],
    ("config", "unset"): [["agents.researcher.identity.aieos_path"]],
    ("home", "init"): [["--project", "."]],
    ("home", "show"): [[], ["--project", "~/agents/notes"]],
    ("home", "volumes"): [[]],
    ("home", "skills"): [
        ["list"],
        ["save", "weekly-report", "--description", "the weekly report", "--file", "SKILL.md"],
    ],
    ("home", "backup"): [["--to", "./backups"], ["--to", "oci://registry.example/me/backups"]],
    ("home", "verify-backup"): [["./backups/home.zip"]],
    ("home", "restore"): [
        ["./backups/home.zip"],
        ["./backups/home.zip", "--home", "DIR"],
        ["oci://registry.example/me/backups@sha256:<digest>"],
    ],
    ("home", "backups"): [
        [],
        ["--to", "/mnt/usb/backups", "--verify"],
        ["--to", "oci://registry.example/me/backups"],
    ],
    ("home", "prune"): [
        ["--keep-last", "3", "--keep-daily", "7", "--dry-run"],
        ["--to", "oci://registry.example/me/backups", "--keep-daily", "7"],
    ],
    ("doctor",): [[], ["--project", ".", "--path", "/mnt/usb"]],
    ("completion",): [["bash"], ["fish"]],
    ("man",): [[]],
    ("login",): [
        ["registry.example", "--username", "me", "--password-stdin"],
        ["localhost:5000", "--plain-http"],
    ],
    ("logout",): [["registry.example"]],
}

# the one rule for a VALUE of 'config set' (bundler.rules.values.parse_value)
SET_VALUE_RULE = """set a config value, keeping the file's formatting

VALUE is typed by the field it sets:
  a string field: the text, bare or as a TOML string (groq.fast or '"groq.fast"');
    give a string that itself starts with a quote as a TOML string
  any other field: one TOML value of its type: true or false, 42, 0.5,
    ["ls", "git"], { key = "value" }; quote it for the shell
  omit VALUE to type it without echo (do that for secrets)"""

GLOBALS_NOTE = (
    "global options (--install DIR, --json, --quiet, --no-progress) go before or after\n"
    "the command: see 'bundler --help'"
)


def _epilog(words: tuple[str, ...]) -> str:
    """A command's help epilog: its examples, each a paste-ready line, and the globals note."""
    lines = ["examples:"]
    lines += [f"  {hints.command(*words, *args)}" for args in EXAMPLES.get(words, [])]
    if len(lines) == 1:
        lines = []
    return "\n".join([*lines, "", GLOBALS_NOTE] if lines else [GLOBALS_NOTE])


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises :class:`UsageError` instead of printing and exiting 2.

    Options are never abbreviated: ``--acc`` for ``--accept-risks`` would keep working only
    until a second option starting with ``--acc`` appears, and then mean something else.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _global_options(suppress: bool) -> argparse.ArgumentParser:
    """The global options; on subcommands they default to SUPPRESS so either position works."""
    parent = argparse.ArgumentParser(add_help=False)
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}

    def text(words: str) -> str:
        # shown once, in 'bundler --help'; a command's help points there instead of repeating
        return argparse.SUPPRESS if suppress else words

    parent.add_argument(
        "--install",
        metavar="DIR",
        help=text("install root (else $ZEROCLAW_CONFIG_DIR, else ~/.zeroclaw)"),
        **default,
    )
    parent.add_argument(
        "--json",
        action="store_true",
        help=text("print exactly one JSON object on stdout"),
        **default,
    )
    parent.add_argument(
        "--quiet", action="store_true", help=text("print only errors and the result"), **default
    )
    parent.add_argument(
        "--no-progress", action="store_true", help=text("never draw progress"), **default
    )
    return parent


def _age_identity(parser: argparse.ArgumentParser, what: str) -> None:
    """``--age-identity FILE`` (repeatable) of the home commands reading an encrypted backup."""
    parser.add_argument(
        "--age-identity",
        action="append",
        default=[],
        metavar="FILE",
        help=f"{what} with FILE: an age identity file or an SSH private key (repeatable)",
    )


def build_parser(groups_wanted: Container[str] | None = None) -> argparse.ArgumentParser:
    """The command tree of 05 §1; the commands of a group only when ``groups_wanted`` holds it.

    Every group is listed either way; the CLI builds only the group it was given (see
    :func:`_group_word`), since building every command's parser is most of ``--help``'s time.
    """

    def wanted(group: str) -> bool:
        return groups_wanted is None or group in groups_wanted

    sub_globals = _global_options(suppress=True)
    parser = _Parser(
        prog="bundler",
        description=(
            "Move AI agents between installations without losing data or leaking credentials."
        ),
        parents=[_global_options(suppress=False)],
    )
    parser.add_argument("--version", action="version", version=f"bundler {__version__}")
    groups = parser.add_subparsers(
        dest="group", metavar="COMMAND", parser_class=_Parser, help="one of:"
    )

    def command(
        subs: Any, name: str, help_text: str, *extra: argparse.ArgumentParser
    ) -> argparse.ArgumentParser:
        # argparse keeps the parent command's words ("bundler agents") only in _prog_prefix
        words = (*str(subs._prog_prefix).split()[1:], name)
        made: argparse.ArgumentParser = subs.add_parser(
            name,
            help=help_text,
            description=help_text,
            parents=[sub_globals, *extra],
            epilog=_epilog(words),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        return made

    agents_parser = command(groups, "agents", "list, export and import agents")
    if wanted("agents"):
        agents = agents_parser.add_subparsers(
            dest="command", metavar="COMMAND", parser_class=_Parser, help="one of:"
        )
        command(agents, "list", "list the install's agents")
        export = command(agents, "export", "export an agent to a portable bundle")
        export.add_argument(
            "alias", metavar="ALIAS", help="the agent to export (see 'agents list')"
        )
        export.add_argument(
            "--out",
            required=True,
            metavar="DIR",
            help="the bundle folder to create (or replace with --force); a name ending in .tar "
            "makes a bundle archive instead",
        )
        export.add_argument(
            "--force", action="store_true", help="replace an existing bundle (never another folder)"
        )
        export.add_argument(
            "--include-memory",
            action="store_true",
            help="carry the agent's SQLite memory (format 2)",
        )
        export.add_argument(
            "--scan-secrets",
            choices=["refuse", "warn", "off"],
            default="refuse",
            help="what a known secret found in a carried file does (default refuse: every hit of "
            "the run is listed, then nothing is published)",
        )
        export.add_argument(
            "--exclude",
            action="append",
            default=[],
            metavar="PATTERN",
            help="keep workspace paths matching this gitignore pattern behind (repeatable; "
            "after the workspace's .bundlerignore, so '!PATTERN' can re-include); each is "
            "listed under 'not carried' and is not swept for secrets",
        )
        export.add_argument(
            "--exclude-from",
            action="append",
            default=[],
            metavar="FILE",
            help="read more such patterns from FILE, one a line, '#' comments (repeatable)",
        )
        export.add_argument(
            "--seal-to",
            action="append",
            default=[],
            metavar="RECIPIENT",
            help="seal the required secrets to RECIPIENT as secrets.age: an age public key "
            "(age1...), an ssh-ed25519 or ssh-rsa public key, or @FILE of them (repeatable)",
        )
        imp = command(agents, "import", "import a bundle into this install, transactionally")
        imp.add_argument(
            "bundle",
            nargs="?",
            metavar="BUNDLE",
            help="the bundle folder or archive, or oci://HOST/REPO[:TAG|@DIGEST] (not with --undo)",
        )
        add_registry_options(imp)
        add_cache_option(imp)
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
            "--age-identity",
            action="append",
            default=[],
            metavar="FILE",
            help="open the bundle's sealed secrets.age with FILE: an age identity file or an "
            "SSH private key (repeatable)",
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
            help="with --undo: accepted for scripts; an undo always saves the entries edited "
            "since the import beside the receipt before removing them",
        )
        command(agents, "imports", "list the import receipts, newest first, with their state")

    bundle_help = "verify, inspect, pack and unpack bundles, write a secrets template"
    bundle_parser = command(groups, "bundle", bundle_help)
    if wanted("bundle"):
        bundle = bundle_parser.add_subparsers(
            dest="command", metavar="COMMAND", parser_class=_Parser, help="one of:"
        )
        for name, text in (
            ("verify", "check a bundle completely, changing nothing"),
            ("inspect", "show what a bundle holds and grants"),
        ):
            reader = command(bundle, name, text)
            reader.add_argument(
                "dir",
                metavar="BUNDLE",
                help="the bundle folder or archive, or oci://HOST/REPO[:TAG|@DIGEST]",
            )
            add_registry_options(reader)
            add_cache_option(reader)
        pack = command(bundle, "pack", "write a bundle folder as one deterministic tar file")
        pack.add_argument("dir", metavar="DIR", help="the bundle folder")
        pack.add_argument("file", metavar="FILE", help="the archive to create (FILE.tar)")
        pack.add_argument(
            "--force", action="store_true", help="replace an existing archive (never another file)"
        )
        unpack = command(bundle, "unpack", "unpack a bundle archive into a verified bundle folder")
        unpack.add_argument("file", metavar="FILE", help="the bundle archive")
        unpack.add_argument("dir", metavar="DIR", help="the bundle folder to create")
        unpack.add_argument(
            "--force", action="store_true", help="replace an existing bundle (never another folder)"
        )
        push = command(bundle, "push", "push a bundle to an OCI registry; print its digest")
        push.add_argument("source", metavar="BUNDLE", help="the bundle folder or bundle archive")
        push.add_argument(
            "ref", metavar="REF", help="oci://HOST[:PORT]/REPO[:TAG] (default tag latest)"
        )
        push.add_argument(
            "--force", action="store_true", help="move a tag that names another artifact"
        )
        add_registry_options(push)
        push.epilog = f"{CREDENTIALS_HELP}\n\n{push.epilog}"
        pull = command(bundle, "pull", "pull a bundle from an OCI registry, verified")
        pull.add_argument("ref", metavar="REF", help="oci://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]")
        pull.add_argument("dest", metavar="DIR", help="the bundle folder to create")
        pull.add_argument("--force", action="store_true", help="replace an existing bundle folder")
        add_registry_options(pull)
        add_cache_option(pull)
        pull.epilog = f"{CREDENTIALS_HELP}\n\n{pull.epilog}"
        cache = command(
            bundle,
            "cache",
            "show the layer cache of pulled blobs, or prune it (least recently used first)",
        )
        cache.add_argument(
            "--prune", action="store_true", help="remove blobs until the cache fits its bound"
        )
        cache.add_argument(
            "--max-size",
            metavar="SIZE",
            help="the bound: bytes, or with a unit (500MiB, 2GiB); default "
            "$BUNDLER_CACHE_MAX_SIZE, else 2GiB",
        )
        tags = command(bundle, "tags", "list the tags of a repository in an OCI registry")
        tags.add_argument("ref", metavar="REF", help="oci://HOST[:PORT]/REPO")
        add_registry_options(tags)
        template = command(
            bundle, "secrets-template", "write the bundle's required secrets as a --secrets-file"
        )
        template.add_argument("dir", metavar="BUNDLE", help="the bundle folder or archive")
        template.add_argument(
            "--out", metavar="FILE", help="create FILE (mode 0600) instead of printing"
        )
        template.add_argument("--force", action="store_true", help="replace an existing FILE")

    recover = command(
        groups, "recover", "repair what an interrupted export, import, backup or restore left"
    )
    recover.add_argument(
        "dest", nargs="?", metavar="DEST", help="an export destination, or a home backup's --to DIR"
    )
    recover.add_argument("--home", metavar="DIR", help="a data home with an interrupted restore")
    recover.add_argument(
        "--scan", metavar="DIR", help="list leftovers among DIR's children, changing nothing"
    )
    recover.add_argument("--dry-run", action="store_true", help="say what would be done")

    config_parser = command(groups, "config", "validate, read and edit config.toml")
    if wanted("config"):
        config = config_parser.add_subparsers(
            dest="command", metavar="COMMAND", parser_class=_Parser, help="one of:"
        )
        command(config, "validate", "print every error and warning of the config")
        get = command(config, "get", "print a config value (secrets masked)")
        get.add_argument("path", metavar="PATH", help="a dotted config path, as in config.toml")
        get.add_argument("--reveal", action="store_true", help="print secret values")
        set_ = command(config, "set", "set a config value, keeping the file's formatting")
        set_.description = SET_VALUE_RULE
        set_.add_argument("path", metavar="PATH", help="a dotted config path, as in config.toml")
        set_.add_argument(
            "value",
            nargs="?",
            metavar="VALUE",
            help="omit to read it from standard input (no echo)",
        )
        unset = command(config, "unset", "remove a config value, keeping the file's formatting")
        unset.add_argument("path", metavar="PATH", help="the config path to remove")

    home_parser = command(groups, "home", "data homes: show, volumes, skills, backups")
    if wanted("home"):
        home = home_parser.add_subparsers(
            dest="command", metavar="COMMAND", parser_class=_Parser, help="one of:"
        )
        project = argparse.ArgumentParser(add_help=False)
        project.add_argument(
            "--project",
            metavar="DIR",
            default=".",
            help="the folder holding Agent.yaml (default: .)",
        )
        for name, text in (
            ("init", "create the data home as a first start does"),
            ("show", "show the data home, sizes and volumes"),
            ("volumes", "list the agent's volumes"),
        ):
            command(home, name, text, project)
        skills = command(home, "skills", "list skills, or save one", project)
        skills.add_argument(
            "action",
            nargs="?",
            choices=["list", "save"],
            help="list the skills (the default), or save a skill of the agent's own",
        )
        skills.add_argument("name", nargs="?", metavar="NAME", help="with save: the skill's name")
        skills.add_argument("--description", metavar="TEXT")
        skills.add_argument("--file", metavar="FILE")
        skills.add_argument(
            "--force", action="store_true", help="save over an agent skill of the same name"
        )
        backup = command(home, "backup", "back up the data home to one zip", project)
        backup.add_argument(
            "--to",
            metavar="FILE",
            help="the zip to create (never replaced), or an existing folder for a timestamped zip, "
            "or oci://HOST/REPO: a registry repository, the backup tagged by its time",
        )
        backup.add_argument(
            "--base",
            metavar="ZIP",
            help="copy unchanged entries from this earlier backup (default: the newest backup "
            "in the target folder)",
        )
        backup.add_argument(
            "--compression",
            choices=["fast", "default", "best", "none"],
            default="default",
            help="deflate level of new entries: fast (1), default (6), best (9), none (stored)",
        )
        backup.add_argument(
            "--full",
            action="store_true",
            help="compress every entry afresh, copying nothing from an earlier backup",
        )
        backup.add_argument(
            "--encrypt-to",
            action="append",
            default=[],
            metavar="RECIPIENT",
            help="write NAME.zip.age, encrypted to RECIPIENT: an age public key (age1...), an "
            "ssh-ed25519 or ssh-rsa public key, or @FILE of them (repeatable)",
        )
        _age_identity(backup, "with --encrypt-to: open an encrypted base")
        add_registry_options(backup)
        verify = command(home, "verify-backup", "check a backup zip, changing nothing")
        verify.add_argument("file", metavar="FILE", help="the backup zip (or .zip.age)")
        _age_identity(verify, "open an encrypted backup")
        listed = command(home, "backups", "list the backups of the home (or of --to DIR)", project)
        listed.add_argument(
            "--to",
            metavar="DIR",
            help="the folder of backups (default: the home's), or oci://HOST/REPO",
        )
        listed.add_argument(
            "--verify", action="store_true", help="check each backup fully, as verify-backup does"
        )
        _age_identity(listed, "with --verify: open the encrypted backups")
        add_registry_options(listed)
        prune = command(
            home, "prune", "remove the backups a retention policy does not keep", project
        )
        prune.add_argument(
            "--to",
            metavar="DIR",
            help="the folder of backups (default: the home's), or oci://HOST/REPO",
        )
        for rule, what in (
            ("last", "the N newest backups"),
            ("daily", "the newest backup of each of the N latest days"),
            ("weekly", "the newest backup of each of the N latest ISO weeks"),
            ("monthly", "the newest backup of each of the N latest months"),
        ):
            prune.add_argument(
                f"--keep-{rule}", type=int, default=0, metavar="N", help=f"keep {what}"
            )
        prune.add_argument(
            "--dry-run", action="store_true", help="list what would be removed, changing nothing"
        )
        add_registry_options(prune)
        restore = command(home, "restore", "restore a backup zip into the data home", project)
        restore.add_argument(
            "file",
            metavar="FILE",
            help="the backup zip (or .zip.age) to restore, or oci://HOST/REPO@sha256:DIGEST "
            "(or :TAG)",
        )
        _age_identity(restore, "open an encrypted backup")
        restore.add_argument(
            "--home", dest="target_home", metavar="DIR", help="restore into this data home instead"
        )
        restore.add_argument(
            "--force",
            action="store_true",
            help="restore even though chat.db looks in use or DIR is not a data home",
        )
        add_registry_options(restore)

    doctor = command(
        groups, "doctor", "check the install, leftovers, the filesystem and the data home"
    )
    doctor.add_argument("--project", metavar="DIR", help="also check this project's data home")
    doctor.add_argument(
        "--path",
        metavar="DIR",
        help="check that exports can replace a bundle atomically where DIR is",
    )
    completion = command(groups, "completion", "print a shell completion script")
    completion.add_argument(
        "shell", choices=SHELLS, metavar="SHELL", help="the shell to print the script for"
    )
    login = command(groups, "login", "check a registry login and store it where it is read first")
    login.add_argument("host", metavar="HOST", help="the registry, HOST[:PORT]")
    login.add_argument("--username", metavar="USER", help="the user name (else asked)")
    login.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from standard input (else asked, not echoed)",
    )
    add_authfile_option(login)
    add_connection_options(login)
    login.epilog = f"{CREDENTIALS_HELP}\n\n{login.epilog}"
    logout = command(groups, "logout", "remove a registry login from every credentials file")
    logout.add_argument("host", metavar="HOST", help="the registry, HOST[:PORT]")
    add_authfile_option(logout)
    man = command(groups, "man", "print the manual page (roff), made from this help")
    # both are generated from this very parser; handed over so they import nothing of this module
    for generated in (completion, man):
        generated.set_defaults(root_parser=parser)
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


def _parse(
    parser: argparse.ArgumentParser, argv: list[str], out: Output
) -> tuple[argparse.Namespace, list[str]] | int:
    """Parse ``argv``; ``--help`` and ``--version`` print their text and give the exit code.

    The text is printed as any command's result is (:meth:`Output.emit`), so a stdout that
    cannot take it is reported rather than lost (argparse drops its own write errors); with
    ``--json`` it is the ``text`` of the one JSON object, as every other output of a ``--json``
    run is."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            return parser.parse_known_args(argv)
    except SystemExit as done:  # argparse's help and version actions, after printing
        if done.code not in (0, None):
            raise
        if out.json_mode:
            return out.emit(Result(payload={"text": printed.getvalue()}))
        return out.emit(Result(text=[printed.getvalue().removesuffix("\n")], verbatim=True))


def _refuse_double_dash_values(argv: Sequence[str]) -> None:
    """``--out=--``: argparse drops a value that is exactly ``--`` (it takes it for the end of
    the options) and hands the command an empty list, which it cannot use."""
    for token in argv:
        if token == "--":
            return
        name, equals, value = token.partition("=")
        if token.startswith("--") and equals and value == "--":
            raise UsageError(
                f"{escape_display(name)}=--: '--' ends the options and cannot be a value; "
                "to name a file '--', write ./--"
            )


def _unrecognized(extras: list[str], args: argparse.Namespace) -> NoReturn:
    """Refuse words no parser took, pointing to the help of the command they were given to.

    Only words shaped like an option name are quoted (:data:`_OPTION_NAME`): any other stray
    word may be a secret (a mistyped ``--secret``, a token that starts with ``-``)."""
    words = ["bundler"]
    group = getattr(args, "group", None)
    if group:
        words.append(group)
        if getattr(args, "command", None):
            words.append(args.command)
    names = [word.split("=", 1)[0] for word in extras]
    options = [name for name in names if _OPTION_NAME.fullmatch(name)]
    others = len(extras) - len(options)
    shown = " ".join(options)
    if others:
        tail = f"{others} other argument(s), not shown as they may be secrets"
        if any(word.startswith("-") for word in extras):
            tail += " (a value that starts with '-' goes after '--')"
        shown = f"{shown} and {tail}" if shown else tail
    raise UsageError(f"unrecognized arguments: {shown} (see '{' '.join(words)} --help')")


# what an option of bundler's looks like: quoted back when mistyped, unlike any other word
_OPTION_NAME = re.compile(r"--[a-z][a-z0-9]*(?:-[a-z0-9]+)*|-[A-Za-z]")


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if interrupts.interrupt_now(signum):
        name = signal.Signals(signum).name
        raise Interrupted(f"interrupted by {name}; cleaned up", signal_name=name)


def _late_signal_warning() -> str | None:
    """The warning for a signal that arrived after the command committed, if one did."""
    late = interrupts.late_signal()
    if late is None:
        return None
    return f"interrupted by {signal.Signals(late).name} after the change was committed: it stands"


_NO_THREAD = "can't start new thread"
"""What CPython's ``Thread.start`` raises (a ``RuntimeError``) when the system refuses a new
thread: its stack could not be mapped (a small ``ulimit -v``) or there are too many."""


def _system_failure(err: OSError) -> Refused | None:
    """The one-line error for an ``OSError`` the system, not an input, caused; None for any
    other (a bug, which keeps its traceback)."""
    hint = environment_hint(err)
    if hint is None:
        return None
    name = err.filename if isinstance(err.filename, str) else ""
    at = f" at {escape_display(name)}" if name else ""
    reason = err.strerror or os.strerror(err.errno or 0)
    # a full disk is NoSpace, the rest EnvironmentFailure: the errno names the concept
    return os_failure(f"the system failed the command{at} ({reason}): {hint}", err, path=name)


def _out_of_memory(what: str) -> Refused:
    """The one-line error for a command the system ran short of memory for (exit 1)."""
    said = f" ({what})" if what else ""
    return EnvironmentFailure(
        f"not enough memory{said}: free some memory, or raise this process's limits "
        "(ulimit -v, ulimit -u), and try again"
    )


def _left_behind() -> list[str]:
    """Warnings for scratch folders the command could not remove (:mod:`bundler.fs.scratch`)."""
    # only a command that made one has imported the module; importing it here would load it
    # (and what it imports) for every command, a folder's verify among them
    if "bundler.fs.scratch" not in sys.modules:
        return []
    from bundler.fs.scratch import take_left_behind

    return take_left_behind()


def _group_word(argv: Sequence[str]) -> str | None:
    """The command group ``argv`` names: its first word that is not an option or the value of
    ``--install`` (the one global option taking a value). A wrong guess only costs argparse its
    usual error, as the word is then no group."""
    after_install = False
    for word in argv:
        if after_install:
            after_install = False
        elif word == "--install":
            after_install = True
        elif not word.startswith("-"):
            return word
    return None


# completion scripts and the man page are generated from every command's parser
_WHOLE_TREE = ("completion", "man")


def _groups_to_build(word: str | None) -> tuple[str, ...] | None:
    """The groups whose commands ``main`` builds parsers for: the one named, or all of them
    (``None``) for the commands that describe the whole tree."""
    if word in _WHOLE_TREE:
        return None
    return () if word is None else (word,)


def _wants_json(argv: Sequence[str]) -> bool:
    # after "--" every word is an operand, "--json" too (an agent may be named so)
    options = argv[: list(argv).index("--")] if "--" in argv else argv
    return "--json" in options


def _start_up_done(collecting: bool, *, own_process: bool) -> None:
    """Turn the garbage collector back on once start-up is over.

    Start-up (parsing, the command's imports) makes objects that live as long as the process
    and no garbage cycle, yet the collector ran a dozen times during it, each pass walking
    everything made so far; with it off, ``bundle verify`` of a small bundle starts measurably
    faster. In the process's own run those objects are then frozen, so the command's passes
    never walk them again (not when ``main`` is called in a longer-lived process, whose garbage
    of the moment would be kept for good).
    """
    if own_process:
        gc.freeze()
    if collecting:
        gc.enable()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code of 05 §2."""
    argv_given, collecting = argv, gc.isenabled()
    gc.disable()  # until the command runs: see _start_up_done
    argv = list(sys.argv[1:] if argv is None else argv)
    closed = stand_in_for_closed_streams()
    escape_what_cannot_be_encoded()
    out = Output(json_mode=_wants_json(argv), closed=closed)
    # a closed terminal (SIGHUP) and kill (SIGTERM) clean up like Ctrl-C: no staging left behind
    interrupts.begin_command()
    for signum in interrupts.HELD:
        signal.signal(signum, _on_signal)
    try:
        early = interrupts.early_signal()
        if early is not None:  # arrived during start-up, when nothing had been touched yet
            _on_signal(early, None)
        _refuse_double_dash_values(argv)
        word = _group_word(argv)
        parser = build_parser(groups_wanted=_groups_to_build(word))
        parsed = _parse(parser, argv, out)
        if isinstance(parsed, int):
            return parsed
        args, extras = parsed
        if extras:
            _unrecognized(extras, args)
        for option in ("install", "json", "quiet", "no_progress"):
            if not hasattr(args, option):
                setattr(args, option, None if option == "install" else False)
        out.configure(json_mode=args.json, quiet=args.quiet, progress=not args.no_progress)
        if args.group is None:
            parser.print_help(sys.stderr)
            raise UsageError("a command is required (see 'bundler --help')")
        words: tuple[str, ...] = (
            (args.group,)
            if args.group in SINGLE_WORD
            else (args.group, getattr(args, "command", None) or "")
        )
        if words[-1] == "":
            raise UsageError(
                f"'bundler {args.group}' needs a command (see 'bundler {args.group} --help')"
            )
        handler = _handler(words)
        _start_up_done(collecting, own_process=argv_given is None)
        result: Result = handler(args, out)
        late = _late_signal_warning()
        if late is not None:
            result.warnings.append(late)
        result.warnings += _left_behind()
        return out.emit(result)
    except (BundlerError, Interrupted) as err:
        return out.fail(err, warnings=_left_behind())
    except MemoryError as err:
        # raised wherever an allocation failed; the commands' clean-up ran on its way up
        return out.fail(_out_of_memory(str(err)), warnings=_left_behind())
    except RuntimeError as err:
        if str(err) != _NO_THREAD:
            raise
        return out.fail(_out_of_memory("cannot start a thread"), warnings=_left_behind())
    except OSError as err:
        # the system's own failure (no descriptor, no memory, a disk error) met where no layer
        # expected one: the commands' clean-up ran on its way up, so say what to do, no trace
        failed = _system_failure(err)
        if failed is None:
            raise
        return out.fail(failed, warnings=_left_behind())
    except KeyboardInterrupt:
        return out.fail(Interrupted("interrupted; cleaned up"))
    except BrokenPipeError:
        return 1
    finally:
        if collecting:
            gc.enable()


__all__ = ["main", "build_parser", "HANDLERS", "escape_display", "json"]
