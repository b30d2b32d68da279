"""``backup.json`` of a backup zip (backup-format.md): read, parsed, checked against its schema
and every range, and matched with the zip's directory (04 §5.2, §5.3.1).

Parsing is strict from the first byte: duplicate keys, floats and constants where an integer
goes, integers of more than 20 digits, unknown keys at any level are refused, and the common
shape of the schema's lists is checked without building a validator per entry.
"""

from __future__ import annotations

import json
import operator
import re
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from bundler.errors import (
    Hostile,
    InvalidInput,
    Malformed,
    NotABundle,
    Tampered,
    TooLarge,
    Unsupported,
)
from bundler.home.zipcheck import (
    DATABASE,
    FORMAT,
    MANIFEST,
    MAX_ENTRY_SIZE,
    MAX_MANIFEST_BYTES,
    MAX_MTIME_NS,
    all_plain,
    invalid_entry,
    path_problem,
    show,
    stream_entry,
)
from bundler.rules import schema
from bundler.rules.units import human_size

_MAX_INT_DIGITS = 20
"""Digits of the longest integer backup.json can hold (2**64 has 20); longer ones are refused:
before Python converts them where it converts any length (:func:`_digits_bounded`), by the
ranges checked after the parse where it does not."""
_SAFE_DIGITS = 5000
"""The most digits an interpreter may convert to an integer for json's own conversion to be
used: converting n digits takes time quadratic in n."""


def _digits_bounded() -> bool:
    """Whether this interpreter refuses to convert integers of more than a few thousand digits
    (Python 3.11, 3.10.7 and later, unless a program lifted the limit). json's conversion (C)
    is then safe from a number of a million digits, which it refuses as a ValueError; an
    integer of 21 digits or more is refused by the ranges checked after the parse. Elsewhere
    every integer goes through :func:`_parse_int` first."""
    limit = getattr(sys, "get_int_max_str_digits", None)
    return limit is not None and 0 < limit() <= _SAFE_DIGITS


class Listed(NamedTuple):
    """One file of ``backup.json``."""

    path: str
    size: int
    xxh3_128: str
    mtime_ns: int | None


@dataclass(frozen=True)
class BackupIndex:
    """``backup.json`` parsed and checked against ``manifests/backup.schema.json``."""

    format: int
    tool: str
    created_at: str
    agent: str | None
    files: dict[str, Listed]
    folders: tuple[str, ...]


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise Malformed(f"{MANIFEST}: key {show(key)} appears twice", path=MANIFEST)
            seen.add(key)
    return result


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise TooLarge(
            f"{MANIFEST}: holds an integer of {len(text)} digits (at most {_MAX_INT_DIGITS})",
            path=MANIFEST,
        )
    return int(text)


def _refuse_constant(name: str) -> Any:
    # json accepts NaN and Infinity, which JSON itself does not have
    raise Malformed(f"{MANIFEST}: {name} is not a JSON number", path=MANIFEST)


def _is_int(value: Any) -> bool:
    """A JSON integer: not a bool, not a float (jsonschema's "integer" admits 1.0)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _bounded(value: Any, low: int, high: int, where: str) -> int:
    """``value`` checked for type and range here, where numbers become what reaches
    ``os.utime`` and size sums: the schema says the same, this does not depend on it."""
    if not _is_int(value) or not low <= value <= high:
        raise Malformed(
            f"{MANIFEST}: {where} must be an integer from {low} to {high}",
            path=f"{MANIFEST}:{where}",
        )
    return int(value)


def parse_index(data: bytes) -> BackupIndex:
    """Parse ``backup.json``; a newer ``format`` is refused before the schema is applied.

    Every number is range-checked before it is used: integers longer than 20 digits, NaN and
    Infinity are refused while parsing, floats and bools where integers belong afterwards.
    """
    try:
        text = data.decode("utf-8")
        document = json.loads(
            text,
            object_pairs_hook=_no_duplicate_keys,
            parse_int=None if _digits_bounded() else _parse_int,
            parse_constant=_refuse_constant,
        )
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Malformed(f"{MANIFEST}: not valid UTF-8 JSON ({exc})", path=MANIFEST) from None
    if not isinstance(document, dict):
        raise Malformed(f"{MANIFEST}: must be a JSON object", path=MANIFEST)
    version = document.get("format")
    if "format" in document and not _is_int(version):
        raise _schema_error("format", "type")
    if isinstance(version, int) and version > FORMAT:
        raise Unsupported(
            f"{MANIFEST}: format {version} is newer than this bundler knows ({FORMAT}): "
            "restore it with a newer bundler",
            path=f"{MANIFEST}:format",
        )
    _validate_schema(document)
    files = _listed_at_once(document["entries"])
    if files is None:
        files = _listed_one_by_one(document["entries"])
    folders = tuple(document.get("folders", ()))
    for folder in folders:
        problem = path_problem(folder, folder=True)
        if problem:
            raise Hostile(f"{MANIFEST}: folder {show(folder)} {problem}", path=show(folder))
    if DATABASE not in files:
        raise NotABundle(f"{MANIFEST}: lists no chat.db: not a data-home backup", path=MANIFEST)
    return BackupIndex(
        document["format"],
        document["tool"],
        document["created_at"],
        document["agent"],
        files,
        folders,
    )


def _within(column: list[Any], low: int, high: int) -> bool:
    """Every value of ``column`` an integer (not a bool) from ``low`` to ``high``."""
    return not column or (
        set(map(type, column)) == {int} and min(column) >= low and max(column) <= high
    )


def _listed_at_once(entries: list[dict[str, Any]]) -> dict[str, Listed] | None:
    """The files of schema-checked ``entries`` when every rule of
    :func:`_listed_one_by_one` surely holds, decided a column at a time; None when in doubt."""
    paths = list(map(operator.itemgetter("path"), entries))
    sizes = list(map(operator.itemgetter("size"), entries))
    times = [item.get("mtime_ns") for item in entries]
    modes = [item["mode"] for item in entries if "mode" in item]
    if not (
        _within(sizes, 0, MAX_ENTRY_SIZE)
        and _within([t for t in times if t is not None], 0, MAX_MTIME_NS)
        and _within(modes, 0, 0o7777)
        and len(set(paths)) == len(paths)
        and all_plain([path for path in paths if path != DATABASE])
    ):
        return None
    digests = map(operator.itemgetter("xxh3_128"), entries)
    rows = map(Listed._make, zip(paths, sizes, digests, times, strict=True))
    return dict(zip(paths, rows, strict=True))


def _listed_one_by_one(entries: list[dict[str, Any]]) -> dict[str, Listed]:
    """The files of schema-checked ``entries``, each checked in turn: its numbers in range
    (here, where they become what reaches ``os.utime`` and size sums), its path allowed and not
    listed twice; the first that is not raises."""
    files: dict[str, Listed] = {}
    for number, item in enumerate(entries):
        size = item["size"]
        if type(size) is not int or not 0 <= size <= MAX_ENTRY_SIZE:
            size = _bounded(size, 0, MAX_ENTRY_SIZE, f"entries/{number}/size")
        mtime_ns = item.get("mtime_ns")
        if mtime_ns is not None and (
            type(mtime_ns) is not int or not 0 <= mtime_ns <= MAX_MTIME_NS
        ):
            mtime_ns = _bounded(mtime_ns, 0, MAX_MTIME_NS, f"entries/{number}/mtime_ns")
        if "mode" in item:
            _bounded(item["mode"], 0, 0o7777, f"entries/{number}/mode")
        path = item["path"]
        problem = path_problem(path)
        if problem is None and path == MANIFEST:
            problem = "lists backup.json itself"
        if problem:
            raise Hostile(f"{MANIFEST}: entry {show(path)} {problem}", path=show(path))
        if path in files:
            raise Malformed(f"{MANIFEST}: entry {show(path)} is listed twice", path=show(path))
        files[path] = Listed(path, size, item["xxh3_128"], mtime_ns)
    return files


_LISTS = ("entries", "folders")
# keywords the per-item fast path below understands; any other sends items to jsonschema
_FLAT_KEYWORDS = frozenset(
    {"type", "minimum", "maximum", "minLength", "maxLength", "pattern", "description"}
)


def _schema_error(where: str, rule: str) -> InvalidInput:
    # the validator's message may quote the value; name the field and the rule instead
    return Malformed(
        f"{MANIFEST}: {show(where)} breaks the schema rule '{rule}'",
        path=f"{MANIFEST}:{show(where)}",
    )


def _flat_problem(value: Any, rules: dict[str, Any]) -> str | None:
    """The first rule of a flat (non-object) schema that ``value`` breaks, or None."""
    kind = rules.get("type")
    if kind == "integer" and (not isinstance(value, int) or isinstance(value, bool)):
        return "type"
    if kind == "string" and not isinstance(value, str):
        return "type"
    if "minimum" in rules and value < rules["minimum"]:
        return "minimum"
    if "maximum" in rules and value > rules["maximum"]:
        return "maximum"
    if "minLength" in rules and len(value) < rules["minLength"]:
        return "minLength"
    if "maxLength" in rules and len(value) > rules["maxLength"]:
        return "maxLength"
    if "pattern" in rules and re.search(rules["pattern"], value) is None:
        return "pattern"
    return None


def _never(_value: Any) -> bool:
    return False


_PY_TYPES: dict[str, type] = {"integer": int, "string": str}


@dataclass(frozen=True)
class _Flat:
    """A flat (non-object) schema's rules, in the form both predicates below read."""

    wanted: type
    nullable: bool
    const: tuple[Any, ...]  # (the value,) when the schema has a const, else ()
    low: int | None
    high: int | None
    shortest: int
    longest: int | None
    search: Callable[[str], Any] | None


def _flat(rules: dict[str, Any]) -> _Flat | None:
    """The ``rules`` of a flat schema the fast predicates understand, or None."""
    kinds = rules.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    others = [kind for kind in kinds if kind != "null"]
    if not set(rules) <= _FLAT_KEYWORDS | {"const"} or len(others) != 1:
        return None
    wanted = _PY_TYPES.get(others[0])
    low, high = rules.get("minimum"), rules.get("maximum")
    shortest, longest = rules.get("minLength", 0), rules.get("maxLength")
    const = (rules["const"],) if "const" in rules else ()
    numeric = (low, high)
    textual = (rules.get("minLength"), longest, rules.get("pattern"))
    if (
        wanted is None
        or (const and type(const[0]) is not wanted)
        or (wanted is int and textual != (None, None, None))
        or (wanted is str and numeric != (None, None))
        or not all(n is None or type(n) is int for n in (low, high, longest))
        or type(shortest) is not int
    ):
        return None
    search = re.compile(rules["pattern"]).search if "pattern" in rules else None
    return _Flat(wanted, "null" in kinds, const, low, high, shortest, longest, search)


def _accepting(rules: dict[str, Any]) -> Callable[[Any], bool]:
    """A predicate true only of values the schema's ``rules`` (a flat, non-object schema)
    accept, as jsonschema and :func:`_flat_problem` judge them; it may be false of some they
    accept too, which are then asked of them. One call per value instead of a walk of the
    rules."""
    flat = _flat(rules)
    if flat is None:
        return _never
    wanted, shortest, longest, search = flat.wanted, flat.shortest, flat.longest, flat.search
    low, high = flat.low, flat.high

    def accepts(value: Any) -> bool:
        if value is None:
            return flat.nullable
        if type(value) is not wanted or (flat.const and value != flat.const[0]):
            return False
        if wanted is int:
            number = cast(int, value)
            return (low is None or number >= low) and (high is None or number <= high)
        text = cast(str, value)
        if len(text) < shortest or (longest is not None and len(text) > longest):
            return False
        return search is None or search(text) is not None

    return accepts


def _accepting_all(rules: dict[str, Any]) -> Callable[[list[Any]], bool]:
    """:func:`_accepting` of a whole column at once: true only when the rules accept every
    value, each rule checked over the column by C code (the types, the extremes, the
    pattern) instead of a call per value; false when in doubt."""
    flat = _flat(rules)
    if flat is None:
        return _never

    def accepts_all(column: list[Any]) -> bool:
        types = set(map(type, column))
        if flat.nullable and type(None) in types:
            types.discard(type(None))
            column = [value for value in column if value is not None]
        if not column:
            return True
        if types != {flat.wanted} or (flat.const and set(column) != {flat.const[0]}):
            return False
        if flat.wanted is int:
            return (flat.low is None or min(column) >= flat.low) and (
                flat.high is None or max(column) <= flat.high
            )
        lengths = set(map(len, column))
        if min(lengths) < flat.shortest or (
            flat.longest is not None and max(lengths) > flat.longest
        ):
            return False
        return flat.search is None or all(map(flat.search, column))

    return accepts_all


def _fast_items_supported(items: dict[str, Any]) -> bool:
    if items.get("type") != "object":
        return set(items) <= _FLAT_KEYWORDS
    fields = items.get("properties", {}).values()
    return items.get("additionalProperties") is False and all(
        set(rules) <= _FLAT_KEYWORDS for rules in fields
    )


def _columns_accepted(values: list[Any], fields: dict[str, Any], needed: frozenset[str]) -> bool:
    """Whether every item of ``values`` is surely accepted, decided a field at a time over the
    whole list (:func:`_accepting_all`): objects all, each with the ``needed`` keys and none but
    the ``fields``, each field's values accepted. False when in doubt; the items are then
    checked one by one, which names the first one wrong."""
    if not values:
        return True
    if set(map(type, values)) != {dict}:
        return False
    shapes = set(map(frozenset, values))
    if not all(needed <= shape <= fields.keys() for shape in shapes):
        return False
    for name, rules in fields.items():
        if all(name in shape for shape in shapes):
            column = list(map(operator.itemgetter(name), values))
        else:
            column = [value[name] for value in values if name in value]
        if not _accepting_all(rules)(column):
            return False
    return True


def _check_items(key: str, values: list[Any], items: dict[str, Any]) -> None:
    """Check a list's items against the schema's ``items`` without jsonschema's per-node cost.

    The rules are read from the schema (one source of truth); a million-entry index is checked
    in a fraction of the time a generic validator takes.
    """
    if items.get("type") != "object":
        if _accepting_all(items)(values):
            return
        accepted = _accepting(items)
        for index, value in enumerate(values):
            if accepted(value):
                continue
            rule = _flat_problem(value, items)
            if rule:
                raise _schema_error(f"{key}/{index}", rule)
        return
    fields: dict[str, Any] = items.get("properties", {})
    required = items.get("required", [])
    accepts = {name: _accepting(rules) for name, rules in fields.items()}
    needed = frozenset(required)
    if _columns_accepted(values, fields, needed):
        return
    for index, value in enumerate(values):
        # the common case, decided by the predicates; anything they doubt is looked at below
        if type(value) is dict and value.keys() >= needed and value.keys() <= accepts.keys():
            for name, field_value in value.items():
                if not accepts[name](field_value):
                    break
            else:
                continue
        if not isinstance(value, dict):
            raise _schema_error(f"{key}/{index}", "type")
        for name in required:
            if name not in value:
                raise _schema_error(f"{key}/{index}", "required")
        for name, field_value in value.items():
            rules = fields.get(name)
            if rules is None:
                raise Malformed(
                    f"{MANIFEST}: {key}/{index} has unknown key {show(name)}",
                    path=f"{MANIFEST}:{key}/{index}",
                )
            rule = _flat_problem(field_value, rules)
            if rule:
                raise _schema_error(f"{key}/{index}/{name}", rule)


_ROOT_KEYWORDS = frozenset(
    {"$schema", "$id", "title", "description", "type", "required", "additionalProperties"}
    | {"properties"}
)


def _top_accepted(root: dict[str, Any], light: dict[str, Any], fast: set[str]) -> bool:
    """Whether the schema's top level surely accepts ``light`` (the lists in ``fast`` checked
    apart): decided without jsonschema, whose import and validator cost more than a backup's
    own check of its index; False when in doubt, and jsonschema then decides."""
    properties = root.get("properties", {})
    if (
        not set(root) <= _ROOT_KEYWORDS
        or root.get("type") != "object"
        or root.get("additionalProperties") is not False
        or not light.keys() >= set(root.get("required", []))
        or not light.keys() <= properties.keys()
    ):
        return False
    return all(key in fast or _accepting(properties[key])(value) for key, value in light.items())


def _validate_schema(document: dict[str, Any]) -> None:
    root = schema.load("backup.schema.json")
    fast: dict[str, tuple[list[Any], dict[str, Any]]] = {}
    for key in _LISTS:
        values = document.get(key)
        spec = root["properties"][key]
        if isinstance(values, list) and _fast_items_supported(spec["items"]):
            if len(values) > spec.get("maxItems", len(values)):
                raise _schema_error(key, "maxItems")
            fast[key] = (values, spec["items"])
    light = {key: ([] if key in fast else value) for key, value in document.items()}
    if not _top_accepted(root, light, set(fast)):
        _refuse_top(root, light)
    for key, (values, items) in fast.items():
        _check_items(key, values, items)


def _refuse_top(root: dict[str, Any], light: dict[str, Any]) -> None:
    """Raise what jsonschema finds wrong with the top level (nothing: it passes)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(root)
    error = next(iter(validator.iter_errors(light)), None)
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(top level)"
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = error.schema.get("properties", {})
            unknown = sorted(key for key in error.instance if key not in known)
            raise Malformed(
                f"{MANIFEST}: {show(where)} has unknown key {show(unknown[0])}",
                path=f"{MANIFEST}:{show(where)}",
            )
        raise _schema_error(where, str(error.validator))


def match_index(index: BackupIndex, infos: Sequence[zipfile.ZipInfo]) -> list[zipfile.ZipInfo]:
    """The file entries of the zip (``backup.json`` excepted) after checking each is listed.

    Every file entry must be in ``entries`` with the size the zip gives it, every folder entry
    in ``folders``, and everything listed must be in the zip.
    """
    files: list[zipfile.ZipInfo] = []
    folders = set(index.folders)
    present: set[str] = set()
    for info in infos:
        name = info.filename
        if name == MANIFEST:
            continue
        if name.endswith("/"):
            if name[:-1] not in folders:
                raise invalid_entry(name, "is not listed in backup.json", Tampered)
            present.add(name)
            continue
        listed = index.files.get(name)
        if listed is None:
            raise invalid_entry(name, "is not listed in backup.json", Tampered)
        if listed.size != info.file_size:
            raise invalid_entry(
                name, "has a size different from the one backup.json lists", Tampered
            )
        present.add(name)
        files.append(info)
    for path in (*index.files, *(f"{folder}/" for folder in index.folders)):
        if path not in present:
            raise invalid_entry(path, "is listed in backup.json but missing from the zip", Tampered)
    return files


def read_index(archive: zipfile.ZipFile) -> BackupIndex:
    """Read and parse ``backup.json`` of an opened backup (at most :data:`MAX_MANIFEST_BYTES`)."""
    try:
        info = archive.getinfo(MANIFEST)
    except KeyError:
        raise NotABundle(f"the zip holds no {MANIFEST}: not a data-home backup") from None
    if info.file_size > MAX_MANIFEST_BYTES:
        raise invalid_entry(MANIFEST, f"is larger than {human_size(MAX_MANIFEST_BYTES)}", TooLarge)
    chunks: list[bytes] = []
    stream_entry(archive, info, info.file_size, None, chunks.append)
    return parse_index(b"".join(chunks))
