"""POST /v2/payment/clarification: every row of the specification's state table (protocol.md
section 6), on SQLite and PostgreSQL, through the real app."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from payplane import verify
from sqlalchemy import select
from starlette.testclient import TestClient

from payplane_server.clock import FakeClock
from payplane_server.context import AppContext
from payplane_server.db.tables import balances, operations, payments
from payplane_server.domain.clarification import DEFAULT_CONSENT_TEXT
from payplane_server.services.clarification import fire_due
from payplane_server.services.projects import create_project
from payplane_server.testing.clarification import callback_bodies, gate_body, waiting_payment
from payplane_server.web import create_app

PROJECT = 402
URL = "/v2/payment/clarification"
WAIT = timedelta(minutes=30)


@pytest.fixture
def secret(ctx: AppContext) -> str:
    return create_project(
        ctx, project_id=PROJECT, name="Shop", callback_url="http://127.0.0.1:9/cb"
    )


@pytest.fixture
def client(ctx: AppContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx), raise_server_exceptions=False) as test_client:
        yield test_client


def clarify(client: TestClient, secret: str, payment_id: str, data: Any = None) -> Any:
    return client.post(URL, json=gate_body(secret, PROJECT, payment_id, data))


def payment(ctx: AppContext, pk: int) -> Any:
    with ctx.db.read() as conn:
        return conn.execute(select(payments).where(payments.c.id == pk)).one()


def operation(ctx: AppContext, pk: int) -> Any:
    with ctx.db.read() as conn:
        return conn.execute(select(operations).where(operations.c.payment_pk == pk)).one()


def test_payment_needing_consent_waits_with_code_3191_and_a_callback_listing_the_fields(
    ctx: AppContext, secret: str, clock: FakeClock
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1", kind="customer")
    row = payment(ctx, pk)
    assert row.status == "awaiting clarification"
    assert row.clarification_deadline == clock.now() + WAIT
    assert operation(ctx, pk).code == "3191"
    [callback] = callback_bodies(ctx, pk)
    assert verify(callback, callback["signature"], secret)
    assert callback["payment"]["status"] == "awaiting clarification"
    assert callback["operation"]["status"] == "awaiting clarification"
    assert callback["operation"]["code"] == "3191"
    props = callback["clarification_fields"]["customer"]["properties"]
    assert set(props) == {"psu_consent", "psu_consent_text"}
    assert props["psu_consent_text"]["default"] == DEFAULT_CONSENT_TEXT


def test_payment_needing_avs_data_waits_with_a_callback_listing_post_code_and_street(
    ctx: AppContext, secret: str
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1", kind="avs_data")
    [callback] = callback_bodies(ctx, pk)
    assert verify(callback, callback["signature"], secret)
    assert set(callback["clarification_fields"]["avs_data"]["properties"]) == {
        "avs_post_code",
        "avs_street_address",
    }


def test_all_requested_parameters_answer_200_success_and_the_payment_succeeds(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    response = clarify(client, secret, "p-1", {"customer": {"psu_consent": "1"}})
    assert response.status_code == 200
    assert response.json() == {
        "status": "success",
        "project_id": PROJECT,
        "payment_id": "p-1",
        "request_id": operation(ctx, pk).request_id,
    }
    row = payment(ctx, pk)
    assert row.status == "success"
    assert row.clarification_deadline is None and row.clarification_fields is None
    op = operation(ctx, pk)
    assert (op.status, op.code) == ("success", "0")
    request, final = callback_bodies(ctx, pk)
    assert request["operation"]["code"] == "3191"
    assert verify(final, final["signature"], secret)
    assert final["payment"]["status"] == "success"
    assert final["operation"]["code"] == "0"
    assert "clarification_fields" not in final
    with ctx.db.read() as conn:
        assert conn.execute(select(balances.c.amount)).scalar() == 1000


def test_complete_avs_data_answers_200_success(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1", kind="avs_data")
    data = {"avs_data": {"avs_post_code": "SW1A 1AA", "avs_street_address": "10 Downing Street"}}
    response = clarify(client, secret, "p-1", data)
    assert (response.status_code, response.json()["status"]) == (200, "success")
    assert payment(ctx, pk).status == "success"
    assert [c["payment"]["status"] for c in callback_bodies(ctx, pk)] == [
        "awaiting clarification",
        "success",
    ]


def test_refused_consent_answers_200_and_declines_with_code_10000_and_a_callback(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    response = clarify(client, secret, "p-1", {"customer": {"psu_consent": "0"}})
    assert (response.status_code, response.json()["status"]) == (200, "success")
    assert payment(ctx, pk).status == "decline"
    final = callback_bodies(ctx, pk)[-1]
    assert final["payment"]["status"] == "decline"
    assert final["operation"]["code"] == "10000"
    assert final["operation"]["message"] == "The customer refused consent"
    with ctx.db.read() as conn:
        assert conn.execute(select(balances.c.amount)).scalar() is None


def test_some_parameters_missing_answers_awaiting_with_the_rest_and_a_callback(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1", kind="avs_data")
    response = clarify(client, secret, "p-1", {"avs_data": {"avs_post_code": "75008"}})
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "awaiting clarification"
    assert (body["project_id"], body["payment_id"]) == (PROJECT, "p-1")
    assert body["request_id"] == operation(ctx, pk).request_id
    assert set(body["clarification_fields"]["avs_data"]["properties"]) == {"avs_street_address"}
    assert payment(ctx, pk).status == "awaiting clarification"
    first, again = callback_bodies(ctx, pk)
    assert first["operation"]["code"] == "3191"
    assert verify(again, again["signature"], secret)
    assert again["payment"]["status"] == "awaiting clarification"
    assert again["clarification_fields"] == body["clarification_fields"]


def test_empty_additional_data_answers_awaiting_with_everything_still_missing(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    response = clarify(client, secret, "p-1", {})
    assert response.status_code == 200
    assert response.json()["status"] == "awaiting clarification"
    assert set(response.json()["clarification_fields"]["customer"]["properties"]) == {
        "psu_consent",
        "psu_consent_text",
    }
    assert len(callback_bodies(ctx, pk)) == 2


def test_invalid_values_answer_awaiting_and_are_asked_for_again(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1", kind="avs_data")
    data = {"avs_data": {"avs_post_code": "<b>", "avs_street_address": "1 Main St"}}
    response = clarify(client, secret, "p-1", data)
    assert response.status_code == 200
    assert response.json()["status"] == "awaiting clarification"
    assert set(response.json()["clarification_fields"]["avs_data"]["properties"]) == {
        "avs_post_code"
    }
    assert payment(ctx, pk).status == "awaiting clarification"


def test_partial_clarification_restarts_the_wait(
    ctx: AppContext, secret: str, client: TestClient, clock: FakeClock
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    clock.advance(minutes=25)
    clarify(client, secret, "p-1", {"customer": {"psu_consent_text": "I agree"}})
    assert payment(ctx, pk).clarification_deadline == clock.now() + WAIT
    clock.advance(minutes=29, seconds=59)
    assert fire_due(ctx) == 0
    assert payment(ctx, pk).status == "awaiting clarification"


def test_empty_resubmission_restarts_the_wait_too(
    ctx: AppContext, secret: str, client: TestClient, clock: FakeClock
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    clock.advance(minutes=29)
    clarify(client, secret, "p-1", {})
    assert payment(ctx, pk).clarification_deadline == clock.now() + WAIT


def test_accepted_values_are_remembered_until_the_rest_arrives(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1", kind="avs_data")
    clarify(client, secret, "p-1", {"avs_data": {"avs_post_code": "75008"}})
    clarify(client, secret, "p-1", {})
    response = clarify(client, secret, "p-1", {"avs_data": {"avs_street_address": "1 Rue X"}})
    assert response.json()["status"] == "success"
    assert payment(ctx, pk).status == "success"


def test_thirty_minutes_without_clarification_declines_with_603_and_a_callback(
    ctx: AppContext, secret: str, clock: FakeClock
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    clock.advance(minutes=29, seconds=59)
    assert fire_due(ctx) == 0
    clock.advance(seconds=1)
    assert fire_due(ctx) == 1
    row = payment(ctx, pk)
    assert row.status == "decline" and row.clarification_deadline is None
    assert operation(ctx, pk).code == "603"
    final = callback_bodies(ctx, pk)[-1]
    assert verify(final, final["signature"], secret)
    assert (final["payment"]["status"], final["operation"]["code"]) == ("decline", "603")
    assert "clarification_fields" not in final


def test_the_wait_never_extends_past_the_24_hour_processing_threshold(
    ctx: AppContext, secret: str, client: TestClient, clock: FakeClock
) -> None:
    registered = clock.now()
    threshold = registered + timedelta(hours=24)
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    # Keep resubmitting every 29 minutes: the wait restarts each time, up to the threshold.
    while clock.now() + timedelta(minutes=29) < threshold:
        clock.advance(minutes=29)
        assert clarify(client, secret, "p-1", {}).status_code == 200
        assert fire_due(ctx) == 0
    assert payment(ctx, pk).clarification_deadline == threshold
    clock.set(threshold - timedelta(seconds=1))
    assert fire_due(ctx) == 0
    clock.set(threshold)
    assert fire_due(ctx) == 1
    assert (payment(ctx, pk).status, operation(ctx, pk).code) == ("decline", "603")


def test_request_without_additional_data_is_refused_400_2004_and_the_wait_does_not_restart(
    ctx: AppContext, secret: str, client: TestClient, clock: FakeClock
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    before = payment(ctx, pk)
    clock.advance(minutes=10)
    response = clarify(client, secret, "p-1", None)
    assert response.status_code == 400
    assert response.json() == {
        "status": "error",
        "code": "2004",
        "message": "The request has no additional_data",
        "errors": [{"field": "additional_data", "message": "is required"}],
    }
    assert payment(ctx, pk) == before
    assert len(callback_bodies(ctx, pk)) == 1


def test_bad_signature_is_refused_401_and_nothing_changes(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    before = payment(ctx, pk)
    body = gate_body(secret, PROJECT, "p-1", {"customer": {"psu_consent": "1"}})
    body["additional_data"]["customer"]["psu_consent"] = "0"
    response = client.post(URL, json=body)
    assert response.status_code == 401
    assert response.json()["status"] == "error"
    assert response.json()["errors"][0]["field"] == "general.signature"
    assert payment(ctx, pk) == before


def test_unknown_payment_is_404_3061(secret: str, client: TestClient) -> None:
    response = clarify(client, secret, "nope", {"customer": {"psu_consent": "1"}})
    assert response.status_code == 404
    assert response.json()["code"] == "3061"
    assert response.json()["status"] == "error"


def test_payment_not_awaiting_clarification_is_409_3060(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    assert clarify(client, secret, "p-1", {"customer": {"psu_consent": "1"}}).status_code == 200
    response = clarify(client, secret, "p-1", {"customer": {"psu_consent": "1"}})
    assert response.status_code == 409
    assert response.json()["code"] == "3060"
    assert len(callback_bodies(ctx, pk)) == 2


def test_a_registered_payment_not_yet_processed_is_409_3060(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    from payplane_server.testing.clarification import insert_new_payment

    with ctx.db.write() as conn:
        insert_new_payment(ctx, conn, project_id=PROJECT, payment_id="p-new")
    response = clarify(client, secret, "p-new", {})
    assert (response.status_code, response.json()["code"]) == (409, "3060")


def test_an_answer_after_the_deadline_is_409_and_the_payment_is_declined_once(
    ctx: AppContext, secret: str, client: TestClient, clock: FakeClock
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    clock.advance(minutes=30, seconds=1)
    response = clarify(client, secret, "p-1", {"customer": {"psu_consent": "1"}})
    assert (response.status_code, response.json()["code"]) == (409, "3060")
    assert (payment(ctx, pk).status, operation(ctx, pk).code) == ("decline", "603")
    assert fire_due(ctx) == 0
    assert [c["operation"]["code"] for c in callback_bodies(ctx, pk)] == ["3191", "603"]
