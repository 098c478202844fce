"""End to end: the client library's ``GateApi`` against a running server (real uvicorn on
loopback) with the real background loops, and a real merchant endpoint receiving callbacks."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from payplane import Callback, GateApi, GateApiError

from payplane_server.clock import FakeClock
from payplane_server.context import AppContext
from payplane_server.services.projects import create_project
from payplane_server.testing import CallbackReceiver, LiveServer
from payplane_server.testing.clarification import gate_body, waiting_payment
from payplane_server.web import create_app
from payplane_server.worker import LOOPS

PROJECT = 402


@pytest.fixture
def receiver() -> Iterator[CallbackReceiver]:
    with CallbackReceiver() as merchant:
        yield merchant


@pytest.fixture
def server(ctx: AppContext) -> Iterator[LiveServer]:
    with LiveServer(create_app(ctx, background=list(LOOPS))) as live:
        yield live


def _callbacks(receiver: CallbackReceiver, secret: str, payment_id: str) -> list[Callback]:
    parsed = [Callback(r.body, secret) for r in list(receiver.requests)]
    return [c for c in parsed if c.get_payment_id() == payment_id]


def _wait_for(what: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_gate_api_clarify_and_status_end_to_end(
    ctx: AppContext, receiver: CallbackReceiver, server: LiveServer
) -> None:
    secret = create_project(ctx, project_id=PROJECT, name="Shop", callback_url=receiver.url)
    waiting_payment(ctx, project_id=PROJECT, payment_id="order-1", kind="avs_data")
    gate = GateApi(PROJECT, secret, server.url)

    [asked] = _wait_for(lambda: _callbacks(receiver, secret, "order-1"))
    assert asked.is_awaiting_clarification()
    assert set(asked.clarification_fields["avs_data"]["properties"]) == {
        "avs_post_code",
        "avs_street_address",
    }
    status = gate.status("order-1")
    assert status.get_payment_status() == "awaiting clarification"
    assert status.clarification_fields == asked.clarification_fields

    partial = gate.clarify("order-1", {"avs_data": {"avs_post_code": "75008"}})
    assert not partial.is_complete
    assert set(partial.clarification_fields["avs_data"]["properties"]) == {"avs_street_address"}
    again = _wait_for(lambda: _callbacks(receiver, secret, "order-1")[1:])[0]
    assert again.clarification_fields == partial.clarification_fields
    assert gate.status("order-1").clarification_fields == partial.clarification_fields

    # The library always sends additional_data; a bare request is refused and changes nothing.
    bare = httpx.post(
        server.url + "/v2/payment/clarification", json=gate_body(secret, PROJECT, "order-1")
    )
    assert (bare.status_code, bare.json()["code"]) == (400, "2004")

    done = gate.clarify("order-1", {"avs_data": {"avs_street_address": "8 Rue Royale"}})
    assert done.is_complete and done.data["payment_id"] == "order-1"
    final = _wait_for(lambda: _callbacks(receiver, secret, "order-1")[2:])[0]
    assert final.get_payment_status() == "success"
    assert final.clarification_fields is None
    assert gate.status("order-1").get_payment_status() == "success"

    with pytest.raises(GateApiError) as not_waiting:
        gate.clarify("order-1", {})
    assert (not_waiting.value.status, not_waiting.value.code) == (409, "3060")
    with pytest.raises(GateApiError) as unknown:
        gate.status("no-such-order")
    assert (unknown.value.status, unknown.value.code) == (404, "3061")
    with pytest.raises(GateApiError) as forged:
        GateApi(PROJECT, "not the secret", server.url).clarify("order-1", {})
    assert forged.value.status == 401


def test_the_running_server_declines_an_unanswered_payment_with_a_603_callback(
    ctx: AppContext, receiver: CallbackReceiver, server: LiveServer, clock: FakeClock
) -> None:
    secret = create_project(ctx, project_id=PROJECT, name="Shop", callback_url=receiver.url)
    waiting_payment(ctx, project_id=PROJECT, payment_id="order-2", kind="customer")
    _wait_for(lambda: _callbacks(receiver, secret, "order-2"))
    clock.advance(minutes=30)
    final = _wait_for(lambda: _callbacks(receiver, secret, "order-2")[1:])[0]
    assert final.get_payment_status() == "decline"
    assert final.get_operation()["code"] == "603"
    with pytest.raises(GateApiError) as late:
        GateApi(PROJECT, secret, server.url).clarify("order-2", {"customer": {"psu_consent": "1"}})
    assert late.value.code == "3060"
