"""The safe tree reader (02 §7.2, 7.1, 7.4): every skip and refusal on real hostile trees."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from support.race_helpers import (
    can_mount_tmpfs,
    fd_count,
    make_socket,
    run_as_nobody,
    unmount,
)

from bundler.errors import Refused
from bundler.fs.safefs import (
    MAX_DEPTH,
    Entry,
    SkipCounts,
    SkipKind,
    WorkspaceExclude,
    open_beneath,
    open_dir_nofollow,
    open_source_root,
    rmtree_at,
    select_skills,
    walk,
)


def open_root(path: Path) -> int:
    fd = open_source_root(path, install_root=None)
    assert fd is not None
    return fd


def listing(
    root: Path,
    *,
    prefix: str = "",
    exclude: Callable[[str, os.stat_result], bool] | None = None,
) -> tuple[list[str], SkipCounts]:
    """Walk ``root``: (relpaths in order, skip counts)."""
    fd = open_root(root)
    counts = SkipCounts()
    try:
        paths = [
            entry.relpath
            for entry in walk(
                fd,
                prefix=prefix,
                exclude=exclude,
                on_skip=counts.record,
                on_non_portable=counts.record_non_portable,
            )
        ]
    finally:
        os.close(fd)
    return paths, counts


# --- order and basic admission -------------------------------------------------------------


def test_entries_sorted_by_name_bytes_depth_first_a_c_before_a_b(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "c").write_text("c")
    (tmp_path / "a-b").write_text("ab")
    (tmp_path / "B").write_text("upper sorts first")
    (tmp_path / "é").write_text("two bytes, after z")
    (tmp_path / "z").write_text("z")
    paths, counts = listing(tmp_path, prefix="workspace/")
    assert paths == [
        "workspace/B",
        "workspace/a",
        "workspace/a/c",
        "workspace/a-b",
        "workspace/z",
        "workspace/é",
    ]
    assert counts.total == 0


def test_folder_entry_comes_before_its_contents_with_open_descriptors(tmp_path: Path) -> None:
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f").write_bytes(b"xyz")
    fd = open_root(tmp_path)
    try:
        seen: list[tuple[str, str, int]] = []
        for entry in walk(fd):
            assert os.fstat(entry.fd).st_ino == entry.stat.st_ino
            if entry.kind == "file":
                assert os.read(entry.fd, 10) == b"xyz"
            seen.append((entry.rel, entry.kind, entry.depth))
    finally:
        os.close(fd)
    assert seen == [("d", "dir", 1), ("d/e", "dir", 2), ("d/e/f", "file", 3)]


def test_walk_closes_every_descriptor_even_when_abandoned(tmp_path: Path) -> None:
    for index in range(5):
        (tmp_path / f"d{index}" / "sub").mkdir(parents=True)
        (tmp_path / f"d{index}" / "sub" / "f").write_text("x")
    fd = open_root(tmp_path)
    before = fd_count()
    try:
        assert len(list(walk(fd))) == 15
        assert fd_count() == before
        gen = walk(fd)
        next(gen)
        next(gen)
        gen.close()
        assert fd_count() == before
    finally:
        os.close(fd)


# --- skips ---------------------------------------------------------------------------------


def test_escaping_symlink_skipped_and_counted(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("never")
    root = tmp_path / "ws"
    root.mkdir()
    (root / "link-out").symlink_to(outside / "secret")
    (root / "dir-out").symlink_to(outside)
    paths, counts = listing(root, prefix="workspace/")
    assert paths == []
    assert counts.symlinks == 2
    assert counts.paths == ["workspace/dir-out", "workspace/link-out"]


def test_in_tree_symlink_skipped_even_pointing_inside(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("r")
    (tmp_path / "alias").symlink_to("real")
    paths, counts = listing(tmp_path)
    assert paths == ["real"]
    assert counts.symlinks == 1


def test_symlink_to_memory_brain_db_skipped(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "brain.db").write_text("private")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "brain.db").symlink_to("../memory/brain.db")
    fd = open_root(tmp_path)
    try:
        counts = SkipCounts()
        rels = [e.rel for e in walk(fd, exclude=WorkspaceExclude(fd), on_skip=counts.record)]
    finally:
        os.close(fd)
    assert rels == ["notes"]
    assert counts.symlinks == 1 and counts.paths == ["notes/brain.db"]


def test_fifo_skipped_as_special_without_opening(tmp_path: Path) -> None:
    # Opening a FIFO without a writer would block forever: finishing proves it was not opened.
    os.mkfifo(tmp_path / "pipe")
    paths, counts = listing(tmp_path)
    assert paths == [] and counts.special == 1


def test_unix_socket_skipped_as_special(tmp_path: Path) -> None:
    make_socket(tmp_path / "sock")
    paths, counts = listing(tmp_path)
    assert paths == [] and counts.special == 1 and counts.paths == ["sock"]


def test_device_file_skipped_as_special(tmp_path: Path) -> None:
    try:
        os.mknod(tmp_path / "null", 0o600 | 0o020000, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("this host forbids mknod (no CAP_MKNOD)")
    paths, counts = listing(tmp_path)
    assert paths == [] and counts.special == 1


def test_hard_link_skipped_on_both_names(tmp_path: Path) -> None:
    (tmp_path / "one").write_text("shared inode")
    os.link(tmp_path / "one", tmp_path / "two")
    (tmp_path / "single").write_text("ok")
    paths, counts = listing(tmp_path)
    assert paths == ["single"]
    assert counts.hard_links == 2


def test_hard_link_to_file_outside_tree_skipped(tmp_path: Path) -> None:
    (tmp_path / "outside").write_text("not ours")
    root = tmp_path / "ws"
    root.mkdir()
    os.link(tmp_path / "outside", root / "inside")
    paths, counts = listing(root)
    assert paths == [] and counts.hard_links == 1


def test_bad_names_counted_not_yielded(tmp_path: Path) -> None:
    root = os.fsencode(tmp_path)
    with open(os.path.join(root, b"latin1-\xe9"), "wb") as handle:
        handle.write(b"x")
    (tmp_path / "ctl\x07bell").write_text("x")
    (tmp_path / "fine").write_text("x")
    paths, counts = listing(tmp_path, prefix="workspace/")
    assert paths == ["workspace/fine"]
    assert counts.bad_names == 2
    # The listed paths are printable: no raw control character or undecodable byte.
    assert counts.paths == ["workspace/ctl\\x07bell", "workspace/latin1-\\xe9"]


def test_non_portable_names_copied_and_listed(tmp_path: Path) -> None:
    (tmp_path / "con.txt").write_text("x")
    (tmp_path / "a:b").write_text("x")
    (tmp_path / "ok.txt").write_text("x")
    paths, counts = listing(tmp_path, prefix="workspace/")
    assert paths == ["workspace/a:b", "workspace/con.txt", "workspace/ok.txt"]
    assert counts.non_portable_names == ["workspace/a:b", "workspace/con.txt"]
    assert counts.total == 0


def test_skipped_paths_capped_at_1000_totals_exact(tmp_path: Path) -> None:
    for index in range(1005):
        (tmp_path / f"l{index:04d}").symlink_to("nowhere")
    _paths, counts = listing(tmp_path)
    assert counts.symlinks == 1005
    assert len(counts.paths) == 1000


def test_skip_counts_json_has_the_05_keys() -> None:
    counts = SkipCounts()
    counts.record(SkipKind.REPLACED, "workspace/x")
    assert counts.as_json() == {
        "symlinks": 0,
        "special": 0,
        "hard_links": 0,
        "replaced": 1,
        "vanished": 0,
        "other_device": 0,
        "bad_names": 0,
    }


def test_mount_point_counted_as_other_device(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    if not can_mount_tmpfs(mnt):
        pytest.skip("this host forbids mounting a tmpfs (needed for a real mount point)")
    try:
        (mnt / "inside").write_text("other filesystem")
        (tmp_path / "local").write_text("x")
        paths, counts = listing(tmp_path)
    finally:
        unmount(mnt)
    assert paths == ["local"]
    assert counts.other_device == 1 and counts.paths == ["mnt"]


# --- races made deterministic: the exclude hook runs between classification and open --------


def swap_during_classification(
    root: Path, target: str, mutate: Callable[[], None]
) -> tuple[list[str], SkipCounts]:
    def exclude(rel: str, _st: os.stat_result) -> bool:
        if rel == target:
            mutate()
        return False

    return listing(root, exclude=exclude)


def test_file_renamed_over_between_classification_and_open_counted_replaced(
    tmp_path: Path,
) -> None:
    (tmp_path / "admitted").write_text("original")
    (tmp_path / "other").write_text("other")
    paths, counts = swap_during_classification(
        tmp_path, "admitted", lambda: os.rename(tmp_path / "other", tmp_path / "admitted")
    )
    assert paths == []
    # "other" is gone from its listed name by the time it is classified
    assert counts.replaced == 1 and counts.vanished == 1
    assert counts.paths == ["admitted", "other"]


def test_file_swapped_for_symlink_after_classification_refused(tmp_path: Path) -> None:
    (tmp_path / "admitted").write_text("original")
    (tmp_path / "outside").write_text("outside")

    def swap() -> None:
        os.unlink(tmp_path / "admitted")
        os.symlink(tmp_path / "outside", tmp_path / "admitted")

    with pytest.raises(Refused, match="admitted turned into a symbolic link") as raised:
        swap_during_classification(tmp_path, "admitted", swap)
    assert raised.value.path == "admitted"


def test_folder_swapped_for_symlink_after_classification_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "elsewhere").mkdir()

    def swap() -> None:
        os.rename(tmp_path / "d", tmp_path / "d.moved")
        os.symlink(tmp_path / "elsewhere", tmp_path / "d")

    with pytest.raises(Refused, match="turned into a symbolic link"):
        swap_during_classification(tmp_path, "d", swap)


def test_folder_swapped_for_file_counted_replaced(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()

    def swap() -> None:
        os.rename(tmp_path / "d", tmp_path / "e")
        (tmp_path / "d").write_text("now a file")

    _paths, counts = swap_during_classification(tmp_path, "d", swap)
    assert counts.replaced == 1


def test_file_swapped_for_fifo_counted_replaced_without_blocking(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")

    def swap() -> None:
        os.unlink(tmp_path / "f")
        os.mkfifo(tmp_path / "f")

    _paths, counts = swap_during_classification(tmp_path, "f", swap)
    assert counts.replaced == 1


def test_entry_removed_between_classification_and_open_counted_vanished(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    paths, counts = swap_during_classification(tmp_path, "f", lambda: os.unlink(tmp_path / "f"))
    assert paths == [] and counts.vanished == 1


def test_entry_removed_between_listing_and_classification_counted_vanished(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").write_text("x")
    _paths, counts = swap_during_classification(tmp_path, "a", lambda: os.unlink(tmp_path / "b"))
    assert counts.vanished == 1 and counts.paths == ["b"]


# --- refusals ------------------------------------------------------------------------------


def test_unreadable_file_refused_naming_it(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)  # nobody may enter the tree; only the file is locked
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "locked").write_text("x")
    (tmp_path / "notes" / "locked").chmod(0)
    fd = open_root(tmp_path)
    try:
        with pytest.raises(Refused, match=r"cannot read workspace/notes/locked") as raised:
            run_as_nobody(lambda: list(walk(fd, prefix="workspace/")))
    finally:
        os.close(fd)
    assert raised.value.path == "workspace/notes/locked"


def test_unreadable_folder_refused_naming_it(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "f").write_text("x")
    (tmp_path / "private").chmod(0o311)  # nobody may enter, may not list
    fd = open_root(tmp_path)
    try:
        with pytest.raises(Refused, match="cannot read private"):
            run_as_nobody(lambda: list(walk(fd)))
    finally:
        os.close(fd)
        (tmp_path / "private").chmod(0o700)


def make_chain(root: Path, depth: int) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)


def test_tree_256_deep_walked_iteratively(tmp_path: Path) -> None:
    make_chain(tmp_path, MAX_DEPTH)
    paths, _ = listing(tmp_path)
    assert len(paths) == MAX_DEPTH


def test_tree_257_deep_refused(tmp_path: Path) -> None:
    make_chain(tmp_path, MAX_DEPTH + 1)
    with pytest.raises(Refused, match="more than 256 levels deep"):
        listing(tmp_path)


# --- roots ---------------------------------------------------------------------------------


def make_install(tmp_path: Path) -> Path:
    install = tmp_path / "install"
    (install / "agents" / "ada" / "workspace").mkdir(parents=True)
    (install / "agents" / "ada" / "workspace" / "note").write_text("x")
    (install / "shared" / "skills" / "tools" / "grep").mkdir(parents=True)
    return install


def test_workspace_root_that_is_a_symlink_refused(tmp_path: Path) -> None:
    real = tmp_path / "real-ws"
    real.mkdir()
    (tmp_path / "ws").symlink_to(real)
    with pytest.raises(Refused, match="is a symbolic link: point the config at the real folder"):
        open_source_root(tmp_path / "ws", install_root=None)


def test_default_workspace_root_symlink_inside_install_refused(tmp_path: Path) -> None:
    install = make_install(tmp_path)
    ws = install / "agents" / "ada" / "workspace"
    os.rename(ws, install / "agents" / "ada" / "ws-real")
    ws.symlink_to("ws-real")  # points inside the install: still refused
    with pytest.raises(Refused, match="workspace is a symbolic link"):
        open_source_root(ws, install_root=install)


def test_symlinked_agents_folder_refused(tmp_path: Path) -> None:
    install = make_install(tmp_path)
    os.rename(install / "agents", tmp_path / "agents-elsewhere")
    (install / "agents").symlink_to(tmp_path / "agents-elsewhere")
    with pytest.raises(Refused, match=r"agents \(above .*\) is a symbolic link") as raised:
        open_source_root(install / "agents" / "ada" / "workspace", install_root=install)
    assert raised.value.path == str(install / "agents")


def test_symlinked_shared_skills_refused(tmp_path: Path) -> None:
    install = make_install(tmp_path)
    os.rename(install / "shared" / "skills", install / "skills-real")
    (install / "shared" / "skills").symlink_to("../skills-real")
    with pytest.raises(Refused, match="is a symbolic link"):
        open_source_root(install / "shared" / "skills" / "tools", install_root=install)


def test_symlink_above_install_root_followed(tmp_path: Path) -> None:
    install = make_install(tmp_path)
    (tmp_path / "via-link").symlink_to(install)
    fd = open_source_root(
        tmp_path / "via-link" / "agents" / "ada" / "workspace",
        install_root=tmp_path / "via-link",
    )
    assert fd is not None
    try:
        assert os.listdir(fd) == ["note"]
    finally:
        os.close(fd)


def test_workspace_path_outside_install_checks_only_last_component(tmp_path: Path) -> None:
    install = make_install(tmp_path)
    (tmp_path / "real-parent" / "ws").mkdir(parents=True)
    (tmp_path / "linked-parent").symlink_to(tmp_path / "real-parent")
    fd = open_source_root(tmp_path / "linked-parent" / "ws", install_root=install)
    assert fd is not None
    os.close(fd)
    (tmp_path / "real-parent" / "ws-link").symlink_to("ws")
    with pytest.raises(Refused, match="ws-link is a symbolic link"):
        open_source_root(tmp_path / "real-parent" / "ws-link", install_root=install)


def test_missing_root_is_none_not_an_error(tmp_path: Path) -> None:
    install = make_install(tmp_path)
    assert open_source_root(install / "agents" / "bob" / "workspace", install_root=install) is None
    assert open_source_root(tmp_path / "nope" / "ws", install_root=None) is None


def test_root_that_is_a_file_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(Refused, match="is not a folder"):
        open_source_root(tmp_path / "file", install_root=None)


def test_open_beneath_refuses_links_and_dotdot(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "l").symlink_to("b")
    root = open_root(tmp_path)
    try:
        fd = open_beneath(root, "a/./b")
        os.close(fd)
        for bad, code in (("a/l", errno.ELOOP), ("a/../a", errno.EINVAL), ("/a", errno.EINVAL)):
            with pytest.raises(OSError) as raised:
                open_beneath(root, bad)
            assert raised.value.errno == code
    finally:
        os.close(root)


def test_open_dir_nofollow_detects_a_different_object(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    before = os.stat(tmp_path / "a")
    root = open_root(tmp_path)
    try:
        os.rename(tmp_path / "a", tmp_path / "c")
        os.rename(tmp_path / "b", tmp_path / "a")
        with pytest.raises(OSError) as raised:
            open_dir_nofollow(root, "a", before)
        assert raised.value.errno == errno.ESTALE
    finally:
        os.close(root)


# --- workspace filter ----------------------------------------------------------------------


def test_root_memory_and_snapshot_excluded_nested_notes_memory_travels(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "brain.db").write_text("private")
    (tmp_path / "MEMORY_SNAPSHOT.md").write_text("private")
    (tmp_path / "notes" / "memory").mkdir(parents=True)
    (tmp_path / "notes" / "memory" / "x").write_text("travels")
    (tmp_path / "notes" / "MEMORY_SNAPSHOT.md").write_text("travels")
    fd = open_root(tmp_path)
    try:
        exclude = WorkspaceExclude(fd)
        rels = [entry.rel for entry in walk(fd, exclude=exclude)]
    finally:
        os.close(fd)
    assert rels == ["notes", "notes/MEMORY_SNAPSHOT.md", "notes/memory", "notes/memory/x"]
    assert exclude.present == ["memory", "MEMORY_SNAPSHOT.md"]


def test_root_memory_moved_during_walk_still_skipped_by_identity(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("first")
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "brain.db").write_text("private")
    (tmp_path / "MEMORY_SNAPSHOT.md").write_text("private")
    (tmp_path / "z").mkdir()
    fd = open_root(tmp_path)
    try:
        exclude = WorkspaceExclude(fd)
        rels: list[str] = []
        for entry in walk(fd, exclude=exclude):
            rels.append(entry.rel)
            if entry.rel == "a":  # after the root was listed, before z is listed
                os.rename(tmp_path / "memory", tmp_path / "z" / "renamed")
                os.rename(tmp_path / "MEMORY_SNAPSHOT.md", tmp_path / "z" / "snap.md")
    finally:
        os.close(fd)
    assert rels == ["a", "z"]


# --- skill bundles -------------------------------------------------------------------------


def make_skill(bundle: Path, name: str) -> None:
    (bundle / name).mkdir()
    (bundle / name / "SKILL.md").write_text(f"# {name}")


def test_skill_bundle_admits_only_folders_with_regular_skill_md(tmp_path: Path) -> None:
    for name in ("grep", "lint", "con", "skipme"):
        make_skill(tmp_path, name)
    (tmp_path / "no-skill").mkdir()
    (tmp_path / "README.md").write_text("loose file")
    (tmp_path / "linked").symlink_to("grep")
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "SKILL.md").symlink_to("../grep/SKILL.md")
    fd = open_root(tmp_path)
    try:
        selection = select_skills(fd, exclude=["skipme"])
    finally:
        os.close(fd)
    assert [name for name, _ in selection.admitted] == ["grep", "lint"]
    assert selection.not_copied == ["README.md", "con", "fake", "linked", "no-skill"]


def test_skill_exclude_wins_over_include_and_filtered_entries_not_reported(
    tmp_path: Path,
) -> None:
    for name in ("a", "b", "c"):
        make_skill(tmp_path, name)
    (tmp_path / "loose").write_text("x")
    fd = open_root(tmp_path)
    try:
        selection = select_skills(fd, include=["a", "b", "loose"], exclude=["b"])
    finally:
        os.close(fd)
    assert [name for name, _ in selection.admitted] == ["a"]
    assert selection.not_copied == ["loose"]


def test_admitted_skill_swapped_after_selection_detected(tmp_path: Path) -> None:
    make_skill(tmp_path, "grep")
    make_skill(tmp_path, "evil")
    fd = open_root(tmp_path)
    try:
        selection = select_skills(fd)
        name, lst = selection.admitted[1]
        assert name == "grep"
        os.rename(tmp_path / "grep", tmp_path / "grep.old")
        os.rename(tmp_path / "evil", tmp_path / "grep")
        with pytest.raises(OSError) as raised:
            open_dir_nofollow(fd, name, lst)
        assert raised.value.errno == errno.ESTALE
    finally:
        os.close(fd)


# --- removal -------------------------------------------------------------------------------


def test_rmtree_at_never_follows_a_link_out(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    staging = tmp_path / "staging"
    (staging / "a" / "b").mkdir(parents=True)
    (staging / "a" / "b" / "f").write_text("x")
    (staging / "a" / "out").symlink_to(outside)
    (staging / "file-link").symlink_to(outside / "keep")
    os.mkfifo(staging / "pipe")
    fd = open_root(tmp_path)
    try:
        rmtree_at(fd, "staging")
        rmtree_at(fd, "staging")  # already gone: not an error
    finally:
        os.close(fd)
    assert not staging.exists()
    assert (outside / "keep").read_text() == "keep"


def test_rmtree_at_removes_a_tree_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    (tmp_path / "top").mkdir()
    make_chain(tmp_path / "top", 1200)
    fd = open_root(tmp_path)
    try:
        rmtree_at(fd, "top")
    finally:
        os.close(fd)
    assert os.listdir(tmp_path) == []


def test_rmtree_at_removes_a_single_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    fd = open_root(tmp_path)
    try:
        rmtree_at(fd, "f")
    finally:
        os.close(fd)
    assert os.listdir(tmp_path) == []


def test_entry_fields_describe_the_opened_object(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"12345")
    fd = open_root(tmp_path)
    try:
        entries: list[Entry] = list(walk(fd, prefix="p/"))
    finally:
        os.close(fd)
    (entry,) = entries
    assert (entry.relpath, entry.rel, entry.name, entry.kind) == ("p/f", "f", "f", "file")
    assert entry.stat.st_size == 5


# --- streaming -----------------------------------------------------------------------------


def walk_peak_bytes(root: Path, folders: int, per_folder: int) -> int:
    import tracemalloc

    for folder in range(folders):
        sub = root / f"d{folder:04d}"
        sub.mkdir()
        for index in range(per_folder):
            (sub / f"file-{index:04d}").write_bytes(b"")
    fd = open_root(root)
    try:
        tracemalloc.start()
        count = sum(1 for _ in walk(fd))
        _current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        os.close(fd)
    assert count == folders * (per_folder + 1)
    return peak


def test_walk_memory_does_not_grow_with_the_number_of_files(tmp_path: Path) -> None:
    (tmp_path / "small").mkdir()
    (tmp_path / "large").mkdir()
    small = walk_peak_bytes(tmp_path / "small", 3, 20)
    large = walk_peak_bytes(tmp_path / "large", 40, 20)  # 13x the files, same folder width
    assert large < small * 1.5 + 16_384, (small, large)
