"""Every test card of the simulator (protocol.md section 4) ends in its outcome through the
Payment Page, on SQLite and PostgreSQL, and the balances equal the successful operations."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select
from starlette.testclient import TestClient

from payplane_server.acquirer import SimulatorAcquirer
from payplane_server.context import AppContext
from payplane_server.db.tables import balances, operations, payments
from payplane_server.services.projects import create_project
from payplane_server.testing.clarification import callback_bodies, gate_body
from payplane_server.testing.customer import Customer, csrf_of, signed_url
from payplane_server.web import create_app

PROJECT = 402
SECRET = "shop-secret-key"

# card -> (payment status, operation code) straight after the card form.
DIRECT = {
    "4000000000000077": ("success", "0"),
    "4111111111111111": ("decline", "10000"),
    "4000000000000119": ("decline", "10102"),
    "4000000000000135": ("decline", "10105"),
    "4539121411168251": ("decline", "10602"),
    "4477000000000006": ("success", "0"),
    "5252000000000004": ("success", "0"),
    "5555555555554444": ("success", "0"),  # any other valid card
}
# card, code typed on the ACS page -> final status, code
CHALLENGES = [
    ("4314220000000056", "1234", "success", "0"),
    ("5413330000000019", "1234", "success", "0"),
    ("4314220000000056", "0000", "decline", "10104"),
    ("5413330000000019", "12345", "decline", "10104"),
    ("5544330000000045", "1234", "decline", "10104"),
]
CURRENCIES = ["USD", "EUR", "JPY", "KWD"]


@pytest.fixture
def customer(ctx: AppContext) -> Iterator[Customer]:
    ctx.extras["acquirer"] = SimulatorAcquirer(0)
    create_project(
        ctx, project_id=PROJECT, name="Shop", callback_url="http://127.0.0.1:9/cb", secret=SECRET
    )
    with TestClient(create_app(ctx), raise_server_exceptions=False) as client:
        yield Customer(client)


def open_payment(customer: Customer, payment_id: str, amount: int, currency: str) -> str:
    params = {
        "project_id": PROJECT,
        "payment_id": payment_id,
        "payment_amount": amount,
        "payment_currency": currency,
        "customer_id": "c-1",
    }
    response, token = customer.open(signed_url(params, SECRET))
    assert response.status_code == 200 and token is not None
    return token


def state(ctx: AppContext, token: str) -> tuple[Any, Any]:
    with ctx.db.read() as conn:
        payment = conn.execute(select(payments).where(payments.c.page_token == token)).one()
        operation = conn.execute(
            select(operations).where(operations.c.payment_pk == payment.id)
        ).one()
    return payment, operation


def assert_balances_match(ctx: AppContext) -> None:
    with ctx.db.read() as conn:
        expected: dict[str, int] = defaultdict(int)
        for op in conn.execute(select(operations).where(operations.c.status == "success")):
            expected[op.sum_converted_currency] += op.sum_converted_amount
        actual = {
            row.currency: row.amount
            for row in conn.execute(select(balances).where(balances.c.project_id == PROJECT))
        }
    assert actual == dict(expected)


def test_every_direct_card_ends_in_its_outcome_and_balances_match(
    customer: Customer, ctx: AppContext
) -> None:
    for number, (pan, (status, code)) in enumerate(DIRECT.items()):
        currency = CURRENCIES[number % len(CURRENCIES)]
        token = open_payment(customer, f"direct-{number}", 1000 + number, currency)
        response = customer.pay(token, pan)
        assert response.status_code == 303, pan
        assert response.headers["location"] == f"/pay/{token}/result", pan
        payment, operation = state(ctx, token)
        assert (payment.status, operation.status, operation.code) == (status, status, code), pan
        page = customer.client.get(response.headers["location"]).text
        assert ("Payment successful" if status == "success" else "Payment declined") in page
        [callback] = callback_bodies(ctx, payment.id)
        assert callback["payment"]["status"] == status
        assert callback["operation"]["code"] == code
    assert_balances_match(ctx)


def test_every_3ds_challenge_card_ends_in_its_outcome(customer: Customer, ctx: AppContext) -> None:
    for number, (pan, code, status, result_code) in enumerate(CHALLENGES):
        token = open_payment(customer, f"acs-{number}", 500, "USD")
        response = customer.pay(token, pan)
        assert response.headers["location"] == f"/pay/{token}/3ds", pan
        payment, operation = state(ctx, token)
        assert payment.status == operation.status == "awaiting 3ds result"
        assert callback_bodies(ctx, payment.id) == [], "no callback while the ACS page is open"
        acs = customer.client.get(f"/pay/{token}/3ds").text
        assert "One-time code" in acs and "$5.00" in acs
        answered = customer.answer_challenge(token, code)
        assert answered.headers["location"] == f"/pay/{token}/result", pan
        payment, operation = state(ctx, token)
        assert (payment.status, operation.code) == (status, result_code), (pan, code)
        [callback] = callback_bodies(ctx, payment.id)
        assert callback["operation"]["code"] == result_code
        replay = customer.client.post(
            f"/pay/{token}/3ds",
            data={"csrf_token": csrf_of(acs), "code": "1234"},
            follow_redirects=False,
        )
        assert replay.headers["location"] == f"/pay/{token}/result"
        assert state(ctx, token)[0].status == status, "a finished challenge stays finished"
        assert len(callback_bodies(ctx, payment.id)) == 1
    assert_balances_match(ctx)


@pytest.mark.parametrize(
    ("pan", "kind", "fields"),
    [
        ("4000000000000200", "customer", {"psu_consent", "psu_consent_text"}),
        ("4000000000000218", "avs_data", {"avs_post_code", "avs_street_address"}),
    ],
)
def test_clarification_cards_wait_for_the_merchant(
    customer: Customer, ctx: AppContext, pan: str, kind: str, fields: set[str]
) -> None:
    token = open_payment(customer, "clarify-1", 700, "EUR")
    response = customer.pay(token, pan)
    assert response.headers["location"] == f"/pay/{token}/waiting"
    payment, operation = state(ctx, token)
    assert (payment.status, operation.code) == ("awaiting clarification", "3191")
    [callback] = callback_bodies(ctx, payment.id)
    assert set(callback["clarification_fields"][kind]["properties"]) == fields
    waiting = customer.client.get(f"/pay/{token}/waiting")
    assert "Waiting for additional information" in waiting.text
    assert f'data-status-url="/pay/{token}/status"' in waiting.text
    assert '<noscript><meta http-equiv="refresh" content="5"></noscript>' in waiting.text
    status = customer.client.get(f"/pay/{token}/status").json()
    assert status == {
        "status": "awaiting clarification",
        "final": False,
        "next": f"/pay/{token}/waiting",
    }

    answer = {
        "customer": {"psu_consent": "1", "psu_consent_text": "I agree"},
        "avs_data": {"avs_post_code": "101000", "avs_street_address": "Tverskaya 1"},
    }[kind]
    body = gate_body(SECRET, PROJECT, "clarify-1", {kind: answer})
    assert customer.client.post("/v2/payment/clarification", json=body).status_code == 200
    status = customer.client.get(f"/pay/{token}/status").json()
    assert status["final"] and status["next"] == f"/pay/{token}/result"
    moved = customer.client.get(f"/pay/{token}/waiting", follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == f"/pay/{token}/result"
    assert_balances_match(ctx)
