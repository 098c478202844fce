"""Hostile requests against the Payment Page host and the Data API: forged, tampered, replayed
and cross-tenant signatures, another account's token, injection strings in every text
parameter, oversized and trickling bodies, path traversal on /static and dangerous merchant
URLs. Each must get the documented refusal and leave the database as it was."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select
from starlette.testclient import TestClient

from payplane_server.acquirer import SimulatorAcquirer
from payplane_server.clock import FakeClock
from payplane_server.context import AppContext
from payplane_server.db.tables import balances, callbacks, payments
from payplane_server.domain.validation import TEXT_PARAMS
from payplane_server.services.projects import create_project
from payplane_server.testing import LiveServer
from payplane_server.testing.clarification import gate_body, waiting_payment
from payplane_server.testing.customer import signed_url
from payplane_server.testing.data_api import build_world, signed_body
from payplane_server.web import create_app, data_api
from payplane_server.web.app import create_data_api_app

SHOP, OTHER = 402, 403
SECRETS = {SHOP: "shop-secret", OTHER: "other-secret"}
INJECTIONS = [
    "'; DROP TABLE payments; --",
    '" OR "1"="1',
    "1) UNION SELECT secret_enc FROM projects --",
    '<script>window.__x=1</script><img src=x onerror="window.__x=1">',
    "{{7*7}}${7*7}<%= 7*7 %>",
]
sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def client(ctx: AppContext) -> Iterator[TestClient]:
    ctx.extras["acquirer"] = SimulatorAcquirer(0)
    for project_id, secret in SECRETS.items():
        create_project(
            ctx, project_id=project_id, name=f"P{project_id}", callback_url=None, secret=secret
        )
    with TestClient(create_app(ctx), raise_server_exceptions=False) as test_client:
        yield test_client


def _params(payment_id: str = "p-1", **extra: str) -> dict[str, str]:
    return {
        "project_id": str(SHOP),
        "payment_id": payment_id,
        "payment_amount": "1999",
        "payment_currency": "USD",
        "customer_id": "c-1",
        **extra,
    }


def _counts(ctx: AppContext) -> tuple[int, int, int]:
    with ctx.db.read() as conn:
        return (
            conn.execute(select(func.count()).select_from(payments)).scalar_one(),
            conn.execute(select(func.count()).select_from(callbacks)).scalar_one(),
            conn.execute(select(func.count()).select_from(balances)).scalar_one(),
        )


def _payment_row(ctx: AppContext, pk: int) -> tuple[Any, ...]:
    with ctx.db.read() as conn:
        return tuple(conn.execute(select(payments).where(payments.c.id == pk)).one())


# --- Payment Page signatures -------------------------------------------------------------


def test_a_forged_or_tampered_payment_url_is_refused_with_403_and_stores_nothing(
    ctx: AppContext, client: TestClient
) -> None:
    params = _params()
    good = signed_url(params, SECRETS[SHOP])
    tampered = good.replace("payment_amount=1999", "payment_amount=1")
    forged = signed_url(params, "guessed-secret")
    other_key = signed_url(params, SECRETS[OTHER])
    unsigned = good.split("&signature=")[0]
    for url in (tampered, forged, other_key, unsigned, good + "x"):
        response = client.get(url)
        assert response.status_code == 403, url
    assert _counts(ctx)[0] == 0
    assert client.get(good).status_code == 200
    assert _counts(ctx)[0] == 1


def test_replaying_a_payment_url_shows_the_same_payment_and_registers_it_once(
    ctx: AppContext, client: TestClient
) -> None:
    url = signed_url(_params("replayed"), SECRETS[SHOP])
    first = client.get(url, follow_redirects=True)
    again = client.get(url, follow_redirects=True)
    assert first.status_code == again.status_code == 200
    assert _counts(ctx)[0] == 1


# --- Gate API signatures and replay -------------------------------------------------------


def test_a_gate_request_signed_with_another_projects_key_is_refused(
    ctx: AppContext, client: TestClient
) -> None:
    pk = waiting_payment(ctx, project_id=SHOP, payment_id="p-1")
    before = _payment_row(ctx, pk)
    answer = {"customer": {"psu_consent": "1"}}
    for body in (
        gate_body(SECRETS[OTHER], SHOP, "p-1", answer),
        gate_body("forged", SHOP, "p-1", answer),
        {**gate_body(SECRETS[SHOP], SHOP, "p-1", answer), "additional_data": {"customer": {}}},
    ):
        response = client.post("/v2/payment/clarification", json=body)
        assert response.status_code == 401, response.text
        assert response.json()["code"] == "3003"
    # The other project's own valid signature does not reach a payment of this project.
    response = client.post(
        "/v2/payment/clarification", json=gate_body(SECRETS[OTHER], OTHER, "p-1", answer)
    )
    assert response.status_code == 404 and response.json()["code"] == "3061"
    status = client.post("/v2/payment/status", json=gate_body(SECRETS[OTHER], OTHER, "p-1"))
    assert status.status_code == 404
    assert _payment_row(ctx, pk) == before


def test_a_replayed_clarification_has_no_second_effect(
    ctx: AppContext, client: TestClient, clock: FakeClock
) -> None:
    """Replay = the same signed bytes sent again. The first request completes the
    clarification; every replay gets 409 (code 3060) and changes nothing: no status move, no
    callback, no balance credit, no restart of any wait."""
    pk = waiting_payment(ctx, project_id=SHOP, payment_id="p-1")
    raw = json.dumps(gate_body(SECRETS[SHOP], SHOP, "p-1", {"customer": {"psu_consent": "1"}}))
    first = client.post("/v2/payment/clarification", content=raw)
    assert first.status_code == 200 and first.json()["status"] == "success"
    after_first = (_payment_row(ctx, pk), _counts(ctx))
    clock.advance(minutes=5)
    for _ in range(3):
        replay = client.post("/v2/payment/clarification", content=raw)
        assert replay.status_code == 409, replay.text
        assert replay.json()["code"] == "3060"
    assert (_payment_row(ctx, pk), _counts(ctx)) == after_first


# --- Data API: another account's token, forged signature -----------------------------------


@sqlite_only
def test_another_accounts_token_cannot_read_a_foreign_project(ctx: AppContext) -> None:
    world = build_world(ctx, seed=True)
    with TestClient(create_data_api_app(ctx), raise_server_exceptions=False) as api:
        outsider = world.tokens["outsider"]
        for path, params in (
            ("/v1/balance/get", {"project_ids": [101]}),
            ("/v1/operations/get-by-payment", {"project_id": 101, "payment_id": "op-1"}),
        ):
            body = signed_body(params, outsider.token, outsider.secret)
            response = api.post(path, content=body)
            assert response.status_code in (400, 401), response.text
            assert set(response.json()) == {"name", "message", "code", "status"}
        own = api.post("/v1/balance/get", content=world.body("outsider"))
        assert own.status_code == 200
        assert all("Shop" not in line["name"] for line in own.json()["balance"])
        admin = world.tokens["admin"]
        forged = signed_body({}, admin.token, outsider.secret)
        assert api.post("/v1/balance/get", content=forged).status_code == 401
        swapped = json.loads(world.body("admin"))
        swapped["token"] = outsider.token
        assert api.post("/v1/balance/get", json=swapped).status_code == 401


# --- Injection strings in every text field -------------------------------------------------


@sqlite_only
def test_injection_strings_in_every_text_parameter_are_stored_verbatim_and_escaped(
    ctx: AppContext, client: TestClient
) -> None:
    fields = ["customer_id", "payment_id", *sorted(set(TEXT_PARAMS) - {"frame_mode"})]
    opened = 0
    for n, value in enumerate(INJECTIONS):
        for name in fields:
            payment_id = f"inj-{n}-{name}"
            params = _params(payment_id)
            params[name] = value if name != "payment_id" else value.replace(";", ",") + str(n)
            if ";" in params[name]:
                params[name] = params[name].replace(";", ",")
            response = client.get(signed_url(params, SECRETS[SHOP]), follow_redirects=True)
            assert response.status_code in (200, 400), (name, value, response.status_code)
            assert "<script>window.__x" not in response.text
            assert 'onerror="window' not in response.text
            opened += response.status_code == 200
    assert opened > len(fields)  # most of them are valid text and were registered
    with ctx.db.read() as conn:
        stored = conn.execute(select(payments.c.params)).scalars().all()
    assert any(INJECTIONS[3] in json.loads(text).values() for text in stored)
    assert _counts(ctx)[0] == opened


# --- Bodies over the limit and bodies that trickle in ---------------------------------------


@sqlite_only
def test_bodies_over_the_limit_get_413_in_each_surfaces_shape(
    ctx: AppContext, client: TestClient
) -> None:
    big = b"{" + b" " * (ctx.settings.max_body_bytes + 10) + b"}"
    gate = client.post("/v2/payment/clarification", content=big)
    assert gate.status_code == 413 and gate.json()["status"] == "error"
    assert client.post("/params/check", content=big).status_code == 413
    assert client.post("/pay/abc/card", content=big).status_code == 413
    with TestClient(create_data_api_app(ctx), raise_server_exceptions=False) as api:
        response = api.post("/v1/balance/get", content=big)
        assert response.status_code == 413
        assert response.json()["status"] == "413"


def _trickle(port: int, path: str, seconds: float) -> bytes:
    """Announce a 100-byte body, send 10 bytes, then wait for the server's answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=seconds + 20) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 100\r\n\r\n"
        )
        sock.sendall(head.encode() + b'{"general"')
        started = time.monotonic()
        data = b""
        while b"\r\n\r\n" not in data and time.monotonic() - started < seconds + 20:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        return data


@sqlite_only
def test_a_body_that_trickles_in_is_refused_with_408(ctx: AppContext) -> None:
    app_ctx = dataclasses.replace(ctx, settings=ctx.settings.replace(body_timeout_seconds=1.0))
    with LiveServer(create_app(app_ctx)) as server:
        port = int(server.url.rsplit(":", 1)[1])
        for path in ("/v2/payment/clarification", "/params/check"):
            answer = _trickle(port, path, 1.0)
            assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


@sqlite_only
def test_a_data_api_body_that_trickles_in_gets_408_in_the_envelope(
    ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data_api, "BODY_TIMEOUT_SECONDS", 1.0)
    with LiveServer(create_data_api_app(ctx), lifespan="off") as server:
        port = int(server.url.rsplit(":", 1)[1])
        answer = _trickle(port, "/v1/balance/get", 1.0)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"content-type: application/json" in answer.lower()


# --- Static files and merchant URLs -------------------------------------------------------


@sqlite_only
def test_path_traversal_on_static_files_reveals_nothing(ctx: AppContext) -> None:
    with LiveServer(create_app(ctx)) as server:
        port = int(server.url.rsplit(":", 1)[1])
        assert _raw_get(port, "/static/payplane.css").startswith(b"HTTP/1.1 200")
        for path in (
            "/static/../app.py",
            "/static/../../config.py",
            "/static/%2e%2e/app.py",
            "/static/%2e%2e%2f%2e%2e%2fconfig.py",
            "/static/..%2fapp.py",
            "/static/....//app.py",
            "/static/%252e%252e/app.py",
            "/static//etc/passwd",
            "/static/..\\app.py",
        ):
            answer = _raw_get(port, path)
            status = answer.split(b" ", 2)[1]
            assert status in (b"400", b"404"), (path, answer[:100])
            assert b"create_app" not in answer and b"root:" not in answer
            assert b"Settings" not in answer


def _raw_get(port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JaVaScRiPt:alert(document.cookie)",
        "data:text/html,<script>alert(1)</script>",
        "//evil.example/",
        "\\\\evil.example",
        "/\\evil.example",
        "http:evil.example",
        "https:/evil.example",
        "vbscript:msgbox(1)",
        "ftp://evil.example/",
        " https://evil.example",
        "https://evil.example\r\nSet-Cookie: x=1",
    ],
)
@sqlite_only
def test_dangerous_merchant_urls_are_refused_and_nothing_is_stored(
    ctx: AppContext, client: TestClient, url: str
) -> None:
    for name in ("merchant_success_url", "merchant_fail_url", "redirect_success_url"):
        params = _params(f"r-{name}", **{name: url})
        response = client.get(signed_url(params, SECRETS[SHOP]), follow_redirects=False)
        assert response.status_code == 400, (name, url)
        assert name in response.text
        assert "location" not in response.headers
    assert _counts(ctx)[0] == 0


@sqlite_only
def test_a_merchant_url_cannot_be_added_without_the_signature(
    ctx: AppContext, client: TestClient
) -> None:
    url = signed_url(_params("r-1"), SECRETS[SHOP]) + "&merchant_success_url=https%3A%2F%2Fevil"
    assert client.get(url).status_code == 403
    assert _counts(ctx)[0] == 0
