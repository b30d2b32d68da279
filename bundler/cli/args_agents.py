"""The parser of ``bundler agents``: list, export, import (and undo), imports."""

from __future__ import annotations

from typing import Any

from bundler.cli.args_registry import add_cache_option, add_registry_options
from bundler.cli.parser import Tree

# command words -> "module:function" of its handler
HANDLERS: dict[tuple[str, ...], str] = {
    ("agents", "list"): "bundler.cli.config_cmds:agents_list",
    ("agents", "export"): "bundler.cli.export_cmds:export",
    ("agents", "import"): "bundler.cli.import_cmds:import_bundle",
    ("agents", "imports"): "bundler.cli.import_cmds:imports",
}

# per command: example argument lists (05 §1)
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
}


def add(groups: Any, tree: Tree) -> None:
    """``agents list|export|import|imports``."""
    agents_parser = tree.command(groups, "agents", "list, export and import agents")
    if not tree.wanted("agents"):
        return
    agents = tree.subcommands(agents_parser)
    tree.command(agents, "list", "list the install's agents")
    export = tree.command(agents, "export", "export an agent to a portable bundle")
    export.add_argument("alias", metavar="ALIAS", help="the agent to export (see 'agents list')")
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
    imp = tree.command(agents, "import", "import a bundle into this install, transactionally")
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
    tree.command(agents, "imports", "list the import receipts, newest first, with their state")
