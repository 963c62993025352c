"""The answer models' attribute docstrings describe their fields, as the document shows them."""

from __future__ import annotations

from server.protocol.schemas.common import ErrorBody, ErrorEnvelope
from server.protocol.schemas.runs import ApprovalAnswer


def test_an_attribute_docstring_describes_its_field() -> None:
    assert ErrorBody.model_fields["message"].description == "What went wrong, readable by a person."
    assert ErrorBody.model_fields["param"].description == (
        "The request field or header at fault, if one is."
    )


def test_a_field_without_a_docstring_has_no_description() -> None:
    assert ErrorEnvelope.model_fields["error"].description is None


def test_a_model_with_a_config_of_its_own_is_described_and_built() -> None:
    assert ApprovalAnswer.model_fields["scope"].description == (
        "``session`` approves the tool for the rest of the conversation."
    )
    assert ApprovalAnswer.model_validate({"approve": True}).scope == "once"


def test_a_described_model_validates_and_serialises_once_built() -> None:
    body = {"message": "m", "type": "t", "param": None, "code": None}
    envelope = ErrorEnvelope.model_validate({"error": body})
    assert envelope.model_dump() == {"error": body}
    schema = ErrorEnvelope.model_json_schema()
    assert schema["$defs"]["ErrorBody"]["properties"]["message"]["description"] == (
        "What went wrong, readable by a person."
    )
