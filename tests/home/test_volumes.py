"""04 §2: every volume rule at load, and the jail of 04 §2.1 (``volume:path``, ``files`` by
default, machine paths, ``..``, symbolic links to files and folders, read-only volumes)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile_agent_yaml import clean_env, run_cli, snapshot_tree

from bundler.errors import InvalidInput
from bundler.home.homes import init_home, resolve_home, safe_folder_name
from bundler.home.volumes import (
    JailError,
    Volume,
    list_allowed_directories,
    load_volumes,
    resolve,
    split_volume,
)

SECRET = b"OUTSIDE-THE-VOLUME-d41d8"


@dataclass
class Setup:
    root: Path
    user: Path
    project: Path
    home: Path
    notes: Path
    docs: Path
    outside: Path
    env: dict[str, str]

    def agent_yaml(self, text: str) -> None:
        (self.project / "Agent.yaml").write_text(text)

    def volumes(self) -> list[Volume]:
        return load_volumes(self.project, environ=self.env)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    user, project, home = tmp_path / "user", tmp_path / "project", tmp_path / "home"
    notes, docs, outside = tmp_path / "notes", tmp_path / "docs", tmp_path / "outside"
    for folder in (user, project, notes, docs, outside):
        folder.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    made = Setup(tmp_path, user, project, home, notes, docs, outside, {"HOME": str(user)})
    made.agent_yaml(f"name: nano\ndata:\n  home: {home}\n")
    return made


def volume_yaml(setup: Setup, body: str) -> None:
    setup.agent_yaml(f"name: nano\ndata:\n  home: {setup.home}\nvolumes:\n{body}")


def refused(setup: Setup, match: str) -> InvalidInput:
    before = snapshot_tree(setup.root)
    with pytest.raises(InvalidInput, match=match) as raised:
        setup.volumes()
    assert snapshot_tree(setup.root) == before
    return raised.value


# --- load: every rule of 04 §2 ----------------------------------------------------------------


def test_files_volume_always_first_and_rw(setup: Setup) -> None:
    volumes = setup.volumes()
    assert [(v.name, v.mode) for v in volumes] == [("files", "rw")]
    assert volumes[0].path == setup.home / "files"


def test_volume_mode_defaults_to_ro_and_keeps_description(setup: Setup) -> None:
    volume_yaml(
        setup,
        f"  notes:\n    path: {setup.notes}\n    mode: rw\n    description: My notes\n"
        f"  docs:\n    path: {setup.docs}\n",
    )
    by_name = {v.name: v for v in setup.volumes()}
    assert (by_name["notes"].mode, by_name["notes"].description) == ("rw", "My notes")
    assert (by_name["docs"].mode, by_name["docs"].description) == ("ro", "")


def test_volume_path_tilde_and_relative_forms(setup: Setup) -> None:
    (setup.user / "Notes").mkdir()
    (setup.project / "shared").mkdir()
    volume_yaml(setup, "  a:\n    path: ~/Notes\n  b:\n    path: shared\n  c:\n    path: ../docs\n")
    paths = {v.name: v.path for v in setup.volumes()}
    assert paths["a"] == setup.user / "Notes"
    assert paths["b"] == setup.project / "shared"
    assert paths["c"] == setup.docs


@pytest.mark.parametrize("name", ["Notes", "my_notes", "a" * 33, "no tes", "notes.", "é"])
def test_volume_names_rule(setup: Setup, name: str) -> None:
    volume_yaml(setup, f"  '{name}':\n    path: {setup.notes}\n")
    refused(setup, "volume name")


def test_volume_name_of_32_characters_and_digits_dashes_allowed(setup: Setup) -> None:
    volume_yaml(setup, f"  {'a' * 30}-9:\n    path: {setup.notes}\n")
    assert setup.volumes()[1].name == "a" * 30 + "-9"


def test_volume_name_files_is_taken(setup: Setup) -> None:
    volume_yaml(setup, f"  files:\n    path: {setup.notes}\n")
    refused(setup, "'files' is taken")


def test_at_most_32_volumes_besides_files(setup: Setup) -> None:
    body = "".join(f"  v{i}:\n    path: {setup.notes}\n" for i in range(32))
    volume_yaml(setup, body)
    assert len(setup.volumes()) == 33
    volume_yaml(setup, body + f"  v32:\n    path: {setup.notes}\n")
    refused(setup, "at most 32 volumes besides files")


def test_volume_path_root_too_wide(setup: Setup) -> None:
    volume_yaml(setup, "  disk:\n    path: /\n")
    error = refused(setup, r"volumes.disk: path / is / \(the whole disk\) \(rule: too wide\)")
    assert error.path == "Agent.yaml:volumes.disk"


def test_volume_path_user_home_too_wide(setup: Setup) -> None:
    volume_yaml(setup, "  me:\n    path: '~'\n")
    refused(setup, r"volumes.me: .*is the user's home folder \(rule: too wide\)")


def test_volume_path_containing_user_home_too_wide(setup: Setup) -> None:
    volume_yaml(setup, f"  all:\n    path: {setup.root}\n")
    refused(setup, r"volumes.all: .*contains the user's home folder")


def test_volume_path_data_home_itself_too_wide(setup: Setup) -> None:
    setup.home.mkdir()
    volume_yaml(setup, f"  self:\n    path: {setup.home}\n")
    refused(setup, r"volumes.self: .*is the data home")


def test_volume_path_inside_data_home_too_wide(setup: Setup) -> None:
    (setup.home / "files").mkdir(parents=True)
    volume_yaml(setup, f"  inner:\n    path: {setup.home}/files\n")
    refused(setup, r"volumes.inner: .*is inside the data home")


def test_volume_path_containing_data_home_too_wide(setup: Setup) -> None:
    nested_home = setup.notes / "agent-home"
    nested_home.mkdir()
    setup.agent_yaml(
        f"name: nano\ndata:\n  home: {nested_home}\nvolumes:\n  notes:\n    path: {setup.notes}\n"
    )
    refused(setup, r"volumes.notes: .*contains the data home")


def test_volume_too_wide_compared_by_real_path(setup: Setup) -> None:
    (setup.outside / "sneaky").symlink_to(setup.user)
    volume_yaml(setup, f"  sneaky:\n    path: {setup.outside}/sneaky\n")
    refused(setup, r"volumes.sneaky: .*is the user's home folder")


def test_volume_unknown_key_refused(setup: Setup) -> None:
    volume_yaml(setup, f"  notes:\n    path: {setup.notes}\n    recursive: true\n")
    refused(setup, r"volumes.notes: unknown key 'recursive'")


def test_volume_missing_path_refused(setup: Setup) -> None:
    volume_yaml(setup, f"  notes:\n    path: {setup.notes}/absent\n")
    refused(setup, r"volumes.notes: path .* does not exist \(rule: path\)")


def test_volume_path_must_be_a_folder(setup: Setup) -> None:
    volume_yaml(setup, f"  notes:\n    path: {setup.outside}/secret.txt\n")
    refused(setup, r"volumes.notes: path .* is not a folder")


def test_volume_description_of_201_characters_refused(setup: Setup) -> None:
    volume_yaml(setup, f"  notes:\n    path: {setup.notes}\n    description: {'d' * 200}\n")
    assert setup.volumes()[1].description == "d" * 200
    volume_yaml(setup, f"  notes:\n    path: {setup.notes}\n    description: {'d' * 201}\n")
    refused(setup, r"volumes.notes.description: must be at most 200 characters")


def test_volume_mode_other_than_rw_ro_refused(setup: Setup) -> None:
    volume_yaml(setup, f"  notes:\n    path: {setup.notes}\n    mode: write\n")
    refused(setup, r"volumes.notes.mode: must be one of rw, ro")


def test_volumes_exclusive_with_allowed_paths(setup: Setup) -> None:
    volume_yaml(
        setup,
        f"  notes:\n    path: {setup.notes}\n"
        f"toolOptions:\n  bxai:\n    allowedPaths: [{setup.docs}]\n",
    )
    refused(setup, r"cannot be combined with toolOptions.bxai.allowedPaths \(rule: exclusive\)")


def test_allowed_paths_alone_means_no_volumes(setup: Setup) -> None:
    setup.agent_yaml(f"name: nano\ntoolOptions:\n  bxai:\n    allowedPaths: [{setup.docs}]\n")
    assert setup.volumes() == []


def test_load_volumes_creates_nothing(setup: Setup) -> None:
    volume_yaml(setup, f"  notes:\n    path: {setup.notes}\n")
    before = snapshot_tree(setup.root)
    setup.volumes()
    assert snapshot_tree(setup.root) == before
    assert not setup.home.exists()


def test_list_allowed_directories_never_shows_a_path(setup: Setup) -> None:
    volume_yaml(setup, f"  notes:\n    path: {setup.notes}\n    description: mine\n")
    listed = list_allowed_directories(setup.volumes())
    assert listed[1] == {"name": "notes", "mode": "ro", "description": "mine"}
    assert str(setup.root) not in json.dumps(listed)


def test_cli_home_volumes_json_is_the_get_volumes_answer(setup: Setup) -> None:
    volume_yaml(setup, f"  notes:\n    path: {setup.notes}\n    mode: rw\n")
    result = run_cli(
        "home", "volumes", "--json", "--project", str(setup.project), env=clean_env(setup.user)
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [v["name"] for v in document["volumes"]] == ["files", "notes"]
    assert all(set(v) == {"name", "mode", "description"} for v in document["volumes"])
    assert str(setup.root) not in result.stdout


# --- the jail of 04 §2.1 ------------------------------------------------------------------------


@pytest.fixture
def jail(setup: Setup) -> list[Volume]:
    init_home(resolve_home(setup.project, environ=setup.env))
    volume_yaml(
        setup, f"  notes:\n    path: {setup.notes}\n    mode: rw\n  docs:\n    path: {setup.docs}\n"
    )
    (setup.notes / "todo.md").write_text("todo")
    (setup.notes / "sub").mkdir()
    (setup.notes / "sub" / "deep.md").write_text("deep")
    (setup.docs / "manual.md").write_text("manual")
    (setup.home / "files" / "mine.txt").write_text("mine")
    return setup.volumes()


def jail_refused(path: str, mode: str, volumes: list[Volume], match: str, root: Path) -> None:
    with pytest.raises(JailError, match=match) as raised:
        resolve(path, mode, volumes)  # type: ignore[arg-type]
    # errors name volumes, never machine paths
    assert str(root) not in raised.value.message
    assert str(root) not in raised.value.path


def read(path: str, volumes: list[Volume]) -> bytes:
    with resolve(path, "read", volumes) as found:
        fd = found.open()
        try:
            return os.read(fd, 1000)
        finally:
            os.close(fd)


@pytest.mark.parametrize(
    ("text", "volume", "inner"),
    [
        ("notes:todo.md", "notes", "todo.md"),
        ("todo.md", "files", "todo.md"),
        ("Notes:todo.md", "files", "Notes:todo.md"),
        ("my_vol:x", "files", "my_vol:x"),
        ("a:b:c", "a", "b:c"),
        (":x", "files", ":x"),
    ],
)
def test_volume_prefix_only_when_it_matches_the_grammar(text: str, volume: str, inner: str) -> None:
    assert split_volume(text) == (volume, inner)


def test_path_without_volume_is_in_files(jail: list[Volume]) -> None:
    assert read("mine.txt", jail) == b"mine"
    with resolve("mine.txt", "read", jail) as found:
        assert found.display == "files:mine.txt"


def test_volume_path_resolves_inside_its_volume(jail: list[Volume]) -> None:
    assert read("notes:todo.md", jail) == b"todo"
    assert read("notes:sub/deep.md", jail) == b"deep"
    assert read("notes:./sub//deep.md", jail) == b"deep"


def test_dotdot_that_stays_inside_is_allowed(jail: list[Volume]) -> None:
    assert read("notes:sub/../todo.md", jail) == b"todo"


@pytest.mark.parametrize("path", ["notes:../outside/secret.txt", "../x", "notes:sub/../../x", ".."])
def test_dotdot_climbing_out_is_refused(jail: list[Volume], setup: Setup, path: str) -> None:
    jail_refused(path, "read", jail, "climbs out of volume", setup.root)


@pytest.mark.parametrize("path", ["/etc/passwd", "notes:/etc/passwd", "~/x", "~", "notes:~/x"])
def test_full_machine_path_is_refused(jail: list[Volume], setup: Setup, path: str) -> None:
    jail_refused(path, "read", jail, "full machine paths are refused", setup.root)


def test_machine_path_of_the_volume_itself_is_refused(jail: list[Volume], setup: Setup) -> None:
    jail_refused(str(setup.notes / "todo.md"), "read", jail, "full machine paths", setup.root)


def test_unknown_volume_is_refused(jail: list[Volume], setup: Setup) -> None:
    jail_refused("music:song.mp3", "read", jail, "there is no volume named music", setup.root)


def test_symlink_to_a_file_outside_is_refused(jail: list[Volume], setup: Setup) -> None:
    (setup.notes / "link.txt").symlink_to(setup.outside / "secret.txt")
    for mode in ("read", "write", "delete", "list"):
        jail_refused("notes:link.txt", mode, jail, "is a symbolic link", setup.root)


def test_symlink_to_a_folder_outside_is_refused(jail: list[Volume], setup: Setup) -> None:
    (setup.notes / "escape").symlink_to(setup.outside)
    jail_refused(
        "notes:escape/secret.txt", "read", jail, "notes:escape is a symbolic link", setup.root
    )
    jail_refused("notes:escape/new.txt", "write", jail, "is a symbolic link", setup.root)
    assert sorted(os.listdir(setup.outside)) == ["secret.txt"]


def test_symlink_inside_the_volume_is_refused_too(jail: list[Volume], setup: Setup) -> None:
    (setup.notes / "alias.md").symlink_to("todo.md")
    (setup.notes / "subalias").symlink_to("sub")
    jail_refused("notes:alias.md", "read", jail, "symbolic link", setup.root)
    jail_refused("notes:subalias/deep.md", "read", jail, "symbolic link", setup.root)


def test_symlink_in_files_volume_is_refused(jail: list[Volume], setup: Setup) -> None:
    (setup.home / "files" / "up").symlink_to(setup.home)
    jail_refused("up/chat.db", "read", jail, "files:up is a symbolic link", setup.root)


@pytest.mark.parametrize("mode", ["write", "move", "delete"])
def test_read_only_volume_refuses_writes(jail: list[Volume], setup: Setup, mode: str) -> None:
    jail_refused(
        "docs:manual.md", mode, jail, f"volume docs is read-only \\({mode} refused\\)", setup.root
    )


@pytest.mark.parametrize("mode", ["read", "list", "copy"])
def test_read_only_volume_can_be_read_listed_copied(jail: list[Volume], mode: str) -> None:
    with resolve("docs:manual.md", mode, jail) as found:  # type: ignore[arg-type]
        assert found.exists


def test_listing_a_volume_root(jail: list[Volume]) -> None:
    with resolve("docs:", "list", jail) as found:
        assert found.name == "."
        assert sorted(os.listdir(found.dir_fd)) == ["manual.md"]


def test_volume_itself_cannot_be_deleted(jail: list[Volume], setup: Setup) -> None:
    jail_refused("notes:", "delete", jail, "cannot delete the volume itself", setup.root)


def test_write_creates_through_the_resolved_descriptor(jail: list[Volume], setup: Setup) -> None:
    with resolve("notes:sub/new.md", "write", jail) as found:
        assert not found.exists
        fd = found.open(os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        os.write(fd, b"new")
        os.close(fd)
    assert (setup.notes / "sub" / "new.md").read_bytes() == b"new"


def test_missing_file_for_read_and_missing_folder_for_write(
    jail: list[Volume], setup: Setup
) -> None:
    jail_refused("notes:absent.md", "read", jail, "notes:absent.md: does not exist", setup.root)
    jail_refused("notes:nope/new.md", "write", jail, "folder notes:nope does not exist", setup.root)
    jail_refused("notes:todo.md/x", "write", jail, "notes:todo.md is not a folder", setup.root)


def test_fifo_is_not_opened(jail: list[Volume], setup: Setup) -> None:
    os.mkfifo(setup.notes / "pipe")
    with (
        resolve("notes:pipe", "read", jail) as found,
        pytest.raises(JailError, match="not a regular"),
    ):
        found.open()


def test_volume_replaced_after_load_is_refused(jail: list[Volume], setup: Setup) -> None:
    os.rename(setup.notes, setup.root / "notes-old")
    os.symlink(setup.outside, setup.notes)
    jail_refused("notes:secret.txt", "read", jail, "volume notes is not available", setup.root)
    os.unlink(setup.notes)
    setup.notes.mkdir()
    (setup.notes / "secret.txt").write_bytes(SECRET)
    jail_refused("notes:secret.txt", "read", jail, "was replaced since it was loaded", setup.root)


def test_resolve_leaks_no_descriptor(jail: list[Volume], setup: Setup) -> None:
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        read("notes:sub/deep.md", jail)
        with pytest.raises(JailError):
            resolve("notes:sub/../../x", "read", jail)
        with pytest.raises(JailError):
            resolve("notes:nope/x", "write", jail)
    assert len(os.listdir("/proc/self/fd")) == before


# --- racing the jail --------------------------------------------------------------------------

_RACER = """
import os, sys
volume, outside = sys.argv[1], sys.argv[2]
sub, real = os.path.join(volume, "sub"), os.path.join(volume, "sub.real")
leaf = os.path.join(real, "file.txt")
while True:
    os.rename(sub, real)
    os.symlink(outside, sub)
    os.rename(leaf, leaf + ".kept")
    os.symlink(os.path.join(outside, "file.txt"), leaf)
    os.unlink(sub)
    os.rename(real, sub)
    os.unlink(os.path.join(sub, "file.txt"))
    os.rename(os.path.join(sub, "file.txt.kept"), os.path.join(sub, "file.txt"))
"""


@pytest.mark.slow
def test_swapping_folders_and_files_for_links_never_leaks_outside(setup: Setup) -> None:
    """06 §3 R3 for the jail: a process swaps ``sub`` for a link to the outside folder and
    ``sub/file.txt`` for a link to an outside file, in a loop; every read either answers the
    volume's own bytes or is refused."""
    import subprocess
    import sys

    iterations = int(os.environ.get("BUNDLER_SLOW_SAMPLE") or 3000)
    (setup.notes / "sub").mkdir()
    (setup.notes / "sub" / "file.txt").write_bytes(b"inside")
    (setup.outside / "file.txt").write_bytes(SECRET)
    volume_yaml(setup, f"  notes:\n    path: {setup.notes}\n    mode: rw\n")
    volumes = setup.volumes()
    racer = subprocess.Popen([sys.executable, "-c", _RACER, str(setup.notes), str(setup.outside)])
    answers = {"inside": 0, "refused": 0}
    try:
        for _ in range(iterations):
            try:
                data = read("notes:sub/file.txt", volumes)
            except (JailError, OSError):
                answers["refused"] += 1
                continue
            assert data == b"inside", "a read through the jail answered bytes from outside"
            answers["inside"] += 1
        racing = racer.poll() is None
    finally:
        racer.kill()
        racer.wait()
    assert racing, "the racer stopped early, so nothing was raced"
    assert answers["inside"] + answers["refused"] == iterations
    print(answers)


def test_files_folder_replaced_by_a_link_is_refused(setup: Setup) -> None:
    setup.home.mkdir()
    (setup.home / "files").symlink_to(setup.outside)
    volumes = setup.volumes()
    jail_refused("secret.txt", "read", volumes, "volume files is not available", setup.root)


def test_overlong_name_is_a_jail_error_not_an_os_error(jail: list[Volume], setup: Setup) -> None:
    jail_refused("notes:" + "n" * 300, "read", jail, "cannot be reached", setup.root)
    jail_refused("notes:" + "n" * 300 + "/x", "read", jail, "cannot be reached", setup.root)


def test_path_resolved_for_reading_cannot_be_opened_for_writing(
    jail: list[Volume], setup: Setup
) -> None:
    for path in ("docs:manual.md", "notes:todo.md"):
        with resolve(path, "read", jail) as found, pytest.raises(JailError, match="resolved for"):
            found.open(os.O_WRONLY | os.O_TRUNC)
    assert (setup.docs / "manual.md").read_text() == "manual"
    assert (setup.notes / "todo.md").read_text() == "todo"


def test_link_swapped_in_after_resolution_is_refused_at_open(
    jail: list[Volume], setup: Setup
) -> None:
    with resolve("notes:todo.md", "read", jail) as found:
        os.unlink(setup.notes / "todo.md")
        (setup.notes / "todo.md").symlink_to(setup.outside / "secret.txt")
        with pytest.raises(JailError, match="is a symbolic link"):
            found.open()


# --- properties ------------------------------------------------------------------------------


_COMPONENTS = st.sampled_from(["a", "b", "..", ".", "", "link", "file.txt", "~", "x:y"])


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    parts=st.lists(_COMPONENTS, max_size=8), prefix=st.sampled_from(["", "notes:", "/", "files:"])
)
def test_any_resolution_stays_inside_its_volume(
    jail: list[Volume], setup: Setup, parts: list[str], prefix: str
) -> None:
    """Whatever the path, a resolution either is refused or holds a folder inside the volume
    (checked through the kernel's own name of the open descriptor)."""
    tree = setup.notes
    if not (tree / "a").exists():
        for base in (tree, setup.home / "files"):
            (base / "a" / "b").mkdir(parents=True)
            (base / "file.txt").write_text("f")
            (base / "link").symlink_to(setup.outside)
            (base / "a" / "link").symlink_to(setup.outside)
    text = prefix + "/".join(parts)
    try:
        found = resolve(text, "write", jail)
    except JailError as err:
        assert str(setup.root) not in err.message
        return
    with found:
        held = Path(os.readlink(f"/proc/self/fd/{found.dir_fd}"))
        assert held == found.volume.path or found.volume.path in held.parents
        assert found.display.startswith(f"{found.volume.name}:")
        assert not (found.name != "." and (held / found.name).is_symlink())


@given(name=st.text(min_size=1, max_size=40))
def test_safe_folder_name_keeps_one_character_per_code_point(name: str) -> None:
    try:
        folder = safe_folder_name(name)
    except InvalidInput:
        assert set(name) <= {"."}
        return
    assert len(folder) == len(name)
    assert all(c.isascii() and (c.isalnum() or c in ".-_") for c in folder)
    assert folder not in (".", "..")


def test_yaml_merge_key_override_is_not_a_duplicate(setup: Setup) -> None:
    setup.agent_yaml(
        f"name: nano\ndata:\n  home: {setup.home}\n"
        f"defaults: &vol\n  path: {setup.notes}\n  mode: ro\n"
        "volumes:\n  notes:\n    <<: *vol\n    mode: rw\n"
    )
    assert [(v.name, v.mode) for v in setup.volumes()] == [("files", "rw"), ("notes", "rw")]
