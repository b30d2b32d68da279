"""``bundler.fs.age``: recipients as ``age -r``/``-R`` take them, identities as ``age -i`` takes
them, and an age file's header checked for syntax without a key. Files are made by the real
``age``, ``age-keygen`` and ``ssh-keygen``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bundler.errors import InvalidInput, UsageError
from bundler.fs import age


def _age_key(folder: Path) -> tuple[Path, str]:
    path = folder / "key.age"
    subprocess.run(["age-keygen", "-o", str(path)], check=True, capture_output=True)
    public = subprocess.run(
        ["age-keygen", "-y", str(path)], check=True, capture_output=True, text=True
    ).stdout.strip()
    return path, public


def test_what_age_writes_for_two_recipients_parses_as_two_beside_its_grease(
    tmp_path: Path,
) -> None:
    _key, public = _age_key(tmp_path)
    other = tmp_path / "other.age"
    subprocess.run(["age-keygen", "-o", str(other)], check=True, capture_output=True)
    plain = tmp_path / "plain"
    plain.write_bytes(b"x" * 100)
    others = _public_file(tmp_path, other)
    sealed = subprocess.run(
        ["age", "-r", public, "-R", str(others), str(plain)], check=True, capture_output=True
    ).stdout
    header = age.parse_header(sealed)
    assert isinstance(header, age.AgeHeader)
    assert header.recipients == 2
    written = age.encrypt(b"x", [age.Recipient("x25519", public)])
    ours = age.parse_header(written)
    assert isinstance(ours, age.AgeHeader) and ours.recipients == 1


def _public_file(folder: Path, identity: Path) -> Path:
    path = folder / f"{identity.name}.pub"
    path.write_text(
        subprocess.run(
            ["age-keygen", "-y", str(identity)], check=True, capture_output=True, text=True
        ).stdout
    )
    return path


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda d: d.replace(b"v1\n", b"v2\n", 1), "header line"),
        (lambda d: d[: d.index(b"\n---")], "cut short"),
        (lambda d: d[: d.index(b"\n---") + 20], "cut short"),
        (lambda d: d.replace(b"\n-> X25519 ", b"\n-> X25519 \x01", 1), "argument"),
        (lambda d: d.replace(b"\n---", b"\n!!!", 1), "neither a stanza nor the MAC"),
        (lambda d: d[: d.index(b"\n---") + 48 + 10], "payload is cut short"),
    ],
)
def test_a_damaged_header_says_why(tmp_path: Path, damage: object, said: str) -> None:
    _key, public = _age_key(tmp_path)
    data = age.encrypt(b"secret text", [age.Recipient("x25519", public)])
    found = age.parse_header(damage(data))  # type: ignore[operator]
    assert isinstance(found, str) and said in found, found


def test_recipients_from_arguments_and_files_each_once_in_order(tmp_path: Path) -> None:
    _key, public = _age_key(tmp_path)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "id")],
                   check=True)  # fmt: skip
    ssh = (tmp_path / "id.pub").read_text().strip()
    listed = tmp_path / "list"
    listed.write_text(f"# team\n\n{ssh}\n   {public}  \n")
    found = age.parse_recipients([public, f"@{listed}"], "--seal-to")
    assert [r.kind for r in found] == ["x25519", "ssh-ed25519"]
    assert found[1].text == " ".join(ssh.split()[:2])  # the comment is dropped


def test_a_recipients_file_of_comments_only_names_nobody(tmp_path: Path) -> None:
    listed = tmp_path / "list"
    listed.write_text("# nobody yet\n")
    with pytest.raises(UsageError, match="names no recipient"):
        age.parse_recipients([f"@{listed}"], "--seal-to")


def test_identities_open_what_age_sealed_and_a_wrong_one_says_so(tmp_path: Path) -> None:
    key, public = _age_key(tmp_path)
    (tmp_path / "o").mkdir()
    other, _ = _age_key(tmp_path / "o")
    plain = tmp_path / "plain"
    plain.write_bytes(b"hello")
    sealed = subprocess.run(
        ["age", "-r", public, str(plain)], check=True, capture_output=True
    ).stdout
    assert age.decrypt(sealed, age.load_identities([key], "--age-identity")) == b"hello"
    with pytest.raises(age.NotOpened, match="no identity given"):
        age.decrypt(sealed, age.load_identities([other], "--age-identity"))
    with pytest.raises(age.NotOpened, match="corrupt or cut short"):
        age.decrypt(sealed[:-3], age.load_identities([key], "--age-identity"))


def test_a_missing_identity_file_is_invalid_input_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="no such file") as caught:
        age.load_identities([tmp_path / "absent"], "--age-identity")
    assert "absent" in caught.value.message


@pytest.mark.parametrize(
    "keygen",
    [["-t", "ed25519"], ["-t", "rsa", "-b", "2048", "-m", "PEM"]],
    ids=["ed25519-openssh", "rsa-pem"],
)
def test_a_passphrase_protected_ssh_key_is_told_by_the_key_itself(
    tmp_path: Path, keygen: list[str]
) -> None:
    """A key sealed by a passphrase asks for it (and, with nobody to ask, says so); one that
    is open loads; one whose body is damaged holds no identity. Told from the key's own
    headers and cipher name, not from the text of pyrage's error."""
    from bundler.errors import NoAnswer

    for name, passphrase in (("open", ""), ("sealed", "pass word")):
        subprocess.run(["ssh-keygen", "-q", *keygen, "-N", passphrase, "-f", str(tmp_path / name)],
                       check=True)  # fmt: skip
    assert len(age.load_identities([tmp_path / "open"], "--age-identity")) == 1
    with pytest.raises(NoAnswer, match="protected by a passphrase"):
        age.load_identities([tmp_path / "sealed"], "--age-identity")
    asked: list[str] = []
    found = age.load_identities(
        [tmp_path / "sealed"], "--age-identity", lambda shown: asked.append(shown) or "pass word"
    )
    assert len(found) == 1 and asked == [str(tmp_path / "sealed")]
    lines = (tmp_path / "open").read_bytes().splitlines(keepends=True)
    (tmp_path / "damaged").write_bytes(lines[0] + b"AAAA" + b"".join(lines[2:]))
    with pytest.raises(InvalidInput):
        age.load_identities([tmp_path / "damaged"], "--age-identity")
