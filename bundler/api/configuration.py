"""The API's operations on the install's ``config.toml``: validate it, read a value, set or
unset one (validated, comment-preserving, atomic), list the agents, and read the value
``config set`` takes from standard input.

A secret given to :func:`set_config` is stored as the install's policy says and is kept in no
report, error or ``repr``; :func:`get_config` returns a secret only when asked to reveal it.
Part of :mod:`bundler.api`: import the names from there.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from bundler.api.options import ConfigGetOptions, ConfigOptions

if TYPE_CHECKING:
    from bundler.config.store import ConfigEdit
    from bundler.install.config_report import AgentList, ConfigCheck, ConfigValue

VIA_SET = "config set"
VIA_UNSET = "config unset"
"""What the audit log records as having made an edit (01 §6): the command's name, whoever
called it."""


def validate_config(install: Path, options: ConfigOptions = ConfigOptions()) -> ConfigCheck:
    """Check the install's config by every rule of 01 §5, environment overrides applied: the
    report's errors and warnings name config paths (and the variable a value came from), and
    the required secrets imports left empty. ``ok`` is false on any error."""
    from bundler.install.config_report import check_config

    return check_config(install, named_install=options.named_install)


def get_config(
    install: Path, path: str, options: ConfigGetOptions = ConfigGetOptions()
) -> ConfigValue:
    """The value at the config ``path`` (``agents.main.model_provider``), overrides applied, or
    the schema's default for a field left out; :class:`NotFound` naming the closest path when
    neither. Secrets read ``***`` unless ``options.reveal``."""
    from bundler.install.config_report import config_value

    return config_value(install, path, reveal=options.reveal, named_install=options.named_install)


def set_config(
    install: Path, path: str, value: str, options: ConfigOptions = ConfigOptions()
) -> ConfigEdit:
    """Set the config ``path`` to ``value`` (typed by the schema, a secret stored as the
    install's ``[secrets]`` policy says), keeping every other byte of ``config.toml``; the
    edited file is validated before it is saved, atomically, and an invalid result raises
    :class:`InvalidInput` with the file unchanged. An empty secret is refused: unset it."""
    from bundler.config.store import set_config_value

    return set_config_value(install, path, value, via=VIA_SET, install=options.named_install)


def unset_config(install: Path, path: str) -> ConfigEdit:
    """Remove the config ``path`` from ``config.toml`` by the rules of :func:`set_config`;
    the report's ``changed`` is false (and nothing is written) when it was not set."""
    from bundler.config.store import unset_config_value

    return unset_config_value(install, path, via=VIA_UNSET)


def list_agents(install: Path) -> AgentList:
    """The install's agents: alias, enabled and model provider, overrides applied."""
    from bundler.install.config_report import list_agents as agents

    return agents(install)


def read_config_value(
    path: str, stream: BinaryIO | None, options: ConfigOptions = ConfigOptions()
) -> str:
    """The value for ``config set PATH`` read from ``stream``: typed without echo when it is a
    terminal, else its bytes as UTF-8 text with one line end dropped. ``None`` (no standard
    input at all) and an empty value are refused, never taken for ``""``; no error quotes what
    was read."""
    from bundler.install.bind_secrets import config_value_from
    from bundler.rules.paths import format_path
    from bundler.rules.values import canonical_segments

    canonical = format_path(canonical_segments(path)[0])
    return config_value_from(stream, canonical, named_install=options.named_install)
