"""What ``config validate``, ``config get`` and ``agents list`` report of the install's config
(01 §5, 05 §3): each a report whose ``as_json()`` is the command's ``--json`` payload.

They live beside the imports because each names what an import left undone: a required secret
an import left unfilled is a warning of ``validate`` and a note of ``get``, known only from
the import receipts (:func:`bundler.install.receipts.unfilled_secrets`).

Reads only. A value is shown as the install's secrets allow: every secret field, and every
string holding one of the install's secret values, as ``***`` unless the caller asked to
reveal (``config get --reveal``); a revealed value is kept out of the report's ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundler.config.file import LoadedConfig
from bundler.config.store import load_config
from bundler.errors import NotFound
from bundler.install.receipts import unfilled_secrets
from bundler.rules import hints, layout
from bundler.rules.config_view import table
from bundler.rules.findings import Finding
from bundler.rules.names import escape_display
from bundler.rules.paths import format_path
from bundler.rules.secrets import sweep_targets
from bundler.rules.validate import validate
from bundler.rules.values import (
    canonical_segments,
    closest_path,
    effective_value,
    format_value,
    is_withheld,
    redact,
    redact_name,
    to_jsonable,
)


def overridden_by(path: str, override_vars: dict[str, str]) -> str | None:
    """The ``ZEROCLAW_*`` variable overriding ``path``, a table holding it, or a value below
    it, if any."""
    for overridden, variable in override_vars.items():
        if path == overridden or path.startswith((overridden + ".", overridden + '."')):
            return variable
        if overridden.startswith((path + ".", path + '."')):
            return variable
    return None


def did_you_mean(data: dict[str, Any], segments: list[str]) -> str:
    """``"; did you mean PATH?"`` for a path close to a mistyped one, else ``""``."""
    close = closest_path(data, segments)
    return f"; did you mean {escape_display(close)}?" if close else ""


def _fill_command(path: str, named_install: str | None) -> str:
    return hints.command("config", "set", path, install=named_install)


@dataclass
class ConfigCheck:
    """``config validate``: the errors and warnings of 01 §5 (each a finding naming a config
    path), the required secrets imports left unfilled (``(path, agent)``), and where a value
    came from an environment variable. ``ok`` when there is no error.

    ``named_install`` is the ``--install`` the commands it suggests repeat (None: none named)."""

    config_file: Path
    errors: list[Finding]
    warnings: list[Finding]
    unfilled: list[tuple[str, str]] = field(default_factory=list)
    override_vars: dict[str, str] = field(default_factory=dict)
    named_install: str | None = None

    @property
    def ok(self) -> bool:
        """True when the config has no error (warnings change nothing a script must act on)."""
        return not self.errors

    def _line(self, finding: Finding) -> str:
        variable = overridden_by(finding.path, self.override_vars)
        suffix = f" (value from environment variable {variable})" if variable else ""
        return escape_display(finding.line() + suffix)

    def _unfilled_message(self, agent: str) -> str:
        return f"required secret left empty by the import of agent {escape_display(agent)}"

    def error_lines(self) -> list[str]:
        """One line per error, made safe for a terminal."""
        return [self._line(finding) for finding in self.errors]

    def warning_lines(self) -> list[str]:
        """``warning: …`` lines: one per warning, then two per unfilled secret (the second the
        ``config set`` command that fills it)."""
        text = [f"warning: {self._line(finding)}" for finding in self.warnings]
        for path, agent in self.unfilled:
            text += [
                f"warning: required_secret_empty {escape_display(path)}: "
                f"{self._unfilled_message(agent)}; run:",
                f"  {_fill_command(path, self.named_install)}",
            ]
        return text

    def warning_count(self) -> int:
        """The warnings, unfilled secrets included."""
        return len(self.warnings) + len(self.unfilled)

    def as_json(self) -> dict[str, list[dict[str, str]]]:
        """``{"errors", "warnings"}``: findings as ``{"kind", "path", "message"}``, an unfilled
        secret as a ``required_secret_empty`` warning with the ``fix`` to run."""
        return {
            "errors": [finding.as_dict() for finding in self.errors],
            "warnings": [finding.as_dict() for finding in self.warnings]
            + [
                {
                    "kind": "required_secret_empty",
                    "path": path,
                    "message": self._unfilled_message(agent),
                    "fix": _fill_command(path, self.named_install),
                }
                for path, agent in self.unfilled
            ],
        }


def check_config(install_root: Path, *, named_install: str | None = None) -> ConfigCheck:
    """``config validate`` of the install at ``install_root``, environment overrides applied."""
    loaded = load_config(install_root)
    errors, warnings = validate(loaded.data, install_root)
    return ConfigCheck(
        config_file=layout.config_file(install_root),
        errors=errors,
        warnings=warnings,
        unfilled=unfilled_secrets(install_root, loaded.data),
        override_vars=dict(loaded.override_vars),
        named_install=named_install,
    )


@dataclass
class ConfigValue:
    """``config get``: the canonical ``path``, its ``value`` as shown (the install's secrets as
    ``***`` unless revealed), whether the value is withheld unasked (``secret``), whether it is
    the schema's ``default``, the variable that overrides it, and, for a secret field, whether
    it is a required secret an import left empty (``None`` for any other field). ``warnings``
    say the override and the empty secret (the latter with the command that fills it)."""

    path: str
    value: Any = field(repr=False)
    secret: bool
    default: bool
    overridden_by: str | None
    empty_required_secret: bool | None
    warnings: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The value as ``config get`` prints it: a string bare, anything else as a TOML value,
        made safe for a terminal."""
        return escape_display(format_value(self.value))

    def as_json(self) -> dict[str, Any]:
        """``{"path", "value", "secret", "default", "overridden_by"}``, and
        ``"empty_required_secret"`` for a secret field."""
        payload: dict[str, Any] = {
            "path": self.path,
            "value": to_jsonable(self.value),
            "secret": self.secret,
            "default": self.default,
            "overridden_by": self.overridden_by,
        }
        if self.empty_required_secret is not None:
            payload["empty_required_secret"] = self.empty_required_secret
        return payload


def config_value(
    install_root: Path, path: str, *, reveal: bool = False, named_install: str | None = None
) -> ConfigValue:
    """``config get PATH``: the value at ``path`` (environment overrides applied), the schema's
    default for a field left out, :class:`NotFound` (with the closest path) for neither.

    With ``reveal`` every ``enc2:``/``enc:`` string in it is opened under the install's key and
    nothing is masked; otherwise nothing a secret holds is returned."""
    loaded = load_config(install_root)
    segments, _node, secret = canonical_segments(path)
    canonical = format_path(segments)
    state, value = effective_value(loaded.data, segments)
    if state == "absent":
        close = did_you_mean(loaded.data, segments)
        raise NotFound(
            f"{canonical} is not set in {layout.config_file(install_root)}{close}", path=canonical
        )
    if reveal:
        # only here: the key and the cipher are for the value asked to be shown
        from bundler.config.secretkey import read_key_at
        from bundler.config.secretstore import reveal as opened

        shown = opened(value, read_key_at(install_root), canonical)
    else:
        shown = redact(value, segments, secret_values=_held(loaded))
    variable = overridden_by(canonical, loaded.override_vars)
    warnings = [f"{canonical} is overridden by environment variable {variable}"] if variable else []
    empty_required: bool | None = None
    if secret:
        empty_required = False
        left = dict(unfilled_secrets(install_root, loaded.data)) if value == "" else {}
        if canonical in left:
            empty_required = True
            sentence = (
                f"{escape_display(canonical)} is a required secret and is still empty (the "
                f"import of agent {escape_display(left[canonical])} left it unfilled); fill it in"
            )
            warnings.append(hints.Hinted(sentence, _fill_command(canonical, named_install)))
    return ConfigValue(
        path=canonical,
        value=shown,
        secret=is_withheld(segments),
        default=state == "default",
        overridden_by=variable,
        empty_required_secret=empty_required,
        warnings=warnings,
    )


def _held(loaded: LoadedConfig) -> set[str]:
    """The install's secret values: the file's and the overridden ones are both its secrets."""
    targets, _encrypted = sweep_targets(loaded.file_data, loaded.data)
    return {target.value for target in targets}


@dataclass
class AgentList:
    """``agents list``: each agent's ``alias``, ``enabled`` and ``model_provider``, in the
    config's order; an alias or provider holding one of the install's secrets shows ``***``
    (05 §3)."""

    agents: list[dict[str, Any]]

    def as_json(self) -> dict[str, Any]:
        """``{"agents": [{"alias", "enabled", "model_provider"}, …]}``."""
        return {"agents": to_jsonable(self.agents)}


def list_agents(install_root: Path) -> AgentList:
    """The agents of the install at ``install_root`` (environment overrides applied)."""
    loaded = load_config(install_root)
    held = _held(loaded)
    rows: list[dict[str, Any]] = []
    for alias, raw_entry in table(loaded.data.get("agents")).items():
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
    return AgentList(rows)
