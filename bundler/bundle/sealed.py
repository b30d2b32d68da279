"""A bundle's sealed secrets: ``secrets.age`` and the manifest's ``[sealed]`` table (02 §12).

A bundle carries no secret value (its ``config.toml`` holds empty strings). The one exception,
asked for with ``--seal-to``, is ``secrets.age`` at the bundle root: the values of the bundle's
``required_secrets`` as the exporting install stores them, in one age file only the named
receivers open (:mod:`bundler.fs.age`).

Binding without a cycle. ``secrets.age`` is not listed in ``checksums.xxh3``; the manifest's
``[sealed]`` table names it with its sha256, its recipient count, the sealed paths and a
128-bit random ``nonce``. The sealed plain text names the bundle it belongs to: its
``format_version``, ``root_agent``, ``exported_at``, the ``nonce``, the sorted
``required_secrets`` and the manifest's ``checksums_xxh3_128``, which an import recomputes from
the files. age authenticates nobody: whoever holds the receiver's public key can seal anything
to it. The binding stops genuine sealed secrets being spliced into another bundle (with the
sha256 rewritten to match); it cannot stop a forger who builds a whole bundle. So what opens is
untrusted input: only paths of ``required_secrets``, only text, each value bounded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bundler.bundle import fragment as fragment_rules
from bundler.bundle.fragment import Problem
from bundler.bundle.manifest import MANIFEST_NAME
from bundler.errors import Damaged, InvalidInput, Malformed, Tampered, Undecryptable
from bundler.fs import age
from bundler.rules.names import escape_display
from bundler.rules.paths import parse_path

if TYPE_CHECKING:
    from bundler.config.secretkey import KeyFile

SEALED_NAME = "secrets.age"
SEALED_TABLE = "sealed"
MAX_SEALED_BYTES = 4 * 1024 * 1024
"""More than any payload bundler writes: values are bounded, and so are the recipients."""
MAX_VALUE_CHARS = 64 * 1024
"""A sealed value longer than this is no credential (a PEM key is a few KiB)."""
PAD_TO = 1024
PAYLOAD_KIND = "bundler-sealed-secrets"
NONCE_BYTES = 16
_NONCE = re.compile(r"[0-9a-f]{32}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# text: any character but controls, which no credential holds (tab and line ends allowed)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Sealing:
    """What an export seals: the bytes of ``secrets.age`` and the manifest's ``[sealed]``."""

    data: bytes
    table: dict[str, Any]


def sealed_values(
    file_data: Mapping[str, Any], required: Sequence[str], found: KeyFile
) -> dict[str, str]:
    """The value of each path of ``required`` as ``config.toml`` stores it (``file_data``, so a
    ``ZEROCLAW_*`` override's value is never sealed): a stored-encrypted one decrypted under
    ``found``'s key, an ``op://`` reference as written; an empty or absent value is left out.

    ``Refused`` naming the path when a stored value does not decrypt: the receiver would get a
    value that opens nowhere.
    """
    # here, not at the top: verify reads this module, and never needs the store
    from bundler.config.secretcipher import NotDecrypted, decrypt, is_encrypted

    values: dict[str, str] = {}
    for path in required:
        present, value = fragment_rules.lookup(file_data, parse_path(path))
        if not present or not isinstance(value, str) or not value:
            continue
        if is_encrypted(value):
            reason = "there is no key to decrypt it"
            if found.key is not None:
                try:
                    value = decrypt(value, found.key)
                except NotDecrypted as err:
                    reason = err.reason
                else:
                    reason = ""
            elif found.state == "unreadable":
                reason = found.problem
            if reason:
                raise Damaged(
                    f"--seal-to: {escape_display(path)} is stored encrypted and does not "
                    f"decrypt under {found.where} ({reason}); nothing was exported",
                    path=path,
                )
        values[path] = value
    return values


def payload_binding(manifest: Mapping[str, Any], nonce: str) -> dict[str, Any]:
    """What the sealed plain text says of the bundle it belongs to (pure)."""
    provenance = manifest.get("provenance")
    contents = manifest.get("contents")
    required = manifest.get("required_secrets")
    return {
        "format_version": manifest.get("format_version"),
        "root_agent": manifest.get("root_agent"),
        "exported_at": provenance.get("exported_at") if isinstance(provenance, dict) else None,
        "nonce": nonce,
        "required_secrets": sorted(required) if isinstance(required, list) else None,
        "checksums_xxh3_128": contents.get("checksums_xxh3_128")
        if isinstance(contents, dict)
        else None,
    }


def seal(
    manifest: Mapping[str, Any], values: Mapping[str, str], recipients: Sequence[age.Recipient]
) -> Sealing:
    """``values`` sealed to ``recipients`` for the bundle whose manifest (without ``[sealed]``)
    is ``manifest``: the file, its plain text padded to a multiple of :data:`PAD_TO` bytes so
    its length says little of the values' lengths (the header's length is age's: it adds a
    random "grease" stanza), and the ``[sealed]`` table naming it."""
    nonce = os.urandom(NONCE_BYTES).hex()
    document = {
        "kind": PAYLOAD_KIND,
        **payload_binding(manifest, nonce),
        "secrets": dict(sorted(values.items())),
    }
    plain = json.dumps(document, ensure_ascii=False, sort_keys=True).encode("utf-8")
    # JSON allows white space after the document: the reader's parser skips the padding
    data = age.encrypt(plain + b" " * (-len(plain) % PAD_TO), recipients)
    table = {
        "file": SEALED_NAME,
        "sha256": hashlib.sha256(data).hexdigest(),
        "recipients": len(recipients),
        "paths": sorted(values),
        "nonce": nonce,
    }
    return Sealing(data, table)


# --- verify: the file against the table, without a key -----------------------------------------


def check_sealed(
    manifest: Mapping[str, Any] | None, data: bytes | None, present: bool
) -> list[Problem]:
    """What is wrong with a bundle's ``secrets.age`` (``data``, None when absent or unread;
    ``present``: the bundle holds one) against the manifest's ``[sealed]`` table (pure): one
    without the other, a table that is malformed or names paths outside ``required_secrets``, a
    sha256 that disagrees, a header that is no age header, a recipient count that differs."""
    table = (manifest or {}).get(SEALED_TABLE)
    if table is None:
        if present:
            return [
                Problem(
                    SEALED_NAME, f"present, but {MANIFEST_NAME} has no [sealed] table", Tampered
                )
            ]
        return []
    where = f"{MANIFEST_NAME}: {SEALED_TABLE}"
    problem = _table_problem(table, manifest or {})
    if problem is not None:
        return [Problem(where, problem, Malformed)]
    if not present:
        return [
            Problem(SEALED_NAME, f"missing, though {MANIFEST_NAME} has a [sealed] table", Tampered)
        ]
    if data is None:
        return []  # the walk said why it could not be read
    if hashlib.sha256(data).hexdigest() != table["sha256"]:
        return [
            Problem(
                SEALED_NAME, f"its sha256 does not match {MANIFEST_NAME}'s sealed.sha256", Tampered
            )
        ]
    header = age.parse_header(data)
    if isinstance(header, str):
        return [Problem(SEALED_NAME, f"not an age file: {header}", Malformed)]
    if header.recipients != table["recipients"]:
        return [
            Problem(
                SEALED_NAME,
                f"its header names {header.recipients} recipient(s), the manifest "
                f"{table['recipients']}",
            )
        ]
    return []


def _table_problem(table: Any, manifest: Mapping[str, Any]) -> str | None:
    if not isinstance(table, dict):
        return "must be a table"
    expected = {"file", "sha256", "recipients", "paths", "nonce"}
    if set(table) != expected:
        return f"must hold exactly {', '.join(sorted(expected))}"
    if table["file"] != SEALED_NAME:
        return f"file must be {SEALED_NAME}"
    if not isinstance(table["sha256"], str) or not _SHA256.fullmatch(table["sha256"]):
        return "sha256 must be 64 lower-case hex digits"
    count = table["recipients"]
    if type(count) is not int or not 1 <= count <= age.MAX_RECIPIENTS:
        return f"recipients must be a count from 1 to {age.MAX_RECIPIENTS}"
    if not isinstance(table["nonce"], str) or not _NONCE.fullmatch(table["nonce"]):
        return "nonce must be 32 lower-case hex digits"
    paths = table["paths"]
    required = manifest.get("required_secrets")
    listed = set(required) if isinstance(required, list) else set()
    if (
        not isinstance(paths, list)
        or not all(isinstance(p, str) for p in paths)
        or paths != sorted(set(paths))
    ):
        return "paths must be sorted, distinct config paths"
    if not set(paths) <= listed:
        return "paths names a path that required_secrets does not list"
    contents = manifest.get("contents")
    if not isinstance(contents, dict) or "checksums_xxh3_128" not in contents:
        return "a sealed bundle needs [contents] with checksums_xxh3_128 to be bound to"
    return None


def sealed_summary(manifest: Mapping[str, Any] | None) -> tuple[int, list[str]] | None:
    """(recipients, paths) of a sound ``[sealed]`` table, for ``inspect`` and import's note."""
    table = (manifest or {}).get(SEALED_TABLE)
    if not isinstance(table, dict) or _table_problem(table, manifest or {}) is not None:
        return None
    return table["recipients"], list(table["paths"])


# --- import: open and judge ---------------------------------------------------------------------


def open_sealed(
    data: bytes, manifest: Mapping[str, Any], checksums_digest: str, identities: Sequence[Any]
) -> dict[str, str]:
    """The sealed values of a verified bundle's ``secrets.age`` (``data``, as read for the
    import), opened with ``identities`` and checked to belong to this bundle: the payload must
    name this manifest's format, root agent, export time, nonce and sorted ``required_secrets``,
    and ``checksums_digest`` (the XXH3-128 of ``checksums.xxh3``, recomputed from the file);
    its paths must be exactly ``[sealed].paths``; each value text of bounded length.

    ``InvalidInput`` (exit 3) naming ``secrets.age`` otherwise; never quoting a value.
    """
    table = manifest.get(SEALED_TABLE)
    if not isinstance(table, dict) or hashlib.sha256(data).hexdigest() != table.get("sha256"):
        raise _refuse("it changed since the bundle was verified", Tampered)
    try:
        plain = age.decrypt(data, identities)
    except age.NotOpened as err:
        raise _refuse(f"cannot be decrypted: {err.reason}", Undecryptable) from None
    try:
        document = json.loads(plain.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _refuse("its sealed content is not the document bundler seals") from None
    finally:
        del plain
    if not isinstance(document, dict) or document.get("kind") != PAYLOAD_KIND:
        raise _refuse("its sealed content is not the document bundler seals")
    binding = payload_binding(manifest, str(table.get("nonce")))
    binding["checksums_xxh3_128"] = checksums_digest
    for key, expected in binding.items():
        if document.get(key) != expected or expected is None:
            raise _refuse(
                f"it is bound to another bundle (its {key} is not this bundle's): sealed "
                "secrets are never moved between bundles"
            )
    secrets = document.get("secrets")
    if not isinstance(secrets, dict):
        raise _refuse("its sealed content is not the document bundler seals")
    required = set(binding["required_secrets"] or [])
    for path, value in secrets.items():
        if path not in required:
            raise _refuse(
                f"it seals {escape_display(str(path))}, which the manifest's required_secrets "
                "does not list"
            )
        if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS or _CONTROL.search(value):
            raise _refuse(
                f"its value for {escape_display(path)} is not text of at most "
                f"{MAX_VALUE_CHARS} characters"
            )
    if sorted(secrets) != table.get("paths"):
        raise _refuse("the paths it seals are not those of the manifest's sealed.paths")
    return {str(path): str(value) for path, value in secrets.items()}


def _refuse(why: str, made: type[InvalidInput] = Malformed) -> InvalidInput:
    return made(f"{SEALED_NAME}: {why}; nothing changed", path=SEALED_NAME)
