"""The parser of ``bundler bundle``: verify, inspect, pack, unpack, push, pull, cache, tags
and secrets-template."""

from __future__ import annotations

from typing import Any

from bundler.cli.args_registry import CREDENTIALS_HELP, add_cache_option, add_registry_options
from bundler.cli.parser import Tree

# command words -> "module:function" of its handler
HANDLERS: dict[tuple[str, ...], str] = {
    ("bundle", "verify"): "bundler.cli.bundle_cmds:verify",
    ("bundle", "inspect"): "bundler.cli.bundle_cmds:inspect",
    ("bundle", "secrets-template"): "bundler.cli.bundle_cmds:secrets_template",
    ("bundle", "push"): "bundler.cli.registry_cmds:push",
    ("bundle", "pull"): "bundler.cli.registry_cmds:pull",
    ("bundle", "tags"): "bundler.cli.registry_cmds:tags",
    ("bundle", "cache"): "bundler.cli.registry_cmds:cache",
    ("bundle", "pack"): "bundler.cli.bundle_cmds:pack",
    ("bundle", "unpack"): "bundler.cli.bundle_cmds:unpack",
}

# per command: example argument lists (05 §1)
EXAMPLES: dict[tuple[str, ...], list[list[str]]] = {
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
        ["oci://registry.example/agents/researcher@sha256:<digest>"],
    ],
}


def add(groups: Any, tree: Tree) -> None:
    """``bundle verify|inspect|pack|unpack|push|pull|cache|tags|secrets-template``."""
    bundle_help = "verify, inspect, pack and unpack bundles, write a secrets template"
    bundle_parser = tree.command(groups, "bundle", bundle_help)
    if not tree.wanted("bundle"):
        return
    bundle = tree.subcommands(bundle_parser)
    for name, text in (
        ("verify", "check a bundle completely, changing nothing"),
        ("inspect", "show what a bundle holds and grants"),
    ):
        reader = tree.command(bundle, name, text)
        reader.add_argument(
            "dir",
            metavar="BUNDLE",
            help="the bundle folder or archive, or oci://HOST/REPO[:TAG|@DIGEST]",
        )
        add_registry_options(reader)
        add_cache_option(reader)
    pack = tree.command(bundle, "pack", "write a bundle folder as one deterministic tar file")
    pack.add_argument("dir", metavar="DIR", help="the bundle folder")
    pack.add_argument("file", metavar="FILE", help="the archive to create (FILE.tar)")
    pack.add_argument(
        "--force", action="store_true", help="replace an existing archive (never another file)"
    )
    unpack = tree.command(bundle, "unpack", "unpack a bundle archive into a verified bundle folder")
    unpack.add_argument("file", metavar="FILE", help="the bundle archive")
    unpack.add_argument("dir", metavar="DIR", help="the bundle folder to create")
    unpack.add_argument(
        "--force", action="store_true", help="replace an existing bundle (never another folder)"
    )
    push = tree.command(bundle, "push", "push a bundle to an OCI registry; print its digest")
    push.add_argument(
        "source",
        metavar="BUNDLE",
        help="the bundle folder or archive, or oci://HOST/REPO[:TAG|@DIGEST] to copy",
    )
    push.add_argument(
        "ref", metavar="REF", help="oci://HOST[:PORT]/REPO[:TAG] (default tag latest)"
    )
    push.add_argument("--force", action="store_true", help="move a tag that names another artifact")
    add_registry_options(push)
    push.epilog = f"{CREDENTIALS_HELP}\n\n{push.epilog}"
    pull = tree.command(bundle, "pull", "pull a bundle from an OCI registry, verified")
    pull.add_argument("ref", metavar="REF", help="oci://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]")
    pull.add_argument("dest", metavar="DIR", help="the bundle folder to create")
    pull.add_argument("--force", action="store_true", help="replace an existing bundle folder")
    add_registry_options(pull)
    add_cache_option(pull)
    pull.epilog = f"{CREDENTIALS_HELP}\n\n{pull.epilog}"
    cache = tree.command(
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
    tags = tree.command(bundle, "tags", "list the tags of a repository in an OCI registry")
    tags.add_argument("ref", metavar="REF", help="oci://HOST[:PORT]/REPO")
    add_registry_options(tags)
    template = tree.command(
        bundle, "secrets-template", "write the bundle's required secrets as a --secrets-file"
    )
    template.add_argument(
        "dir",
        metavar="BUNDLE",
        help="the bundle folder or archive, or oci://HOST/REPO[:TAG|@DIGEST]",
    )
    template.add_argument(
        "--out", metavar="FILE", help="create FILE (mode 0600) instead of printing"
    )
    template.add_argument("--force", action="store_true", help="replace an existing FILE")
    add_registry_options(template)
    add_cache_option(template)
