"""No exception object holds a secret value (01 §6): every refusal of export and
import that can meet a known secret is provoked through the library, and the raised error is
searched whole: ``str``, ``args``, ``repr``, ``.message``, ``.path``, and every exception along
its ``__cause__`` and ``__context__`` chains (an ``OSError``'s ``filename`` included), for the
secret in every encoding the leak oracle knows.

A message rewritten after the raise leaves the secret in ``args`` and ``repr``; a system error
chained with ``from`` names the file it was given; a decode error keeps the bytes it failed on.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.e2e_helpers import leaks_in, write_secrets_file
from support.installs import copy_example, encrypt_install
from support.race_helpers import run_as_nobody

from bundler.bundle.export import export_agent
from bundler.config.secretcipher import encrypt
from bundler.config.secretkey import KEY_NAME, SecretKey
from bundler.errors import BundlerError
from bundler.install.import_types import ImportOptions
from bundler.install.importer import import_bundle

ANTHROPIC_KEY = "sk-FAKE-anthropic-0000000000000000"
BEARER = "Bearer sk-FAKE-search-999999999999"
KEY_PATH = "providers.models.anthropic.main.api_key"
GIVEN = "sk-GIVEN-import-value-0123456789abc"  # a value given to import
SECRETS = [ANTHROPIC_KEY, BEARER, "ghp_FAKE888888888888888888", GIVEN]
NOBODY = 65534


def _texts(err: BaseException) -> Iterator[str]:
    """Every text an exception and its chains expose."""
    seen: set[int] = set()
    pending: list[BaseException] = [err]
    while pending:
        link = pending.pop()
        if id(link) in seen:
            continue
        seen.add(id(link))
        yield str(link)
        yield repr(link)
        yield from (repr(arg) for arg in link.args)
        yield from (str(arg) for arg in link.args)
        for attr in ("message", "path", "filename", "filename2", "object"):
            value = getattr(link, attr, None)
            if value is not None:
                yield value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        pending += [e for e in (link.__cause__, link.__context__) if e is not None]


def _leaks(err: BaseException) -> list[str]:
    return [leak for text in _texts(err) for leak in leaks_in(text, SECRETS)]


def _refusal(action: Callable[[], Any]) -> BundlerError:
    with pytest.raises(BundlerError) as caught:
        action()
    return caught.value


# --- export ------------------------------------------------------------------------------------


def _workspace(root: Path) -> Path:
    return root / "agents" / "researcher" / "workspace"


def _plant_file(root: Path, rel: str, data: bytes) -> None:
    target = _workspace(root) / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _deep(top: Path) -> None:
    top.mkdir(parents=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(260):  # deeper than the 256 levels an export accepts (02 §7.2)
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def _set_workspace_path(root: Path, path: Path) -> None:
    config = root / "config.toml"
    text = config.read_text(encoding="utf-8")
    text = text.replace(
        "[agents.researcher.workspace]\n",
        f"[agents.researcher.workspace]\npath = {json.dumps(str(path))}\n",
        1,
    )
    config.write_text(text, encoding="utf-8")


EXPORT_CASES: dict[str, Callable[[Path, Path], tuple[Path, dict[str, Any]]]] = {}


def _case(name: str) -> Callable[[Any], Any]:
    def register(func: Any) -> Any:
        EXPORT_CASES[name] = func
        return func

    return register


@_case("content-raw")
def _content_raw(root: Path, tmp: Path) -> tuple[Path, dict[str, Any]]:
    _plant_file(root, "notes/k.txt", f"key {BEARER}\n".encode())
    return tmp / "out", {}


@_case("file-name-with-space")
def _file_name(root: Path, tmp: Path) -> tuple[Path, dict[str, Any]]:
    _plant_file(root, f"notes/{BEARER}.txt", b"harmless\n")
    return tmp / "out", {}


@_case("empty-folder-name")
def _folder_name(root: Path, tmp: Path) -> tuple[Path, dict[str, Any]]:
    (_workspace(root) / "a" / BEARER).mkdir(parents=True)
    return tmp / "out", {}


@_case("too-deep-under-secret-folder")
def _too_deep(root: Path, tmp: Path) -> tuple[Path, dict[str, Any]]:
    _deep(_workspace(root) / BEARER)
    return tmp / "out", {"scan_secrets": "off"}


@_case("destination-parent-missing")
def _dest_missing(root: Path, tmp: Path) -> tuple[Path, dict[str, Any]]:
    return tmp / BEARER / "out", {}


@_case("destination-not-a-bundle")
def _dest_occupied(root: Path, tmp: Path) -> tuple[Path, dict[str, Any]]:
    out = tmp / f"x {ANTHROPIC_KEY}"
    out.mkdir()
    (out / "something.txt").write_text("not a bundle\n")
    return out, {"force": True}


@_case("workspace-path-is-a-link")
def _workspace_link(root: Path, tmp: Path) -> tuple[Path, dict[str, Any]]:
    real = tmp / "real-workspace"
    real.mkdir()
    link = tmp / f"ws {ANTHROPIC_KEY}"
    link.symlink_to(real)
    _set_workspace_path(root, link)
    return tmp / "out", {}


@_case("include-memory-without-store")
def _no_brain(root: Path, tmp: Path) -> tuple[Path, dict[str, Any]]:
    elsewhere = tmp / ANTHROPIC_KEY / "ws"
    elsewhere.mkdir(parents=True)
    _set_workspace_path(root, elsewhere)
    return tmp / "out", {"include_memory": True}


@_case("stored-key-under-an-override")
def _override(root: Path, tmp: Path) -> tuple[Path, dict[str, Any]]:
    _plant_file(root, "notes/pasted.txt", ANTHROPIC_KEY.encode())
    env = {"ZEROCLAW_providers__models__anthropic__main__api_key": ""}
    return tmp / "out", {"environ": env}


@_case("config-not-utf8")
def _not_utf8(root: Path, tmp: Path) -> tuple[Path, dict[str, Any]]:
    config = root / "config.toml"
    config.write_bytes(config.read_bytes() + b"\n# \xff\xfe\n")
    return tmp / "out", {}


@_case("config-unparseable")
def _unparseable(root: Path, tmp: Path) -> tuple[Path, dict[str, Any]]:
    config = root / "config.toml"
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace(f'api_key = "{ANTHROPIC_KEY}"', f'api_key = "{ANTHROPIC_KEY}'))
    return tmp / "out", {}


@pytest.mark.parametrize("case", list(EXPORT_CASES))
def test_no_export_refusal_holds_a_secret_in_its_exception(tmp_path: Path, case: str) -> None:
    root = copy_example(tmp_path)
    out, options = EXPORT_CASES[case](root, tmp_path)
    options.setdefault("environ", {})
    err = _refusal(lambda: export_agent(root, "researcher", out, **options))
    assert err.message and "\n" not in err.message
    assert _leaks(err) == [], (case, err.path)


def _export_as_nobody(install: Path, out: Path, scan: str) -> dict[str, Any]:
    """Run ``export_agent`` as uid 65534 in a forked child; the child searches the error.

    The interpreter lives under /root, which nobody cannot reach, so the CLI cannot be started
    as nobody; :func:`race_helpers.run_as_nobody` forks, keeping the imported library.
    """

    def export() -> dict[str, Any]:
        try:
            export_agent(install, "researcher", out, scan_secrets=scan, environ={})
        except BundlerError as err:
            return {"raised": True, "message": err.message, "leaks": _leaks(err)}
        return {"raised": False}

    result: dict[str, Any] = run_as_nobody(export)
    return result


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the install to another user")
@pytest.mark.parametrize("kind", ["file", "folder"])
@pytest.mark.parametrize("scan", ["refuse", "off"])
def test_unreadable_entry_named_after_a_secret_leaves_no_secret_in_the_exception(
    kind: str, scan: str
) -> None:
    base = Path(tempfile.mkdtemp(prefix="bundler-exc-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        install = copy_example(base)
        entry = _workspace(install) / BEARER
        if kind == "folder":
            entry.mkdir()
            (entry / "inside.txt").write_text("harmless\n")
        else:
            entry.write_text("harmless\n")
        for folder, dirs, files in os.walk(base):
            for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.chown(name, NOBODY, NOBODY, follow_symlinks=False)
        os.chmod(entry, 0)
        outcome = _export_as_nobody(install, base / "bundle", scan)
    finally:
        shutil.rmtree(base)
    assert outcome["raised"], outcome
    if scan == "off":
        assert "cannot read" in outcome["message"]
    assert outcome["leaks"] == []


# --- import ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's researcher exported once (read-only here)."""
    base = tmp_path_factory.mktemp("bundle")
    root = copy_example(base)
    out = base / "researcher"
    export_agent(root, "researcher", out, environ={})
    return out


def _given_file(tmp: Path, text: bytes, mode: int = 0o600) -> Path:
    path = tmp / "secrets.toml"
    path.write_bytes(text)
    os.chmod(path, mode)
    return path


IMPORT_CASES: dict[str, Callable[[Path, Path], dict[str, Any]]] = {
    "secret-for-an-unknown-path": lambda tmp, b: {
        "secrets": [f"providers.models.nobody.main.api_key={GIVEN}"]
    },
    "secret-without-path": lambda tmp, b: {"secrets": [GIVEN]},
    "secret-with-a-bad-path": lambda tmp, b: {"secrets": [f'"unterminated={GIVEN}']},
    "secrets-file-readable-by-others": lambda tmp, b: {
        "secrets_file": write_secrets_file(tmp / "s.toml", {KEY_PATH: GIVEN}, 0o644)
    },
    "secrets-file-not-toml": lambda tmp, b: {
        "secrets_file": _given_file(tmp, f'"{KEY_PATH}" = {GIVEN}\n'.encode())
    },
    "secrets-file-not-utf8": lambda tmp, b: {
        "secrets_file": _given_file(tmp, f'"{KEY_PATH}" = "{GIVEN}\xff"\n'.encode("latin-1"))
    },
    "secrets-file-wrong-type": lambda tmp, b: {
        "secrets_file": _given_file(tmp, f'"{KEY_PATH}" = ["{GIVEN}"]\n'.encode())
    },
}


def _target_with_researcher(tmp: Path) -> Path:
    return copy_example(tmp, "install")


@pytest.mark.parametrize("case", list(IMPORT_CASES))
def test_no_import_refusal_holds_a_given_secret_in_its_exception(
    tmp_path: Path, bundle: Path, case: str
) -> None:
    options = IMPORT_CASES[case](tmp_path, bundle)
    target = tmp_path / "target"
    err = _refusal(
        lambda: import_bundle(target, bundle, ImportOptions(accept_risks=True, **options))
    )
    assert _leaks(err) == [], (case, err.path)


@pytest.mark.parametrize("refusal", ["alias-taken", "bundle-tampered", "target-config-not-utf8"])
def test_import_refused_after_reading_secrets_holds_none_of_them(
    tmp_path: Path, bundle: Path, refusal: str
) -> None:
    given = write_secrets_file(tmp_path / "s.toml", {KEY_PATH: GIVEN})
    target = tmp_path / "target"
    used = bundle
    if refusal == "alias-taken":
        target = copy_example(tmp_path)  # already has a researcher; holds the example's keys
    elif refusal == "bundle-tampered":
        used = tmp_path / "tampered"
        shutil.copytree(bundle, used)
        (used / "workspace" / f"{GIVEN}.txt").write_text("not in the checksums\n")
    else:
        target = copy_example(tmp_path)
        config = target / "config.toml"
        config.write_bytes(config.read_bytes() + b"\n# \xff\n")
    err = _refusal(
        lambda: import_bundle(
            target,
            used,
            ImportOptions(as_alias="researcher", secrets_file=given, accept_risks=True),
        )
    )
    assert _leaks(err) == [], (refusal, err.path)


# --- the mechanism ---------------------------------------------------------------------------


def _withhold_bearer(text: str) -> str:
    return text.replace(BEARER, "<withheld>")


def test_an_error_made_inside_withholding_never_holds_the_secret() -> None:
    """Scrubbed when made: ``args``, ``str``, ``repr`` and ``path`` agree, and a system error
    chained with ``from`` (which names the file it was given) is scrubbed along the chain."""
    from bundler.errors import Refused, withholding

    def fail() -> None:
        try:
            os.open(f"/nonexistent/{BEARER}", os.O_RDONLY)
        except OSError as exc:
            raise Refused(f"cannot read {BEARER}/x (gone)", path=f"workspace/{BEARER}") from exc

    with pytest.raises(Refused) as caught, withholding(_withhold_bearer):
        fail()
    err = caught.value
    assert err.args == (err.message,) and "<withheld>" in err.message
    assert isinstance(err.__cause__, OSError) and "<withheld>" in str(err.__cause__.filename)
    assert _leaks(err) == []


def test_a_foreign_exception_holding_the_secret_is_cut_from_the_chain() -> None:
    from bundler.errors import Refused, withholding

    def fail() -> None:
        try:
            raise ValueError(f"parser saw {BEARER!r}")
        except ValueError as exc:
            raise Refused("the file does not parse", path="x") from exc

    with pytest.raises(Refused) as caught, withholding(_withhold_bearer):
        fail()
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert _leaks(caught.value) == []


@pytest.mark.parametrize("broken", ["not-utf8", "not-toml"])
def test_a_config_that_cannot_be_read_is_reported_by_an_error_with_no_chain(
    tmp_path: Path, bundle: Path, broken: str
) -> None:
    """The decode error holds the file (its ``args``; newer TOML parsers keep ``doc``): the
    error reporting it is raised outside the handler, so nothing chains the file to it."""
    root = copy_example(tmp_path)
    config = root / "config.toml"
    raw = config.read_bytes()
    config.write_bytes(raw + (b"\n# \xff\n" if broken == "not-utf8" else b"\n[[[ broken\n"))
    exported = _refusal(lambda: export_agent(root, "researcher", tmp_path / "out", environ={}))
    imported = _refusal(
        lambda: import_bundle(root, bundle, ImportOptions(as_alias="other", accept_risks=True))
    )
    for err in (exported, imported):
        assert err.code == 3, err.message
        assert err.__cause__ is None and err.__context__ is None, repr(err.__context__)
        assert _leaks(err) == []


# --- the secret store -----------------------------------------------------------------------------


def _sealed_example(tmp: Path) -> tuple[Path, SecretKey]:
    root = copy_example(tmp)
    encrypt_install(root)
    return root, SecretKey(bytes.fromhex((root / KEY_NAME).read_text()))


def _key_texts(key: SecretKey) -> list[str]:
    return [key.raw.hex(), key.raw.hex().upper(), key.raw.decode("latin-1")]


@pytest.mark.parametrize("where", ["file-name", "content"])
def test_an_export_refused_for_a_value_stored_encrypted_holds_neither_it_nor_the_key(
    tmp_path: Path, where: str
) -> None:
    root, key = _sealed_example(tmp_path)
    if where == "file-name":
        _plant_file(root, f"notes/{ANTHROPIC_KEY}.txt", b"harmless\n")
    else:
        _plant_file(root, "notes/k.txt", f"key {ANTHROPIC_KEY}\n".encode())
    err = _refusal(lambda: export_agent(root, "researcher", tmp_path / "out", environ={}))
    assert _leaks(err) == []
    assert not any(k in text for text in _texts(err) for k in _key_texts(key))


def test_a_refused_sealed_value_holds_neither_the_value_nor_the_key(tmp_path: Path) -> None:
    from bundler.config.store import set_config_value

    root, key = _sealed_example(tmp_path)
    foreign = encrypt(GIVEN, SecretKey(os.urandom(32)))
    err = _refusal(lambda: set_config_value(root, KEY_PATH, foreign, via="test", environ={}))
    assert _leaks(err) == [] and not any(foreign[5:] in text for text in _texts(err))
    assert not any(k in text for text in _texts(err) for k in _key_texts(key))


def test_an_import_refusing_a_given_sealed_value_holds_no_secret(
    tmp_path: Path, bundle: Path
) -> None:
    root, key = _sealed_example(tmp_path)
    foreign = encrypt(GIVEN, SecretKey(os.urandom(32)))
    err = _refusal(
        lambda: import_bundle(
            root,
            bundle,
            ImportOptions(as_alias="other", secrets=[f"{KEY_PATH}={foreign}"], accept_risks=True),
        )
    )
    assert _leaks(err) == [] and not any(foreign[5:] in text for text in _texts(err))
    assert not any(k in text for text in _texts(err) for k in _key_texts(key))


@pytest.mark.parametrize("content", ["31-bytes", "33-bytes", "not-hex"])
def test_a_key_file_refused_is_never_quoted(tmp_path: Path, content: str) -> None:
    from bundler.config.secretkey import load_key

    text = {"31-bytes": "c3" * 31, "33-bytes": "c3" * 33, "not-hex": "c3" * 31 + "zz"}[content]
    (tmp_path / KEY_NAME).write_text(text)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        err = _refusal(lambda: load_key(fd, tmp_path))
    finally:
        os.close(fd)
    assert not any("c3c3c3" in t for t in _texts(err)), err.message


def test_a_value_that_does_not_open_says_why_and_holds_nothing_of_it() -> None:
    from bundler.config.secretcipher import NotDecrypted, decrypt

    key = SecretKey(os.urandom(32))
    for value in (encrypt(GIVEN, SecretKey(os.urandom(32))), "enc:" + "ff" * 20):
        with pytest.raises(NotDecrypted) as caught:
            decrypt(value, key)
        texts = list(_texts(caught.value))
        assert not any(value[4:] in t or key.raw.hex() in t for t in texts)
        assert caught.value.__context__ is None and caught.value.__cause__ is None


# --- the sealed handoff: secrets.age ------------------------------------------------------------


def _receiver() -> tuple[Any, str]:
    import pyrage

    identity = pyrage.x25519.Identity.generate()
    return identity, str(identity.to_public())


def _sealed_bundle(tmp_path: Path) -> tuple[Path, Path, Any]:
    """An export of the encrypted example sealed to a fresh receiver: (bundle, identity file,
    the identity)."""
    root, _key = _sealed_example(tmp_path)
    identity, public = _receiver()
    out = tmp_path / "sealed-bundle"
    export_agent(root, "researcher", out, environ={}, seal_to=[public])
    file = tmp_path / "receiver.age"
    file.write_text(f"{identity}\n")
    return out, file, identity


def _forge_payload(bundle: Path, identity: Any, change: Callable[[dict[str, Any]], None]) -> None:
    import hashlib

    import pyrage

    payload = json.loads(pyrage.decrypt((bundle / "secrets.age").read_bytes(), [identity]))
    change(payload)
    data = pyrage.encrypt(json.dumps(payload).encode(), [identity.to_public()])
    manifest = (bundle / "zeroclaw-agent.toml").read_text()
    old = hashlib.sha256((bundle / "secrets.age").read_bytes()).hexdigest()
    (bundle / "secrets.age").write_bytes(data)
    new = hashlib.sha256(data).hexdigest()
    (bundle / "zeroclaw-agent.toml").write_text(manifest.replace(old, new))


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda p: p["secrets"].update({"gateway.paired_tokens": ANTHROPIC_KEY}),
                     id="path-not-listed"),
        pytest.param(lambda p: p["secrets"].update({KEY_PATH: ANTHROPIC_KEY + "\x00"}),
                     id="not-text"),
        pytest.param(lambda p: p.update(nonce="0" * 32), id="bound-elsewhere"),
    ],
)  # fmt: skip
def test_a_sealed_payload_refused_on_import_holds_none_of_its_values(
    tmp_path: Path, change: Callable[[dict[str, Any]], None]
) -> None:
    bundle, identity_file, identity = _sealed_bundle(tmp_path)
    _forge_payload(bundle, identity, change)
    target = tmp_path / "target"
    err = _refusal(
        lambda: import_bundle(
            target, bundle, ImportOptions(age_identities=[identity_file], accept_risks=True)
        )
    )
    assert "secrets.age" in err.message
    assert _leaks(err) == []
    assert str(identity) not in " ".join(_texts(err))


def test_an_import_refused_after_the_seal_opened_holds_no_sealed_value(tmp_path: Path) -> None:
    bundle, identity_file, _identity = _sealed_bundle(tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.toml").write_text(
        "[secrets]\nencrypt = 7\n"
    )  # refused once a value is stored
    err = _refusal(
        lambda: import_bundle(
            target, bundle, ImportOptions(age_identities=[identity_file], accept_risks=True)
        )
    )
    assert _leaks(err) == []


@pytest.mark.parametrize(
    "line",
    [
        "AGE-SECRET-KEY-1" + "Q" * 58,
        "-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAA",
        "age1" + ANTHROPIC_KEY,
    ],
)
def test_a_malformed_recipient_is_never_quoted(tmp_path: Path, line: str) -> None:
    from bundler.fs.age import parse_recipients

    listed = tmp_path / "receivers.txt"
    listed.write_text(f"{line}\n")
    for given in (line, f"@{listed}"):
        err = _refusal(lambda given=given: parse_recipients([given], "--seal-to"))  # type: ignore[misc]
        assert not any(line in text or line[4:20] in text for text in _texts(err)), err.message


def test_an_identity_file_that_is_no_identity_is_never_quoted(tmp_path: Path) -> None:
    from bundler.fs.age import load_identities

    bad = tmp_path / "id"
    bad.write_text(f"AGE-SECRET-KEY-1{ANTHROPIC_KEY}\n")
    err = _refusal(lambda: load_identities([bad], "--age-identity"))
    assert _leaks(err) == [] and "--age-identity" in err.message


def _home_backup(tmp_path: Path) -> tuple[Path, Path, Any]:
    """A project with a data home, its backup encrypted to a fresh age key (the identity)."""
    import pyrage
    from support.hostile_zips import make_project

    from bundler.home.backup import backup_home

    project, _home = make_project(tmp_path)
    identity = pyrage.x25519.Identity.generate()
    (tmp_path / "user").mkdir()
    env = {"HOME": str(tmp_path / "user")}
    sealed = backup_home(
        project, to=tmp_path / "b.zip.age", environ=env, encrypt_to=[str(identity.to_public())]
    ).path
    return project, sealed, identity


def test_an_encrypted_backup_refused_holds_no_key_material(tmp_path: Path) -> None:
    import pyrage

    from bundler.home.backup import backup_home
    from bundler.home.restore import restore_home
    from bundler.home.verify import verify_backup

    project, sealed, identity = _home_backup(tmp_path)
    other = pyrage.x25519.Identity.generate()
    keys = [str(identity), str(other)]
    wrong = tmp_path / "other.txt"
    wrong.write_text(f"{other}\n")
    cut = tmp_path / "cut.zip.age"
    cut.write_bytes(sealed.read_bytes()[:-100])
    right = tmp_path / "key.txt"
    right.write_text(f"# a comment\n{identity}\n")
    env = {"HOME": str(tmp_path / "user")}
    refusals = [
        _refusal(lambda: verify_backup(sealed, age_identities=[wrong])),
        _refusal(lambda: restore_home(project, sealed, age_identities=[wrong], environ=env)),
        _refusal(lambda: restore_home(project, cut, age_identities=[right], environ=env)),
        _refusal(lambda: verify_backup(cut, age_identities=[right])),
        _refusal(
            lambda: backup_home(
                project, to=tmp_path / "c.zip.age", encrypt_to=[str(other)], environ=env
            )
        ),
    ]
    for err in refusals:
        texts = list(_texts(err))
        assert not [k for k in keys for text in texts if k in text or k[16:40] in text], err
