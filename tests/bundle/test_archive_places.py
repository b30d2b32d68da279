"""The rules of a member's place (every name once, each folder before its contents, nothing
under a file) give the same findings whether the reader holds every name or, for an archive
in checksum order, only the chain of members above the last one, recalling the rest from the
caller's listing when the order breaks."""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from support import hostile_archives

from bundler.bundle.archive_listing import ListedMember
from bundler.bundle.archive_members import MemberPlaces
from bundler.bundle.archive_read import ArchiveLimits, list_tar, read_tar
from bundler.errors import InvalidInput
from bundler.fs.durable import open_dir

names = st.sampled_from(["a", "b", "a/x", "a/y", "a.x", "b/z", "a/x/q", "a/x/q/r", "c", "a b"])


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.tuples(names, st.booleans()), max_size=10))
def test_a_chain_in_checksum_order_finds_what_every_name_held_finds(
    members: list[tuple[str, bool]],
) -> None:
    """Member by member, the same finding (the first ends the archive), in any order."""
    seen: list[tuple[str, bool]] = []
    chained, held = MemberPlaces(lambda: iter(seen)), MemberPlaces(None)
    for name, is_dir in members:
        finding = chained.problem(name)
        assert finding == held.problem(name), (members, name)
        if finding is not None:
            break
        chained.add(name, is_dir)
        held.add(name, is_dir)
        seen.append((name, is_dir))


def test_an_archive_in_checksum_order_is_listed_holding_no_name() -> None:
    """A layer bundler pushed (its folders' members, in checksum order) is never recalled."""
    data = hostile_archives.member("workspace", None) + b"".join(
        hostile_archives.member(f"workspace/{n:03}", b"x") for n in range(50)
    )
    recalled: list[int] = []
    listed: list[ListedMember] = []

    def recall() -> list[tuple[str, bool]]:
        recalled.append(len(listed))
        return [(m.name, m.is_dir) for m in listed]

    list_tar(io.BytesIO(data + bytes(1024)), ArchiveLimits(), record=listed.append, recall=recall)
    assert len(listed) == 51 and recalled == []


def _refusal(read: Callable[[], object]) -> str | None:
    try:
        read()
    except InvalidInput as exc:
        return str(exc)
    return None


def test_the_hostile_corpus_is_refused_alike_listed_and_unpacked(
    exported: Path, tmp_path: Path
) -> None:
    """The lister (which recalls its own listing when the order breaks) and the unpacker
    (which holds every name) refuse each hostile archive with the same line."""
    for index, case in enumerate(hostile_archives.cases(exported)):
        dest = tmp_path / str(index)
        dest.mkdir(mode=0o700)
        fd = open_dir(dest, follow=False)
        try:
            unpacked = _refusal(
                functools.partial(read_tar, io.BytesIO(case.data), fd, case.limits, name="b.tar")
            )
        finally:
            os.close(fd)
        listed = _refusal(
            functools.partial(list_tar, io.BytesIO(case.data), case.limits, name="b.tar")
        )
        assert unpacked is not None and listed == unpacked, case.name
