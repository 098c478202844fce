"""Gate.handle_callback: verified callbacks only, and clear errors for every kind of bad input."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from payplane import (
    MAX_BODY_BYTES,
    Callback,
    Gate,
    InvalidSignature,
    MalformedCallback,
    PayplaneError,
    sign,
)

SECRET = "qwerty"
GATE = Gate(SECRET)


def callback_payload(**extra: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "project_id": 402,
        "payment": {
            "id": "order-1",
            "type": "purchase",
            "status": "success",
            "date": "2026-11-22T10:00:00+0000",
            "method": "card",
            "sum": {"amount": 1001, "currency": "USD"},
            "description": "Success",
        },
        "account": {"number": "400000******0077", "type": "visa"},
        "customer": {"id": "c1"},
        "operation": {
            "id": 17,
            "type": "sale",
            "status": "success",
            "date": "2026-11-22T10:00:00+0000",
            "created_date": "2026-11-22T09:59:58+0000",
            "request_id": "a1b2c3",
            "sum_initial": {"amount": 1001, "currency": "USD"},
            "sum_converted": {"amount": 1001, "currency": "USD"},
            "code": "0",
            "message": "Success",
            "provider": {"id": 1, "payment_id": "", "auth_code": ""},
        },
    }
    payload.update(extra)
    return payload


def signed(payload: dict[str, Any], secret: str = SECRET) -> dict[str, Any]:
    return {**payload, "signature": sign(payload, secret)}


def test_a_signed_callback_is_accepted_as_str_bytes_and_dict() -> None:
    body = signed(callback_payload())
    for given_body in (
        json.dumps(body),
        json.dumps(body).encode(),
        bytearray(json.dumps(body), "utf-8"),
        body,
    ):
        callback = GATE.handle_callback(given_body)
        assert callback.get_payment_id() == "order-1"
        assert callback.get_payment_status() == Callback.SUCCESS
        assert callback.get_payment()["sum"] == {"amount": 1001, "currency": "USD"}


def test_get_value_reads_dotted_paths_and_list_indices() -> None:
    payload = callback_payload(errors=[{"code": "123"}])
    callback = GATE.handle_callback(signed(payload))
    assert callback.get_value("operation.sum_initial.amount") == 1001
    assert callback.get_value("operation.provider.payment_id") == ""
    assert callback.get_value("errors.0.code") == "123"
    assert callback.get_value("errors.5.code") is None
    assert callback.get_value("operation.nothing.here") is None
    assert callback.get_value("payment.id.deeper") is None
    assert callback.get_project_id() == 402
    assert callback.get_operation() is not None


def test_a_clarification_request_exposes_its_fields() -> None:
    fields = {
        "customer": {
            "type": "object",
            "description": "Customer details",
            "properties": {
                "psu_consent": {"type": "string", "description": "consent"},
                "psu_consent_text": {"type": "string", "description": "text", "default": "I agree"},
            },
        }
    }
    payload = callback_payload(clarification_fields=fields)
    payload["payment"]["status"] = "awaiting clarification"
    callback = GATE.handle_callback(json.dumps(signed(payload)))
    assert callback.clarification_fields == fields
    assert callback.is_awaiting_clarification()
    assert callback.get_payment_status() == Callback.AWAITING_CLARIFICATION
    assert GATE.handle_callback(signed(callback_payload())).clarification_fields is None


def test_status_constants_cover_payplane_and_the_original_platform() -> None:
    payplane_statuses = {
        "processing",
        "awaiting 3ds result",
        "awaiting clarification",
        "success",
        "decline",
        "error",
    }
    original_extra = {
        "awaiting redirect result",
        "awaiting customer",
        "awaiting capture",
        "cancelled",
        "refunded",
        "partially refunded",
        "reversed",
    }
    assert set(Callback.STATUSES) == payplane_statuses | original_extra
    assert len(Callback.STATUSES) == len(set(Callback.STATUSES))


def test_a_tampered_value_raises_invalid_signature() -> None:
    body = signed(callback_payload())
    body["payment"]["sum"]["amount"] = 1
    with pytest.raises(InvalidSignature, match="does not match"):
        GATE.handle_callback(json.dumps(body))


def test_another_secret_raises_invalid_signature() -> None:
    with pytest.raises(InvalidSignature):
        GATE.handle_callback(signed(callback_payload(), "other"))


def test_a_callback_without_signature_raises_invalid_signature() -> None:
    with pytest.raises(InvalidSignature, match="no signature"):
        GATE.handle_callback(json.dumps(callback_payload()))


@pytest.mark.parametrize(
    "bad", ["", "not base64 at all", "A" * 88, "====" * 22, 12345, None, ["x"]]
)
def test_a_signature_that_is_not_base64_of_a_digest_raises_invalid_signature(bad: Any) -> None:
    body = {**callback_payload(), "signature": bad}
    with pytest.raises(InvalidSignature):
        GATE.handle_callback(json.dumps(body))


def test_a_signature_in_general_is_found_too() -> None:
    payload = callback_payload(general={"project_id": 402, "payment_id": "order-1"})
    payload["general"]["signature"] = sign(payload, SECRET)
    assert GATE.handle_callback(payload).get_payment_id() == "order-1"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("not json", "not JSON"),
        (b"\xff\xfe\xfa", "not"),
        ("[1, 2]", "not an object (it is a list)"),
        ('"text"', "not an object (it is a string)"),
        ("null", "not an object (it is a null)"),
        ('{"a": NaN}', "not JSON"),
        ("", "not JSON"),
        ("[" * 100_000 + "]" * 100_000, "nest"),
    ],
)
def test_a_body_that_is_not_a_json_object_raises_malformed_callback(body: Any, words: str) -> None:
    with pytest.raises(MalformedCallback) as caught:
        GATE.handle_callback(body)
    assert words in str(caught.value)


def nested(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        node = {"n": node}
    return node


def test_nesting_of_32_levels_is_accepted_and_33_is_refused() -> None:
    fine = signed(callback_payload(deep=nested(31)))  # the body itself is level 1
    assert GATE.handle_callback(json.dumps(fine)).get_value("deep.n.n.leaf") is None
    too_deep = callback_payload(deep=nested(32))
    body = {**too_deep, "signature": "A" * 86 + "=="}
    with pytest.raises(MalformedCallback, match="deeper than 32"):
        GATE.handle_callback(json.dumps(body))


def test_a_body_over_one_mebibyte_is_refused_before_parsing() -> None:
    payload = signed(callback_payload(padding="x" * MAX_BODY_BYTES))
    for body in (json.dumps(payload), json.dumps(payload).encode()):
        with pytest.raises(MalformedCallback, match="larger than 1048576 bytes"):
            GATE.handle_callback(body)
    multibyte = json.dumps(signed(callback_payload(padding="é" * 600_000)), ensure_ascii=False)
    assert len(multibyte) < MAX_BODY_BYTES < len(multibyte.encode())
    with pytest.raises(MalformedCallback, match="larger than"):
        GATE.handle_callback(multibyte)


def test_a_body_just_under_one_mebibyte_is_read() -> None:
    payload = callback_payload(padding="")
    room = MAX_BODY_BYTES - len(json.dumps(signed(payload)))
    payload["padding"] = "x" * room
    body = json.dumps(signed(payload))
    assert len(body) == MAX_BODY_BYTES
    assert GATE.handle_callback(body).get_value("padding") == "x" * room


def test_non_string_keys_in_a_dict_body_raise_malformed_callback() -> None:
    body = signed(callback_payload())
    body["payment"][7] = "seven"
    with pytest.raises(MalformedCallback, match="key 7 at 'payment' is not a string"):
        GATE.handle_callback(body)


def test_unsignable_values_in_a_dict_body_raise_malformed_callback() -> None:
    body = signed(callback_payload())
    body["payment"]["when"] = object()
    with pytest.raises(MalformedCallback, match="type object"):
        GATE.handle_callback(body)


@pytest.mark.parametrize("missing", ["payment", "payment.id", "payment.status"])
def test_a_genuine_body_without_payment_details_raises_malformed_callback(missing: str) -> None:
    payload = callback_payload()
    if missing == "payment":
        del payload["payment"]
    else:
        del payload["payment"][missing.split(".")[1]]
    with pytest.raises(MalformedCallback, match="payment"):
        GATE.handle_callback(signed(payload))


def test_a_body_of_another_type_raises_malformed_callback() -> None:
    with pytest.raises(MalformedCallback, match="str, bytes or a dict"):
        GATE.handle_callback(42)  # type: ignore[arg-type]


def test_a_dict_body_is_copied_so_later_changes_cannot_alter_the_verified_callback() -> None:
    body = signed(callback_payload())
    callback = GATE.handle_callback(body)
    body["payment"]["status"] = "decline"
    assert callback.get_payment_status() == "success"


def test_callback_built_directly_is_verified_too() -> None:
    body = signed(callback_payload())
    assert Callback(json.dumps(body), SECRET).get_payment_id() == "order-1"
    with pytest.raises(InvalidSignature):
        Callback(json.dumps(body), "other")
    assert Callback(body, SECRET).to_dict() == body


def test_every_error_belongs_to_the_library_tree() -> None:
    for error in (InvalidSignature, MalformedCallback):
        assert issubclass(error, PayplaneError)


# --- hypothesis: whatever arrives, only the library's own errors come out ----------------------

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)
python_keys = st.one_of(
    st.text(max_size=4), st.integers(), st.none(), st.booleans(), st.tuples(st.integers())
)
python_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=6),
        st.binary(max_size=4),
        st.builds(object),
        st.sets(st.integers(), max_size=2),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children),
        st.dictionaries(python_keys, children, max_size=4),
    ),
    max_leaves=12,
)
json_signatures = st.one_of(
    st.just(sign({"a": 1}, SECRET)),
    st.text(max_size=100),
    st.integers(),
    st.none(),
)
signatures = st.one_of(json_signatures, st.binary(max_size=10))


def only_library_errors(body: Any) -> None:
    try:
        GATE.handle_callback(body)
    except PayplaneError as error:
        assert str(error)
    # anything else propagates and fails the test


@settings(deadline=None, max_examples=200)
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_arbitrary_text_and_bytes_raise_only_library_errors(body: Any) -> None:
    only_library_errors(body)


@settings(deadline=None, max_examples=200)
@given(json_values, json_signatures)
def test_arbitrary_json_raises_only_library_errors(value: Any, signature: Any) -> None:
    if isinstance(value, dict):
        value = {**value, "signature": signature}
    text = json.dumps(value)
    only_library_errors(text)
    only_library_errors(text.encode("utf-16"))


@settings(deadline=None, max_examples=200)
@given(st.dictionaries(python_keys, python_values, max_size=5), signatures)
def test_arbitrary_python_dicts_raise_only_library_errors(
    value: dict[Any, Any], signature: Any
) -> None:
    body = copy.copy(value)
    body["signature"] = signature
    only_library_errors(body)


@settings(deadline=None, max_examples=100)
@given(json_values)
def test_genuine_callbacks_with_arbitrary_extra_content_are_accepted(extra: Any) -> None:
    payload = callback_payload(extra=extra)
    body = json.dumps(signed(payload))
    assert GATE.handle_callback(body).get_value("extra") == json.loads(json.dumps(extra))
