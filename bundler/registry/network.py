"""The one place a failed exchange with a registry is classified: the network's, or the bytes'.

A registry that dies mid-pull, a proxy that resets the connection, an answer that stops coming:
none of these says anything of the artifact, and a second attempt may well succeed. They are
:class:`~bundler.errors.RegistryUnreachable` (exit 1, "try again"). What arrived and is wrong
(a digest that does not match, a body longer than declared, a manifest that does not parse) is
the registry's content, :class:`bundler.errors.InvalidInput` (exit 3), never this: trying again
would fetch the same bytes. A layer that retries catches
:class:`~bundler.errors.RegistryUnreachable` alone, and ``cause`` (one of :data:`CLOSED`,
:data:`RESET`, :data:`TIMED_OUT`, :data:`UNREACHABLE`, or :data:`BUSY`: the registry answered
that it is overloaded, every time it was asked) tells it what happened.
"""

from __future__ import annotations

import http.client

from bundler.errors import RegistryUnreachable
from bundler.rules.names import escape_display

CLOSED = "closed"
RESET = "reset"
TIMED_OUT = "timed out"
UNREACHABLE = "unreachable"
BUSY = "busy"


def cause_of(err: BaseException | None) -> str | None:
    """What ``err``, raised by a socket or ``http.client`` while talking to a registry, says of
    the network: :data:`CLOSED`, :data:`RESET`, :data:`TIMED_OUT` or :data:`UNREACHABLE`; None
    when it is no failure of the network (an answer whose HTTP framing is garbled, say).
    ``None`` for ``err`` is the end of the stream where more was declared: the connection
    closed."""
    if err is None or isinstance(err, (http.client.RemoteDisconnected, BrokenPipeError)):
        return CLOSED
    if isinstance(err, TimeoutError):
        return TIMED_OUT
    if isinstance(err, (ConnectionResetError, ConnectionAbortedError)):
        return RESET
    if isinstance(err, OSError):
        return UNREACHABLE
    return None


def shown_host(netloc: str) -> str:
    """The host and port of ``netloc`` as a message shows them: an address a registry sent (a
    redirect, a token realm) may carry user information, which is the registry's text and may
    be a credential."""
    return escape_display(netloc.rpartition("@")[2])


def lost(netloc: str, cause: str, doing: str, *, waited: float) -> RegistryUnreachable:
    """The failure of ``cause`` (see :func:`cause_of`) during ``doing`` ("the download of blob
    sha256:…") with the registry at ``netloc``, in the words a person reads; ``waited`` is
    the timeout, in seconds, that a :data:`TIMED_OUT` ran out."""
    host = shown_host(netloc)
    if cause == TIMED_OUT:
        what = f"{host} sent nothing for {waited:g} s"
    elif cause == RESET:
        what = f"the connection to {host} closed (reset)"
    else:
        what = f"the connection to {host} closed"
    return RegistryUnreachable(f"{what} during {doing}; try again", host=host, cause=cause)


__all__ = ["cause_of", "lost", "shown_host"]
