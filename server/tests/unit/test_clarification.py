"""The clarification domain: descriptors, judging answers, and the length of the wait."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from payplane_server.domain.clarification import (
    DEFAULT_CONSENT_TEXT,
    MAX_VALUE_CHARS,
    ClarificationState,
    FieldError,
    check_structure,
    clarification_fields,
    wait_deadline,
)

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def test_customer_request_asks_for_consent_and_its_text_in_the_specification_shape() -> None:
    fields = ClarificationState.request("customer").fields()
    assert list(fields) == ["customer"]
    customer = fields["customer"]
    assert customer["type"] == "object"
    assert isinstance(customer["description"], str) and customer["description"]
    props = customer["properties"]
    assert set(props) == {"psu_consent", "psu_consent_text"}
    assert props["psu_consent"]["type"] == "string"
    assert "default" not in props["psu_consent"]
    assert props["psu_consent_text"] == {
        "type": "string",
        "description": "Text displayed on the payment form",
        "default": DEFAULT_CONSENT_TEXT,
    }


def test_avs_request_asks_for_post_code_and_street_address() -> None:
    fields = ClarificationState.request("avs_data").fields()
    props = fields["avs_data"]["properties"]
    assert set(props) == {"avs_post_code", "avs_street_address"}
    assert all(p["type"] == "string" and p["description"] for p in props.values())


def test_unknown_kind_cannot_be_requested() -> None:
    with pytest.raises(KeyError):
        ClarificationState.request("shipping")


def test_consent_given_completes_and_the_text_takes_its_default() -> None:
    result = ClarificationState.request("customer").apply({"customer": {"psu_consent": "1"}})
    assert result.complete and not result.refused
    assert result.state.accepted == {
        "customer": {"psu_consent": "1", "psu_consent_text": DEFAULT_CONSENT_TEXT}
    }
    assert result.state.fields() == {}


def test_consent_refused_completes_as_refused() -> None:
    result = ClarificationState.request("customer").apply({"customer": {"psu_consent": "0"}})
    assert result.complete and result.refused


@pytest.mark.parametrize("value", ["", "yes", "2", " 1", "true", "10"])
def test_consent_other_than_one_or_zero_is_asked_for_again(value: str) -> None:
    result = ClarificationState.request("customer").apply({"customer": {"psu_consent": value}})
    assert not result.complete
    assert [e.field for e in result.invalid] == ["additional_data.customer.psu_consent"]
    assert set(result.state.fields()["customer"]["properties"]) == {
        "psu_consent",
        "psu_consent_text",
    }


def test_consent_text_alone_leaves_only_consent_missing() -> None:
    result = ClarificationState.request("customer").apply(
        {"customer": {"psu_consent_text": "I agree"}}
    )
    assert not result.complete
    assert set(result.state.fields()["customer"]["properties"]) == {"psu_consent"}
    assert result.state.accepted == {"customer": {"psu_consent_text": "I agree"}}


def test_empty_submission_leaves_everything_missing() -> None:
    state = ClarificationState.request("avs_data")
    result = state.apply({})
    assert not result.complete and result.invalid == ()
    assert result.state.fields() == state.fields()


def test_accepted_values_are_kept_between_submissions() -> None:
    first = ClarificationState.request("avs_data").apply(
        {"avs_data": {"avs_post_code": "SW1A 1AA"}}
    )
    assert set(first.state.fields()["avs_data"]["properties"]) == {"avs_street_address"}
    restored = ClarificationState.from_json(first.state.to_json())
    second = restored.apply({"avs_data": {"avs_street_address": "10 Downing Street"}})
    assert second.complete
    assert second.state.accepted == {
        "avs_data": {"avs_post_code": "SW1A 1AA", "avs_street_address": "10 Downing Street"}
    }


def test_an_invalid_resubmission_withdraws_the_earlier_value() -> None:
    first = ClarificationState.request("avs_data").apply({"avs_data": {"avs_post_code": "12345"}})
    second = first.state.apply({"avs_data": {"avs_post_code": "<script>"}})
    assert set(second.state.fields()["avs_data"]["properties"]) == {
        "avs_post_code",
        "avs_street_address",
    }


@pytest.mark.parametrize("code", ["12345", "12345-6789", "SW1A 1AA", "K1A 0B1", "75008"])
def test_real_post_codes_are_accepted(code: str) -> None:
    result = ClarificationState.request("avs_data").apply({"avs_data": {"avs_post_code": code}})
    assert result.invalid == ()


@pytest.mark.parametrize("code", ["", "   ", "-123", "1234567890abcdefg", "12;34", "<b>", "12\n3"])
def test_odd_post_codes_are_rejected(code: str) -> None:
    result = ClarificationState.request("avs_data").apply({"avs_data": {"avs_post_code": code}})
    assert [e.field for e in result.invalid] == ["additional_data.avs_data.avs_post_code"]


@pytest.mark.parametrize(
    "street", ["10 Downing Street", "Straße des 17. Juni 135", "Flat 2/B, O'Neil Rd. #4"]
)
def test_real_street_addresses_are_accepted(street: str) -> None:
    result = ClarificationState.request("avs_data").apply(
        {"avs_data": {"avs_street_address": street}}
    )
    assert result.invalid == ()


@pytest.mark.parametrize("street", ["", "  ", "...", "a" * 101, "Main St <script>", "a\x00b"])
def test_odd_street_addresses_are_rejected(street: str) -> None:
    result = ClarificationState.request("avs_data").apply(
        {"avs_data": {"avs_street_address": street}}
    )
    assert len(result.invalid) == 1


@pytest.mark.parametrize("text", ["", "   ", "a" * 2001, "bell\x07"])
def test_odd_consent_texts_are_rejected(text: str) -> None:
    result = ClarificationState.request("customer").apply({"customer": {"psu_consent_text": text}})
    assert [e.field for e in result.invalid] == ["additional_data.customer.psu_consent_text"]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ([], "additional_data"),
        ("x", "additional_data"),
        (None, "additional_data"),
        ({"shipping": {}}, "additional_data.shipping"),
        ({"customer": "1"}, "additional_data.customer"),
        ({"customer": {"psu_consent": 1}}, "additional_data.customer.psu_consent"),
        ({"customer": {"psu_consent": None}}, "additional_data.customer.psu_consent"),
        ({"customer": {"psu_consent": ["1"]}}, "additional_data.customer.psu_consent"),
        ({"customer": {"psu_consent": {"a": "1"}}}, "additional_data.customer.psu_consent"),
        ({"customer": {"name": "x"}}, "additional_data.customer.name"),
        (
            {"customer": {"psu_consent_text": "x" * (MAX_VALUE_CHARS + 1)}},
            "additional_data.customer.psu_consent_text",
        ),
    ],
)
def test_malformed_additional_data_is_named_field_by_field(data: object, field: str) -> None:
    errors = check_structure(data)
    assert [e.field for e in errors] == [field]


def test_keys_the_payment_was_not_asked_for_are_malformed() -> None:
    requested = ClarificationState.request("customer").requested
    errors = check_structure({"avs_data": {"avs_post_code": "1"}}, requested)
    assert errors == [FieldError("additional_data.avs_data", "was not requested for this payment")]
    assert check_structure({"customer": {"psu_consent": "1"}}, requested) == []


def test_the_wait_is_thirty_minutes_from_the_request() -> None:
    assert wait_deadline(T0, T0 + timedelta(hours=24), 1800) == T0 + timedelta(minutes=30)


def test_the_wait_never_runs_past_the_processing_threshold() -> None:
    threshold = T0 + timedelta(minutes=10)
    assert wait_deadline(T0, threshold, 1800) == threshold


@given(
    at=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2040, 1, 1)),
    threshold_after=st.integers(min_value=-(10**6), max_value=10**6),
    wait=st.integers(min_value=1, max_value=10**6),
)
def test_the_deadline_is_the_earlier_of_wait_and_threshold(
    at: datetime, threshold_after: int, wait: int
) -> None:
    at = at.replace(tzinfo=UTC)
    threshold = at + timedelta(seconds=threshold_after)
    deadline = wait_deadline(at, threshold, wait)
    assert deadline <= threshold and deadline <= at + timedelta(seconds=wait)
    assert deadline in (threshold, at + timedelta(seconds=wait))


def test_fields_for_nothing_missing_is_empty() -> None:
    assert clarification_fields({"customer": ()}) == {}


def test_callback_keys_are_safe_for_every_official_library() -> None:
    # protocol.md 1.1: no sibling key may be another's prefix followed by a character below ':'.
    for kind in ("customer", "avs_data"):
        names = list(ClarificationState.request(kind).fields()[kind]["properties"])
        for a in names:
            for b in names:
                if a != b and b.startswith(a):
                    assert b[len(a)] > ":"
