"""Bad clarification requests get the documented Gate error, never a 500, and change nothing:
no status change, no callback, no restart of the wait."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from payplane import sign
from sqlalchemy import select
from starlette.testclient import TestClient

from payplane_server.clock import FakeClock
from payplane_server.context import AppContext
from payplane_server.db.tables import payments
from payplane_server.services.projects import create_project
from payplane_server.testing.clarification import callback_bodies, gate_body, waiting_payment
from payplane_server.web import create_app

PROJECT, OTHER = 402, 403
URL = "/v2/payment/clarification"
GOOD = {"customer": {"psu_consent": "1"}}


@pytest.fixture
def secrets_(ctx: AppContext) -> dict[int, str]:
    return {
        PROJECT: create_project(ctx, project_id=PROJECT, name="Shop", callback_url="http://x/cb"),
        OTHER: create_project(ctx, project_id=OTHER, name="Other", callback_url="http://y/cb"),
    }


@pytest.fixture
def waiting(ctx: AppContext, secrets_: dict[int, str], clock: FakeClock) -> Iterator[int]:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    before = _snapshot(ctx, pk)
    # Any restart of the wait would now show as a later deadline.
    clock.advance(minutes=10)
    yield pk
    assert _snapshot(ctx, pk) == before, "a refused request changed the payment"


@pytest.fixture
def client(ctx: AppContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx), raise_server_exceptions=False) as test_client:
        yield test_client


def _snapshot(ctx: AppContext, pk: int) -> tuple[Any, ...]:
    with ctx.db.read() as conn:
        row = conn.execute(select(payments).where(payments.c.id == pk)).one()
    return (tuple(row), len(callback_bodies(ctx, pk)))


def _signed(body: dict[str, Any], secret: str) -> dict[str, Any]:
    general = body.get("general")
    if isinstance(general, dict):
        general["signature"] = sign(body, secret)
    return body


def _assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"status", "code", "message", "errors"}
    assert body["status"] == "error"
    assert isinstance(body["code"], str) and isinstance(body["message"], str)
    assert all(set(e) == {"field", "message"} for e in body["errors"])
    if code is not None:
        assert body["code"] == code
    return body


RAW_BODIES = {
    "not JSON": b"payment_id=p-1&consent=1",
    "empty": b"",
    "not UTF-8": b'{"general": "\xff\xfe"}',
    "JSON array": b"[1, 2]",
    "JSON string": b'"general"',
    "JSON null": b"null",
    "nested too deep": b"[" * 100_000,
    "NaN project": b'{"general": {"project_id": NaN, "payment_id": "p-1", "signature": "x"}}',
    "huge number project": b'{"general": {"project_id": 1e999, "payment_id": "p-1", '
    b'"signature": "x"}, "additional_data": {}}',
    "duplicate keys": b'{"general": 1, "general": "x"}',
}


# Parsing does not depend on the engine: these long lists run on SQLite only.
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@SQLITE_ONLY
@pytest.mark.usefixtures("waiting")
@pytest.mark.parametrize("raw", RAW_BODIES.values(), ids=RAW_BODIES.keys())
def test_unparsable_bodies_are_400_2004(client: TestClient, raw: bytes) -> None:
    response = client.post(URL, content=raw, headers={"content-type": "application/json"})
    _assert_error(response, 400, "2004")


def _general(**changes: Any) -> dict[str, Any]:
    general: dict[str, Any] = {"project_id": PROJECT, "payment_id": "p-1"}
    for key, value in changes.items():
        if value is ...:
            general.pop(key)
        else:
            general[key] = value
    return general


MALFORMED: dict[str, tuple[dict[str, Any], str]] = {
    "general missing": ({"additional_data": GOOD}, "general"),
    "general a string": ({"general": "p-1", "additional_data": GOOD}, "general"),
    "general a list": ({"general": [PROJECT, "p-1"], "additional_data": GOOD}, "general"),
    "general null": ({"general": None, "additional_data": GOOD}, "general"),
    "project_id missing": (
        {"general": _general(project_id=...), "additional_data": GOOD},
        "general.project_id",
    ),
    "project_id a string": (
        {"general": _general(project_id="402"), "additional_data": GOOD},
        "general.project_id",
    ),
    "project_id a bool": (
        {"general": _general(project_id=True), "additional_data": GOOD},
        "general.project_id",
    ),
    "project_id a float": (
        {"general": _general(project_id=402.0), "additional_data": GOOD},
        "general.project_id",
    ),
    "project_id negative": (
        {"general": _general(project_id=-402), "additional_data": GOOD},
        "general.project_id",
    ),
    "project_id huge": (
        {"general": _general(project_id=2**80), "additional_data": GOOD},
        "general.project_id",
    ),
    "payment_id missing": (
        {"general": _general(payment_id=...), "additional_data": GOOD},
        "general.payment_id",
    ),
    "payment_id a number": (
        {"general": _general(payment_id=1), "additional_data": GOOD},
        "general.payment_id",
    ),
    "payment_id empty": (
        {"general": _general(payment_id=""), "additional_data": GOOD},
        "general.payment_id",
    ),
    "payment_id huge": (
        {"general": _general(payment_id="p" * 100_000), "additional_data": GOOD},
        "general.payment_id",
    ),
    "unknown top-level key": ({"general": _general(), "additional_data": GOOD, "x": 1}, "x"),
    "unknown general key": (
        {"general": _general(terminal_id=7), "additional_data": GOOD},
        "general.terminal_id",
    ),
    "additional_data a list": ({"general": _general(), "additional_data": []}, "additional_data"),
    "additional_data a string": (
        {"general": _general(), "additional_data": "psu_consent=1"},
        "additional_data",
    ),
    "additional_data null": ({"general": _general(), "additional_data": None}, "additional_data"),
    "additional_data a number": ({"general": _general(), "additional_data": 1}, "additional_data"),
    "unknown object": (
        {"general": _general(), "additional_data": {"shipping": {"city": "X"}}},
        "additional_data.shipping",
    ),
    "object not an object": (
        {"general": _general(), "additional_data": {"customer": "1"}},
        "additional_data.customer",
    ),
    "unknown parameter": (
        {"general": _general(), "additional_data": {"customer": {"psu_age": "30"}}},
        "additional_data.customer.psu_age",
    ),
    "value a number": (
        {"general": _general(), "additional_data": {"customer": {"psu_consent": 1}}},
        "additional_data.customer.psu_consent",
    ),
    "value a bool": (
        {"general": _general(), "additional_data": {"customer": {"psu_consent": True}}},
        "additional_data.customer.psu_consent",
    ),
    "value null": (
        {"general": _general(), "additional_data": {"customer": {"psu_consent": None}}},
        "additional_data.customer.psu_consent",
    ),
    "value an object": (
        {"general": _general(), "additional_data": {"customer": {"psu_consent": {"v": "1"}}}},
        "additional_data.customer.psu_consent",
    ),
    "value a list": (
        {"general": _general(), "additional_data": {"customer": {"psu_consent": ["1"] * 50}}},
        "additional_data.customer.psu_consent",
    ),
    "value huge": (
        {
            "general": _general(),
            "additional_data": {"customer": {"psu_consent_text": "I agree. " * 50_000}},
        },
        "additional_data.customer.psu_consent_text",
    ),
}


@SQLITE_ONLY
@pytest.mark.usefixtures("waiting")
@pytest.mark.parametrize(("body", "field"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_requests_are_400_2004_naming_the_field(
    client: TestClient, secrets_: dict[int, str], body: dict[str, Any], field: str
) -> None:
    body = json.loads(json.dumps(body))
    response = client.post(URL, json=_signed(body, secrets_[PROJECT]))
    error = _assert_error(response, 400, "2004")
    assert field in [e["field"] for e in error["errors"]]


@pytest.mark.usefixtures("waiting")
def test_parameters_not_requested_of_this_payment_are_400(
    client: TestClient, secrets_: dict[int, str]
) -> None:
    data = {"avs_data": {"avs_post_code": "75008"}}
    response = client.post(URL, json=gate_body(secrets_[PROJECT], PROJECT, "p-1", data))
    error = _assert_error(response, 400, "2004")
    assert error["errors"] == [
        {"field": "additional_data.avs_data", "message": "was not requested for this payment"}
    ]


@SQLITE_ONLY
@pytest.mark.usefixtures("waiting")
@pytest.mark.parametrize(
    "signature",
    [..., 12345, None, "", "not base64!", "A" * 88, sign({"x": "y"}, "other")],
    ids=["missing", "number", "null", "empty", "garbage", "zeros", "another payload"],
)
def test_missing_or_wrong_signatures_are_refused(
    client: TestClient, signature: Any, secrets_: dict[int, str]
) -> None:
    body: dict[str, Any] = {"general": _general(), "additional_data": GOOD}
    if signature is not ...:
        body["general"]["signature"] = signature
    response = client.post(URL, json=body)
    if signature is ... or signature is None or isinstance(signature, int):
        _assert_error(response, 400, "2004")
    else:
        _assert_error(response, 401, "3003")


@pytest.mark.usefixtures("waiting")
def test_a_signature_made_with_another_projects_key_is_401(
    client: TestClient, secrets_: dict[int, str]
) -> None:
    response = client.post(URL, json=gate_body(secrets_[OTHER], PROJECT, "p-1", GOOD))
    _assert_error(response, 401, "3003")


@pytest.mark.usefixtures("waiting")
def test_an_unknown_project_is_401_like_a_wrong_key(
    client: TestClient, secrets_: dict[int, str]
) -> None:
    response = client.post(URL, json=gate_body(secrets_[PROJECT], 999, "p-1", GOOD))
    _assert_error(response, 401, "3003")


@pytest.mark.usefixtures("waiting")
def test_a_clarification_for_another_projects_payment_is_404(
    client: TestClient, secrets_: dict[int, str]
) -> None:
    # Correctly signed by the other project, naming this project's payment ID.
    response = client.post(URL, json=gate_body(secrets_[OTHER], OTHER, "p-1", GOOD))
    _assert_error(response, 404, "3061")


@pytest.mark.usefixtures("waiting")
def test_a_body_over_the_limit_is_413_in_the_gate_shape(
    client: TestClient, ctx: AppContext, secrets_: dict[int, str]
) -> None:
    filler = "x" * (ctx.settings.max_body_bytes + 10)
    body = gate_body(secrets_[PROJECT], PROJECT, "p-1", {"customer": {"psu_consent_text": filler}})
    response = client.post(URL, json=body)
    _assert_error(response, 413)


@pytest.mark.usefixtures("waiting")
def test_get_is_not_allowed(client: TestClient) -> None:
    assert client.get(URL).status_code == 405
