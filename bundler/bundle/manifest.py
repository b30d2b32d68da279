"""The bundle's own files, pure: manifest, ``config.toml`` rendering and ``checksums.xxh3`` (02 §9).

Rendering is deterministic: the same inputs give byte-identical files, so two exports of an
unchanged agent with the same ``SOURCE_DATE_EPOCH`` are byte-identical bundles. Parsing is
strict and treats its input as hostile: every failure is :class:`InvalidInput` naming the file
and the field, never a traceback.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from bundler.errors import Hostile, InvalidInput, Malformed, TooLarge, Unsupported, UsageError
from bundler.rules import layout, schema, schemacheck
from bundler.rules.names import escape_display, has_control_chars
from bundler.rules.risk import RiskFlag
from bundler.rules.tomlcompat import TOMLDecodeError, loads

MANIFEST_NAME = layout.MANIFEST_NAME
CONFIG_NAME = layout.CONFIG_NAME
CHECKSUMS_NAME = "checksums.xxh3"
NEVER_LISTED = frozenset({MANIFEST_NAME, CHECKSUMS_NAME})
"""The files at a bundle's root ``checksums.xxh3`` never lists (02 §9.2): itself, which cannot
hold its own digest, and the manifest, which names the digest of ``checksums.xxh3``."""
KNOWN_FORMATS = (1, 2)
MEMORY_STORE = "memory/brain.db"

# the order 02 §2 lists a fragment's tables in; render_config writes them in this order
FRAGMENT_TABLE_ORDER = (
    "agents",
    "risk_profiles",
    "runtime_profiles",
    "skill_bundles",
    "knowledge_bundles",
    "mcp_bundles",
    "providers",
    "mcp",
)

CONFIG_HEADER = (
    "# A scrubbed config fragment made by bundler: one agent and the entries it references.\n"
    "# It is not a whole config. Secret values are empty strings: the bundle manifest's\n"
    "# required_secrets lists them; fill each in with `bundler config set <path>` after import.\n"
    "\n"
)

_CHECKSUM_LINE = re.compile(r"([0-9a-f]{32})  ([^\n]+)")
_SUMMARY_TOP = (
    "format_version",
    "root_agent",
    "required_secrets",
    "skill_bundles",
    "provenance",
    "contents",
    "memory",
    "dropped",
    "risk_flags",
)


@dataclass(frozen=True)
class Dropped:
    """Something populated that stays behind: a config or bundle path, reason, detail (02 §3)."""

    path: str
    reason: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        """The ``{path, reason, detail}`` table of the manifest's ``[[dropped]]``."""
        return {"path": self.path, "reason": self.reason, "detail": self.detail}


def dropped_sort_key(row: Dropped) -> tuple[str, str]:
    """``dropped`` is sorted by path, then reason (02 §3)."""
    return (row.path, row.reason)


@dataclass(frozen=True)
class Provenance:
    """Who made the bundle and when.

    bundler writes ``exporter`` and a UTC ``YYYY-MM-DDTHH:MM:SSZ`` time; ZeroClaw's own exporter
    writes ``zeroclaw_version`` instead of ``exporter`` and chrono's RFC 3339 form with
    nanoseconds and ``+00:00``. A reader accepts either name and any RFC 3339 time.
    """

    exporter: str | None
    exported_at: str
    zeroclaw_version: str | None = None

    def as_dict(self) -> dict[str, str]:
        """The ``[provenance]`` table, with only the keys the bundle said."""
        data: dict[str, str] = {}
        if self.exporter is not None:
            data["exporter"] = self.exporter
        if self.zeroclaw_version is not None:
            data["zeroclaw_version"] = self.zeroclaw_version
        data["exported_at"] = self.exported_at
        return data

    @property
    def zeroclaw_written(self) -> bool:
        """True when ZeroClaw's own exporter wrote the bundle (no ``exporter`` name)."""
        return self.exporter is None and self.zeroclaw_version is not None


@dataclass(frozen=True)
class Contents:
    """The carried files: how many, their total size, and the checksums file with its digest."""

    files: int
    bytes: int
    checksums: str
    checksums_xxh3_128: str


@dataclass(frozen=True)
class Memory:
    """Format 2's ``[memory]`` table (02 §10)."""

    backend: str
    store: str
    snapshot_at: str


@dataclass
class Manifest:
    """``zeroclaw-agent.toml``. ``extra`` holds top-level keys this reader does not know."""

    format_version: int
    root_agent: str
    required_secrets: list[str]
    skill_bundles: list[str]
    provenance: Provenance
    contents: Contents | None
    dropped: list[Dropped] = field(default_factory=list)
    risk_flags: list[RiskFlag] = field(default_factory=list)
    memory: Memory | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The manifest as a plain table in the key order of 02 §9 (unknown keys last)."""
        data: dict[str, Any] = {
            "format_version": self.format_version,
            "root_agent": self.root_agent,
            "required_secrets": list(self.required_secrets),
            "skill_bundles": list(self.skill_bundles),
            "provenance": self.provenance.as_dict(),
        }
        if self.contents is not None:
            data["contents"] = {
                "files": self.contents.files,
                "bytes": self.contents.bytes,
                "checksums": self.contents.checksums,
                "checksums_xxh3_128": self.contents.checksums_xxh3_128,
            }
        if self.memory is not None:
            data["memory"] = {
                "backend": self.memory.backend,
                "store": self.memory.store,
                "snapshot_at": self.memory.snapshot_at,
            }
        data["dropped"] = [row.as_dict() for row in self.dropped]
        data["risk_flags"] = [flag.as_dict() for flag in self.risk_flags]
        for key, value in self.extra.items():
            data.setdefault(key, value)
        return data


def _is_table_value(value: Any) -> bool:
    return isinstance(value, Mapping) or (
        bool(value) and isinstance(value, list) and all(isinstance(v, Mapping) for v in value)
    )


def render_manifest(manifest: Manifest) -> bytes:
    """``zeroclaw-agent.toml`` as bytes, deterministic, keys in the order of 02 §9.

    ``dropped`` and ``risk_flags`` are always written as arrays of tables (``[[dropped]]``),
    however short, so the file reads the same whatever its content.
    """
    import tomli_w  # writing is export's: verify and import only read a manifest

    data = manifest.as_dict()
    scalars = {key: value for key, value in data.items() if not _is_table_value(value)}
    parts = [tomli_w.dumps(scalars)]
    for key, value in data.items():
        if key in scalars:
            continue
        if isinstance(value, Mapping):
            parts.append(tomli_w.dumps({key: value}))
        else:
            parts.extend(f"[[{key}]]\n" + tomli_w.dumps(dict(item)) for item in value)
    return "\n".join(part.rstrip("\n") + "\n" for part in parts).encode("utf-8")


@cache
def _manifest_validator() -> Callable[[Any], list[schemacheck.Violation]]:
    """The manifest schema's check: compiled, so ``bundle verify`` does not pay jsonschema's
    import; jsonschema itself should the schema outgrow the compiled checker."""
    return _schema_check(reference=False)


def _schema_check(*, reference: bool) -> Callable[[Any], list[schemacheck.Violation]]:
    return schemacheck.document_check(
        schema.load("bundle-manifest.schema.json"), reference=reference
    )


def manifest_schema_error(table: Any, *, reference: bool = False) -> tuple[str, str] | None:
    """The first schema violation of a manifest table as (path, message), or None.

    "First" is the violation at the smallest path, in the schema's keyword order within one
    path; ``reference=True`` uses jsonschema (for the differential test).
    """
    check = _schema_check(reference=True) if reference else _manifest_validator()
    found = sorted(check(table), key=lambda violation: list(violation.segments))
    if not found:
        return None
    first = found[0]
    return _json_path(table, first.segments) or "(top level)", _schema_message(first, found)


def _fail(message: str, path: str = "", made: type[InvalidInput] = Malformed) -> InvalidInput:
    where = f"{MANIFEST_NAME}: {path}: " if path else f"{MANIFEST_NAME}: "
    return made(escape_display(where + message), path=path or MANIFEST_NAME)


def _json_path(table: Any, segments: Iterable[str | int]) -> str:
    """``dropped[0].path``: array entries by index, table keys after a dot."""
    out, value = "", table
    for part in segments:
        if isinstance(value, list):
            out += f"[{part}]"
            value = value[int(part)]
        else:
            out += f".{part}" if out else str(part)
            value = value.get(part) if isinstance(value, dict) else None
    return out


def parse_manifest(data: bytes) -> Manifest:
    """Parse and check ``zeroclaw-agent.toml`` against ``manifests/bundle-manifest.schema.json``.

    A ``format_version`` this reader does not know is refused as made by a newer tool; format 2
    needs its ``[memory]`` table. Unknown keys are accepted and kept in ``extra``.
    """
    try:
        table = loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise _fail("is not UTF-8") from None
    except TOMLDecodeError as exc:
        raise _fail(f"does not parse: {exc}") from None
    except RecursionError:
        raise _fail("is nested too deeply", made=TooLarge) from None
    version = table.get("format_version")
    if type(version) is not int:
        raise _fail("must be an integer", "format_version")
    if version not in KNOWN_FORMATS:
        if version > max(KNOWN_FORMATS):
            raise _fail(
                f"format {version} was made by a newer tool; upgrade bundler to read it",
                "format_version",
                Unsupported,
            )
        raise _fail(f"unknown format {version}", "format_version")
    schema_error = manifest_schema_error(table)
    if schema_error is not None:
        raise _fail(schema_error[1], schema_error[0])
    if version == 2 and "memory" not in table:
        raise _fail("a format 2 bundle needs its [memory] table", "memory")
    if version == 2 and "contents" not in table:
        raise _fail("a format 2 bundle needs its [contents] table", "contents")
    provenance, contents = table["provenance"], table.get("contents")
    if not is_rfc3339(provenance["exported_at"]):
        raise _fail("is not an RFC 3339 date and time", "provenance.exported_at")
    memory = table.get("memory")
    return Manifest(
        format_version=version,
        root_agent=table["root_agent"],
        required_secrets=list(table["required_secrets"]),
        skill_bundles=list(table["skill_bundles"]),
        provenance=Provenance(
            provenance.get("exporter"),
            provenance["exported_at"],
            provenance.get("zeroclaw_version"),
        ),
        contents=Contents(
            contents["files"],
            contents["bytes"],
            contents["checksums"],
            contents["checksums_xxh3_128"],
        )
        if isinstance(contents, dict)
        else None,
        dropped=[
            Dropped(row["path"], row["reason"], row["detail"]) for row in table.get("dropped", [])
        ],
        risk_flags=[
            RiskFlag(row["kind"], row["path"], row["detail"]) for row in table.get("risk_flags", [])
        ],
        memory=Memory(memory["backend"], memory["store"], memory["snapshot_at"])
        if isinstance(memory, dict)
        else None,
        extra={key: value for key, value in table.items() if key not in _SUMMARY_TOP},
    )


_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?"
    r"(?:[Zz]|[+-]([0-9]{2}):([0-9]{2}))"
)


def is_rfc3339(text: str) -> bool:
    """True when ``text`` is an RFC 3339 ``date-time`` (section 5.6), any offset and fraction.

    The form and every field's range are checked: a month 13, a 31 April, an hour 24 or an
    offset ``+24:00`` is refused, as is anything around the time. A leap second (``:60``) is
    allowed, as RFC 3339 allows it.
    """
    match = _RFC3339.fullmatch(text)
    if match is None:
        return False
    year, month, day, hour, minute, second = (int(v) for v in match.groups()[:6])
    try:
        datetime.date(year, month, day)
    except ValueError:
        return False
    if hour > 23 or minute > 59 or second > 60:
        return False
    off_hour, off_minute = match.group(7), match.group(8)
    return off_hour is None or (int(off_hour) <= 23 and int(off_minute) <= 59)


def _schema_message(first: schemacheck.Violation, found: list[schemacheck.Violation]) -> str:
    # a manifest value may be long or hostile, so say only which rule failed
    keyword, node = first.keyword, first.node
    if keyword == "required":
        missing = [
            str(violation.missing)
            for violation in found
            if violation.keyword == "required"
            and violation.segments == first.segments
            and violation.node == node
        ]
        return f"missing {', '.join(missing)}"
    if keyword == "type":
        return f"must be of type {node['type']}"
    if keyword in ("enum", "const"):
        return "is not one of the allowed values"
    if keyword == "pattern":
        return "does not have the expected form"
    if keyword in ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"):
        return f"violates {keyword} {node[keyword]}"
    if keyword == "uniqueItems":
        return "has repeated items"
    return f"fails the {keyword} rule"


# --- config.toml -------------------------------------------------------------------------------


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _canonical(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


def render_config(fragment: Mapping[str, Any]) -> bytes:
    """The bundle's ``config.toml``: a header comment, then the fragment with sorted keys.

    Tables come in the order of 02 §2, keys inside them sorted, arrays as they are: the same
    fragment always renders to the same bytes whatever order its dictionaries were built in.
    """
    import tomli_w  # writing is export's: verify and import only read a config

    ordered: dict[str, Any] = {}
    for key in FRAGMENT_TABLE_ORDER:
        if key in fragment:
            ordered[key] = _canonical(fragment[key])
    for key in sorted(fragment):
        if key not in ordered:
            ordered[key] = _canonical(fragment[key])
    return (CONFIG_HEADER + tomli_w.dumps(ordered)).encode("utf-8")


# --- checksums.xxh3 ----------------------------------------------------------------------------


def checksum_sort_key(path: str) -> tuple[bytes, ...]:
    """Depth-first, each folder's names sorted by bytes: ``a/c`` before ``a-b`` (02 §9.2)."""
    return tuple(path.encode("utf-8", "surrogateescape").split(b"/"))


def checksum_sort_text(path: str) -> str:
    """:func:`checksum_sort_key`'s order as one string, several times cheaper to build: only for
    a path that holds no control character and no lone surrogate (one read strictly, as an
    archive member's name or a line of a well-formed ``checksums.xxh3`` is).

    "/" becomes "\\x00", which sorts below every character such a path holds, so components
    compare one by one, a shorter first; and the code point order of such strings is the byte
    order of their UTF-8.
    """
    return path.replace("/", "\x00")


def checksum_line(digest: str, path: str) -> bytes:
    """One ``<32 hex>  <path>`` line of ``checksums.xxh3`` (``xxhsum -H2`` format)."""
    return f"{digest}  {path}\n".encode()


def render_checksums(lines: Iterable[tuple[str, str]]) -> bytes:
    """:func:`checksum_line` lines in :func:`checksum_sort_key` order."""
    ordered = sorted(lines, key=lambda line: checksum_sort_key(line[1]))
    return b"".join(checksum_line(digest, path) for digest, path in ordered)


def parse_checksums(data: bytes) -> list[tuple[str, str]]:
    """Parse ``checksums.xxh3`` strictly: lower-case digests, safe unique paths, canonical order.

    Returns ``(digest, path)`` pairs. Raises :class:`InvalidInput` naming the line at fault.
    """
    return [(digest, path) for path, digest in checksums_by_path(data).items()]


def checksums_by_path(data: bytes) -> dict[str, str]:
    """:func:`parse_checksums` as ``{path: digest}`` in the file's order."""
    return {path: digest for _key, path, digest in iter_checksums((data,))}


ChecksumLine = tuple[str, str, str]
"""One line of ``checksums.xxh3``: (:func:`checksum_sort_text` of its path, path, digest)."""


def iter_checksums(chunks: Iterable[bytes]) -> Iterator[ChecksumLine]:
    """The lines of ``checksums.xxh3`` from its bytes in pieces of any size: the one parser.

    Every rule is checked (lower-case digests, safe paths, canonical order, no path twice), and
    only one block of whole lines is held at a time, so a 1,000,000-line file costs no more
    memory than a short one (06 P4). Raises :class:`InvalidInput` after the lines before the
    fault were yielded, naming what a reader of the whole file would name first: a file that
    is not UTF-8 anywhere, then one whose last line has no newline, then the first line at
    fault. A path repeated later than on the next line is out of order there.

    A well-formed block is checked by the regex engine over its whole text (a 1,000,000-line
    file must not dominate verify, 06 P3); one that fast check does not accept is parsed line
    by line, which either accepts it as well or names the line at fault.
    """
    pending = bytearray()  # the bytes after the last newline read so far
    previous = ""  # the sort text of the last path yielded ("" sorts below every path)
    number = 0  # lines read so far
    fault: InvalidInput | None = None
    utf8 = True
    for chunk in chunks:
        cut = chunk.rfind(b"\n") + 1
        if not cut:
            pending += chunk
            continue
        block = bytes(pending) + chunk[:cut] if pending else chunk[:cut]
        pending[:] = chunk[cut:]
        if not utf8:
            continue
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError:
            utf8 = False
            continue
        if fault is not None:
            continue  # only the file-wide rules are left to check
        lines = _block_fast(text, previous)
        if lines is None:
            try:
                lines = _block_by_line(text, previous, number)
            except InvalidInput as exc:
                fault = exc
                continue
        if lines:
            number += len(lines)
            previous = lines[-1][0]
            yield from lines
    if pending and utf8:
        try:
            bytes(pending).decode("utf-8")
        except UnicodeDecodeError:
            utf8 = False
    if not utf8:
        raise Malformed(f"{CHECKSUMS_NAME}: is not UTF-8", path=CHECKSUMS_NAME)
    if pending:
        raise Malformed(f"{CHECKSUMS_NAME}: the last line has no newline", path=CHECKSUMS_NAME)
    if fault is not None:
        raise fault


# Strictly narrower than what _block_by_line accepts: every digest, path and separator well
# formed, no control character anywhere, no empty, "." or ".." component.
_CHECKSUM_COMPONENT = r"(?!\.\.?[/\n])[^\x00-\x1f\x7f-\x9f/]+"
_CHECKSUMS_TEXT = re.compile(
    rf"(?:[0-9a-f]{{32}}  (?:{_CHECKSUM_COMPONENT}/)*{_CHECKSUM_COMPONENT}\n)*"
)


def _block_fast(text: str, previous: str) -> list[ChecksumLine] | None:
    """The common case of whole well-formed lines following ``previous`` (a sort text); None
    sends them to :func:`_block_by_line`."""
    if _CHECKSUMS_TEXT.fullmatch(text) is None:
        return None
    lines = text.split("\n")[:-1]
    # checksum_sort_text of every path (no control character got this far), made at once
    keys = [line[34:] for line in checksum_sort_text(text).split("\n")[:-1]]
    if keys and not previous < keys[0]:
        return None
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        return None  # out of order or repeated
    return [(key, line[34:], line[:32]) for key, line in zip(keys, lines, strict=True)]


def _block_by_line(text: str, previous: str, before: int) -> list[ChecksumLine]:
    """Whole lines (``before`` lines precede them) checked one by one, each after ``previous``;
    raises :class:`InvalidInput` naming the line at fault."""
    out: list[ChecksumLine] = []
    for number, line in enumerate(text.split("\n")[:-1], start=before + 1):
        where = f"{CHECKSUMS_NAME}:{number}"
        match = _CHECKSUM_LINE.fullmatch(line)
        if match is None:
            raise Malformed(f"{where}: not a '<32 lower-case hex digits>  <path>' line", path=where)
        digest, path = match.groups()
        if not _is_bundle_path(path):
            raise Hostile(
                f"{where}: {escape_display(path)} is not a normalised relative path", path=where
            )
        # a safe path holds no control character: its sort text orders it (02 §9.2)
        key = checksum_sort_text(path)
        if key == previous:
            raise Malformed(f"{where}: {escape_display(path)} is listed twice", path=where)
        if key < previous:
            raise Malformed(f"{where}: {escape_display(path)} is out of order", path=where)
        previous = key
        out.append((key, path, digest))
    return out


def _checksums_fast(raw: bytes) -> dict[str, str] | None:
    """:func:`_block_fast` of a whole file as ``{path: digest}``; None where it declines."""
    try:
        lines = _block_fast(raw.decode("utf-8"), "")
    except UnicodeDecodeError:
        return None
    return None if lines is None else {path: digest for _key, path, digest in lines}


def _checksums_by_line(data: bytes) -> dict[str, str]:
    """:func:`_block_by_line` of a whole file as ``{path: digest}``, with the file-wide rules."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed(f"{CHECKSUMS_NAME}: is not UTF-8", path=CHECKSUMS_NAME) from None
    if text and not text.endswith("\n"):
        raise Malformed(f"{CHECKSUMS_NAME}: the last line has no newline", path=CHECKSUMS_NAME)
    return {path: digest for _key, path, digest in _block_by_line(text, "", 0)}


def _is_bundle_path(path: str) -> bool:
    # Workspace names need not be portable (02 §7.3 copies them with a warning), but every
    # component must be a real name: no empty, '.', '..' or control characters.
    return not has_control_chars(path) and all(
        part not in ("", ".", "..") for part in path.split("/")
    )


def exported_at(environ: Mapping[str, str]) -> str:
    """Now in UTC as ``YYYY-MM-DDTHH:MM:SSZ``, or ``SOURCE_DATE_EPOCH`` when it is set."""
    raw = environ.get("SOURCE_DATE_EPOCH")
    if raw is None or raw == "":
        seconds = int(time.time())
    else:
        if not raw.isdigit():
            raise UsageError(
                "SOURCE_DATE_EPOCH must be a whole number of seconds since 1970",
                path="SOURCE_DATE_EPOCH",
            )
        seconds = int(raw)
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    except (OverflowError, OSError, ValueError):
        raise UsageError("SOURCE_DATE_EPOCH is out of range", path="SOURCE_DATE_EPOCH") from None


MAX_MANIFEST_BYTES = 16 * 1024 * 1024


# 1,000,000 lines of "<32 hex>  <path>" with long paths fit comfortably
MAX_CHECKSUMS_BYTES = 512 * 1024 * 1024
