"""Callback delivery against a real HTTP receiver on loopback, on SQLite and PostgreSQL.

Time moves with the FakeClock (the schedule), never by sleeping; the only real waits are the
short HTTP timeouts of the hanging-endpoint tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from payment_page_sdk.callback import Callback
from payment_page_sdk.signature_handler import SignatureHandler
from payplane import verify
from sqlalchemy import select

from payplane_server.clock import FakeClock
from payplane_server.context import AppContext
from payplane_server.db import Database
from payplane_server.db.tables import callback_attempts, callbacks, projects
from payplane_server.domain.payments import Code, Status
from payplane_server.domain.retry import SCHEDULE
from payplane_server.testing import CallbackReceiver, free_port
from payplane_server.testing.outbox import (
    callback_rows,
    decide,
    make_project,
    queued_payment,
    seed_payment,
)
from payplane_server.worker.delivery import DeliveryWorker, deliver_due
from payplane_server.worker.outbox import AttemptResult, claim_due, record_results

PROJECT = 402


def attempts_of(ctx: AppContext, callback_id: int) -> list[Any]:
    with ctx.db.read() as conn:
        return list(
            conn.execute(
                select(callback_attempts)
                .where(callback_attempts.c.callback_id == callback_id)
                .order_by(callback_attempts.c.number)
            ).all()
        )


def with_settings(ctx: AppContext, **changes: Any) -> AppContext:
    return dataclasses.replace(ctx, settings=ctx.settings.replace(**changes))


def failing(times: int, status: int = 500) -> Any:
    def behaviour(n: int, request: Any) -> tuple[int, float, bytes]:
        return (status, 0.0, b"nope") if n <= times else (200, 0.0, b"ok")

    return behaviour


@pytest.fixture
def receiver() -> Iterator[CallbackReceiver]:
    with CallbackReceiver() as server:
        yield server


def test_a_callback_is_posted_once_as_signed_json_and_marked_delivered(
    ctx: AppContext, receiver: CallbackReceiver
) -> None:
    secret = make_project(ctx, PROJECT, receiver.url)
    pk = queued_payment(ctx, project_id=PROJECT, payment_id="p-1")

    assert deliver_due(ctx) == 1

    [request] = receiver.wait_for(1)
    assert request.path == "/callback"
    assert request.headers["Content-Type"] == "application/json"
    assert int(request.headers["Content-Length"]) == len(request.body)
    body = request.json()
    assert body["payment"]["id"] == "p-1"
    assert body["payment"]["status"] == "success"
    assert body["account"]["number"] == "400000******0077"
    assert verify(body, body["signature"], secret)
    Callback(request.body.decode(), SignatureHandler(secret))  # the official library agrees
    [row] = callback_rows(ctx, pk)
    assert (row.state, row.attempts, row.next_attempt_at, row.claimed_until) == (
        "delivered",
        1,
        None,
        None,
    )
    assert row.delivered_at == ctx.clock.now()
    assert request.body == row.body.encode()
    [attempt] = attempts_of(ctx, row.id)
    assert (attempt.number, attempt.http_status, attempt.error) == (1, 200, None)
    assert attempt.latency_ms >= 0
    assert deliver_due(ctx) == 0
    assert len(receiver.requests) == 1


def test_failing_n_times_then_200_is_delivered_on_attempt_n_plus_1_with_scheduled_gaps(
    ctx: AppContext, clock: FakeClock
) -> None:
    failures = 9  # six 10-second retries, then two gaps from the formula
    with CallbackReceiver(failing(failures)) as receiver:
        make_project(ctx, PROJECT, receiver.url)
        pk = queued_payment(ctx, project_id=PROJECT, payment_id="p-retry")
        assert deliver_due(ctx) == 1
        for attempt in range(2, failures + 2):
            [row] = callback_rows(ctx, pk)
            assert row.state == "pending"
            gap = SCHEDULE.gap_before(attempt)
            assert row.next_attempt_at == clock.now() + timedelta(seconds=gap)
            clock.advance(gap - 1)
            assert deliver_due(ctx) == 0, "not due a second early"
            clock.advance(1)
            assert deliver_due(ctx) == 1
        receiver.wait_for(failures + 1)
    [row] = callback_rows(ctx, pk)
    assert (row.state, row.attempts) == ("delivered", failures + 1)
    attempts = attempts_of(ctx, row.id)
    assert [a.number for a in attempts] == list(range(1, failures + 2))
    assert [a.http_status for a in attempts] == [500] * failures + [200]
    assert all("HTTP 500" in a.error for a in attempts[:-1])
    started = [a.started_at for a in attempts]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(started)]
    assert gaps == pytest.approx([SCHEDULE.gap_before(n) for n in range(2, failures + 2)])


def test_a_refused_connection_is_an_error_attempt_retried_in_ten_seconds(
    ctx: AppContext, clock: FakeClock
) -> None:
    make_project(ctx, PROJECT, f"http://127.0.0.1:{free_port()}/callback")
    pk = queued_payment(ctx, project_id=PROJECT, payment_id="p-refused")

    assert deliver_due(ctx) == 1

    [row] = callback_rows(ctx, pk)
    assert (row.state, row.attempts) == ("pending", 1)
    assert row.next_attempt_at == clock.now() + timedelta(seconds=10)
    [attempt] = attempts_of(ctx, row.id)
    assert attempt.http_status is None
    assert "Cannot connect" in attempt.error
    assert row.last_error == attempt.error


def test_an_endpoint_that_hangs_past_the_timeout_is_an_error_attempt(ctx: AppContext) -> None:
    short = with_settings(ctx, callback_timeout_seconds=0.5)

    def hang(n: int, request: Any) -> tuple[int, float, bytes]:
        return 200, 10.0, b"too late"

    with CallbackReceiver(hang) as receiver:
        make_project(short, PROJECT, receiver.url)
        pk = queued_payment(short, project_id=PROJECT, payment_id="p-hang")
        began = time.monotonic()
        assert deliver_due(short) == 1
        took = time.monotonic() - began
    [row] = callback_rows(ctx, pk)
    assert (row.state, row.attempts) == ("pending", 1)
    [attempt] = attempts_of(ctx, row.id)
    assert attempt.http_status is None
    assert attempt.error == "no answer within 0.5 s"
    assert 400 <= attempt.latency_ms < 8000
    assert took < 8, "the worker did not wait for the 10-second answer"


def test_a_200_that_arrives_just_inside_the_timeout_is_delivered(ctx: AppContext) -> None:
    # The 30-second timeout scaled down: a late answer well inside it is the same case as 29 s
    # of 30 (with room for a loaded test machine).
    short = with_settings(ctx, callback_timeout_seconds=4.0)

    def slow(n: int, request: Any) -> tuple[int, float, bytes]:
        return 200, 2.5, b"ok"

    with CallbackReceiver(slow) as receiver:
        make_project(short, PROJECT, receiver.url)
        pk = queued_payment(short, project_id=PROJECT, payment_id="p-slow")
        assert deliver_due(short) == 1
    [row] = callback_rows(ctx, pk)
    assert (row.state, row.attempts) == ("delivered", 1)
    [attempt] = attempts_of(ctx, row.id)
    assert attempt.http_status == 200
    assert attempt.latency_ms >= 2500


def test_three_callbacks_of_one_payment_arrive_in_order_under_failures(
    ctx: AppContext, clock: FakeClock
) -> None:
    # Every second request fails, so each callback needs retries while later ones wait.
    def flaky(n: int, request: Any) -> tuple[int, float, bytes]:
        return (503, 0.0, b"busy") if n % 2 else (200, 0.0, b"ok")

    with CallbackReceiver(flaky) as receiver:
        make_project(ctx, PROJECT, receiver.url)
        with ctx.db.write() as conn:
            pk = seed_payment(ctx, conn, project_id=PROJECT, payment_id="p-order")
        fields = {"customer": {"type": "object", "description": "d", "properties": {}}}
        decide(
            ctx,
            pk,
            Status.AWAITING_CLARIFICATION,
            Code.NEED_CLARIFICATION,
            clarification_fields={"customer": {**fields["customer"], "description": "first"}},
        )
        decide(
            ctx,
            pk,
            Status.AWAITING_CLARIFICATION,
            Code.NEED_CLARIFICATION,
            clarification_fields={"customer": {**fields["customer"], "description": "second"}},
        )
        decide(ctx, pk, Status.SUCCESS, Code.SUCCESS)
        rows = callback_rows(ctx, pk)
        assert [r.next_attempt_at is None for r in rows] == [False, True, True]
        for _ in range(20):
            deliver_due(ctx)
            if all(r.state == "delivered" for r in callback_rows(ctx, pk)):
                break
            clock.advance(10)
        requests = receiver.requests
    rows = callback_rows(ctx, pk)
    assert [r.state for r in rows] == ["delivered"] * 3
    order = {row.body: index for index, row in enumerate(rows)}
    sequence = [order[r.body.decode()] for r in requests]
    assert sequence == sorted(sequence), "a later callback was sent before an earlier one"
    delivered = [order[r.body.decode()] for n, r in enumerate(requests, 1) if n % 2 == 0]
    assert delivered == [0, 1, 2]
    assert [r.attempts for r in rows] == [2, 2, 2]


def test_merchant_callback_url_of_the_payment_overrides_the_projects_url(
    ctx: AppContext,
) -> None:
    with CallbackReceiver() as project_receiver, CallbackReceiver() as payment_receiver:
        make_project(ctx, PROJECT, project_receiver.url)
        queued_payment(
            ctx,
            project_id=PROJECT,
            payment_id="p-override",
            merchant_callback_url=payment_receiver.url.replace("/callback", "/orders/7"),
        )
        queued_payment(ctx, project_id=PROJECT, payment_id="p-default")
        assert deliver_due(ctx) == 2
        [own] = payment_receiver.wait_for(1)
        [default] = project_receiver.wait_for(1)
    assert own.path == "/orders/7"
    assert own.json()["payment"]["id"] == "p-override"
    assert default.json()["payment"]["id"] == "p-default"


def test_a_dead_workers_lease_expires_and_the_callback_is_delivered_again(
    ctx: AppContext, clock: FakeClock, receiver: CallbackReceiver
) -> None:
    make_project(ctx, PROJECT, receiver.url)
    pk = queued_payment(ctx, project_id=PROJECT, payment_id="p-lease")
    lease = 40.0
    [claimed] = claim_due(ctx.db, clock.now(), 10, lease)  # a worker that then dies

    assert deliver_due(ctx) == 0, "leased rows are not due"
    clock.advance(lease - 1)
    assert deliver_due(ctx) == 0
    clock.advance(1)
    assert deliver_due(ctx) == 1

    [row] = callback_rows(ctx, pk)
    assert (row.state, row.attempts) == ("delivered", 1)
    # The dead worker's late result cannot overwrite the outcome of the one that took over.
    late = AttemptResult(claimed, clock.now(), clock.now(), 500, 1, "HTTP 500")
    recorded = record_results(ctx.db, [late], clock.now())
    assert recorded.lost == 1
    [row] = callback_rows(ctx, pk)
    assert (row.state, row.attempts) == ("delivered", 1)
    assert len(attempts_of(ctx, row.id)) == 1


def test_stopping_during_a_claim_gives_the_claimed_leases_back(
    ctx: AppContext, clock: FakeClock, receiver: CallbackReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(ctx, PROJECT, receiver.url)
    pk = queued_payment(ctx, project_id=PROJECT, payment_id="p-stop")
    entered, go = threading.Event(), threading.Event()

    def slow_claim(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        go.wait(30)
        return claim_due(*args, **kwargs)

    monkeypatch.setattr("payplane_server.worker.delivery.claim_due", slow_claim)

    async def scenario() -> None:
        worker = DeliveryWorker(ctx, poll_interval=0.05)
        await worker.start()
        await asyncio.to_thread(entered.wait, 30)
        stopping = asyncio.create_task(worker.stop(grace=0.1))
        await asyncio.sleep(0.2)  # stop() has cancelled the claim loop mid-claim
        go.set()  # the claim commits its lease in its thread all the same
        await stopping

    asyncio.run(scenario())
    assert entered.is_set()
    [row] = callback_rows(ctx, pk)
    # Given back, not leased to a stopped worker until the lease runs out.
    assert (row.state, row.attempts) == ("pending", 0)
    assert row.claimed_until is None
    assert row.next_attempt_at is not None and row.next_attempt_at <= clock.now()
    assert receiver.requests == []
    assert deliver_due(ctx) == 1


def test_two_claims_never_hold_the_same_callback(ctx: AppContext, clock: FakeClock) -> None:
    make_project(ctx, PROJECT, "http://127.0.0.1:9/callback")
    for n in range(6):
        queued_payment(ctx, project_id=PROJECT, payment_id=f"p-{n}")
    first = claim_due(ctx.db, clock.now(), 4, 60)
    second = claim_due(ctx.db, clock.now(), 4, 60)
    assert len(first) == 4
    assert len(second) == 2
    assert not {c.id for c in first} & {c.id for c in second}


def test_a_url_with_a_refused_scheme_fails_at_once_and_releases_the_next(
    ctx: AppContext, receiver: CallbackReceiver
) -> None:
    make_project(ctx, PROJECT, "ftp://merchant.example/callback")
    bad = queued_payment(ctx, project_id=PROJECT, payment_id="p-ftp")
    with ctx.db.write() as conn:
        conn.execute(projects.update().values(callback_url=receiver.url))
    good = queued_payment(ctx, project_id=PROJECT, payment_id="p-http")

    assert deliver_due(ctx) == 2

    [row] = callback_rows(ctx, bad)
    assert (row.state, row.attempts) == ("failed", 1)
    assert row.last_error.startswith("refused: ")
    assert "http or https" in row.last_error
    assert callback_rows(ctx, good)[0].state == "delivered"
    assert [r.json()["payment"]["id"] for r in receiver.wait_for(1)] == ["p-http"]


def test_the_platforms_own_address_is_refused_at_delivery(ctx: AppContext) -> None:
    own = with_settings(ctx, port=free_port())
    make_project(own, PROJECT, f"http://localhost:{own.settings.port}/payment")
    pk = queued_payment(own, project_id=PROJECT, payment_id="p-self")
    assert deliver_due(own) == 1
    [row] = callback_rows(own, pk)
    assert row.state == "failed"
    assert "this platform itself" in row.last_error


def test_a_callback_failed_for_good_releases_the_next_one_of_the_payment(
    ctx: AppContext, clock: FakeClock
) -> None:
    with CallbackReceiver(failing(10_000)) as receiver:
        make_project(ctx, PROJECT, receiver.url)
        with ctx.db.write() as conn:
            pk = seed_payment(ctx, conn, project_id=PROJECT, payment_id="p-give-up")
        decide(
            ctx,
            pk,
            Status.AWAITING_CLARIFICATION,
            Code.NEED_CLARIFICATION,
            clarification_fields={"customer": {"type": "object", "description": "x"}},
        )
        decide(ctx, pk, Status.DECLINE, Code.AUTO_DECLINE)
        first, second = callback_rows(ctx, pk)
        # Jump straight to the last attempt instead of walking 11 days.
        with ctx.db.write() as conn:
            conn.execute(callbacks.update().where(callbacks.c.id == first.id).values(attempts=119))
        assert deliver_due(ctx) == 2  # attempt 120 fails, the decline goes out at once
        first, second = callback_rows(ctx, pk)
        assert (first.state, first.attempts, first.next_attempt_at) == ("failed", 120, None)
        assert (second.state, second.attempts) == ("pending", 1)
        assert second.next_attempt_at == clock.now() + timedelta(seconds=10)
        bodies = [json.loads(r.body) for r in receiver.requests]
    assert [b["payment"]["status"] for b in bodies] == ["awaiting clarification", "decline"]


def test_the_background_loop_wakes_on_commit_without_polling(
    ctx: AppContext, receiver: CallbackReceiver
) -> None:
    make_project(ctx, PROJECT, receiver.url)

    async def scenario() -> float:
        worker = DeliveryWorker(ctx, poll_interval=3600)
        await worker.start()
        try:
            await asyncio.sleep(0.2)
            began = time.monotonic()
            await asyncio.to_thread(queued_payment, ctx, project_id=PROJECT, payment_id="p-wake")
            await asyncio.to_thread(receiver.wait_for, 1, 30)
            return receiver.requests[0].at - began
        finally:
            await worker.stop()

    waited = asyncio.run(scenario())
    assert waited < 5, "woken by the commit, not by the hour-long poll"
    assert callback_rows(ctx)[0].state == "delivered"


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_listen_notify_wakes_a_worker_for_another_process_commit(
    ctx: AppContext, receiver: CallbackReceiver
) -> None:
    # The worker has its own Database: commits through ``ctx`` fire no in-process signal
    # there, so only PostgreSQL's NOTIFY can wake it before its hour-long poll.
    other = dataclasses.replace(ctx, db=Database(ctx.db.url))
    make_project(ctx, PROJECT, receiver.url)

    async def scenario() -> None:
        worker = DeliveryWorker(other, poll_interval=3600)
        await worker.start()
        try:
            for _ in range(300):
                if worker.listening:
                    break
                await asyncio.sleep(0.1)
            assert worker.listening
            await asyncio.to_thread(queued_payment, ctx, project_id=PROJECT, payment_id="p-ntfy")
            await asyncio.to_thread(receiver.wait_for, 1, 30)
        finally:
            await worker.stop()

    try:
        asyncio.run(scenario())
    finally:
        other.db.dispose()
    assert callback_rows(ctx)[0].state == "delivered"
