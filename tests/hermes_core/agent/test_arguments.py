"""parse_arguments and coerce: verdicts on literal argument text, and schema coercion."""

from __future__ import annotations

from typing import Any

from hermes_core.agent.arguments import ParsedArguments, coerce, parse_arguments


def _schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def test_an_empty_string_means_no_arguments() -> None:
    assert parse_arguments("") == ParsedArguments("ok", {})
    assert parse_arguments("  \n ") == ParsedArguments("ok", {})


def test_a_json_object_is_ok() -> None:
    assert parse_arguments(' {"path": "a.txt", "lines": [1, 2]} \n') == ParsedArguments(
        "ok", {"path": "a.txt", "lines": [1, 2]}
    )


def test_text_that_stops_mid_json_is_truncated() -> None:
    assert parse_arguments('{"path": "a.txt", "content": "hel') == ParsedArguments(
        "truncated", {}, "arguments end mid-JSON (Unterminated string starting at)"
    )


def test_text_that_stops_after_a_value_is_truncated() -> None:
    assert parse_arguments('{"a": 1') == ParsedArguments(
        "truncated", {}, "arguments end mid-JSON (Expecting ',' delimiter)"
    )


def test_closed_but_malformed_json_is_invalid() -> None:
    assert parse_arguments('{"a": 1,}') == ParsedArguments(
        "invalid",
        {},
        "Invalid JSON arguments: Expecting property name enclosed in double quotes at "
        "character 8. Send a JSON object; for a tool without required parameters send {}.",
    )


def test_a_json_array_is_invalid() -> None:
    assert parse_arguments("[1, 2]") == ParsedArguments(
        "invalid", {}, "Arguments must be a JSON object, not an array."
    )


def test_parse_arguments_coerces_to_the_schema() -> None:
    schema = _schema(count={"type": "integer"}, force={"type": "boolean"})

    parsed = parse_arguments('{"count": "3", "force": "false", "path": "x"}', schema)

    assert parsed == ParsedArguments("ok", {"count": 3, "force": False, "path": "x"})


def test_an_integer_string_becomes_an_integer() -> None:
    schema = _schema(a={"type": "integer"}, b={"type": "integer"}, c={"type": "integer"})

    assert coerce({"a": "42", "b": " -7 ", "c": "42.0"}, schema) == {"a": 42, "b": -7, "c": 42}


def test_a_fractional_string_for_an_integer_is_left_alone() -> None:
    schema = _schema(a={"type": "integer"}, b={"type": "integer"})

    assert coerce({"a": "4.5", "b": "many"}, schema) == {"a": "4.5", "b": "many"}


def test_a_large_integer_string_keeps_every_digit() -> None:
    # Chat and message ids (Discord, Telegram, X) are 19-digit integers: beyond a float's 53 bits.
    schema = _schema(message_id={"type": "integer"})

    assert coerce({"message_id": "1234567890123456789"}, schema) == {
        "message_id": 1234567890123456789
    }


def test_a_number_string_becomes_a_float() -> None:
    schema = _schema(a={"type": "number"}, b={"type": "number"}, c={"type": "number"})

    assert coerce({"a": "3.5", "b": "2", "c": "lots"}, schema) == {"a": 3.5, "b": 2.0, "c": "lots"}


def test_a_boolean_string_becomes_a_boolean() -> None:
    schema = _schema(
        a={"type": "boolean"}, b={"type": "boolean"}, c={"type": "boolean"}, d={"type": "boolean"}
    )

    assert coerce({"a": "true", "b": "False", "c": " TRUE ", "d": "yes"}, schema) == {
        "a": True,
        "b": False,
        "c": True,
        "d": "yes",
    }


def test_json_strings_become_arrays_and_objects() -> None:
    schema = _schema(items={"type": "array"}, options={"type": "object"})

    assert coerce({"items": '["a", 1]', "options": '{"deep": true}'}, schema) == {
        "items": ["a", 1],
        "options": {"deep": True},
    }


def test_json_strings_of_the_wrong_shape_or_malformed_are_left_alone() -> None:
    schema = _schema(a={"type": "array"}, b={"type": "object"}, c={"type": "array"})

    arguments = {"a": '{"x": 1}', "b": "[1]", "c": "[1, "}

    assert coerce(arguments, schema) == arguments


def test_nested_objects_are_coerced() -> None:
    schema = _schema(
        options={
            "type": "object",
            "properties": {
                "depth": {"type": "integer"},
                "inner": {"type": "object", "properties": {"on": {"type": "boolean"}}},
            },
        }
    )

    arguments = {"options": {"depth": "2", "inner": {"on": "true"}, "other": "3"}}

    assert coerce(arguments, schema) == {
        "options": {"depth": 2, "inner": {"on": True}, "other": "3"}
    }


def test_a_nullable_type_coerces_to_its_concrete_type() -> None:
    schema = _schema(limit={"type": ["integer", "null"]}, flag={"type": ["null", "boolean"]})

    assert coerce({"limit": "10", "flag": "true"}, schema) == {"limit": 10, "flag": True}
    assert coerce({"limit": None, "flag": None}, schema) == {"limit": None, "flag": None}


def test_values_of_the_right_type_and_unknown_properties_are_left_alone() -> None:
    schema = _schema(count={"type": "integer"}, name={"type": "string"})

    arguments = {"count": 3, "name": "42", "extra": "true"}

    assert coerce(arguments, schema) == arguments


def test_a_schema_without_properties_changes_nothing() -> None:
    assert coerce({"a": "1"}, {"type": "object"}) == {"a": "1"}
