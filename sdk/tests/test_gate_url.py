"""Gate: signed Payment Page URLs, and test mode against a real parameter check service."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any, Callable
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest

from payplane import (
    Gate,
    InvalidParameter,
    ParamProblem,
    Payment,
    PayplaneError,
    ServiceUnreachable,
    UnexpectedResponse,
    ValidationException,
    sign,
    verify,
)

SECRET = "qwerty"


def full_payment() -> Payment:
    payment = Payment(402, "order-123456")
    payment.payment_amount = 1001
    payment.payment_currency = "USD"
    payment.customer_id = "cust 77/é"
    payment.payment_description = "Order #123456 & more"
    payment.language_code = "en"
    return payment


def query_of(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def test_the_url_points_at_the_payment_page_and_carries_every_parameter() -> None:
    url = Gate(SECRET, base_url="https://pay.example/").get_purchase_payment_page_url(
        full_payment()
    )
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "pay.example", "/payment")
    query = query_of(url)
    assert query["customer_id"] == "cust 77/é"
    assert query["payment_description"] == "Order #123456 & more"
    assert query["payment_amount"] == "1001"
    assert query["interface_type"] == '{"id": 50}'
    assert list(query)[-1] == "signature"


def test_the_signature_is_percent_encoded_and_signs_the_parameters() -> None:
    payment = full_payment()
    url = Gate(SECRET).get_purchase_payment_page_url(payment)
    raw_signature = url.rsplit("&signature=", 1)[1]
    assert not set("+/=") & set(raw_signature)
    signature = unquote(raw_signature)
    assert signature == sign(payment.get_params(), SECRET)
    expected = base64.b64encode(
        hmac.new(
            SECRET.encode(),
            ";".join(f"{k}:{v}" for k, v in sorted(payment.get_params().items())).encode(),
            hashlib.sha512,
        ).digest()
    ).decode()
    assert signature == expected


def test_the_url_verifies_from_its_own_query_text() -> None:
    payment = full_payment()
    payment.set_param("redirect", True)
    payment.set_param("close_on_missclick", False)
    payment.set_param("frame_mode", "popup")
    query = query_of(Gate(SECRET).get_purchase_payment_page_url(payment))
    signature = query.pop("signature")
    assert query["redirect"] == "1"
    assert query["close_on_missclick"] == "0"
    assert query["frame_mode"] == "popup"
    assert verify(query, signature, SECRET)
    query["payment_amount"] = "1002"
    assert not verify(query, signature, SECRET)


def test_the_shared_payplane_vector_is_what_the_gate_signs(vectors: list[dict[str, Any]]) -> None:
    vector = next(v for v in vectors if v["payload"].get("payment_id") == "order-123456")
    payment = Payment(402, "order-123456")
    for name, value in vector["payload"].items():
        if name not in ("project_id", "payment_id"):
            payment.set_param(name, value)
    params = payment.get_params()
    del params["interface_type"]
    assert sign(params, vector["secret"]) == vector["signature"]


@pytest.mark.parametrize("base_url", ["ftp://x", "pay.example", "", None, "file:///etc/passwd"])
def test_a_base_url_that_is_not_http_is_refused(base_url: Any) -> None:
    with pytest.raises(InvalidParameter):
        Gate(SECRET, base_url=base_url)


# --- test mode --------------------------------------------------------------------------------


def params_check(request: Any) -> tuple[int, dict[str, Any]]:
    """Answers like the parameter check service of protocol.md section 9."""
    parts = urlsplit(request.path)
    if request.method != "GET" or parts.path != "/params/check":
        return 404, {"errors": [{"param": "path", "reason": "not found"}]}
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    errors = []
    if "signature" in query:
        errors.append({"param": "signature", "reason": "The check takes no signature."})
    if not query.get("payment_amount"):
        errors.append({"param": "payment_amount", "reason": "This value is required, null given."})
    if query.get("account_token", "good") != "good":
        errors.append({"param": "account_token", "reason": "The token is invalid."})
    if errors:
        return 400, {"errors": errors}
    return 200, {"status": "ok"}


def test_test_mode_asks_the_check_service_then_returns_the_signed_url(
    local_server: Callable[..., Any],
) -> None:
    server = local_server(params_check)
    gate = Gate(SECRET, base_url="https://pay.example", test_host=server.url)
    payment = full_payment()
    url = gate.get_payment_page_url(payment)
    assert url == gate.get_purchase_payment_page_url(payment)
    assert len(server.requests) == 1
    checked = query_of(server.requests[0].path)
    assert checked == {k: str(v) for k, v in payment.get_params().items()}


def test_test_mode_raises_validation_exception_in_the_documented_format(
    local_server: Callable[..., Any],
) -> None:
    server = local_server(params_check)
    payment = Payment(402, "order-1")
    payment.set_param("account_token", "bad")
    with pytest.raises(ValidationException) as caught:
        Gate(SECRET, test_host=server.url).get_payment_page_url(payment)
    assert str(caught.value) == (
        "One or more parameters are not valid:\n"
        "payment_amount\n"
        "    This value is required, null given.\n"
        "account_token\n"
        "    The token is invalid."
    )
    assert caught.value.errors == [
        ParamProblem("payment_amount", "This value is required, null given."),
        ParamProblem("account_token", "The token is invalid."),
    ]
    assert isinstance(caught.value, PayplaneError)


def test_test_mode_uses_the_payment_page_host_when_no_test_host_is_given(
    local_server: Callable[..., Any],
) -> None:
    server = local_server(params_check)
    Gate(SECRET, base_url=server.url).get_payment_page_url(full_payment())
    assert server.requests[0].path.startswith("/params/check?")


def test_an_unreachable_check_service_raises_service_unreachable(unused_url: str) -> None:
    gate = Gate(SECRET, test_host=unused_url)
    with pytest.raises(ServiceUnreachable) as caught:
        gate.get_payment_page_url(full_payment())
    assert unused_url in str(caught.value)
    assert not isinstance(caught.value, ValidationException)


@pytest.mark.parametrize(
    "answer",
    [
        (500, "Internal error"),
        (200, "not json"),
        (200, {"status": "maybe"}),
        (400, {"errors": []}),
        (400, ["not", "an", "object"]),
        (400, {"errors": ["not an object"]}),
    ],
)
def test_a_check_service_answer_that_cannot_be_read_raises_unexpected_response(
    local_server: Callable[..., Any], answer: tuple[int, Any]
) -> None:
    server = local_server(lambda request: answer)
    with pytest.raises(UnexpectedResponse):
        Gate(SECRET, test_host=server.url).get_payment_page_url(full_payment())


def test_a_check_service_that_does_not_answer_in_time_is_unreachable(
    local_server: Callable[..., Any],
) -> None:
    import time

    def slow(request: Any) -> tuple[int, dict[str, str]]:
        time.sleep(1.5)
        return 200, {"status": "ok"}

    server = local_server(slow)
    with pytest.raises(ServiceUnreachable, match="no answer within"):
        Gate(SECRET, test_host=server.url, timeout=0.3).get_payment_page_url(full_payment())


def test_interface_type_is_sent_as_json_text() -> None:
    query = query_of(Gate(SECRET).get_purchase_payment_page_url(full_payment()))
    assert json.loads(query["interface_type"]) == {"id": 50}
