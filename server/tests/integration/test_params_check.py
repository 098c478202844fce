"""The parameter check service (protocol.md section 9) over HTTP, and the client library's test
mode against a real server. It needs no database: it only runs the shared validator."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import payplane
import pytest
from starlette.testclient import TestClient

from payplane_server.clock import FakeClock
from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.testing import LiveServer
from payplane_server.web import create_app

GOOD: dict[str, Any] = {
    "project_id": 402,
    "payment_id": "order-1",
    "payment_amount": 1999,
    "payment_currency": "USD",
    "customer_id": "c-1",
}
REQUIRED_NULL = "This value is required, null given."


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[AppContext]:
    settings = Settings(data_dir=tmp_path, master_key=base64.b64encode(b"k" * 32).decode())
    context = AppContext.create(settings, clock=FakeClock())
    yield context
    context.close()


@pytest.fixture
def client(ctx: AppContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.mark.parametrize("path", ["/params/check", "/v1/params/check"])
def test_valid_parameters_are_ok(client: TestClient, path: str) -> None:
    response = client.get(f"{path}?{urlencode(GOOD)}")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_each_invalid_parameter_is_listed_with_its_reason(client: TestClient) -> None:
    query = urlencode({k: v for k, v in GOOD.items() if k != "payment_amount"})
    response = client.get(f"/params/check?{query}&payment_currency=XYZ")
    assert response.status_code == 400
    assert response.json() == {
        "errors": [
            {"param": "payment_currency", "reason": "This parameter is given more than once."}
        ]
    }
    query = urlencode({**GOOD, "payment_currency": "XYZ", "customer_id": ""})
    response = client.get(f"/params/check?{query}".replace("payment_amount=1999&", ""))
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "param": "payment_currency",
            "reason": "This value is not a valid ISO 4217 currency code.",
        },
        {"param": "customer_id", "reason": "This value should not be blank."},
        {"param": "payment_amount", "reason": REQUIRED_NULL},
    ]


def test_post_takes_a_json_object_with_typed_values(client: TestClient) -> None:
    assert client.post("/params/check", json=GOOD).json() == {"status": "ok"}
    response = client.post("/params/check", json={**GOOD, "payment_amount": None})
    assert response.status_code == 400
    assert response.json() == {"errors": [{"param": "payment_amount", "reason": REQUIRED_NULL}]}
    response = client.post(
        "/params/check", json={**GOOD, "payment_amount": "12", "project_id": True}
    )
    assert response.json()["errors"] == [
        {"param": "project_id", "reason": "This value should be of type integer."}
    ]


def test_post_also_reads_a_form_encoded_body(client: TestClient) -> None:
    response = client.post(
        "/params/check",
        content=urlencode(GOOD),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert response.json() == {"status": "ok"}


@pytest.mark.parametrize(
    "body", [b"", b"not json", b"[1, 2]", b'"text"', b"\xff\xfe", b"[" * 100_000, b"1e999999"]
)
def test_a_body_that_is_not_a_json_object_is_400(client: TestClient, body: bytes) -> None:
    response = client.post(
        "/params/check", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["param"] == "body"


def test_best_before_in_the_past_is_reported(client: TestClient, ctx: AppContext) -> None:
    past = (ctx.clock.now() - timedelta(minutes=1)).isoformat()
    future = (ctx.clock.now() + timedelta(minutes=1)).isoformat()
    assert client.post("/params/check", json={**GOOD, "best_before": future}).status_code == 200
    response = client.post("/params/check", json={**GOOD, "best_before": past})
    assert response.json()["errors"][0]["param"] == "best_before"


def test_a_merchant_callback_url_at_the_platform_itself_is_reported(
    client: TestClient, ctx: AppContext
) -> None:
    itself = f"http://{ctx.settings.host}:{ctx.settings.port}/callback"
    response = client.get(f"/params/check?{urlencode({**GOOD, 'merchant_callback_url': itself})}")
    assert response.status_code == 400
    assert response.json() == {
        "errors": [
            {
                "param": "merchant_callback_url",
                "reason": "The callback URL points at this platform itself.",
            }
        ]
    }
    other = {**GOOD, "merchant_callback_url": "https://shop.example.com/callback"}
    assert client.get(f"/params/check?{urlencode(other)}").status_code == 200


def test_a_malformed_query_is_reported_not_crashed_on(client: TestClient) -> None:
    response = client.get(f"/params/check?{urlencode(GOOD)}&x=%zz&y=%ff")
    assert response.status_code == 400
    assert [error["param"] for error in response.json()["errors"]] == ["x", "y"]


def test_the_client_library_test_mode_works_against_a_real_server(ctx: AppContext) -> None:
    with LiveServer(create_app(ctx)) as server:
        gate = payplane.Gate("secret", base_url=server.url)
        payment = payplane.Payment(402, "order-1")
        payment.payment_amount = 1999
        payment.payment_currency = "USD"
        payment.customer_id = "c-1"
        url = gate.get_payment_page_url(payment)
        assert url.startswith(server.url + "/payment?")
        payment.payment_currency = "XYZ"
        with pytest.raises(payplane.ValidationException) as raised:
            gate.get_payment_page_url(payment)
    assert str(raised.value) == (
        "One or more parameters are not valid:\n"
        "payment_currency\n"
        "    This value is not a valid ISO 4217 currency code."
    )
