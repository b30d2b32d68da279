"""The sealed handoff (02 §12, 03 §3.1): ``agents export --seal-to`` writes the required
secrets as an age file only the receiver opens, bound to its bundle; ``agents import
--age-identity`` fills them. Real installs in ZeroClaw's default state (``enc2:`` under
``.secret_key``), the real CLI, and the real ``age``, ``age-keygen`` and ``ssh-keygen``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import hostile_bundles
from support.hostile_secret_store import (
    AGE_SECRET_KEY_LINE,
    HOSTILE_IDENTITIES,
    HOSTILE_RECIPIENTS,
    HostileIdentity,
)
from support.installs import encrypt_install, make_install, opened_config, stored_secrets
from support.kit import clean_env, one_error, run_cli, tree_snapshot

from bundler.rules.tomlcompat import loads

CONFIG = """\
[agents.researcher]
model_provider = "anthropic.main"
risk_profile = "default"
memory = { backend = "none" }

[agents.other]
model_provider = "openai.main"
risk_profile = "default"

[providers.models.anthropic.main]
api_key = "sk-FAKE-sealed-anthropic-0123456789"
model = "claude"

[providers.models.openai.main]
api_key = "sk-FAKE-not-in-the-closure-987654321"
model = "gpt"

[risk_profiles.default]
level = "supervised"
"""
SEALED_PATH = "providers.models.anthropic.main.api_key"
SEALED_VALUE = "sk-FAKE-sealed-anthropic-0123456789"


def age_identity(folder: Path, name: str = "receiver") -> tuple[Path, str]:
    """An age identity file made by ``age-keygen``, and its public key."""
    path = folder / f"{name}.age"
    subprocess.run(["age-keygen", "-o", str(path)], check=True, capture_output=True)
    public = subprocess.run(
        ["age-keygen", "-y", str(path)], check=True, capture_output=True, text=True
    ).stdout.strip()
    return path, public


def ssh_identity(folder: Path, kind: str = "ed25519", passphrase: str = "") -> Path:
    """An SSH private key made by ``ssh-keygen`` (its public key beside it, ``.pub``)."""
    path = folder / f"id_{kind}"
    extra = ["-b", "2048"] if kind == "rsa" else []
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, *extra, "-N", passphrase, "-f", str(path)], check=True
    )
    return path


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = make_install(tmp_path, CONFIG, name="source")
    encrypt_install(root)
    return root


def export(source: Path, out: Path, *seal: str) -> subprocess.CompletedProcess[str]:
    args = [a for r in seal for a in ("--seal-to", r)]
    return run_cli(
        ["--install", str(source), "--json", "agents", "export", "researcher", "--out", str(out),
         *args]
    )  # fmt: skip


def imported(target: Path, bundle: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["--install", str(target), "--json", "agents", "import", str(bundle), *extra])


def manifest(bundle: Path) -> dict[str, object]:
    return loads((bundle / "zeroclaw-agent.toml").read_text())


def test_a_sealed_export_opens_with_age_to_exactly_the_closures_required_secrets(
    source: Path, tmp_path: Path
) -> None:
    identity, public = age_identity(tmp_path)
    ssh_key = ssh_identity(tmp_path)
    bundle = tmp_path / "b"
    done = export(source, bundle, public, f"@{ssh_key}.pub")
    assert done.returncode == 0, done.stderr
    table = manifest(bundle)["sealed"]
    assert isinstance(table, dict)
    data = (bundle / "secrets.age").read_bytes()
    assert table["sha256"] == hashlib.sha256(data).hexdigest()
    assert table["recipients"] == 2 and table["paths"] == [SEALED_PATH]
    assert "secrets.age" not in (bundle / "checksums.xxh3").read_text()
    for key in (identity, ssh_key):
        opened = subprocess.run(
            ["age", "-d", "-i", str(key), str(bundle / "secrets.age")],
            check=True,
            capture_output=True,
        ).stdout
        assert len(opened) % 1024 == 0  # padded: its length says little of the values'
        payload = json.loads(opened)
        assert payload["secrets"] == {SEALED_PATH: SEALED_VALUE}
        assert payload["nonce"] == table["nonce"] and payload["required_secrets"] == [SEALED_PATH]
    # the config still carries empty strings, and no plain value is anywhere else
    for path in bundle.rglob("*"):
        if path.is_file() and path.name != "secrets.age":
            assert SEALED_VALUE.encode() not in path.read_bytes()
    assert json.loads(done.stdout)["sealed"] == {"recipients": 2, "paths": [SEALED_PATH]}
    assert run_cli(["bundle", "verify", str(bundle)]).returncode == 0
    shown = run_cli(["bundle", "inspect", str(bundle)])
    assert "secrets sealed to 2 recipient(s)" in shown.stdout and SEALED_PATH in shown.stdout


def test_a_sealed_import_with_the_identity_leaves_no_secret_to_fill_and_stores_enc2(
    source: Path, tmp_path: Path
) -> None:
    identity, public = age_identity(tmp_path)
    bundle = tmp_path / "b"
    assert export(source, bundle, public).returncode == 0
    target = make_install(tmp_path, "", name="target")
    done = imported(target, bundle, "--age-identity", str(identity))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["secrets_missing"] == [] and report["secrets_from_seal"] == [SEALED_PATH]
    stored = stored_secrets((target / "config.toml").read_text())
    assert stored[SEALED_PATH].startswith("enc2:")
    opened = opened_config(target)
    assert opened["providers"]["models"]["anthropic"]["main"]["api_key"] == SEALED_VALUE  # type: ignore[index]
    assert (target / "config.toml").stat().st_mode & 0o777 == 0o600
    for path in target.rglob("*"):
        if path.is_file():
            assert SEALED_VALUE.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("kind", ["ed25519", "rsa"])
def test_an_ssh_key_opens_what_was_sealed_to_its_public_key(
    source: Path, tmp_path: Path, kind: str
) -> None:
    key = ssh_identity(tmp_path, kind)
    bundle = tmp_path / "b"
    assert export(source, bundle, (Path(f"{key}.pub")).read_text()).returncode == 0
    target = make_install(tmp_path, "", name="target")
    done = imported(target, bundle, "--age-identity", str(key))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["secrets_from_seal"] == [SEALED_PATH]


def test_an_explicit_secret_wins_over_the_sealed_one(source: Path, tmp_path: Path) -> None:
    identity, public = age_identity(tmp_path)
    bundle = tmp_path / "b"
    assert export(source, bundle, public).returncode == 0
    target = make_install(tmp_path, "", name="target")
    done = imported(
        target, bundle, "--age-identity", str(identity), "--secret", f"{SEALED_PATH}=sk-given-1234"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["secrets_from_seal"] == []
    opened = opened_config(target)
    assert opened["providers"]["models"]["anthropic"]["main"]["api_key"] == "sk-given-1234"  # type: ignore[index]


def test_without_an_identity_a_sealed_bundle_imports_as_an_ordinary_one_and_says_so(
    source: Path, tmp_path: Path
) -> None:
    _identity, public = age_identity(tmp_path)
    bundle = tmp_path / "b"
    assert export(source, bundle, public).returncode == 0
    target = make_install(tmp_path, "", name="target")
    done = imported(target, bundle)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["secrets_missing"] == [SEALED_PATH] and report["secrets_from_seal"] == []
    assert any("sealed" in note and "--age-identity" in note for note in report["notes"])


def refused_unchanged(target: Path, bundle: Path, *extra: str) -> str:
    """Import ``bundle`` into ``target``: one line, exit 3, nothing changed; the line."""
    before = tree_snapshot(target)
    done = run_cli(["--install", str(target), "agents", "import", str(bundle), *extra])
    assert done.returncode == 3, done.stderr
    assert one_error(done.stderr), done.stderr
    assert SEALED_VALUE not in done.stderr + done.stdout
    assert tree_snapshot(target) == before
    return done.stderr


def test_the_wrong_identity_is_refused_with_nothing_changed(source: Path, tmp_path: Path) -> None:
    _identity, public = age_identity(tmp_path)
    other, _ = age_identity(tmp_path, "other")
    bundle = tmp_path / "b"
    assert export(source, bundle, public).returncode == 0
    target = make_install(tmp_path, "", name="target")
    assert "secrets.age" in refused_unchanged(target, bundle, "--age-identity", str(other))


def test_a_payload_moved_from_another_bundle_is_refused_even_with_its_sha256_rewritten(
    source: Path, tmp_path: Path
) -> None:
    identity, public = age_identity(tmp_path)
    first, second = tmp_path / "first", tmp_path / "second"
    assert export(source, first, public).returncode == 0
    (source / "agents" / "researcher" / "workspace").mkdir(parents=True, exist_ok=True)
    (source / "agents" / "researcher" / "workspace" / "note.md").write_text("changed\n")
    assert export(source, second, public).returncode == 0
    moved = (first / "secrets.age").read_bytes()
    (second / "secrets.age").write_bytes(moved)
    text = (second / "zeroclaw-agent.toml").read_text()
    old = manifest(second)["sealed"]["sha256"]  # type: ignore[index]
    new = hashlib.sha256(moved).hexdigest()
    (second / "zeroclaw-agent.toml").write_text(text.replace(str(old), new))
    assert run_cli(["bundle", "verify", str(second)]).returncode == 0  # syntax is all it sees
    target = make_install(tmp_path, "", name="target")
    line = refused_unchanged(target, second, "--age-identity", str(identity))
    assert "secrets.age" in line and "another bundle" in line


def _forge(bundle: Path, identity: Path, change: object) -> None:
    """Open the bundle's payload with ``identity``, let ``change`` edit it, seal it again to the
    same public key and rewrite the manifest's sha256: what a forger holding the public key
    can do."""
    import pyrage

    public = subprocess.run(
        ["age-keygen", "-y", str(identity)], check=True, capture_output=True, text=True
    ).stdout.strip()
    opened = subprocess.run(
        ["age", "-d", "-i", str(identity), str(bundle / "secrets.age")],
        check=True,
        capture_output=True,
    ).stdout
    payload = json.loads(opened)
    change(payload)  # type: ignore[operator]
    data = pyrage.encrypt(json.dumps(payload).encode(), [pyrage.x25519.Recipient.from_str(public)])
    old = manifest(bundle)["sealed"]["sha256"]  # type: ignore[index]
    (bundle / "secrets.age").write_bytes(data)
    text = (bundle / "zeroclaw-agent.toml").read_text()
    (bundle / "zeroclaw-agent.toml").write_text(
        text.replace(str(old), hashlib.sha256(data).hexdigest())
    )


@pytest.mark.parametrize(
    ("name", "change", "said"),
    [
        (
            "a path the manifest does not list",
            lambda p: p["secrets"].update({"gateway.paired_tokens": "x"}),
            "does not list",
        ),
        ("a value that is not text", lambda p: p["secrets"].update({SEALED_PATH: 7}), "text"),
        (
            "a value too long",
            lambda p: p["secrets"].update({SEALED_PATH: "a" * 70000}),
            "at most",
        ),
        ("another nonce", lambda p: p.update(nonce="0" * 32), "another bundle"),
        ("not the document", lambda p: p.clear(), "not the document"),
    ],
)
def test_a_forged_payload_is_refused_with_nothing_changed(
    source: Path, tmp_path: Path, name: str, change: object, said: str
) -> None:
    identity, public = age_identity(tmp_path)
    bundle = tmp_path / "b"
    assert export(source, bundle, public).returncode == 0
    _forge(bundle, identity, change)
    target = make_install(tmp_path, "", name="target")
    line = refused_unchanged(target, bundle, "--age-identity", str(identity))
    assert said in line and "secrets.age" in line, name


def test_a_payload_cut_short_is_refused_on_import(source: Path, tmp_path: Path) -> None:
    identity, public = age_identity(tmp_path)
    bundle = tmp_path / "b"
    assert export(source, bundle, public).returncode == 0
    data = (bundle / "secrets.age").read_bytes()[:-40]
    old = manifest(bundle)["sealed"]["sha256"]  # type: ignore[index]
    (bundle / "secrets.age").write_bytes(data)
    text = (bundle / "zeroclaw-agent.toml").read_text()
    (bundle / "zeroclaw-agent.toml").write_text(
        text.replace(str(old), hashlib.sha256(data).hexdigest())
    )
    target = make_install(tmp_path, "", name="target")
    assert "secrets.age" in refused_unchanged(target, bundle, "--age-identity", str(identity))


@pytest.mark.parametrize("case", sorted(n for n in hostile_bundles.CASES if "sealed" in n))
def test_a_sealed_file_verify_refuses_is_refused_by_import_with_nothing_changed(
    tmp_path: Path, case: str
) -> None:
    from support import bundlefactory as bf

    bundle = bf.build_bundle(tmp_path / "b")
    expected = hostile_bundles.CASES[case](bundle)
    done = run_cli(["bundle", "verify", str(bundle)])
    assert done.returncode == 3 and expected in done.stdout + done.stderr
    identity, _ = age_identity(tmp_path)
    target = make_install(tmp_path, "", name="target")
    refused_unchanged(target, bundle, "--age-identity", str(identity))


@pytest.mark.parametrize("hostile", HOSTILE_IDENTITIES, ids=lambda h: h.name)
def test_an_identity_file_that_is_none_is_refused(
    source: Path, tmp_path: Path, hostile: HostileIdentity
) -> None:
    _identity, public = age_identity(tmp_path)
    bundle = tmp_path / "b"
    assert export(source, bundle, public).returncode == 0
    bad = tmp_path / "bad-identity"
    hostile.make(bad)
    target = make_install(tmp_path, "", name="target")
    line = refused_unchanged(target, bundle, "--age-identity", str(bad))
    assert "--age-identity" in line and "bad-identity" in line, hostile.name


def test_a_passphrase_protected_ssh_key_without_a_terminal_is_refused(
    source: Path, tmp_path: Path
) -> None:
    key = ssh_identity(tmp_path, "ed25519", passphrase="correct horse")
    bundle = tmp_path / "b"
    assert export(source, bundle, Path(f"{key}.pub").read_text()).returncode == 0
    target = make_install(tmp_path, "", name="target")
    before = tree_snapshot(target)
    done = run_cli(["--install", str(target), "agents", "import", str(bundle),
                    "--age-identity", str(key)], stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "passphrase" in done.stderr and "terminal" in done.stderr
    assert tree_snapshot(target) == before


@pytest.mark.parametrize(
    "keygen",
    [
        ["-t", "rsa", "-b", "2048", "-m", "PEM"],  # the legacy PEM form
        ["-t", "ed25519"],  # what ssh-keygen writes by default: OpenSSH's own, bcrypt-derived
    ],
    ids=["rsa-pem", "ed25519-openssh"],
)
def test_a_passphrase_protected_ssh_key_is_opened_after_a_no_echo_prompt(
    source: Path, tmp_path: Path, keygen: list[str]
) -> None:
    import pexpect

    key = tmp_path / "id_protected"
    subprocess.run(["ssh-keygen", "-q", *keygen, "-N", "pass word", "-f", str(key)], check=True)
    bundle = tmp_path / "b"
    assert export(source, bundle, Path(f"{key}.pub").read_text()).returncode == 0
    target = make_install(tmp_path, "", name="target")
    for typed, status in (("wrong", 1), ("pass word", 0)):
        before = tree_snapshot(target)
        child = pexpect.spawn(
            sys.executable,
            ["-m", "bundler", "--install", str(target), "agents", "import", str(bundle),
             "--age-identity", str(key), "--accept-risks"],
            encoding="utf-8",
            timeout=120,
            env=clean_env(),
        )  # fmt: skip
        child.expect("passphrase for")
        child.sendline(typed)
        child.expect(pexpect.EOF)
        output = child.before or ""
        child.close()
        assert child.exitstatus == status, output
        assert typed not in output.split("(not echoed):", 1)[1]  # never echoed back
        if status:
            assert "does not open it" in output and tree_snapshot(target) == before
    assert opened_config(target)["providers"]["models"]["anthropic"]["main"]["api_key"] == (  # type: ignore[index]
        SEALED_VALUE
    )


SECRET_KEY_LINE = AGE_SECRET_KEY_LINE


@pytest.mark.parametrize("recipient", HOSTILE_RECIPIENTS)
def test_a_malformed_seal_to_is_refused_before_anything_is_written(
    source: Path, tmp_path: Path, recipient: str
) -> None:
    before = tree_snapshot(source)
    done = export(source, tmp_path / "b", recipient)
    assert done.returncode == 2, done.stdout
    assert json.loads(done.stdout)["error"]["message"].count("--seal-to") >= 1
    assert not (tmp_path / "b").exists() and tree_snapshot(source) == before
    if recipient.startswith(("AGE-SECRET", "age1", "ssh-", "-----")):
        assert recipient not in done.stdout + done.stderr  # never echoed: it may be a key


def test_a_recipients_file_takes_comments_and_blank_lines_and_names_a_bad_line(
    source: Path, tmp_path: Path
) -> None:
    _identity, public = age_identity(tmp_path)
    listed = tmp_path / "receivers.txt"
    listed.write_text(f"# the receiver\n\n{public}\n")
    assert export(source, tmp_path / "ok", f"@{listed}").returncode == 0
    listed.write_text(f"# the receiver\n{public}\n{SECRET_KEY_LINE}\n")
    done = export(source, tmp_path / "bad", f"@{listed}")
    assert done.returncode == 2 and "line 3" in done.stdout
    assert SECRET_KEY_LINE not in done.stdout + done.stderr


def test_op_references_are_sealed_as_written_and_overrides_never(tmp_path: Path) -> None:
    config = CONFIG.replace(f'"{SEALED_VALUE}"', '"op://vault/anthropic/key"')
    source = make_install(tmp_path, config, name="source")
    identity, public = age_identity(tmp_path)
    bundle = tmp_path / "b"
    done = run_cli(
        ["--install", str(source), "agents", "export", "researcher", "--out", str(bundle),
         "--seal-to", public],
        env={"ZEROCLAW_providers__models__anthropic__main__api_key": "sk-FAKE-override-55555"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    opened = subprocess.run(
        ["age", "-d", "-i", str(identity), str(bundle / "secrets.age")],
        check=True,
        capture_output=True,
    ).stdout
    assert json.loads(opened)["secrets"] == {SEALED_PATH: "op://vault/anthropic/key"}
    assert b"sk-FAKE-override" not in opened


def test_a_stored_value_that_does_not_decrypt_refuses_the_seal_naming_its_path(
    source: Path, tmp_path: Path
) -> None:
    (source / ".secret_key").write_text(os.urandom(32).hex())
    _identity, public = age_identity(tmp_path)
    done = export(source, tmp_path / "b", public)
    assert done.returncode == 1, done.stdout
    assert SEALED_PATH in json.loads(done.stdout)["error"]["message"]
    assert not (tmp_path / "b").exists()


def test_pack_and_unpack_carry_the_sealed_file_after_the_manifest(
    source: Path, tmp_path: Path
) -> None:
    identity, public = age_identity(tmp_path)
    bundle, archive = tmp_path / "b", tmp_path / "b.tar"
    assert export(source, bundle, public).returncode == 0
    assert run_cli(["bundle", "pack", str(bundle), str(archive)]).returncode == 0
    names = subprocess.run(["tar", "tf", str(archive)], check=True, capture_output=True, text=True)
    assert names.stdout.splitlines()[:4] == [
        "checksums.xxh3",
        "config.toml",
        "zeroclaw-agent.toml",
        "secrets.age",
    ]
    assert run_cli(["bundle", "unpack", str(archive), str(tmp_path / "u")]).returncode == 0
    assert tree_snapshot(tmp_path / "u") == tree_snapshot(bundle)
    # an export straight to an archive, imported from it
    assert export(source, tmp_path / "direct.tar", public).returncode == 0
    target = make_install(tmp_path, "", name="target")
    done = imported(target, tmp_path / "direct.tar", "--age-identity", str(identity))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["secrets_from_seal"] == [SEALED_PATH]


def test_two_sealed_exports_differ_only_in_the_sealed_file_nonce_and_sha256(
    source: Path, tmp_path: Path
) -> None:
    _identity, public = age_identity(tmp_path)
    env = {"SOURCE_DATE_EPOCH": "1700000000"}
    for name in ("one", "two"):
        done = run_cli(
            ["--install", str(source), "agents", "export", "researcher", "--out",
             str(tmp_path / name), "--seal-to", public],
            env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    one, two = tree_snapshot(tmp_path / "one"), tree_snapshot(tmp_path / "two")
    assert set(one) == set(two)
    differ = {name for name in one if one[name] != two[name]}
    assert differ == {"secrets.age", "zeroclaw-agent.toml"}
    first, second = manifest(tmp_path / "one"), manifest(tmp_path / "two")
    for table in (first, second):
        table["sealed"] = {k: v for k, v in table["sealed"].items() if k not in ("nonce", "sha256")}  # type: ignore[union-attr]
    assert first == second


def test_a_sealed_bundle_moved_whole_keeps_working(source: Path, tmp_path: Path) -> None:
    identity, public = age_identity(tmp_path)
    bundle = tmp_path / "b"
    assert export(source, bundle, public).returncode == 0
    moved = tmp_path / "elsewhere" / "b"
    shutil.copytree(bundle, moved.parent / "b")
    target = make_install(tmp_path, "", name="target")
    assert imported(target, moved, "--age-identity", str(identity)).returncode == 0
