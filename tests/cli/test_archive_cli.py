"""The archive form through the real CLI: pack, unpack, export --out FILE.tar, and
verify / inspect / import of an archive; the hostile corpus refused with one line, exit 3,
nothing left behind (beside the destination, in the temporary folder, in the install).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from support import bundlefactory as bf
from support import hostile_archives
from support.faultinject import ptrace_unavailable, trace_log
from support.kit import clean_env, cli_command, one_error, run_cli, tree_snapshot

from bundler.bundle.history import recent_destinations

EPOCH = {"SOURCE_DATE_EPOCH": "1700000000"}


@pytest.fixture(scope="module")
def packed(exported: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("packed") / "bundle.tar"
    done = run_cli(["bundle", "pack", str(exported), str(out)])
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture
def tmpdir_env(tmp_path: Path) -> dict[str, str]:
    """A private TMPDIR, so what verify/inspect leave (or not) there can be seen."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    return {"TMPDIR": str(folder)}


def bundler(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), env=env, errors="backslashreplace", timeout=300)


# --- round trips and determinism ---------------------------------------------------------------


def test_pack_then_unpack_gives_the_folder_back_byte_for_byte(
    exported: Path, packed: Path, tmp_path: Path
) -> None:
    done = bundler("bundle", "unpack", str(packed), str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(exported)
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_the_same_bundle_packs_to_the_same_bytes_after_touching_the_source(
    exported: Path, packed: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    for path in [copy, *copy.rglob("*")]:
        os.utime(path, (1, 2))
        os.chown(path, 1234, 5678)
    done = bundler("bundle", "pack", str(copy), str(tmp_path / "again.tar"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "again.tar").read_bytes() == packed.read_bytes()


def test_the_archive_is_private_like_the_bundle_folder(packed: Path) -> None:
    assert packed.stat().st_mode & 0o777 == 0o600


def test_gnu_tar_lists_the_packed_archive_cleanly(packed: Path) -> None:
    listed = subprocess.run(["tar", "-tvf", str(packed)], capture_output=True, text=True)
    assert listed.returncode == 0 and listed.stderr == ""
    assert "zeroclaw-agent.toml" in listed.stdout.splitlines()[2]  # root files first


def test_export_to_an_archive_equals_packing_the_exported_folder(tmp_path: Path) -> None:
    install = bf.write_install(tmp_path / "install")
    folder = tmp_path / "folder"
    archive = tmp_path / "direct.tar"
    env = {**EPOCH, "TMPDIR": str(tmp_path)}
    for out in (folder, archive):
        done = bundler(
            "--install", str(install), "agents", "export", "researcher", "--out", str(out), env=env
        )
        assert done.returncode == 0, done.stderr
    assert f"exported researcher to {archive}" in done.stdout
    done = bundler("bundle", "pack", str(folder), str(tmp_path / "packed.tar"))
    assert done.returncode == 0, done.stderr
    assert archive.read_bytes() == (tmp_path / "packed.tar").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["direct.tar", "folder", "install", "packed.tar"]
    assert recent_destinations()[-1] == str(archive)


def _without_path(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k != "bundle"}


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_verify_and_inspect_of_the_archive_equal_those_of_the_folder(
    exported: Path, packed: Path, command: str, tmpdir_env: dict[str, str]
) -> None:
    of_folder = bundler("bundle", command, str(exported), "--json", env=tmpdir_env)
    of_archive = bundler("bundle", command, str(packed), "--json", env=tmpdir_env)
    assert of_folder.returncode == of_archive.returncode == 0, of_archive.stderr
    folder_json, archive_json = json.loads(of_folder.stdout), json.loads(of_archive.stdout)
    assert _without_path(folder_json) == _without_path(archive_json)
    assert archive_json.get("bundle", str(packed)) == str(packed)
    assert os.listdir(tmpdir_env["TMPDIR"]) == []


def test_importing_the_archive_equals_importing_the_folder(
    exported: Path, packed: Path, tmp_path: Path, tmpdir_env: dict[str, str]
) -> None:
    results = {}
    for name, source in (("folder", exported), ("archive", packed)):
        install = tmp_path / name
        install.mkdir()
        (install / "config.toml").write_text("")
        done = bundler(
            "--install", str(install), "agents", "import", str(source), "--accept-risks",
            env=tmpdir_env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        snap = tree_snapshot(install)
        results[name] = {k: v for k, v in snap.items() if not k.startswith("data/state/imports")}
        assert not [n for n in os.listdir(install) if n.startswith(".bundler-")]
    assert results["folder"] == results["archive"]
    receipt = next((tmp_path / "archive" / "data/state/imports").glob("*.toml")).read_text()
    assert f'bundle = "{packed}"' in receipt
    assert os.listdir(tmpdir_env["TMPDIR"]) == []


def test_a_dry_run_import_of_an_archive_writes_nothing_in_the_install(
    packed: Path, tmp_path: Path, tmpdir_env: dict[str, str]
) -> None:
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text("")
    before = tree_snapshot(install, mtimes=True, dir_mtimes=True)
    done = bundler(
        "--install", str(install), "agents", "import", str(packed), "--dry-run", env=tmpdir_env
    )
    assert done.returncode == 0, done.stderr
    assert f"would import agent researcher from {packed}" in done.stdout
    assert tree_snapshot(install, mtimes=True, dir_mtimes=True) == before
    assert os.listdir(tmpdir_env["TMPDIR"]) == []


# --- refusals ----------------------------------------------------------------------------------


def test_pack_refuses_an_existing_archive_without_force_and_replaces_it_with_force(
    exported: Path, packed: Path, tmp_path: Path
) -> None:
    out = tmp_path / "b.tar"
    shutil.copy(packed, out)
    out.write_bytes(out.read_bytes()[:-512] + b"x" * 512)  # still starts with a tar header
    done = bundler("bundle", "pack", str(exported), str(out))
    assert done.returncode == 1 and one_error(done.stderr) and "--force" in done.stderr
    done = bundler("bundle", "pack", str(exported), str(out), "--force")
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == packed.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["b.tar"]


def test_pack_never_replaces_a_file_that_is_not_an_archive(exported: Path, tmp_path: Path) -> None:
    out = tmp_path / "notes.txt"
    out.write_text("my notes\n")
    done = bundler("bundle", "pack", str(exported), str(out), "--force")
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "not a bundle archive" in done.stderr
    assert out.read_text() == "my notes\n"


def test_pack_refuses_a_folder_that_is_not_a_sound_bundle(exported: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    (copy / "config.toml").write_text("[agents]\n")
    done = bundler("bundle", "pack", str(copy), str(tmp_path / "b.tar"))
    assert done.returncode == 3 and one_error(done.stderr), done.stderr
    assert not (tmp_path / "b.tar").exists()


def test_pack_refuses_an_archive_inside_the_bundle(exported: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    done = bundler("bundle", "pack", str(copy), str(copy / "workspace" / "b.tar"))
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert tree_snapshot(copy) == tree_snapshot(exported)


def test_unpack_replaces_a_bundle_only_with_force_and_never_another_folder(
    exported: Path, packed: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "dest"
    shutil.copytree(exported, dest)
    (dest / "workspace" / "extra.md").write_text("old\n")
    done = bundler("bundle", "unpack", str(packed), str(dest))
    assert done.returncode == 1 and one_error(done.stderr) and "--force" in done.stderr
    done = bundler("bundle", "unpack", str(packed), str(dest), "--force")
    assert done.returncode == 0, done.stderr
    assert tree_snapshot(dest) == tree_snapshot(exported)
    other = tmp_path / "other"
    other.mkdir()
    (other / "mine.txt").write_text("x")
    done = bundler("bundle", "unpack", str(packed), str(other), "--force")
    assert done.returncode == 1 and one_error(done.stderr)
    assert sorted(os.listdir(tmp_path)) == ["dest", "other"]


def test_unpack_refuses_an_archive_whose_bundle_does_not_verify(
    exported: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    (copy / "workspace" / "README.md").write_text("tampered\n")
    from bundler.bundle.archive_write import bundle_members, write_tar
    from bundler.fs.durable import open_dir

    fd = open_dir(copy)
    try:
        with open(tmp_path / "t.tar", "wb") as stream:
            write_tar(fd, bundle_members(fd), stream)
    finally:
        os.close(fd)
    shutil.rmtree(copy)
    done = bundler("bundle", "unpack", str(tmp_path / "t.tar"), str(tmp_path / "out"))
    assert done.returncode == 3 and one_error(done.stderr), done.stderr
    assert "workspace/README.md" in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["t.tar"]


# --- the hostile corpus ------------------------------------------------------------------------


def _cli_cases() -> list[str]:
    # the two limit cases need limits far below the real ones: tests/bundle/test_archive_read.py
    return [name for name in _all_cases() if name not in ("too_many_members", "total_size_limit")]


def _all_cases() -> list[str]:
    return list(hostile_archives.CASE_NAMES)


# one of each kind of fault, for the commands that share unpack's reader; every case: slow
_REPRESENTATIVE = (
    "symlink",
    "dotdot",
    "pax_path_dotdot",
    "file_under_a_file",
    "trailing_garbage",
    "not_a_tar",
)


def _shared_reader_cases() -> list[Any]:
    """The representative cases, and the rest as ``slow``: all of them, or where CI asks for a
    sample (BUNDLER_SLOW_SAMPLE) that many, spread over the corpus."""
    rest = [name for name in _cli_cases() if name not in _REPRESENTATIVE]
    wanted = os.environ.get("BUNDLER_SLOW_SAMPLE", "")
    if wanted.isdigit() and 0 < int(wanted) < len(rest):
        step = len(rest) / int(wanted)
        rest = [rest[int(index * step)] for index in range(int(wanted))]
    return [
        *(pytest.param(name) for name in _cli_cases() if name in _REPRESENTATIVE),
        *(pytest.param(name, marks=pytest.mark.slow) for name in rest),
    ]


@pytest.fixture(scope="module")
def corpus(exported: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("corpus")
    written = {}
    for case in hostile_archives.cases(exported):
        path = folder / f"{case.name}.tar"
        path.write_bytes(case.data)
        written[case.name] = path
    return written


def _fragment(exported: Path, name: str) -> str:
    return next(c.fragment for c in hostile_archives.cases(exported) if c.name == name)


def _assert_refused(done: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert done.returncode == 3, done.stderr
    assert one_error(done.stderr), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert fragment in done.stderr, done.stderr


@pytest.mark.parametrize("case", _cli_cases())
def test_hostile_archive_unpack_is_refused_leaving_nothing(
    exported: Path, corpus: dict[str, Path], tmp_path: Path, case: str
) -> None:
    archive = tmp_path / "hostile.tar"
    shutil.copy(corpus[case], archive)
    done = bundler("bundle", "unpack", str(archive), str(tmp_path / "out"))
    _assert_refused(done, _fragment(exported, case))
    assert sorted(os.listdir(tmp_path)) == ["hostile.tar"]


@pytest.mark.parametrize("case", _shared_reader_cases())
def test_hostile_archive_verify_is_refused_leaving_nothing(
    exported: Path, corpus: dict[str, Path], case: str, tmpdir_env: dict[str, str]
) -> None:
    done = bundler("bundle", "verify", str(corpus[case]), env=tmpdir_env)
    _assert_refused(done, _fragment(exported, case))
    assert os.listdir(tmpdir_env["TMPDIR"]) == []


@pytest.mark.parametrize("case", _shared_reader_cases())
def test_hostile_archive_import_is_refused_leaving_the_install_unchanged(
    exported: Path, corpus: dict[str, Path], tmp_path: Path, case: str, tmpdir_env: dict[str, str]
) -> None:
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text("")
    before = tree_snapshot(install, mtimes=True)
    done = bundler(
        "--install", str(install), "agents", "import", str(corpus[case]), "--accept-risks",
        env=tmpdir_env,
    )  # fmt: skip
    _assert_refused(done, _fragment(exported, case))
    assert tree_snapshot(install, mtimes=True) == before
    assert os.listdir(tmpdir_env["TMPDIR"]) == []


def test_a_long_bundle_is_packed_past_the_page_cache_to_the_same_bytes(tmp_path: Path) -> None:
    """A bundle of 48 MB is packed with direct writes (a second, O_DIRECT descriptor of the
    staging file, aligned pwritev2 calls); the archive is the same bytes, and unpacks to the
    bundle."""
    from support.faultinject import ptrace_unavailable, trace_log
    from support.kit import clean_env, cli_command

    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    big = bf.big_bundle(tmp_path, "big", b"pack")
    out = tmp_path / "big.tar"
    cmd = [*cli_command(), "bundle", "pack", str(big), str(out)]
    done, trace = trace_log(cmd, ["openat", "pwritev2"], env=clean_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == bf.pack_bytes(big)
    assert "/proc/self/fd/" in trace and "O_DIRECT" in trace and "pwritev2(" in trace
    unpacked = run_cli(["bundle", "unpack", str(out), str(tmp_path / "unpacked")])
    assert unpacked.returncode == 0, unpacked.stderr
    assert tree_snapshot(tmp_path / "unpacked") == tree_snapshot(big)


# --- what other tar programs write, and what none does -------------------------------------


def unpack_from_pipe(data: bytes, dest: Path) -> subprocess.CompletedProcess[str]:
    """``bundle unpack /dev/stdin DEST`` with ``data`` coming down a pipe (read as it streams)."""
    read_end, write_end = os.pipe()

    def feed() -> None:
        with os.fdopen(write_end, "wb") as pipe, contextlib.suppress(BrokenPipeError):
            pipe.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        return run_cli(["bundle", "unpack", "/dev/stdin", str(dest)], stdin=read_end)
    finally:
        os.close(read_end)
        writer.join()


TAR_PROGRAMS = {
    "gnu_tar_gnu": ["tar", "--format=gnu", "-cf"],
    "gnu_tar_pax": ["tar", "--format=pax", "-cf"],
    "gnu_tar_ustar": ["tar", "--format=ustar", "-cf"],
    "python_tarfile": [sys.executable, "-m", "tarfile", "-c"],
}


@pytest.mark.parametrize("program", TAR_PROGRAMS)
def test_an_archive_another_tar_program_made_unpacks_from_a_file_and_a_pipe(
    exported: Path, tmp_path: Path, program: str
) -> None:
    """Every tar program pads with zeros and writes what the bundle's checksums list: what
    they make of a bundle folder unpacks to that folder, read whole or as it streams."""
    archive = tmp_path / "made.tar"
    tops = sorted(p.name for p in exported.iterdir())
    subprocess.run([*TAR_PROGRAMS[program], str(archive), *tops], cwd=exported, check=True)
    assert archive.read_bytes() != bf.pack_bytes(exported)
    done = bundler("bundle", "unpack", str(archive), str(tmp_path / "from-file"))
    assert done.returncode == 0, done.stderr
    assert tree_snapshot(tmp_path / "from-file") == tree_snapshot(exported)
    piped = unpack_from_pipe(archive.read_bytes(), tmp_path / "from-pipe")
    assert piped.returncode == 0, piped.stderr
    assert tree_snapshot(tmp_path / "from-pipe") == tree_snapshot(exported)


@pytest.mark.parametrize("case", ["padding_not_zero", "padding_not_zero_after_a_pax_header"])
def test_an_archive_padded_with_bytes_that_are_not_zeros_is_refused_from_a_pipe(
    exported: Path, corpus: dict[str, Path], tmp_path: Path, case: str
) -> None:
    """Read as it streams, the same refusal as from a file (the corpus's own test): one line,
    exit 3, nothing published."""
    done = unpack_from_pipe(corpus[case].read_bytes(), tmp_path / "out")
    _assert_refused(done, _fragment(exported, case))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("read", ["file", "pipe"])
def test_a_member_the_checksums_do_not_list_is_refused_before_its_data_is_written(
    corpus: dict[str, Path], tmp_path: Path, read: str
) -> None:
    """A file ``checksums.xxh3`` does not list, declaring a gibibyte: refused from its header,
    no file made for it (from a pipe, the files before it were made: the trace is not empty
    of creations). It was written, up to the member size limit, and refused afterwards."""
    if (why := ptrace_unavailable()) is not None:
        pytest.skip(why)
    archive = corpus["member_not_in_checksums_declaring_a_gibibyte"]
    dest = tmp_path / "out"
    source = str(archive) if read == "file" else "/dev/stdin"
    command = shlex.join([*cli_command(), "bundle", "unpack", source, str(dest)])
    if read == "pipe":
        command = f"cat {shlex.quote(str(archive))} | {command}"
    done, log = trace_log(["sh", "-c", command], ["openat"], env=clean_env())
    _assert_refused(done, "member workspace/extra is not listed in checksums.xxh3")
    created = [line for line in log.splitlines() if "O_CREAT" in line]
    assert not [line for line in created if '"extra"' in line], created
    if read == "pipe":
        assert any('"README.md"' in line for line in created), created
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.parametrize("case", ["member_not_in_checksums", "member_before_checksums_not_in_them"])
def test_a_member_the_checksums_do_not_list_is_refused_from_a_pipe(
    exported: Path, corpus: dict[str, Path], tmp_path: Path, case: str
) -> None:
    done = unpack_from_pipe(corpus[case].read_bytes(), tmp_path / "out")
    _assert_refused(done, _fragment(exported, case))
    assert os.listdir(tmp_path) == []
