"""``ZEROCLAW_a__b__c`` environment overrides, folded into a loaded config (01 §1).

An override changes the loaded data, never the file: :attr:`LoadedConfig.file_data` keeps what
the file says. Each value is typed and checked by the schema at its path; a bad one is
``InvalidInput`` naming the variable. An override may not turn ``unrestricted_filesystem`` on
nor change a locked memory backend (``Refused``). Messages name variables and config paths,
never a value: overrides often carry secrets.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from bundler.config.file import LoadedConfig
from bundler.config.guards import guarded_changes
from bundler.config.memorylock import backend_locked
from bundler.errors import InvalidConfig, InvalidInput, PolicyRefused
from bundler.rules import schema
from bundler.rules.paths import format_path
from bundler.rules.schemacheck import check_value
from bundler.rules.values import list_index, parse_value

__all__ = ["ENV_PREFIX", "apply_overrides", "override_variables"]

ENV_PREFIX = "ZEROCLAW_"


def override_variables(environ: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    """The override variables in ``environ``, sorted: ``(name, raw segments)``.

    Only ``ZEROCLAW_`` names that contain ``__`` are overrides; ``ZEROCLAW_CONFIG_DIR`` is not.
    """
    found = []
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and "__" in name[len(ENV_PREFIX) :]:
            found.append((name, name[len(ENV_PREFIX) :].split("__")))
    return found


def apply_overrides(loaded: LoadedConfig, environ: Mapping[str, str]) -> None:
    """Fold the override variables of ``environ`` into ``loaded.data`` (never into the file)."""
    _apply(loaded, environ)


def _apply(loaded: LoadedConfig, environ: Mapping[str, str]) -> None:
    overrides = override_variables(environ)
    if not overrides:
        return
    data = copy.deepcopy(loaded.file_data)  # the file's data never sees an override
    touched: list[tuple[str, list[str]]] = []
    for name, raw_segments in overrides:
        if not all(raw_segments):
            raise InvalidConfig(
                f"environment variable {name}: empty config path segment", path=name
            )
        segments, node, _secret = schema.resolve(raw_segments)
        path = format_path(segments)
        if node is None:
            raise InvalidConfig(
                f"environment variable {name}: {path} is not a config field", path=name
            )
        try:
            value = parse_value(environ[name], node, path)
        except InvalidInput as err:
            raise InvalidConfig(f"environment variable {name}: {err.message}", path=name) from None
        problems = check_value(node, value, segments)
        if problems:
            first = problems[0]
            raise InvalidConfig(
                f"environment variable {name}: {first.path} {first.message}", path=name
            )
        _set_plain(data, segments, value, name)
        touched.append((name, segments))
        loaded.overridden.add(path)
        loaded.override_vars[path] = name
    _check_override_guards(loaded, data, touched)
    loaded.data = data


def _set_plain(data: dict[str, Any], segments: list[str], value: Any, variable: str) -> None:
    container: Any = data
    node: schema.Node | None = schema.config_schema()
    for depth, segment in enumerate(segments):
        last = depth == len(segments) - 1
        if isinstance(container, list):
            index = list_index(container, segment, node)
            if index is None:
                raise InvalidConfig(
                    f"environment variable {variable}: no entry "
                    f"{format_path(segments[: depth + 1])}",
                    path=variable,
                )
            if last:
                container[index] = value
                return
            container = container[index]
        elif isinstance(container, dict):
            if last:
                container[segment] = value
                return
            if segment not in container:
                child = schema.child(node, segment)
                container[segment] = [] if child and child.get("type") == "array" else {}
            container = container[segment]
        else:
            raise InvalidConfig(
                f"environment variable {variable}: {format_path(segments[:depth])} is not a table",
                path=variable,
            )
        node = schema.child(node, segment)


def _check_override_guards(
    loaded: LoadedConfig, after: Mapping[str, Any], touched: list[tuple[str, list[str]]]
) -> None:
    """Overrides may not open the filesystem escape hatch nor change a locked memory backend."""
    for change in guarded_changes(loaded.file_data, after):
        variable = next(
            (
                name
                for name, segments in touched
                if tuple(segments) == change.segments[: len(segments)]
            ),
            touched[0][0],
        )
        if change.is_unrestricted and change.new is True:
            raise PolicyRefused(
                f"environment variable {variable}: an override may not turn {change.path} on; "
                "use 'bundler config set' (audited)",
                path=variable,
            )
        if not change.is_unrestricted and backend_locked(
            change, [loaded.file_data, after], loaded.install_root
        ):
            raise PolicyRefused(
                f"environment variable {variable}: memory backend is locked: agent "
                f"{format_path([change.alias])} has written memory",
                path=variable,
            )
