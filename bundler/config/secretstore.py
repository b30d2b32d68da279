"""ZeroClaw's secret store: what the install's stored secrets become under its policy and key.

ZeroClaw encrypts every secret field of ``config.toml`` at rest unless ``[secrets] encrypt`` is
false. The key is :mod:`bundler.config.secretkey`'s, the ``enc2:``/``enc:`` values
:mod:`bundler.config.secretcipher`'s; here, by use: writing under the policy
(:func:`encrypt_policy`, :func:`store_value`, :func:`store_tree`, :class:`SecretWriter`), the
export's sweep (:func:`open_stored`) and ``doctor``/``config get`` (:func:`census`,
:func:`reveal`).

Neither the key nor a decrypted value ever reaches a message, an exception, a ``repr`` or a
file other than ``.secret_key`` itself: errors say which check failed, never what was read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundler.config.secretcipher import (
    ENC2,
    NotDecrypted,
    decrypt,
    encrypt,
    is_encrypted,
    is_reference,
    try_decrypt,
)
from bundler.config.secretkey import (
    KEY_BYTES,
    KEY_NAME,
    KeyFile,
    SecretKey,
    key_error,
    key_spellings,
    publish_key,
    read_key_file,
)
from bundler.errors import InvalidConfig, InvalidInput, Undecryptable
from bundler.rules import schema
from bundler.rules.paths import format_path
from bundler.rules.secrets import SECRET_MIN_LENGTH, SweepTarget, iter_leaves

"""More than any key ZeroClaw writes (64 digits) with room for white space around it."""


# --- what the sweep looks for ------------------------------------------------------------------

KEY_TARGET_PATH = KEY_NAME
"""The name a hit on the key itself reports in place of a config path."""

NO_KEY = "no key"
KEY_UNREADABLE = "key unreadable"
WRONG_KEY = "does not decrypt under the key"
REFERENCE_REASON = "op:// reference"


@dataclass
class OpenedConfig:
    """The config's views with every stored value that opens replaced by its plain text (in
    memory only), what else to sweep for, and what could not be opened, counted by reason."""

    views: list[Any]
    targets: list[SweepTarget] = field(default_factory=list, repr=False)
    unswept: dict[str, int] = field(default_factory=dict)

    @property
    def unswept_total(self) -> int:
        """How many stored secrets hide a plain text the sweep cannot look for."""
        return sum(self.unswept.values())


def open_stored(views: Sequence[Any], found: KeyFile) -> OpenedConfig:
    """Every ``enc2:``/``enc:`` string anywhere in ``views`` opened under ``found``'s key.

    The answer's ``views`` are copies with each value that opened replaced by its plain text, so
    the sweep's own rules (:func:`bundler.rules.secrets.sweep_targets`: floors, bearer tokens)
    apply to it; ``targets`` adds each opened value of at least the secret floor at its path
    (ciphertext outside a secret field too) and the key in each spelling a copy of
    ``.secret_key`` would leak it (its raw bytes among them). ``unswept`` counts the distinct
    values that stay hidden: with no key, an unreadable key, under another key, and
    ``op://`` references (never resolved).
    """
    key = found.key
    opened: dict[str, str | None] = {}
    unswept: dict[str, set[str]] = {}

    def visit(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: visit(v) for k, v in value.items()}
        if isinstance(value, list):
            return [visit(v) for v in value]
        if isinstance(value, str):
            if is_encrypted(value):
                if value not in opened:
                    opened[value] = try_decrypt(value, key)
                plain = opened[value]
                if plain is not None:
                    return plain
                reason = {"present": WRONG_KEY, "unreadable": KEY_UNREADABLE}.get(
                    found.state, NO_KEY
                )
                unswept.setdefault(reason, set()).add(value)
            elif is_reference(value):
                unswept.setdefault(REFERENCE_REASON, set()).add(value)
        return value

    result = OpenedConfig([visit(view) for view in views])
    for view in views:
        for leaf in iter_leaves(view):
            plain = opened.get(leaf.value) if isinstance(leaf.value, str) else None
            if plain is not None and len(plain) >= SECRET_MIN_LENGTH:
                result.targets.append(SweepTarget(leaf.path, plain))
    if key is not None:
        spellings = [*key_spellings(key), key.raw.decode("utf-8", "surrogateescape")]
        result.targets += [SweepTarget(KEY_TARGET_PATH, spelling) for spelling in spellings]
    result.unswept = {reason: len(values) for reason, values in sorted(unswept.items())}
    return result


# --- what a writer stores ----------------------------------------------------------------------

POLICY_VARIABLE = "ZEROCLAW_secrets__encrypt"


def encrypt_policy(file_data: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[bool, str]:
    """Whether secrets are stored encrypted: the file's ``[secrets] encrypt``, default true (as
    ZeroClaw's ``SecretsConfig``), and a warning when :data:`POLICY_VARIABLE` says otherwise
    (the file is what a writer follows: the override is the running agent's, not the file's).

    ``InvalidInput`` when the file's value is not a boolean (ZeroClaw would not start).
    """
    table = file_data.get("secrets")
    policy: Any = table.get("encrypt", True) if isinstance(table, Mapping) else True
    if not isinstance(policy, bool):
        raise InvalidConfig(
            "secrets.encrypt must be true or false in config.toml", path="secrets.encrypt"
        )
    raw = environ.get(POLICY_VARIABLE)
    overridden = {"true": True, "false": False}.get(raw.strip().lower()) if raw else None
    warning = ""
    if overridden is not None and overridden != policy:
        stored = "encrypted" if policy else "in plain text"
        warning = (
            f"{POLICY_VARIABLE} says secrets.encrypt = {str(overridden).lower()}, but "
            f"config.toml says {str(policy).lower()}: secrets are written {stored}, as the "
            "file says"
        )
    return policy, warning


def needs_key(values: Iterable[str], policy: bool) -> bool:
    """Whether storing ``values`` needs the install's key: to seal one (policy on, a value that
    is neither empty, nor a reference, nor already stored-encrypted) or to check one given
    stored-encrypted."""
    return any(
        is_encrypted(value) or (policy and value and not is_reference(value)) for value in values
    )


def store_value(value: str, key: SecretKey | None, *, policy: bool, path: str, where: str) -> str:
    """What a writer stores for the secret ``value`` at the config path ``path``, as ZeroClaw's
    save does: under the policy, a plain value sealed as ``enc2:`` (never an empty one, never an
    ``op://`` reference); a value given already ``enc2:`` kept as it is, and one given as the
    legacy ``enc:`` rewritten as ``enc2:`` (plain with the policy off), each only when it opens
    under ``key``: a value the install cannot open would stop ZeroClaw from starting.

    ``InvalidInput`` naming ``path`` and the key file ``where`` when a given stored-encrypted
    value does not open (or there is no key to open it).
    """
    if not value or is_reference(value):
        return value
    if is_encrypted(value):
        if key is None:
            raise Undecryptable(
                f"{path}: the value given is stored-encrypted, and there is no {where} to "
                "decrypt it; give the plain value",
                path=path,
            )
        try:
            plain = decrypt(value, key)
        except NotDecrypted as err:
            reason = err.reason
        else:
            if value.startswith(ENC2):
                return value
            return encrypt(plain, key) if policy else plain
        raise Undecryptable(
            f"{path}: the value given is stored-encrypted but does not decrypt under {where} "
            f"({reason}); give the plain value, or one encrypted under this install's key",
            path=path,
        )
    if not policy:
        return value
    if key is None:
        raise ValueError("sealing needs the install's key")
    return encrypt(value, key)


def store_tree(
    value: Any, segments: Sequence[str], seal: Callable[[str, str], str], *, secret: bool = False
) -> Any:
    """``value`` (to be written at ``segments``) with ``seal(text, path)`` applied to every
    string ZeroClaw encrypts in it: a secret field's string, each string item of a secret list,
    each string value of a secret map, found by the schema's ``x-secret`` (pure)."""
    node = schema.resolve(list(segments))[1]
    return _store(value, list(segments), node, seal, secret or bool(node and node.get("x-secret")))


def secret_strings(value: Any, segments: Sequence[str]) -> list[str]:
    """The strings of ``value`` (to be written at ``segments``) that :func:`store_tree` would
    give to its ``seal``."""
    found: list[str] = []

    def collect(text: str, _path: str) -> str:
        found.append(text)
        return text

    store_tree(value, segments, collect)
    return found


def _store(
    value: Any, segments: list[str], node: Any, seal: Callable[[str, str], str], secret: bool
) -> Any:
    if isinstance(value, str):
        return seal(value, format_path(segments)) if secret else value
    if isinstance(value, list):
        if secret:
            return [_store(v, [*segments, str(i)], None, seal, True) for i, v in enumerate(value)]
        items = node.get("items") if isinstance(node, dict) else None
        keyed = isinstance(node, dict) and node.get("x-keyed-by")
        out = []
        for i, item in enumerate(value):
            name = item.get("name") if keyed and isinstance(item, dict) else None
            step = name if isinstance(name, str) else str(i)
            sub = items if isinstance(items, dict) else None
            out.append(
                _store(item, [*segments, step], sub, seal, bool(sub and sub.get("x-secret")))
            )
        return out
    if isinstance(value, dict):
        out_map: dict[str, Any] = {}
        for key, sub in value.items():
            child = None if secret else schema.child(node, str(key))
            inner = secret or bool(child and child.get("x-secret"))
            out_map[key] = _store(sub, [*segments, str(key)], child, seal, inner)
        return out_map
    return value


class SecretWriter:
    """What one write of the config stores for each secret value it is given (:meth:`store`),
    under the install's policy and key.

    With the policy on and no key yet, values are sealed under a new key held in memory
    (``pending``); :meth:`publish` puts it on disk, before the staged config that needs it
    exists. If another process published a key first, its key is the install's and every value
    sealed under the pending one is sealed again under it (the replacements are returned).
    """

    def __init__(
        self,
        install_fd: int,
        install_root: Path,
        file_data: Mapping[str, Any],
        environ: Mapping[str, str],
        *,
        owner: tuple[int, int] | None = None,
    ) -> None:
        self.install_fd = install_fd
        self.install_root = install_root
        self.warnings: list[str] = []
        self._bad_policy: InvalidInput | None = None
        try:
            self.policy, warning = encrypt_policy(file_data, environ)
        except InvalidInput as err:
            # only a write that stores a secret depends on the policy: it refuses then
            self.policy, warning, self._bad_policy = True, "", err
        if warning:
            self.warnings.append(warning)
        self.found = read_key_file(install_fd, install_root)
        self.owner = owner
        self.pending: SecretKey | None = None
        self._sealed: dict[str, str] = {}
        self._warned_mode = False

    @property
    def key(self) -> SecretKey | None:
        """The key values are sealed under: the install's, else the pending one."""
        return self.found.key or self.pending

    def store(self, value: str, path: str) -> str:
        """:func:`store_value` of ``value`` at ``path`` under this install's policy and key."""
        if self._bad_policy is not None and value:
            raise self._bad_policy
        if not needs_key([value], self.policy):
            return value
        if self.found.state == "unreadable":
            raise key_error(self.found)
        if self.found.too_open and not self._warned_mode:
            self._warned_mode = True
            self.warnings.append(self.found.mode_warning())
        if self.key is None and not is_encrypted(value):
            self.pending = SecretKey(os.urandom(KEY_BYTES))
        stored = store_value(value, self.key, policy=self.policy, path=path, where=self.found.where)
        if self.pending is not None and stored != value:
            self._sealed[stored] = value
        return stored

    def publish(self) -> tuple[bool, dict[str, str]]:
        """Put the pending key on disk (:func:`bundler.config.secretkey.publish_key`):
        ``(whether this made the key, the values to replace when another process's key is used
        instead)``. Nothing to do without a
        pending key."""
        if self.pending is None:
            return False, {}
        key, made = publish_key(self.install_fd, self.install_root, self.pending, owner=self.owner)
        self.found = KeyFile("present", self.found.where, key, 0o600)
        self.pending = None
        if made:
            return True, {}
        return False, {sealed: encrypt(plain, key) for sealed, plain in self._sealed.items()}


def replace_sealed(text: str, replacements: Mapping[str, str]) -> str:
    """``text`` with each sealed value of ``replacements`` swapped for its new sealing. An
    ``enc2:`` value is hex after its prefix, written as it is in any TOML string, and its random
    nonce makes it unique in the file."""
    for old, new in replacements.items():
        text = text.replace(old, new)
    return text


def reveal(value: Any, found: KeyFile, path: str) -> Any:
    """``value`` (read at the config path ``path``) with every ``enc2:``/``enc:`` string in it
    opened under ``found``'s key, for ``config get --reveal``. ``InvalidInput`` naming ``path``
    (never a value) when one does not open; an ``op://`` reference stays as written."""
    if isinstance(value, dict):
        return {key: reveal(sub, found, path) for key, sub in value.items()}
    if isinstance(value, list):
        return [reveal(sub, found, path) for sub in value]
    if not is_encrypted(value):
        return value
    if found.state == "unreadable":
        raise key_error(found)
    if found.key is None:
        raise Undecryptable(
            f"{path} is stored encrypted and there is no {found.where} to decrypt it",
            path=path,
        )
    try:
        return decrypt(value, found.key)
    except NotDecrypted as err:
        reason = err.reason
    raise Undecryptable(f"{path} does not decrypt under {found.where}: {reason}", path=path)


def census(data: Any, found: KeyFile) -> tuple[int, int]:
    """How many stored-encrypted strings of ``data`` open under ``found``'s key, and how many do
    not (none opens without a key): ``doctor``'s count, which never says which."""
    opened = closed = 0
    pending: list[Any] = [data]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending += value.values()
        elif isinstance(value, list):
            pending += value
        elif is_encrypted(value):
            if try_decrypt(value, found.key) is None:
                closed += 1
            else:
                opened += 1
    return opened, closed
