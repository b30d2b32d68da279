"""``Agent.yaml``: loading it safely and checking it against ``manifests/agent.schema.json``.

The file is the user's, but it may have been copied from anywhere, so it is read like untrusted
input: a regular file only (a FIFO would block, a device could be endless), at most
:data:`MAX_BYTES`, UTF-8, ``yaml.safe_load`` with duplicate keys refused, alias expansion bounded
(a "billion laughs" file is refused instead of expanded), nesting bounded. Every error is
:class:`~bundler.errors.InvalidInput` naming ``Agent.yaml`` and the key path, and never quoting
a value (an Agent.yaml may hold tokens in keys this module does not know).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Hashable
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from bundler.errors import (
    Hostile,
    InvalidConfig,
    InvalidInput,
    Malformed,
    NotFound,
    TooLarge,
    os_failure,
)
from bundler.rules import schema, schemacheck
from bundler.rules.names import escape_display
from bundler.rules.paths import format_path
from bundler.rules.units import human_size

FILE_NAME = "Agent.yaml"
SCHEMA_NAME = "agent.schema.json"
MAX_BYTES = 1 << 20
# values reachable from the root, counting every alias expansion: far above any real file,
# far below what a hostile file of aliases would expand to
MAX_NODES = 100_000
MAX_DEPTH = 64

_TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "boolean": "true or false",
    "integer": "an integer",
    "number": "a number",
}


def key_path(segments: list[str | int] | tuple[str | int, ...]) -> str:
    """The dotted key path of ``segments`` as printed in messages (``volumes.notes.mode``)."""
    if not segments:
        return "(top level)"
    return escape_display(format_path(segments, config=False))


def _error(where: list[str | int] | tuple[str | int, ...], what: str) -> InvalidInput:
    path = key_path(where)
    return InvalidConfig(f"{FILE_NAME}: {path}: {what}", path=f"{FILE_NAME}:{path}")


class _Loader(yaml.SafeLoader):
    """``SafeLoader`` refusing duplicate keys, which YAML forbids and PyYAML silently merges."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Hashable] = set()
    # explicit keys only: a key that overrides one brought in by a merge (<<) is legitimate
    for key_node, _value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, Hashable):
            raise yaml.constructor.ConstructorError(
                None, None, "a key is not a plain value", key_node.start_mark
            )
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{escape_display(str(key))}'", key_node.start_mark
            )
        seen.add(key)
    loader.flatten_mapping(node)
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read(path: Path) -> bytes | None:
    """The bytes of ``path``, or None when it does not exist; only a regular file is read."""
    try:
        # O_NONBLOCK: opening a FIFO must not hang; it is refused below by its type
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ENOENT:
            return None
        raise InvalidInput(
            f"{FILE_NAME}: cannot be read ({os.strerror(err.errno or 0)})", path=FILE_NAME
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Hostile(f"{FILE_NAME}: is not a regular file", path=FILE_NAME)
        if info.st_size > MAX_BYTES:
            raise TooLarge(f"{FILE_NAME}: is larger than {human_size(MAX_BYTES)}", path=FILE_NAME)
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            total += len(chunk)
            if total > MAX_BYTES:
                raise TooLarge(
                    f"{FILE_NAME}: is larger than {human_size(MAX_BYTES)}", path=FILE_NAME
                )
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as err:
        raise InvalidInput(
            f"{FILE_NAME}: cannot be read ({os.strerror(err.errno or 0)})", path=FILE_NAME
        ) from None
    finally:
        os.close(fd)


def _check_shape(document: Any) -> None:
    """Refuse documents whose alias expansion or nesting is beyond any real Agent.yaml."""
    budget = MAX_NODES
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        value, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise TooLarge(
                f"{FILE_NAME}: expands to more than {MAX_NODES} values (aliases?)", path=FILE_NAME
            )
        if depth > MAX_DEPTH:
            raise TooLarge(f"{FILE_NAME}: is nested deeper than {MAX_DEPTH} levels", path=FILE_NAME)
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)


def parse_agent_yaml(data: bytes) -> dict[str, Any]:
    """Parse and validate the bytes of an Agent.yaml (pure). An empty file is an empty mapping."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise Malformed(
            f"{FILE_NAME}: is not valid UTF-8 (byte {err.start})", path=FILE_NAME
        ) from None
    try:
        document = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = escape_display(str(err.problem or err.context or "invalid YAML"))
        raise Malformed(f"{FILE_NAME}: {problem}{where}", path=FILE_NAME) from None
    except yaml.YAMLError:
        raise Malformed(f"{FILE_NAME}: is not valid YAML", path=FILE_NAME) from None
    except RecursionError:
        raise TooLarge(
            f"{FILE_NAME}: is nested deeper than {MAX_DEPTH} levels", path=FILE_NAME
        ) from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise Malformed(f"{FILE_NAME}: must be a mapping at the top level", path=FILE_NAME)
    _check_shape(document)
    validate_agent_yaml(document)
    return document


def load_agent_yaml(project: Path, *, required: bool = True) -> dict[str, Any]:
    """The validated ``Agent.yaml`` of ``project``.

    A missing file is an empty mapping when ``required`` is False (a home named by the
    environment needs no Agent.yaml); otherwise it is refused (exit 1), as is a missing project
    folder. Every problem in the file is :class:`InvalidInput` naming the key path.
    """
    try:
        is_dir = project.is_dir()
    except OSError as err:  # a name too long, a folder we may not search: is_dir raises those
        raise os_failure(
            f"cannot examine the project folder {escape_display(str(project))} "
            f"({err.strerror}); pass --project DIR (the folder holding Agent.yaml)",
            err,
            path=str(project),
        ) from None
    if not is_dir:
        raise NotFound(
            f"project folder {escape_display(str(project))} does not exist; "
            "pass --project DIR (the folder holding Agent.yaml)",
            path=str(project),
        )
    data = _read(project / FILE_NAME)
    if data is None:
        if required:
            raise NotFound(
                f"no {FILE_NAME} in {escape_display(str(project))}; "
                "pass --project DIR (the folder holding Agent.yaml)",
                path=str(project / FILE_NAME),
            )
        return {}
    return parse_agent_yaml(data)


def _describe(error: Any) -> tuple[list[str | int], str]:
    """A jsonschema error as (key path, message) that never quotes the offending value."""
    where: list[str | int] = list(error.absolute_path)
    keyword = error.validator
    rule = error.validator_value
    instance = error.instance
    if keyword == "type":
        wanted = rule if isinstance(rule, str) else rule[0]
        return where, f"must be {_TYPE_WORDS.get(wanted, wanted)}"
    if keyword == "required":
        missing = [key for key in rule if isinstance(instance, dict) and key not in instance]
        return where, f"missing key '{escape_display(', '.join(missing))}'"
    if keyword == "additionalProperties":
        known = set(error.schema.get("properties", {}))
        extra = sorted(str(key) for key in instance if key not in known)
        return where, f"unknown key '{escape_display(extra[0]) if extra else '?'}'"
    if keyword == "enum":
        return where, "must be one of " + ", ".join(str(choice) for choice in rule)
    if keyword == "maxLength":
        return where, f"must be at most {rule} characters (has {len(instance)})"
    if keyword == "minLength":
        return where, "must not be empty"
    if keyword == "maxProperties" and where == ["volumes"]:
        return where, f"at most {rule} volumes besides files (found {len(instance)})"
    if keyword in ("pattern", "not") and where and where[0] == "volumes":
        # propertyNames failures arrive with the name as the instance
        name = escape_display(str(instance))
        if instance == "files":
            return where, "volume name 'files' is taken (it is the home's files/ folder)"
        return where, f"volume name '{name}' must be 1-32 lowercase letters, digits and dashes"
    return where, f"does not satisfy the schema ({keyword})"


@cache
def _agent_check() -> Callable[[Any], list[schemacheck.Violation]]:
    """The schema's compiled check (:mod:`bundler.rules.schemacheck`): a sound Agent.yaml, what
    every home command reads, is passed without jsonschema's import, a fifth to a third of a
    small home's backup; jsonschema still checks should the schema outgrow the checker."""
    return schemacheck.document_check(schema.load(SCHEMA_NAME))


def validate_agent_yaml(document: dict[str, Any]) -> None:
    """Raise :class:`InvalidInput` for the first schema violation (in key-path order).

    The compiled check decides whether there is one; jsonschema, the reference, then names the
    first, in the words :func:`_describe` gives its errors."""
    for key in document:
        if not isinstance(key, str):
            raise _error([], f"key '{escape_display(str(key))}' must be a string")
    volumes = document.get("volumes")
    if isinstance(volumes, dict):
        for key in volumes:
            if not isinstance(key, str):
                raise _error(["volumes"], f"volume name '{escape_display(str(key))}' must be text")
    if not _agent_check()(document):
        return
    validator = schemacheck.validator_of(schema.load(SCHEMA_NAME))()
    errors = sorted(
        validator.iter_errors(document),
        key=lambda e: ([str(p) for p in e.absolute_path], str(e.validator)),
    )
    if errors:
        where, what = _describe(errors[0])
        raise _error(where, what)


def agent_name(document: dict[str, Any]) -> str | None:
    """The agent's ``name``, None when it has none (validated documents only)."""
    name = document.get("name")
    return name if isinstance(name, str) else None


def agent_can_save_skills(document: dict[str, Any]) -> bool:
    """``skills.agentCanSave`` (default true)."""
    skills = document.get("skills")
    if isinstance(skills, dict):
        return skills.get("agentCanSave", True) is not False
    return True
