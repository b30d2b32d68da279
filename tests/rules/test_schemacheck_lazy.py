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


def test_the_fallback_names_each_required_field_missing_from_the_schema_not_a_message() -> None:
    """jsonschema gives one ``required`` error per name, the name only in its text: the
    fallback names them from the schema's list, in its order, for each object that lacks them."""
    entry = {
        "type": "object",
        "required": ["model", "api_url", "name"],
        "properties": {"name": {"type": "string"}, "model": {"type": "string"}},
    }
    node = {
        "type": "object",
        "properties": {"a": entry, "b": entry, "tags": NODE["properties"]["tags"]},
    }
    assert schemacheck.unsupported_keyword(node) == "minItems"
    found = schemacheck.check_value(node, {"a": {"name": "x"}, "b": {"model": "m"}}, ["t"])
    assert [(f.path, f.message) for f in found] == [
        ("t.a.model", "is required"),
        ("t.a.api_url", "is required"),
        ("t.b.api_url", "is required"),
        ("t.b.name", "is required"),
    ]
