"""The install's ``config.toml``: loading it for use and ``config set`` (01 §1, §6).

* :func:`load_config` reads the file and folds in the environment overrides.
* :func:`set_config_value` is ``config set``: a comment-preserving edit, validated before it is
  saved through the write protocol.

The rest of the config layer lives in modules by concept; import each name from its own:

* :mod:`bundler.config.file`: finding the install root, reading and parsing ``config.toml``.
* :mod:`bundler.rules.values`: values at config paths (lookup, defaults, redaction, typing).
* :mod:`bundler.config.overrides`: ``ZEROCLAW_a__b__c`` environment overrides.
* :mod:`bundler.config.guards`: which changes touch the escape hatch or the memory backend.
* :mod:`bundler.config.memorylock`: whether a memory backend is locked (a scan of the workspace).
* :mod:`bundler.config.write`: the write protocol of 01 §6 (lock, stage, commit, audit).

No message built here contains a value from the config, the environment or the command line:
any of them may be a secret. Messages name config paths and variable names only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.container import Container, OutOfOrderTableProxy
from tomlkit.items import AoT, Array, InlineTable, Table

from bundler.config import overrides
from bundler.config.file import (
    ConfigFile,
    LoadedConfig,
    no_config,
    open_install_root,
    parse_config_text,
    read_config_file,
    read_config_snapshot,
)
from bundler.config.guards import guarded_changes
from bundler.config.memorylock import backend_locked
from bundler.config.secretstore import (
    SecretWriter,
    replace_sealed,
    secret_strings,
    store_tree,
)
from bundler.config.textfix import above_heading, keep_heading, line_endings_like, trailing_comments
from bundler.config.write import (
    append_audit,
    config_lock,
    write_config,
)
from bundler.errors import (
    InvalidConfig,
    Malformed,
    NotFound,
    PolicyRefused,
    Refused,
    UsageError,
)
from bundler.rules import hints, layout, schema
from bundler.rules.names import escape_display
from bundler.rules.paths import format_path
from bundler.rules.tomlcompat import same_data
from bundler.rules.validate import validate
from bundler.rules.values import (
    canonical_segments,
    closest_path,
    list_index,
    lookup,
    parse_value,
    to_item,
    without,
)

TextFix = Callable[[str, str], str]
"""What an edit does to the text tomlkit wrote (given the old text and that one)."""


def load_config(
    install_root: Path,
    *,
    environ: Mapping[str, str] | None = None,
    apply_overrides: bool = True,
) -> LoadedConfig:
    """Load ``<install>/config.toml`` for use, with environment overrides unless told not to.

    Raises ``Refused`` when the file is missing or unreadable, ``InvalidInput`` for bad TOML or a
    bad override (naming the variable), ``Refused`` for an override that turns
    ``unrestricted_filesystem`` on or changes a locked memory backend.
    """
    text, identity = read_config_snapshot(install_root)
    data = parse_config_text(text, str(layout.config_file(install_root)))
    loaded = LoadedConfig(install_root, data, text, identity, file_data=data)
    if apply_overrides:
        overrides.apply_overrides(loaded, os.environ if environ is None else environ)
    return loaded


@dataclass(frozen=True)
class ConfigEdit:
    """What ``config set`` or ``config unset`` did: the canonical ``path``, whether the value
    was there to change (``unset``: False when it was not set; nothing was written then), and
    the ``warnings`` of failures after the commit point (the new ``config.toml`` stands).
    ``secret`` says the path is a secret field; ``unset`` which of the two commands it was;
    ``closest`` the path the user probably meant when an unset found nothing to remove. The
    value set is not kept."""

    path: str
    changed: bool
    warnings: list[str] = field(default_factory=list)
    secret: bool = False
    unset: bool = False
    closest: str | None = None

    def as_json(self) -> dict[str, Any]:
        """``{"path"}``, and ``"removed"`` for an unset."""
        if self.unset:
            return {"path": self.path, "removed": self.changed}
        return {"path": self.path}


def set_config_value(
    install_root: Path,
    path: str,
    raw_value: str,
    *,
    via: str,
    install: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ConfigEdit:
    """``config set``: set ``path`` to ``raw_value`` in ``config.toml``.

    The value is typed by the schema; every other byte of the file is kept. Each secret string
    in it is stored as the file's ``[secrets] encrypt`` says (default: sealed as ``enc2:`` under
    ``.secret_key``, created first when missing; ``environ`` is only read for the policy's
    override, which is warned about). The file is then 0600. The edited file is
    validated alone (no overrides) before it is saved; an invalid result raises ``InvalidInput``
    listing the errors and leaves the file byte-identical. Changing a locked memory backend is
    refused; a change of ``unrestricted_filesystem`` is audited. An empty secret is refused
    (``UsageError`` naming ``config unset``, run against ``install``, the ``--install`` given).
    """
    segments, node, secret = canonical_segments(path)
    canonical = format_path(segments)
    if node is None:
        close = closest_path({}, segments)
        hint = f"did you mean {escape_display(close)}? (" if close else ""
        end = ")" if close else ""
        raise UsageError(
            f"{canonical} is not a config field bundler knows; {hint}to set a field it does "
            f"not know, edit config.toml by hand{end}",
            path=canonical,
        )
    if secret and raw_value == "":
        # an empty string over a working key is how one is lost by a slip (a variable that
        # expanded to nothing); removing a secret is a deliberate command of its own
        raise UsageError(
            hints.Hinted(
                f"{canonical} is a secret and an empty value would erase it, so nothing was "
                "changed; to remove the secret, unset it",
                hints.command("config", "unset", canonical, install=install),
            ),
            path=canonical,
        )
    value = parse_value(raw_value, node, canonical, toml_strings=True)
    stored = [value]

    def store(config: ConfigFile, before: dict[str, Any], install_fd: int) -> SecretWriter | None:
        # ZeroClaw's save: every secret string sealed under the install's key when the file's
        # policy says so; a value given sealed must open under this install's key
        if not secret_strings(value, segments):
            return None
        writer = SecretWriter(
            install_fd,
            install_root,
            before,
            os.environ if environ is None else environ,
            owner=(config.uid, config.gid) if config.exists else None,
        )
        stored[0] = store_tree(value, segments, writer.store)
        return writer

    def edit(document: tomlkit.TOMLDocument) -> TextFix:
        heading = _set_in_document(document, segments, stored[0], canonical)
        return lambda old, new: above_heading(old, new, heading)

    warnings = _edit_config(
        install_root, segments, lambda: (True, stored[0]), edit, via=via, verb="set", store=store
    )
    return ConfigEdit(canonical, True, warnings, secret=secret)


def unset_config_value(install_root: Path, path: str, *, via: str) -> ConfigEdit:
    """``config unset``: remove ``path`` from ``config.toml``, keeping every other byte's
    formatting (``changed`` False when it was not set: nothing written).

    The same rules as :func:`set_config_value`: the result is validated before it is saved
    (a required field cannot be unset), a locked memory backend is refused, and a change of
    ``unrestricted_filesystem`` is audited.
    """
    segments, _node, secret = canonical_segments(path)
    removed = False

    def edit(document: tomlkit.TOMLDocument) -> TextFix:
        nonlocal removed
        removed, heading = _remove_from_document(document, segments)
        return lambda old, new: keep_heading(old, new, heading)

    warnings = _edit_config(
        install_root, segments, lambda: (False, None), edit, via=via, verb="unset"
    )
    # a path that was not there is most often a typo: name the one probably meant
    closest = None if removed else closest_path(load_config(install_root).data, segments)
    return ConfigEdit(
        format_path(segments), removed, warnings, secret=secret, unset=True, closest=closest
    )


def _remove_from_document(document: tomlkit.TOMLDocument, segments: list[str]) -> tuple[bool, str]:
    """Delete ``segments`` from the document: whether it was there, and the comment lines that
    ended the table removed (:func:`_trailing_comments`), which the caller puts back."""
    removed = _remove_item(document, segments)
    return removed is not None, trailing_comments(removed) if removed is not None else ""


def _remove_item(document: tomlkit.TOMLDocument, segments: list[str]) -> Any:
    """Delete ``segments`` from the document: the item deleted, or None when it is not there."""
    container: Any = document
    node: schema.Node | None = schema.config_schema()
    for depth, segment in enumerate(segments):
        last = depth == len(segments) - 1
        if isinstance(container, (list, AoT, Array)):
            index = list_index(list(container), segment, node)
            if index is None:
                return None
            if last:
                item = container[index]
                del container[index]
                return item
            container = container[index]
        elif isinstance(container, (Container, Table, InlineTable, OutOfOrderTableProxy)):
            if segment not in container:
                return None
            if last:
                item = container[segment]
                del container[segment]
                return item
            container = container[segment]
        else:
            return None
        node = schema.child(node, segment)
    return None


def _edit_config(
    install_root: Path,
    segments: list[str],
    expected: Callable[[], tuple[bool, Any]],
    edit: Callable[[tomlkit.TOMLDocument], TextFix],
    *,
    via: str,
    verb: str,
    store: Callable[[ConfigFile, dict[str, Any], int], SecretWriter | None] | None = None,
) -> list[str]:
    """Apply ``edit`` to ``config.toml`` under the lock: checked to change only ``segments``
    (to ``expected()``, :func:`~bundler.rules.values.lookup`'s answer), validated, guarded,
    audited, atomic. Returns the warnings (the secret store's, and failures after the commit).

    ``store`` decides, once the file is read, what the secret values become; a key it needs is
    published once the edit is known to be valid, before the staged file exists (a crash after
    it leaves an unused key beside the old config, which is harmless)."""
    canonical = format_path(segments)
    config_path = layout.config_file(install_root)
    if not os.path.lexists(config_path):
        # checked before taking the lock, whose file would otherwise be created in a non-install
        raise no_config(install_root)
    with (
        config_lock(install_root),
        open_install_root(install_root, for_writing=True) as install_fd,
        ExitStack() as stack,
    ):
        if install_fd is None:  # removed since the check above
            raise no_config(install_root)
        config = read_config_file(install_fd, install_root, stack)
        text = config.text
        before = config.parse()
        writer = store(config, before, install_fd) if store is not None else None
        document = _parse_document(text, str(config_path))
        fix = edit(document)
        new_text = line_endings_like(text, fix(text, document.as_string()))
        after = parse_config_text(new_text, str(config_path))
        if not _only_the_path_changed(before, after, segments, expected()):
            # where tomlkit put the new text is what TOML's reading of it decides; a key
            # appended in the wrong table silently moves others (a table of dotted keys)
            raise PolicyRefused(
                f"config {verb} {canonical} refused: in this config.toml's layout the edit "
                "would also move or change other entries; edit config.toml by hand",
                path=canonical,
            )
        changes = guarded_changes(before, after)
        for change in changes:
            if not change.is_unrestricted and backend_locked(change, [before, after], install_root):
                raise PolicyRefused(
                    f"{change.path}: memory backend is locked: the workspace's memory/ folder "
                    "holds this agent's memory; export it first or keep the backend",
                    path=change.path,
                )
        errors, _warnings = validate(after, install_root)
        if errors:
            shown = "; ".join(finding.line() for finding in errors[:5])
            more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
            raise InvalidConfig(
                f"config {verb} {canonical} refused, the result would be invalid: {shown}{more}",
                path=canonical,
            )
        if new_text == text:
            return []
        notes: list[str] = []
        if writer is not None:
            _created, replacements = writer.publish()
            new_text = replace_sealed(new_text, replacements)
            notes = writer.warnings
        warnings = [*notes, *write_config(config, new_text)]
        # committed: the new file stands, so what fails from here on is a warning (05 §2)
        for change in changes:
            if change.is_unrestricted:
                try:
                    append_audit(install_root, change.path, change.old, change.new, via)
                except Refused as err:
                    warnings.append(f"the change is saved, but its audit record is not: {err}")
        return warnings


def _only_the_path_changed(
    before: dict[str, Any], after: dict[str, Any], segments: list[str], expected: tuple[bool, Any]
) -> bool:
    """Whether ``after`` is ``before`` with the value at ``segments`` set (``expected`` is
    ``(True, value)``) or removed (``(False, None)``), and nothing else changed but the tables
    the edit made or emptied on the way."""
    if expected[0]:
        return same_data(lookup(after, segments), expected) and same_data(
            without(after, segments), without(before, segments)
        )
    # removing a list item moves the next ones up: after holds at most their shift
    return same_data(without(after, segments, keep_leaf=True), without(before, segments))


def _parse_document(text: str, where: str) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(text)
    except Exception as err:  # tomlkit has no single error base; the text already parsed above
        raise Malformed(
            f"{where}: cannot edit this TOML: {type(err).__name__}", path=where
        ) from None


def _set_in_document(
    document: tomlkit.TOMLDocument, segments: list[str], value: Any, canonical: str
) -> str:
    """Set ``segments`` to ``value`` in a tomlkit document, creating only what is missing.

    Missing tables become dotted keys inside the deepest existing table (or a new ``[table]``
    directly under a super-table or the root), and nested inline tables inside inline tables
    and array-of-tables entries, so the new key lands where TOML says it belongs. Returns the
    comment lines that end the ``[table]`` a key was appended to (:func:`_trailing_comments`),
    which the new key must go above.
    """
    container: Any = document
    dotted = False  # whether container is a table made by dotted keys (a.b = 1)
    node: schema.Node | None = schema.config_schema()
    for depth, segment in enumerate(segments):
        rest = segments[depth:]
        if isinstance(container, (list, AoT, Array)):
            index = list_index(list(container), segment, node)
            if index is None:
                raise NotFound(
                    f"{canonical}: no entry {format_path(segments[: depth + 1])}; add it to "
                    "config.toml first",
                    path=canonical,
                )
            if len(rest) == 1:
                if not _replace_table_contents(container[index], value):
                    container[index] = to_item(value, inline=True)
                return ""
            container, dotted = container[index], False
        elif isinstance(container, (Container, Table, InlineTable, OutOfOrderTableProxy)):
            if segment in container and len(rest) > 1:
                container, dotted = container[segment], _by_dotted_key(container, segment)
            elif segment in container and _replace_table_contents(container[segment], value):
                return ""
            else:
                return _add_missing(container, rest, value, dotted=dotted)
        else:
            raise NotFound(
                f"{canonical}: {format_path(segments[:depth])} is not a table", path=canonical
            )
        node = schema.child(node, segment)
    raise UsageError(f"{canonical}: empty config path", path=canonical)  # pragma: no cover


def _replace_table_contents(table: Any, value: Any) -> bool:
    """Give a ``[table]`` (or ``[[array]]`` entry) exactly ``value``'s keys, key by key.

    Replacing the table object instead would drop its header's comments and the comments and
    blank lines that follow it in the file. Returns False (nothing done) unless both are tables.
    """
    if not isinstance(table, Table) or not isinstance(value, Mapping):
        return False
    for key in [key for key in table if key not in value]:
        del table[key]
    for key, sub in value.items():
        if not (key in table and _replace_table_contents(table[key], sub)):
            table[key] = to_item(sub, inline=True)
    return True


def _by_dotted_key(container: Any, key: str) -> bool:
    """Whether ``container[key]`` is a table made by dotted keys (``key.x = 1``), which tomlkit
    marks a super-table as it does one made by ``[key.sub]`` headers; but no ``[header]`` of
    its own can follow it, so a key is added to it as one more dotted key.

    Told by the key in the container's body where tomlkit gives one, else by the table itself:
    a table of headers holds only tables, so one holding a value was made by dotted keys. (One
    made by dotted keys that holds only tables, under a table spread across the file, is not
    told: the edit's check refuses what it would misplace.)
    """
    if isinstance(container, Container):
        body = container.body
    elif isinstance(container, Table):
        body = container.value.body
    else:
        body = []
    if any(found is not None and found.key == key and found.is_dotted() for found, _ in body):
        return True
    table = container[key]
    return isinstance(table, Table) and any(
        not isinstance(item, (Table, AoT)) for item in table.value.values()
    )


def _add_missing(container: Any, rest: list[str], value: Any, *, dotted: bool = False) -> str:
    """Add ``rest`` (missing in ``container``) with ``value``. In a table made by dotted keys
    the new key is one more dotted key of it, which TOML reads where it is written."""
    heading = trailing_comments(container)
    if len(rest) == 1:
        inline = isinstance(container, InlineTable)
        container[rest[0]] = to_item(value, inline=inline or isinstance(value, Mapping))
        return heading
    if isinstance(container, (InlineTable, OutOfOrderTableProxy)):
        nested: Any = value
        for segment in reversed(rest[1:]):
            nested = {segment: nested}
        container[rest[0]] = to_item(nested, inline=True)
        return ""
    if isinstance(container, tomlkit.TOMLDocument) or (
        isinstance(container, Table) and container.is_super_table() and not dotted
    ):
        # a key-value appended to the root or a super-table would land after other tables
        # and belong to them; a new [table] section is where TOML puts it unambiguously
        table = tomlkit.table()
        container[rest[0]] = table
        _add_missing(table, rest[1:], value)
        return ""
    container.append(tomlkit.key(rest), to_item(value, inline=True))
    return heading
