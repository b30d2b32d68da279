"""Agent.yaml is checked by the compiled schema checker, with jsonschema's verdicts.

Every home command reads Agent.yaml, and jsonschema's import took a fifth to a third of a small
home's backup; so the compiled checker of ``rules.schemacheck`` decides whether a document
breaks the schema, and jsonschema, the reference, is imported only to name the fault of one
that does.
These tests keep the two engines' findings equal, keyword by keyword and place by place.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.documents import changed, value_paths

from bundler.home.agentyaml import SCHEMA_NAME, validate_agent_yaml
from bundler.rules import schema, schemacheck

NODE = schema.load(SCHEMA_NAME)

SOUND: dict[str, Any] = {
    "name": "scout",
    "data": {"home": "~/.bxagents/scout"},
    "volumes": {
        "notes": {"path": "/srv/notes", "mode": "rw", "description": "shared notes"},
        "papers": {"path": "papers"},
    },
    "skills": {"agentCanSave": True, "autoApprove": False},
    "toolOptions": {"bxai": {"allowedPaths": ["/srv", "/tmp"]}},
    "runtime": {"anything": ["the runtime's own"]},
}

# values of each YAML type, with the traps: bool is not a number, "" is empty, 201 characters
# pass no description, "files" is a taken volume name, upper case breaks the name pattern
junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 3)
    | st.floats(-1, 2, allow_nan=False)
    | st.sampled_from(["", "x", "rw", "ro", "rx", "/srv", "files", "Notes", "d" * 201]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["path", "mode", "description", "extra", "files", "Bad", "n"]), inner
        )
    ),
    max_leaves=6,
)


SOUND_PATHS = [
    *value_paths(SOUND)[1:],
    ("volumes", "files"),
    ("volumes", "Upper"),
    ("volumes", "notes", "extra"),
    ("data", "home"),
]


def _found(document: Any, *, reference: bool) -> set[tuple[tuple[Any, ...], str, str | None]]:
    violations = schemacheck.document_check(NODE, reference=reference)(document)
    return {(tuple(v.segments), v.keyword, v.key or v.missing) for v in violations}


def test_the_compiled_checker_covers_the_agent_schema_whole() -> None:
    assert schemacheck.unsupported_keyword(NODE) is None
    assert _found(SOUND, reference=False) == set() == _found(SOUND, reference=True)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SOUND_PATHS), junk, st.booleans())
def test_engines_find_the_same_faults_in_an_agent_yaml(
    path: tuple[Any, ...], value: Any, remove: bool
) -> None:
    document = changed(SOUND, path, value, remove=remove)
    assert _found(document, reference=False) == _found(document, reference=True)


def test_more_volumes_than_allowed_is_found_by_both_engines() -> None:
    document = {"volumes": {f"v{index}": {"path": "p"} for index in range(33)}}
    assert _found(document, reference=False) == {((("volumes",)), "maxProperties", None)}
    assert _found(document, reference=True) == _found(document, reference=False)


_VALIDATE = """
import sys
from bundler.home.agentyaml import validate_agent_yaml
from bundler.errors import InvalidInput
validate_agent_yaml({"name": "scout", "volumes": {"notes": {"path": "/srv/notes"}}})
print("sound", "jsonschema" in sys.modules)
try:
    validate_agent_yaml({"volumes": {"notes": {"path": "/srv", "mode": "rx"}}})
except InvalidInput as err:
    print("unsound", "jsonschema" in sys.modules, err)
"""


def test_a_sound_agent_yaml_is_passed_without_importing_jsonschema() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _VALIDATE], capture_output=True, text=True, check=True
    )
    sound, unsound = done.stdout.splitlines()
    assert sound == "sound False"
    # a fault is still named by the reference, in the words it always had
    assert unsound.startswith("unsound True ") and "volumes.notes.mode" in unsound
    assert "must be one of rw, ro" in unsound


def test_a_fault_found_by_the_compiled_checker_is_named_as_before() -> None:
    try:
        validate_agent_yaml({"volumes": {"files": {"path": "x"}}})
    except Exception as err:  # noqa: BLE001 - the message is what is compared
        assert "volume name 'files' is taken" in str(err)
    else:
        raise AssertionError("a volume named files passed")
