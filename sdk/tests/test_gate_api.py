"""GateApi (clarification and status) against a real local HTTP server that acts the platform."""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest

from payplane import (
    Callback,
    ClarificationResult,
    GateApi,
    GateApiError,
    InvalidParameter,
    InvalidSignature,
    ServiceUnreachable,
    UnexpectedResponse,
    sign,
    verify,
)

SECRET = "project-secret"
FIELDS = {
    "customer": {
        "type": "object",
        "description": "Customer data",
        "properties": {"psu_consent_text": {"type": "string", "description": "consent text"}},
    }
}


def signed(body: dict[str, Any], secret: str = SECRET) -> dict[str, Any]:
    return {**body, "signature": sign(body, secret)}


def status_body(status: str = "awaiting clarification", **extra: Any) -> dict[str, Any]:
    return {
        "project_id": 402,
        "payment": {"id": "p-1", "type": "purchase", "status": status},
        "operation": {"id": 5, "type": "sale", "status": status, "code": "3191"},
        **extra,
    }


def gate_route(request: Any) -> tuple[int, Any]:
    """The Gate API of protocol.md section 6, for payment p-1 awaiting clarification."""
    body = request.json()
    general = body.get("general", {})
    if not verify(body, general.get("signature"), SECRET):
        return 401, {
            "status": "error",
            "code": "3003",
            "message": "Invalid signature",
            "errors": [],
        }
    if general.get("payment_id") != "p-1":
        return 404, {
            "status": "error",
            "code": "3061",
            "message": "Payment not found",
            "errors": [],
        }
    if request.path == "/v2/payment/clarification":
        if "additional_data" not in body:
            return 400, {
                "status": "error",
                "code": "2004",
                "message": "additional_data is required",
                "errors": [{"field": "additional_data", "message": "required"}],
            }
        customer = body["additional_data"].get("customer", {})
        if customer.get("psu_consent_text"):
            return 200, {
                "status": "success",
                "project_id": 402,
                "payment_id": "p-1",
                "request_id": "r1",
            }
        return 200, signed(
            {
                "status": "awaiting clarification",
                "project_id": 402,
                "payment_id": "p-1",
                "clarification_fields": FIELDS,
            }
        )
    if request.path == "/v2/payment/status":
        return 200, signed(status_body(clarification_fields=FIELDS))
    return 404, "no such path"


@pytest.fixture
def gate_api(local_server: Callable[..., Any]) -> tuple[Any, GateApi]:
    server = local_server(gate_route)
    return server, GateApi(402, SECRET, server.url)


def test_clarify_posts_a_signed_request_and_reports_success(gate_api: tuple[Any, GateApi]) -> None:
    server, api = gate_api
    result = api.clarify("p-1", {"customer": {"psu_consent_text": "I agree"}})
    assert result == ClarificationResult("success", None, result.data)
    assert result.is_complete
    request = server.requests[0]
    assert (request.method, request.path) == ("POST", "/v2/payment/clarification")
    body = json.loads(request.body)
    assert body["general"]["project_id"] == 402 and body["general"]["payment_id"] == "p-1"
    assert body["additional_data"] == {"customer": {"psu_consent_text": "I agree"}}
    assert verify(body, body["general"]["signature"], SECRET)


def test_a_partial_clarification_returns_what_is_still_missing(
    gate_api: tuple[Any, GateApi],
) -> None:
    _, api = gate_api
    result = api.clarify("p-1", {})
    assert result.status == ClarificationResult.AWAITING_CLARIFICATION
    assert not result.is_complete
    assert result.clarification_fields == FIELDS


def test_a_clarification_answer_with_a_wrong_signature_is_refused(
    local_server: Callable[..., Any],
) -> None:
    answer = signed({"status": "awaiting clarification", "clarification_fields": FIELDS}, "other")
    server = local_server(lambda r: (200, answer))
    with pytest.raises(InvalidSignature):
        GateApi(402, SECRET, server.url).clarify("p-1", {})


def test_status_returns_a_verified_callback(gate_api: tuple[Any, GateApi]) -> None:
    server, api = gate_api
    callback = api.status("p-1")
    assert isinstance(callback, Callback)
    assert callback.get_payment_status() == "awaiting clarification"
    assert callback.clarification_fields == FIELDS
    body = json.loads(server.requests[0].body)
    assert server.requests[0].path == "/v2/payment/status"
    assert set(body) == {"general"}


@pytest.mark.parametrize(
    "answer",
    [status_body(), signed(status_body(), "other"), {**status_body(), "signature": "nope"}],
)
def test_an_unsigned_or_wrongly_signed_status_answer_is_refused(
    local_server: Callable[..., Any], answer: dict[str, Any]
) -> None:
    server = local_server(lambda r: (200, answer))
    with pytest.raises(InvalidSignature):
        GateApi(402, SECRET, server.url).status("p-1")


def test_a_status_answer_that_cannot_be_read_raises_unexpected_response(
    local_server: Callable[..., Any],
) -> None:
    server = local_server(lambda r: (200, "<html>"))
    with pytest.raises(UnexpectedResponse):
        GateApi(402, SECRET, server.url).status("p-1")


def test_error_bodies_become_gate_api_errors(gate_api: tuple[Any, GateApi]) -> None:
    server, api = gate_api
    with pytest.raises(GateApiError) as caught:
        api.status("unknown")
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        404,
        "3061",
        "Payment not found",
    )
    with pytest.raises(GateApiError) as caught:
        GateApi(402, "wrong", server.url).status("p-1")
    assert (caught.value.status, caught.value.code) == (401, "3003")


def test_the_errors_list_is_kept(local_server: Callable[..., Any]) -> None:
    body = {
        "status": "error",
        "code": "2004",
        "message": "bad",
        "errors": [{"field": "additional_data", "message": "required"}],
    }
    server = local_server(lambda r: (400, body))
    with pytest.raises(GateApiError) as caught:
        GateApi(402, SECRET, server.url).clarify("p-1", {})
    assert caught.value.errors == [{"field": "additional_data", "message": "required"}]
    assert "2004" in str(caught.value)


def test_a_non_json_error_is_still_a_gate_api_error(local_server: Callable[..., Any]) -> None:
    server = local_server(lambda r: (503, "maintenance"))
    with pytest.raises(GateApiError) as caught:
        GateApi(402, SECRET, server.url).status("p-1")
    assert caught.value.status == 503 and caught.value.message == "maintenance"


def test_an_unreachable_gate_raises_service_unreachable(unused_url: str) -> None:
    with pytest.raises(ServiceUnreachable):
        GateApi(402, SECRET, unused_url).status("p-1")


def test_bad_arguments_are_refused_before_any_request() -> None:
    api = GateApi(402, SECRET)
    with pytest.raises(InvalidParameter):
        api.clarify("p-1", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter):
        api.status("")
    with pytest.raises(InvalidParameter):
        GateApi("402", SECRET)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter):
        api.clarify("p-1", {"customer": {1: "x"}})  # type: ignore[dict-item]
