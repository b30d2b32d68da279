"""Journals and receipts are bundler's own files, but they sit in a folder others can write to
and a crash or a disk can damage them: recovery and undo act only on what they can trust.

A journal (03 §3.2) names what recovery removes, moves back and writes; a receipt (03 §4) what
an undo removes. Every name and path in either is checked before anything is done: a damaged
or hand-written one is refused in one line, and nothing outside the install (nor, for a
journal, anything at all) changes. Found by a fuzzer of receipts and journals.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from support import bundlefactory as bf
from support.installs import run_cli
from support.kit import one_error, tree_snapshot

from bundler.install.journal import Journal

TOKEN = "AAAAAAAAAAAA"
STAGING = f".bundler-import-{TOKEN}"
SECRET = "sk-local-prod-key-1234567890"
CONFIG = (
    '[agents.lead]\nmodel_provider = "openai.prod"\nrisk_profile = "strict"\n\n'
    f'[providers.models.openai.prod]\napi_key = "{SECRET}"\nmodel = "gpt"\n\n'
    '[risk_profiles.strict]\nlevel = "readonly"\n'
)


def bundler(install: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["--install", str(install), *args], timeout=60)


@pytest.fixture
def scene(tmp_path: Path) -> dict[str, Path]:
    """An install after a real import, and a folder and a file beside it that nothing may
    touch."""
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text(CONFIG)
    bundle = bf.build_bundle(tmp_path / "bundle")
    done = bundler(install, "agents", "import", str(bundle), "--accept-risks", "--json")
    assert done.returncode == 0, done.stderr
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "kept").write_text("kept\n")
    (tmp_path / "victimfile").write_text("kept\n")
    (tmp_path / "victim.partial").write_text("kept\n")
    return {
        "install": install,
        "receipt": Path(json.loads(done.stdout)["receipt"]),
        "root": tmp_path,
    }


def journal_fields(**changed: Any) -> dict[str, Any]:
    """A journal as an uncommitted import writes it, with ``changed`` fields."""
    fields = Journal(
        kind="import",
        token=TOKEN,
        old_config="0" * 32,
        new_config="1" * 32,
        config_tmp=f".config.toml.bundler-{TOKEN}",
        config_dir=".",
        receipt_stem="20261203T000000Z-researcher",
        receipt_text="format = 1\n",
    ).__dict__
    fields.update(changed)
    return fields


def plant_journal(install: Path, raw: bytes) -> Path:
    staging = install / STAGING
    staging.mkdir(mode=0o700)
    (staging / "journal.toml").write_bytes(raw)
    return staging


def assert_refused_and_untouched(
    done: subprocess.CompletedProcess[str], root: Path, before: dict[str, Any]
) -> None:
    text = done.stdout + done.stderr
    assert done.returncode in (1, 3) and one_error(done.stderr), text
    assert "Traceback" not in text and SECRET not in text
    assert tree_snapshot(root) == before


HOSTILE_JOURNALS = {
    # each once made recovery reach outside the install, or end in a traceback
    "token_climbs_out": {"token": f"{TOKEN}/../../victim"},
    "token_of_another_folder": {"token": "BBBBBBBBBBBB"},
    "config_tmp_climbs_out": {"config_tmp": "../victimfile"},
    "config_tmp_absolute": {"config_tmp": "/tmp/victimfile"},
    "receipt_stem_climbs_out": {"receipt_stem": "../../../victim"},
    "move_outside": {"moves": [{"src": f"{STAGING}/w", "dst": "../victim", "tree": "x"}]},
    "move_not_a_table": {"moves": ["x"]},
    "moves_not_a_list": {"moves": 5},
    "parents_not_paths": {"parents": [1]},
    "emptied_mode_too_large": {"emptied": [{"path": "zz", "mode": 2**70}]},
    "emptied_setuid_text": {"emptied": [{"path": "zz", "mode": "4777"}]},
    "remove_parents_dotdot": {"remove_parents": [".."]},
    "audit_without_path": {"audit": [{"old": False, "new": True, "via": "x"}]},
    "kind_unknown": {"kind": "\x1b]0;PWNED\x07"},
    # an undo's taken files: recovery moves each back to src, or unlinks it in its staging
    "take_staged_outside": {
        "takes": [{"src": "zz", "dst": "../victim/kept", "size": 5, "digest": "x"}]
    },
    "take_staged_deeper": {
        "takes": [{"src": "zz", "dst": f"{STAGING}/a/../../victim", "size": 5, "digest": "x"}]
    },
    "take_put_back_outside": {
        "takes": [{"src": "../victim/new", "dst": f"{STAGING}/0", "size": 5, "digest": "x"}]
    },
    "take_size_text": {"takes": [{"src": "zz", "dst": f"{STAGING}/0", "size": "5", "digest": ""}]},
    "prune_climbs_out": {"prune": ["../victim"]},
    "undone_receipt_climbs_out": {"undone_receipt": "../../../victimfile.toml"},
    # the staged listing recovery publishes beside the receipt it writes
    "receipt_files_climbs_out": {"receipt_files": "../../victimfile"},
    "receipt_files_without_its_digest": {
        "receipt_files": "receipt.files",
        "receipt_text": 'format = 1\nlisting = { xxh3_128 = 5, bytes = "x" }\n',
    },
    "receipt_files_receipt_not_toml": {"receipt_files": "receipt.files", "receipt_text": "[["},
}


@pytest.mark.parametrize("changed", HOSTILE_JOURNALS.values(), ids=HOSTILE_JOURNALS.keys())
def test_a_journal_naming_anything_recovery_cannot_trust_is_refused(
    scene: dict[str, Path], changed: dict[str, Any]
) -> None:
    install, root = scene["install"], scene["root"]
    plant_journal(install, tomli_w.dumps(journal_fields(**changed)).encode())
    before = tree_snapshot(root)
    for dry_run in (["--dry-run"], []):
        done = bundler(install, "recover", "--install", str(install), *dry_run)
        assert_refused_and_untouched(done, root, before)
        assert "damaged" in done.stderr and "\x1b" not in done.stderr
    # an import meanwhile refuses too: it never clears a journal it cannot read
    again = bundler(install, "agents", "import", str(root / "bundle"), "--as", "second")
    assert_refused_and_untouched(again, root, before)


@pytest.mark.parametrize(
    "raw",
    [b"\xff\xfe not text", b"kind = [", b"x = " + b"[" * 5000 + b"]" * 5000],
    ids=["not_utf8", "not_toml", "nested_past_the_parser"],
)
def test_a_journal_that_does_not_parse_is_refused_not_taken_for_none(
    scene: dict[str, Path], raw: bytes
) -> None:
    """It used to count as no journal: the staging folder was removed as if nothing outside it
    had changed, though its moves had."""
    install, root = scene["install"], scene["root"]
    plant_journal(install, raw)
    before = tree_snapshot(root)
    done = bundler(install, "recover", "--install", str(install))
    assert_refused_and_untouched(done, root, before)
    assert "damaged" in done.stderr


def test_a_journal_that_is_a_fifo_is_refused_without_waiting(scene: dict[str, Path]) -> None:
    install, root = scene["install"], scene["root"]
    staging = install / STAGING
    staging.mkdir(mode=0o700)
    os.mkfifo(staging / "journal.toml")
    before = tree_snapshot(root)
    done = bundler(install, "recover", "--install", str(install))
    assert_refused_and_untouched(done, root, before)
    assert "not a regular file" in done.stderr


# --------------------------------------------------------------------------- receipts


def rewrite_receipt(receipt: Path, **changed: Any) -> None:
    from bundler.rules.tomlcompat import loads

    data = loads(receipt.read_text())
    data.update(changed)
    receipt.write_text(tomli_w.dumps(data))


HOSTILE_RECEIPTS = {
    # a field path made --force save the whole entry, its API key included
    "entry_is_a_secret_field": {
        "entries": [{"path": "providers.models.openai.prod.api_key", "digest": "0" * 32}],
        "folders": [],
    },
    "entry_not_a_table": {"entries": ["x"]},
    "entry_without_path": {"entries": [{}]},
    "folders_not_a_list": {"folders": 5},
    "folder_outside": {"folders": [{"path": "../victim", "tree": "x"}]},
    "emptied_not_a_list": {"emptied": "abc"},
    "emptied_mode_too_large": {"emptied": [{"path": "zz", "mode": 2**62}]},
    "created_parents_not_paths": {"created_parents": [1]},
    "created_parents_dotdot": {"created_parents": [".."]},
    # an undo removes the files a folder lists, each relative to its folder
    "files_climb_out": {
        "folders": [
            {
                "path": "agents/researcher/workspace",
                "tree": "x",
                "files": [["../../../../victim/kept", 5, "d"]],
            }
        ]
    },
    "files_not_triples": {
        "folders": [{"path": "agents/researcher/workspace", "tree": "x", "files": [["README.md"]]}]
    },
    "files_size_negative": {
        "folders": [
            {"path": "agents/researcher/workspace", "tree": "x", "files": [["README.md", -1, "d"]]}
        ]
    },
    "undone_not_a_table": {"undone": 5},
}


@pytest.mark.parametrize("changed", HOSTILE_RECEIPTS.values(), ids=HOSTILE_RECEIPTS.keys())
def test_a_receipt_naming_anything_an_undo_cannot_trust_is_refused(
    scene: dict[str, Path], changed: dict[str, Any]
) -> None:
    install, receipt, root = scene["install"], scene["receipt"], scene["root"]
    rewrite_receipt(receipt, **changed)
    before = tree_snapshot(root)
    for extra in (["--dry-run"], ["--force"], []):
        done = bundler(install, "agents", "import", "--undo", str(receipt), *extra)
        assert_refused_and_untouched(done, root, before)
        assert "damaged" in done.stderr
    for command in (["agents", "imports"], ["doctor"]):
        listed = bundler(install, *command)
        assert "Traceback" not in listed.stderr and SECRET not in listed.stdout + listed.stderr
    assert tree_snapshot(root) == before


def test_a_receipt_nested_past_the_parser_is_refused(scene: dict[str, Path]) -> None:
    install, receipt, root = scene["install"], scene["receipt"], scene["root"]
    receipt.write_text(receipt.read_text() + "x = " + "[" * 5000 + "]" * 5000 + "\n")
    before = tree_snapshot(root)
    done = bundler(install, "agents", "import", "--undo", str(receipt))
    assert_refused_and_untouched(done, root, before)
    assert "Traceback" not in bundler(install, "agents", "imports").stderr


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_receipt_that_is_not_a_small_regular_file_is_refused_without_waiting(
    scene: dict[str, Path], kind: str
) -> None:
    """A FIFO blocked the read forever; /dev/zero read until memory ran out."""
    install, receipt, root = scene["install"], scene["receipt"], scene["root"]
    receipt.unlink()
    if kind == "fifo":
        os.mkfifo(receipt)
    else:
        receipt.symlink_to("/dev/zero")
    before = tree_snapshot(root)
    # a hang is a TimeoutExpired of run_cli (60 s), which fails the test
    done = bundler(install, "agents", "import", "--undo", str(receipt))
    listed = bundler(install, "agents", "imports")
    checked = bundler(install, "doctor")
    assert_refused_and_untouched(done, root, before)
    assert "not a regular file" in done.stderr
    for other in (listed, checked):
        assert "Traceback" not in other.stderr


def _listing_rewritten(receipt: Path, text: bytes) -> None:
    """Replace the receipt's file listing with ``text`` and name it in the receipt (digest and
    size), so only what the lines say can make the undo refuse."""
    import xxhash

    from bundler.rules.tomlcompat import loads

    Path(f"{receipt}.files").write_bytes(text)
    listing = loads(receipt.read_text())["listing"]
    listing.update(xxh3_128=xxhash.xxh3_128_hexdigest(text), bytes=len(text))
    rewrite_receipt(receipt, listing=listing)


def _first_line_path(receipt: Path, path: str) -> None:
    lines = Path(f"{receipt}.files").read_bytes().splitlines(keepends=True)
    digest, size, _ = lines[0].split(b" ", 2)
    lines[0] = b" ".join([digest, size, path.encode()]) + b"\n"
    _listing_rewritten(receipt, b"".join(lines))


def _fifo(receipt: Path) -> None:
    Path(f"{receipt}.files").unlink()
    os.mkfifo(f"{receipt}.files")


def _dev_zero(receipt: Path) -> None:
    Path(f"{receipt}.files").unlink()
    Path(f"{receipt}.files").symlink_to("/dev/zero")


def _one_digit_changed(receipt: Path) -> None:
    sidecar = Path(f"{receipt}.files")
    raw = bytearray(sidecar.read_bytes())
    raw[0] = ord("0") if raw[0] != ord("0") else ord("1")
    sidecar.write_bytes(bytes(raw))


HOSTILE_LISTINGS = {
    "missing": lambda receipt: Path(f"{receipt}.files").unlink(),
    "one_digit_changed": _one_digit_changed,
    "truncated": lambda receipt: Path(f"{receipt}.files").write_bytes(
        Path(f"{receipt}.files").read_bytes()[:-1]
    ),
    "a_line_more": lambda receipt: Path(f"{receipt}.files").write_bytes(
        Path(f"{receipt}.files").read_bytes() + b"0" * 32 + b" 5 kept\n"
    ),
    "another_receipts": lambda receipt: Path(f"{receipt}.files").write_bytes(
        b"0" * 32 + b" 5 README.md\n"
    ),
    "fifo": _fifo,
    "dev_zero": _dev_zero,
    # named by digest in the receipt, so only the check of each path stops them
    "climbs_out_with_its_digest": lambda r: _first_line_path(r, "../../../../victim/kept"),
    "absolute_with_its_digest": lambda r: _first_line_path(r, "/tmp/victimfile"),
    "not_a_line_with_its_digest": lambda r: _listing_rewritten(
        r, b"x\n" + b"".join(Path(f"{r}.files").read_bytes().splitlines(keepends=True)[1:])
    ),
    "fewer_lines_with_its_digest": lambda r: _listing_rewritten(
        r, b"".join(Path(f"{r}.files").read_bytes().splitlines(keepends=True)[1:])
    ),
}


@pytest.mark.parametrize("damage", HOSTILE_LISTINGS.values(), ids=HOSTILE_LISTINGS.keys())
def test_a_receipt_listing_missing_damaged_or_not_its_own_is_refused_and_changes_nothing(
    scene: dict[str, Path], damage: Any
) -> None:
    """03 §4: undo tells a file still as imported by the listing beside the receipt; one that
    is missing, damaged or not the one the receipt names (its digest) is refused before
    anything is done, and a path in it leading out of its folder is refused even when the
    digest was made to match."""
    install, receipt, root = scene["install"], scene["receipt"], scene["root"]
    assert Path(f"{receipt}.files").read_bytes().count(b"\n") >= 2
    damage(receipt)
    before = tree_snapshot(root)
    for extra in (["--dry-run"], ["--force"], []):
        done = bundler(install, "agents", "import", "--undo", str(receipt), *extra)
        assert_refused_and_untouched(done, root, before)
        assert f"{receipt.name}.files" in done.stderr
        assert ("is missing" if not os.path.lexists(f"{receipt}.files") else "") in done.stderr
    for command in (["agents", "imports"], ["doctor"]):
        listed = bundler(install, *command)
        assert "Traceback" not in listed.stderr and SECRET not in listed.stdout + listed.stderr
    assert tree_snapshot(root) == before
