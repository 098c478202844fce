"""POST /v2/payment/status: the payment in the callback format, signed, with
``clarification_fields`` while it waits (protocol.md section 6)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from payplane import verify
from starlette.testclient import TestClient

from payplane_server.context import AppContext
from payplane_server.services.clarification import submit_clarification
from payplane_server.services.projects import create_project
from payplane_server.testing.clarification import (
    callback_bodies,
    gate_body,
    insert_new_payment,
    waiting_payment,
)
from payplane_server.web import create_app

PROJECT, OTHER = 402, 403
URL = "/v2/payment/status"


@pytest.fixture
def secret(ctx: AppContext) -> str:
    return create_project(ctx, project_id=PROJECT, name="Shop", callback_url="http://x/cb")


@pytest.fixture
def client(ctx: AppContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx), raise_server_exceptions=False) as test_client:
        yield test_client


def status(client: TestClient, secret: str, payment_id: str, project_id: int = PROJECT) -> Any:
    return client.post(URL, json=gate_body(secret, project_id, payment_id))


def test_a_waiting_payment_reports_its_clarification_fields_signed(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1", kind="avs_data")
    response = status(client, secret, "p-1")
    assert response.status_code == 200
    body = response.json()
    assert verify(body, body["signature"], secret)
    assert body["payment"]["status"] == "awaiting clarification"
    assert body["operation"]["code"] == "3191"
    [callback] = callback_bodies(ctx, pk)
    assert body["clarification_fields"] == callback["clarification_fields"]


def test_after_a_partial_answer_the_status_lists_only_what_is_missing(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    waiting_payment(ctx, project_id=PROJECT, payment_id="p-1", kind="avs_data")
    submit_clarification(ctx, PROJECT, "p-1", {"avs_data": {"avs_post_code": "75008"}})
    body = status(client, secret, "p-1").json()
    assert set(body["clarification_fields"]["avs_data"]["properties"]) == {"avs_street_address"}


def test_a_resolved_payment_reports_its_result_without_clarification_fields(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    submit_clarification(ctx, PROJECT, "p-1", {"customer": {"psu_consent": "1"}})
    body = status(client, secret, "p-1").json()
    assert verify(body, body["signature"], secret)
    assert body["payment"]["status"] == "success"
    assert "clarification_fields" not in body
    # The status answer is the same document as the final callback.
    assert body == callback_bodies(ctx, pk)[-1]


def test_a_registered_payment_reports_its_status(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    with ctx.db.write() as conn:
        insert_new_payment(ctx, conn, project_id=PROJECT, payment_id="p-new")
    body = status(client, secret, "p-new").json()
    assert verify(body, body["signature"], secret)
    assert (body["payment"]["id"], body["payment"]["status"]) == ("p-new", "new")


def test_an_unknown_payment_is_404_3061(secret: str, client: TestClient) -> None:
    response = status(client, secret, "nope")
    assert response.status_code == 404
    assert response.json() == {
        "status": "error",
        "code": "3061",
        "message": "Payment not found",
        "errors": [],
    }


def test_a_bad_signature_is_401(ctx: AppContext, secret: str, client: TestClient) -> None:
    waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    body = gate_body(secret, PROJECT, "p-1")
    body["general"]["payment_id"] = "p-2"
    response = client.post(URL, json=body)
    assert response.status_code == 401
    assert response.json()["status"] == "error"


def test_another_projects_key_is_401_and_its_own_view_of_our_payment_is_404(
    ctx: AppContext, secret: str, client: TestClient
) -> None:
    other = create_project(ctx, project_id=OTHER, name="Other", callback_url=None)
    waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    assert status(client, other, "p-1").status_code == 401
    assert status(client, other, "p-1", project_id=OTHER).status_code == 404


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    "raw",
    [
        b"nope",
        b"[]",
        b'{"general": "p-1"}',
        b'{"general": {"project_id": "402", "payment_id": "p-1", "signature": "x"}}',
        b'{"general": {"project_id": 402, "payment_id": "p-1"}}',
        b'{"general": {"project_id": 402, "payment_id": "p-1", "signature": "x"}, "x": 1}',
        b'{"general": {"project_id": 402, "payment_id": "p-1", "signature": "x"},'
        b' "additional_data": {}}',
    ],
)
def test_malformed_status_requests_are_400_2004(
    secret: str, client: TestClient, raw: bytes
) -> None:
    response = client.post(URL, content=raw)
    assert response.status_code == 400
    assert response.json()["code"] == "2004"
