"""registries.conf (containers' version 2) as bundler reads it: insecure, blocked, mirrors."""

from __future__ import annotations

import pytest

from bundler.errors import InvalidInput
from bundler.rules.registries_conf import parse_files

SYSTEM = """
unqualified-search-registries = ["docker.io"]

[[registry]]
location = "reg.corp:5000"
insecure = true

[[registry]]
location = "blocked.example"
blocked = true

[[registry]]
prefix = "pull.example"
location = "pull.example"

[[registry.mirror]]
location = "cache.corp:5000/pull-example"

[[registry.mirror]]
location = "tags-only.corp"
pull-from-mirror = "tag-only"
insecure = true
"""


def test_insecure_blocked_and_mirrors_are_read_per_host() -> None:
    conf = parse_files([("/etc/containers/registries.conf", SYSTEM)])
    assert conf.settings_for("REG.corp:5000").insecure  # type: ignore[union-attr]
    assert conf.settings_for("blocked.example").blocked  # type: ignore[union-attr]
    assert conf.settings_for("reg.corp") is None  # the port is part of the host's name
    pulled = conf.settings_for("pull.example")
    assert pulled is not None
    by_digest = pulled.mirrors_for(by_digest=True)
    assert [m.netloc for m in by_digest] == ["cache.corp:5000"]
    assert by_digest[0].repository("agents/researcher") == "pull-example/agents/researcher"
    by_tag = pulled.mirrors_for(by_digest=False)
    assert [m.netloc for m in by_tag] == ["cache.corp:5000", "tags-only.corp"]
    assert by_tag[1].insecure and by_tag[1].repository("a/b") == "a/b"


def test_mirror_by_digest_only_keeps_every_mirror_to_pulls_by_digest() -> None:
    text = """
[[registry]]
location = "r.example"
mirror-by-digest-only = true
[[registry.mirror]]
location = "m.example"
"""
    settings = parse_files([("f", text)]).settings_for("r.example")
    assert settings is not None
    assert settings.mirrors_for(by_digest=False) == []
    assert [m.netloc for m in settings.mirrors_for(by_digest=True)] == ["m.example"]


def test_a_later_file_replaces_an_earlier_files_table_for_the_same_host() -> None:
    first = '[[registry]]\nlocation = "r.example"\ninsecure = true\n'
    later = '[[registry]]\nlocation = "r.example"\nblocked = true\n'
    settings = parse_files([("a.conf", first), ("b.conf", later)]).settings_for("r.example")
    assert settings is not None
    assert (settings.insecure, settings.blocked, settings.source) == (False, True, "b.conf")


def test_what_bundler_does_not_read_is_named_once_per_file() -> None:
    text = """
unqualified-search-registries = ["docker.io"]
short-name-mode = "enforcing"
[aliases]
fedora = "registry.fedoraproject.org/fedora"
[[registry]]
prefix = "*.example.com"
location = "mirror.example"
[[registry]]
location = "r.example/namespace"
"""
    conf = parse_files([("user.conf", text)])
    assert conf.hosts == {}
    assert len(conf.ignored) == 5
    assert all(line.startswith("user.conf: ") for line in conf.ignored)


def test_version_one_tables_are_ignored_with_a_warning() -> None:
    conf = parse_files([("v1.conf", '[registries.insecure]\nregistries = ["r.example"]\n')])
    assert conf.hosts == {} and "version 1" in conf.ignored[0]


@pytest.mark.parametrize(
    "text",
    [
        "[[registry]\nlocation = 'x'",  # not TOML
        "registry = 'r.example'",  # not an array of tables
        "[[registry]]\ninsecure = true",  # no location
        "[[registry]]\nlocation = 'bad host!'",
        "[[registry]]\nlocation = 'r.example'\ninsecure = 'yes'",
        "[[registry]]\nlocation = 'r.example'\nprefix = 7",
        "[[registry]]\nlocation = 'r.example'\nmirror = 'm.example'",
        "[[registry]]\nlocation = 'r.example'\n[[registry.mirror]]\nlocation = 'm'\n"
        "pull-from-mirror = 'sometimes'",
        "[[registry]]\nlocation = 'r.example'\n[[registry.mirror]]\ninsecure = true",
    ],
)
def test_a_malformed_file_is_invalid_input_naming_it(text: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_files([("/home/u/.config/containers/registries.conf", text)])
    assert str(caught.value).startswith("/home/u/.config/containers/registries.conf")
    assert caught.value.code == 3
