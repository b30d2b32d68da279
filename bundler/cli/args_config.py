"""The parser of ``bundler config``: validate, get, set and unset."""

from __future__ import annotations

from typing import Any

from bundler.cli.parser import Tree

# command words -> "module:function" of its handler
HANDLERS: dict[tuple[str, ...], str] = {
    ("config", "validate"): "bundler.cli.config_cmds:validate",
    ("config", "get"): "bundler.cli.config_cmds:get",
    ("config", "set"): "bundler.cli.config_cmds:set_value",
    ("config", "unset"): "bundler.cli.config_cmds:unset_value",
}

# per command: example argument lists (05 §1)
EXAMPLES: dict[tuple[str, ...], list[list[str]]] = {
    ("config", "validate"): [[], ["--json"]],
    ("config", "get"): [["agents.researcher.model_provider"], ["providers.models", "--json"]],
    ("config", "set"): [
        ["agents.researcher.model_provider", "groq.fast"],
        ["agents.researcher.enabled", "false"],
        ["risk_profiles.default.allowed_commands", '["ls", "git"]'],
        ["providers.models.openai.main.api_key"],
    ],
    ("config", "unset"): [["agents.researcher.identity.aieos_path"]],
}


# the one rule for a VALUE of 'config set' (bundler.rules.values.parse_value)
SET_VALUE_RULE = """set a config value, keeping the file's formatting

VALUE is typed by the field it sets:
  a string field: the text, bare or as a TOML string (groq.fast or '"groq.fast"');
    give a string that itself starts with a quote as a TOML string
  any other field: one TOML value of its type: true or false, 42, 0.5,
    ["ls", "git"], { key = "value" }; quote it for the shell
  omit VALUE to type it without echo (do that for secrets)"""


def add(groups: Any, tree: Tree) -> None:
    """``config validate|get|set|unset``."""
    config_parser = tree.command(groups, "config", "validate, read and edit config.toml")
    if not tree.wanted("config"):
        return
    config = tree.subcommands(config_parser)
    tree.command(config, "validate", "print every error and warning of the config")
    get = tree.command(config, "get", "print a config value (secrets masked)")
    get.add_argument("path", metavar="PATH", help="a dotted config path, as in config.toml")
    get.add_argument("--reveal", action="store_true", help="print secret values")
    set_ = tree.command(config, "set", "set a config value, keeping the file's formatting")
    set_.description = SET_VALUE_RULE
    set_.add_argument("path", metavar="PATH", help="a dotted config path, as in config.toml")
    set_.add_argument(
        "value",
        nargs="?",
        metavar="VALUE",
        help="omit to read it from standard input (no echo)",
    )
    unset = tree.command(config, "unset", "remove a config value, keeping the file's formatting")
    unset.add_argument("path", metavar="PATH", help="the config path to remove")
