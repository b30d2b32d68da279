"""The compiled checker compiles a subschema when a value first reaches it (06 §1 start-up).

A keyword it does not implement still hands the whole value to jsonschema, wherever in the
schema the keyword sits; a subschema no value reaches costs nothing and decides nothing.
"""

from __future__ import annotations

from bundler.rules import schemacheck

NODE = {
    "type": "object",
    "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        "name": {"type": "string"},
    },
}


def test_a_keyword_it_lacks_deep_in_the_schema_falls_back_to_jsonschema() -> None:
    assert schemacheck.unsupported_keyword(NODE) == "minItems"
    [finding] = schemacheck.check_value(NODE, {"tags": ["one"]}, ["t"])
    assert (finding.path, finding.message) == ("t.tags", "does not satisfy the schema (minItems)")


def test_a_subschema_no_value_reaches_is_never_compiled() -> None:
    assert schemacheck.check_value(NODE, {"name": "x"}, ["t"]) == []
    [finding] = schemacheck.check_value(NODE, {"name": 5}, ["t"])
    assert (finding.path, finding.message) == ("t.name", "must be a string")
