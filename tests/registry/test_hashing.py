"""``Sha256``: the digest a pull checks every blob against, taken in a thread for a long blob;
it must be exactly hashlib's, whatever the chunks, and leave the interpreter as it found it."""

from __future__ import annotations

import hashlib
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bundler.fs.threads import running
from bundler.registry import hashing
from bundler.registry.hashing import THREADED_BYTES, Sha256


def threads_named(name: str) -> int:
    return running().count(name)


@given(st.lists(st.binary(max_size=3000), max_size=12), st.booleans())
@settings(max_examples=60, deadline=None)
def test_the_digest_is_hashlibs_for_any_chunks(chunks: list[bytes], threaded: bool) -> None:
    digest = Sha256(THREADED_BYTES if threaded else 0)
    for chunk in chunks:
        digest.update(chunk)
    assert digest.hexdigest() == hashlib.sha256(b"".join(chunks)).hexdigest()


def test_a_long_stream_is_hashed_in_a_thread_that_stops_with_the_digest() -> None:
    chunk = bytes(range(256)) * 4096  # 1 MiB
    before = sys.getswitchinterval()
    digest = Sha256(THREADED_BYTES)
    assert threads_named("bundler-sha256") == 1
    assert sys.getswitchinterval() <= hashing.SWITCH_INTERVAL
    for _ in range(hashing.QUEUED * 3):  # more than the queue holds: put waits, nothing lost
        digest.update(chunk)
    assert digest.hexdigest() == hashlib.sha256(chunk * (hashing.QUEUED * 3)).hexdigest()
    assert threads_named("bundler-sha256") == 0
    assert sys.getswitchinterval() == pytest.approx(before)


def test_a_short_stream_starts_no_thread() -> None:
    digest = Sha256(THREADED_BYTES - 1)
    assert threads_named("bundler-sha256") == 0
    digest.update(b"abc")
    assert digest.hexdigest() == hashlib.sha256(b"abc").hexdigest()


def test_close_without_the_digest_stops_the_thread_and_restores_the_interval() -> None:
    """What a failed download does: it closes the hash it will never read."""
    before = sys.getswitchinterval()
    digest = Sha256(THREADED_BYTES)
    digest.update(b"x" * 4096)
    digest.close()
    digest.close()  # twice is harmless: the download's exit closes it after a digest was read
    assert threads_named("bundler-sha256") == 0
    assert sys.getswitchinterval() == pytest.approx(before)
