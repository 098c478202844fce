"""The Data API's answers on SQLite and PostgreSQL, in process (Starlette's TestClient)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from payplane import verify
from starlette.testclient import TestClient

from payplane_server.context import AppContext
from payplane_server.services.accounts import grant_project, revoke_project
from payplane_server.testing.data_api import DataApiWorld, build_world
from payplane_server.testing.writer import writer_held_elsewhere
from payplane_server.web import create_data_api_app


@pytest.fixture
def world(ctx: AppContext) -> DataApiWorld:
    return build_world(ctx)


@pytest.fixture
def client(ctx: AppContext) -> Iterator[TestClient]:
    with TestClient(create_data_api_app(ctx), base_url="https://data-api.test") as test_client:
        yield test_client


def post(
    client: TestClient, world: DataApiWorld, path: str, who: str, params: dict[str, Any]
) -> httpx.Response:
    return client.post(path, content=world.body(who, params))


def signed_ok(world: DataApiWorld, who: str, response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert verify(body, body["signature"], world.tokens[who].secret)
    return body


DAY = {"from": "2026-11-20 00:00:00", "to": "2026-11-21 23:59:59"}


def test_balance_lists_every_visible_project_and_currency_signed(
    client: TestClient, world: DataApiWorld
) -> None:
    body = signed_ok(world, "admin", post(client, world, "/v1/v1/balance/get", "admin", {}))
    assert body["balance"] == [{"name": "Shop_balance_EUR", "EUR": "30000"}]
    assert set(body) == {"balance", "signature"}


def test_balance_of_a_finance_user_covers_only_granted_projects(
    ctx: AppContext, client: TestClient, world: DataApiWorld
) -> None:
    body = signed_ok(world, "finance", post(client, world, "/v1/balance/get", "finance", {}))
    assert [line["name"] for line in body["balance"]] == ["Shop_balance_EUR"]
    revoke_project(ctx, world.user_ids["finance"], 101)
    body = signed_ok(world, "finance", post(client, world, "/v1/balance/get", "finance", {}))
    assert body["balance"] == []


def test_support_role_may_not_read_balances(client: TestClient, world: DataApiWorld) -> None:
    response = post(client, world, "/v1/balance/get", "support", {})
    assert response.status_code == 401
    assert response.json()["name"] == "Authorization Required"


@pytest.mark.parametrize("prefix", ["/v1/v1", "/v1"])
def test_operations_page_within_the_interval_in_order(
    client: TestClient, world: DataApiWorld, prefix: str
) -> None:
    params = {"interval": {"from": "2026-11-20 12:00:00", "to": "2026-11-20 15:00:00"}}
    body = signed_ok(
        world, "admin", post(client, world, f"{prefix}/operations/get", "admin", params)
    )
    got = [(op["project_id"], op["operation_created_at"]) for op in body["operations"]]
    # Project 101 every hour on the hour, 102 at half past: the "to" second is inclusive.
    assert got == [
        (101, "2026-11-20 12:00:00"),
        (102, "2026-11-20 12:30:00"),
        (101, "2026-11-20 13:00:00"),
        (102, "2026-11-20 13:30:00"),
        (101, "2026-11-20 14:00:00"),
        (102, "2026-11-20 14:30:00"),
        (101, "2026-11-20 15:00:00"),
    ]
    assert (body["total"], body["limit"], body["offset"]) == (7, 1000, 0)
    first = body["operations"][0]
    assert first == {
        "project_id": 101,
        "operation_id": first["operation_id"],
        "payment_id": "seed-2",
        "operation_type": "sale",
        "operation_status": "success",
        "payment_method": "card",
        "account_number": "400000******0077",
        "customer_id": "customer-2",
        "description": "Order 2",
        "operation_created_at": "2026-11-20 12:00:00",
        "operation_completed_at": "2026-11-20 12:00:02",
        "sum_initial": {"amount": 1000, "currency": "EUR"},
        "sum_converted": {"amount": 1000, "currency": "EUR"},
        "code": "0",
        "message": "Success",
    }


def test_time_zone_applies_to_the_interval_and_to_returned_dates(
    client: TestClient, world: DataApiWorld
) -> None:
    params = {
        "interval": {"from": "2026-11-20 13:00:00", "to": "2026-11-20 13:00:00"},
        "time_zone": "Europe/Berlin",
        "project_ids": [101],
    }
    body = signed_ok(world, "admin", post(client, world, "/v1/operations/get", "admin", params))
    # 13:00 in Berlin (UTC+1 in November) is 12:00 UTC.
    assert [op["payment_id"] for op in body["operations"]] == ["seed-2"]
    assert body["operations"][0]["operation_created_at"] == "2026-11-20 13:00:00"


def test_filters_fields_limit_offset_and_total(client: TestClient, world: DataApiWorld) -> None:
    params = {
        "interval": DAY,
        "project_ids": [101, 102],
        "operation_types": ["sale"],
        "statuses": ["decline"],
        "fields": ["payment_id", "operation_status"],
        "limit": 3,
        "offset": 2,
    }
    body = signed_ok(world, "admin", post(client, world, "/v1/operations/get", "admin", params))
    assert body["operations"] == [
        {"payment_id": f"outlet-{i}", "operation_status": "decline"} for i in (2, 3, 4)
    ]
    assert (body["total"], body["limit"], body["offset"]) == (10, 3, 2)


def test_paging_walks_every_operation_exactly_once(client: TestClient, world: DataApiWorld) -> None:
    seen: list[int] = []
    offset = 0
    while True:
        params = {"interval": DAY, "limit": 7, "offset": offset, "fields": ["operation_id"]}
        body = signed_ok(world, "admin", post(client, world, "/v1/operations/get", "admin", params))
        assert body["total"] == 40
        if not body["operations"]:
            break
        seen.extend(op["operation_id"] for op in body["operations"])
        offset += 7
    assert len(seen) == len(set(seen)) == 40


def test_a_finance_user_sees_only_granted_projects_and_grants_apply_at_once(
    ctx: AppContext, client: TestClient, world: DataApiWorld
) -> None:
    params = {"interval": DAY, "fields": ["project_id"]}
    body = signed_ok(world, "finance", post(client, world, "/v1/operations/get", "finance", params))
    assert {op["project_id"] for op in body["operations"]} == {101}
    grant_project(ctx, world.user_ids["finance"], 102)
    body = signed_ok(world, "finance", post(client, world, "/v1/operations/get", "finance", params))
    assert {op["project_id"] for op in body["operations"]} == {101, 102}


def test_operations_of_one_payment(client: TestClient, world: DataApiWorld) -> None:
    params = {"project_id": 102, "payment_id": "outlet-3", "time_zone": "Asia/Tokyo"}
    body = signed_ok(
        world, "admin", post(client, world, "/v1/v1/operations/get-by-payment", "admin", params)
    )
    assert len(body["operations"]) == 1
    operation = body["operations"][0]
    assert operation["payment_id"] == "outlet-3"
    assert operation["operation_created_at"] == "2026-11-20 22:30:00"
    assert operation["code"] == "10000"


def test_unknown_payment_gets_404_in_the_envelope(client: TestClient, world: DataApiWorld) -> None:
    params = {"project_id": 101, "payment_id": "nope"}
    response = post(client, world, "/v1/operations/get-by-payment", "admin", params)
    assert response.status_code == 404
    assert response.json() == {
        "name": "Not Found",
        "message": "Payment nope was not found in project 101.",
        "code": "0",
        "status": "404",
    }


def test_response_bytes_are_utf8_json(ctx: AppContext, client: TestClient) -> None:
    world = build_world(ctx, seed=False)
    response = post(client, world, "/v1/balance/get", "admin", {"note": "Grüße ✓"})
    assert response.headers["content-type"].startswith("application/json")
    assert json.loads(response.content.decode("utf-8")) == response.json()


def test_a_held_writer_lock_delays_balance_but_does_not_fail_it(
    ctx: AppContext, client: TestClient, world: DataApiWorld
) -> None:
    """On SQLite the request's work starts on the event loop, finds the writer lock (its rate
    limit count is a write) held by another thread, and finishes on a worker thread once the
    lock is free; on PostgreSQL it runs on a thread from the start."""
    with writer_held_elsewhere(ctx.db) as holder:
        threading.Timer(0.3, holder.release).start()
        body = signed_ok(world, "admin", post(client, world, "/v1/balance/get", "admin", {}))
        answered_after_release = holder.released.is_set()
    assert body["balance"] == [{"name": "Shop_balance_EUR", "EUR": "30000"}]
    if ctx.db.is_sqlite:
        assert answered_after_release
