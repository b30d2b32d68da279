"""The parser of ``bundler home``: the data home, its volumes and skills, and its backups."""

from __future__ import annotations

import argparse
from typing import Any

from bundler.cli.args_registry import add_registry_options
from bundler.cli.parser import Tree

# command words -> "module:function" of its handler
HANDLERS: dict[tuple[str, ...], str] = {
    ("home", "init"): "bundler.cli.home_cmds:init",
    ("home", "show"): "bundler.cli.home_cmds:show",
    ("home", "volumes"): "bundler.cli.home_cmds:volumes",
    ("home", "skills"): "bundler.cli.home_cmds:skills",
    ("home", "backup"): "bundler.cli.backup_cmds:backup",
    ("home", "verify-backup"): "bundler.cli.backup_cmds:verify_backup",
    ("home", "restore"): "bundler.cli.backup_cmds:restore",
    ("home", "backups"): "bundler.cli.backup_cmds:list_backups",
    ("home", "prune"): "bundler.cli.backup_cmds:prune",
}

# per command: example argument lists (05 §1)
EXAMPLES: dict[tuple[str, ...], list[list[str]]] = {
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
}


def _age_identity(parser: argparse.ArgumentParser, what: str) -> None:
    """``--age-identity FILE`` (repeatable) of the home commands reading an encrypted backup."""
    parser.add_argument(
        "--age-identity",
        action="append",
        default=[],
        metavar="FILE",
        help=f"{what} with FILE: an age identity file or an SSH private key (repeatable)",
    )


def add(groups: Any, tree: Tree) -> None:
    """``home init|show|volumes|skills|backup|verify-backup|backups|prune|restore``."""
    home_parser = tree.command(groups, "home", "data homes: show, volumes, skills, backups")
    if not tree.wanted("home"):
        return
    home = tree.subcommands(home_parser)
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
        tree.command(home, name, text, project)
    skills = tree.command(home, "skills", "list skills, or save one", project)
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
    backup = tree.command(home, "backup", "back up the data home to one zip", project)
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
        "ssh-ed25519 or ssh-rsa public key, or @FILE of them (repeatable); with oci://, "
        "push it whole as one layer",
    )
    _age_identity(backup, "with --encrypt-to: open an encrypted base")
    add_registry_options(backup)
    verify = tree.command(home, "verify-backup", "check a backup zip, changing nothing")
    verify.add_argument("file", metavar="FILE", help="the backup zip (or .zip.age)")
    _age_identity(verify, "open an encrypted backup")
    listed = tree.command(home, "backups", "list the backups of the home (or of --to DIR)", project)
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
    prune = tree.command(
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
        prune.add_argument(f"--keep-{rule}", type=int, default=0, metavar="N", help=f"keep {what}")
    prune.add_argument(
        "--dry-run", action="store_true", help="list what would be removed, changing nothing"
    )
    add_registry_options(prune)
    restore = tree.command(home, "restore", "restore a backup zip into the data home", project)
    restore.add_argument(
        "file",
        metavar="FILE",
        help="the backup zip (or .zip.age) to restore, or oci://HOST/REPO@sha256:DIGEST (or :TAG)",
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
