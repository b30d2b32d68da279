"""Credentials recognised by their look, pure: where the schema says nothing, what in a config's
text is a credential all the same.

Three rules, each written only here:

- a key named like a secret's (:func:`is_opaque_secret_key`: a channel's ``bot_token``);
- the credentials written into a web address: its user information
  (``https://user:PASSWORD@host``, or ``https://TOKEN@host``) and every ``name=value``
  parameter named like a secret, in the query (``?api_key=…``), the fragment
  (``#access_token=…``, OAuth's implicit flow) or a path segment (``/v1;api_key=…``); query
  and fragment parameters are separated by ``&`` or ``;`` (:func:`credentials_in`);
- the token of an authorization value (``Bearer TOKEN``, :func:`authorization_token`): a
  header's value is swept for whole, and the token alone is what a script or a log repeats.

Each address credential is found where it is written, so that the sweep looks for its spelling
as written as well as for its decoded value (``%2d`` and ``-`` are one character to a server,
two spellings to a byte search), and so that a message can show the address with every
credential masked (:func:`mask_credentials`).

Nothing here puts a credential into a message or a ``repr``.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field

OPAQUE_SECRET_KEY = re.compile(r"token|secret|password|passwd|api_key|apikey", re.IGNORECASE)
ADDRESS_SECRET_PARAMETERS = frozenset({"key", "sig", "signature", "auth"})
"""Parameters that carry a credential though the opaque key rule does not match them
(Google's ``key=``, a signed URL's ``sig=``)."""
ADDRESS_USER_TOKEN_MIN_LENGTH = 16
"""A user name alone in an address (``https://TOKEN@host``) counts as a token from this length:
shorter ones are names such as ``git``."""
AUTHORIZATION_SCHEMES = frozenset({"basic", "bearer", "bot", "token", "apikey", "key"})
"""The schemes an authorization value starts with (RFC 9110's ``Basic`` and ``Bearer``, and
the ``Bot``, ``Token`` and ``ApiKey`` of chat and API services), in lower case."""
MASK = "***"

_ADDRESS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
# a parameter: its name, then its value up to the next separator of its part of the address
_QUERY_PARAMETER = re.compile(r"([^&;=]*)=([^&;]*)")
_PATH_PARAMETER = re.compile(r";([^;=/]*)=([^;/]*)")
_AUTHORIZATION = re.compile(r"([A-Za-z][A-Za-z-]*) +(\S+)")


def is_opaque_secret_key(key: str) -> bool:
    """True when ``key``, where the schema does not describe it (an opaque table such as a
    channel's, or a key the schema does not know), names a secret by its look:
    ``token|secret|password|passwd|api_key|apikey`` in any case (02 §5.3). Its value is swept for
    like a secret field's, and never shown."""
    return OPAQUE_SECRET_KEY.search(key) is not None


def authorization_token(value: str) -> str | None:
    """The token of ``value`` when it is an authorization value, ``SCHEME TOKEN`` with a scheme
    of :data:`AUTHORIZATION_SCHEMES` (``Bearer sk-…``); None otherwise."""
    match = _AUTHORIZATION.fullmatch(value.strip())
    if match is None or match.group(1).lower() not in AUTHORIZATION_SCHEMES:
        return None
    return match.group(2)


@dataclass(frozen=True)
class Credential:
    """One credential of a text: ``text[start:end]`` as written, and ``value`` decoded."""

    start: int
    end: int
    value: str = field(repr=False)


def credentials_in(text: str) -> Iterator[Credential]:
    """Every credential written into the web addresses (``scheme://…``) of ``text``, in order.

    The user information's password, or its user name when there is no password and the name
    is :data:`ADDRESS_USER_TOKEN_MIN_LENGTH` long; and the value of every parameter whose name
    looks like a secret's (:func:`is_opaque_secret_key`, or one of
    :data:`ADDRESS_SECRET_PARAMETERS`), whatever its length: the caller decides which lengths
    count.
    """
    if "://" not in text:
        return
    for match in _ADDRESS.finditer(text):
        yield from _address_credentials(match.group(), match.start())


def _address_credentials(address: str, at: int) -> Iterator[Credential]:
    authority_at = address.index("://") + 3
    path_at = _first(address, "/?#", authority_at)
    query_at = _first(address, "?#", path_at)
    fragment_at = _first(address, "#", query_at)
    authority = address[authority_at:path_at]
    user_end = authority.rfind("@")
    if user_end >= 0:
        colon = authority.find(":", 0, user_end)
        if colon >= 0:
            yield _credential(address, at, authority_at + colon + 1, authority_at + user_end)
        elif user_end >= ADDRESS_USER_TOKEN_MIN_LENGTH:
            yield _credential(address, at, authority_at, authority_at + user_end)
    parts = (
        (_PATH_PARAMETER, path_at, query_at, False),
        (_QUERY_PARAMETER, query_at + 1, fragment_at, True),
        (_QUERY_PARAMETER, fragment_at + 1, len(address), True),
    )
    for pattern, start, end, form_encoded in parts:
        for parameter in pattern.finditer(address, start, end):
            name = urllib.parse.unquote_plus(parameter.group(1))
            if is_opaque_secret_key(name) or name.lower() in ADDRESS_SECRET_PARAMETERS:
                yield _credential(
                    address, at, parameter.start(2), parameter.end(2), form_encoded=form_encoded
                )


def _first(address: str, stops: str, start: int) -> int:
    """Where the first of ``stops`` stands in ``address`` from ``start``; its end when none."""
    found = [index for index in (address.find(stop, start) for stop in stops) if index >= 0]
    return min(found, default=len(address))


def _credential(
    address: str, at: int, start: int, end: int, *, form_encoded: bool = False
) -> Credential:
    written = address[start:end]
    unquote = urllib.parse.unquote_plus if form_encoded else urllib.parse.unquote
    return Credential(at + start, at + end, unquote(written))


def spellings(credential: Credential, text: str) -> list[str]:
    """The credential as written in ``text`` and decoded, each once."""
    written = text[credential.start : credential.end]
    return [written] if written == credential.value else [written, credential.value]


def mask_credentials(text: str) -> str:
    """``text`` with every credential of its web addresses replaced by :data:`MASK`: what a
    message may show of an address (where it sends the agent's requests, not with what)."""
    pieces: list[str] = []
    shown = 0
    for credential in credentials_in(text):  # in order, none overlapping another
        if credential.start == credential.end:
            continue  # an empty value: nothing to hide
        pieces += [text[shown : credential.start], MASK]
        shown = credential.end
    return "".join([*pieces, text[shown:]])
