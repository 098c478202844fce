"""Clarification timers: durable in the database, fired once by any number of workers, fired
by the running loop when due, and cheap while nothing is due. Time moves with FakeClock."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, text, update

from payplane_server.clock import FakeClock
from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.db import Database
from payplane_server.db.tables import callbacks, payments
from payplane_server.domain.payments import Status
from payplane_server.services.clarification import fire_due, next_deadline, submit_clarification
from payplane_server.services.processing import Change, callback_body_for, transition_many
from payplane_server.services.projects import create_project
from payplane_server.testing.clarification import callback_bodies, waiting_payment
from payplane_server.worker import LOOPS
from payplane_server.worker.timers import BACKLOG_PAUSE, MAX_SLEEP, TimerLoop, loop

PROJECT, OTHER = 402, 403


@pytest.fixture
def project(ctx: AppContext) -> str:
    return create_project(ctx, project_id=PROJECT, name="Shop", callback_url="http://x/cb")


def statuses(ctx: AppContext) -> dict[str, str]:
    with ctx.db.read() as conn:
        rows = conn.execute(select(payments.c.payment_id, payments.c.status)).all()
    return {row.payment_id: row.status for row in rows}


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not hold in time")
        time.sleep(0.02)


def run_loop_until(ctx: AppContext, condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Run the real timer loop (as ``serve`` would) until ``condition`` holds."""

    async def main() -> None:
        async with loop(ctx):
            await asyncio.to_thread(wait_until, condition, timeout)

    asyncio.run(main())


def test_the_timer_loop_is_registered_for_serve() -> None:
    assert loop in LOOPS


@pytest.mark.usefixtures("project")
def test_only_due_payments_are_declined(ctx: AppContext, clock: FakeClock) -> None:
    waiting_payment(ctx, project_id=PROJECT, payment_id="early")
    clock.advance(minutes=10)
    waiting_payment(ctx, project_id=PROJECT, payment_id="late")
    clock.advance(minutes=20)
    assert fire_due(ctx) == 1
    assert statuses(ctx) == {"early": "decline", "late": "awaiting clarification"}
    assert next_deadline(ctx) == clock.now() + timedelta(minutes=10)


@pytest.mark.usefixtures("project")
def test_the_running_loop_declines_a_payment_once_its_wait_runs_out(
    ctx: AppContext, clock: FakeClock
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")

    async def main() -> None:
        async with loop(ctx):
            await asyncio.sleep(0.6)  # a few idle passes: nothing is due yet
            assert statuses(ctx) == {"p-1": "awaiting clarification"}
            clock.advance(minutes=30)
            await asyncio.to_thread(wait_until, lambda: statuses(ctx)["p-1"] == "decline")

    asyncio.run(main())
    assert [c["operation"]["code"] for c in callback_bodies(ctx, pk)] == ["3191", "603"]


@pytest.mark.usefixtures("project")
def test_setting_a_deadline_wakes_the_timer_loop(ctx: AppContext) -> None:
    woken: list[str] = []
    remove = ctx.db.listen("timers", woken.append)
    try:
        waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
        assert woken == ["timers"]
        submit_clarification(ctx, PROJECT, "p-1", {})
        assert woken == ["timers", "timers"]
    finally:
        remove()


def test_timers_survive_a_restart(settings: Settings, clock: FakeClock) -> None:
    first = AppContext.create(settings, clock=clock, db=Database(settings.resolved_database_url))
    create_project(first, project_id=PROJECT, name="Shop", callback_url="http://x/cb")
    for n in range(5):
        waiting_payment(first, project_id=PROJECT, payment_id=f"p-{n}")
        clock.advance(minutes=1)
    first.close()

    clock.advance(hours=2)
    second = AppContext.create(settings, clock=clock, db=Database(settings.resolved_database_url))
    try:
        run_loop_until(second, lambda: set(statuses(second).values()) == {"decline"})
        for pk in range(1, 6):
            codes = [c["operation"]["code"] for c in callback_bodies(second, pk)]
            assert codes == ["3191", "603"]
    finally:
        second.close()


@pytest.mark.usefixtures("project")
def test_several_workers_decline_each_payment_exactly_once(
    ctx: AppContext, settings: Settings, clock: FakeClock
) -> None:
    count = 60
    with ctx.db.write() as conn:
        pks = [
            waiting_payment(ctx, project_id=PROJECT, payment_id=f"p-{n}", conn=conn)
            for n in range(count)
        ]
    clock.advance(minutes=31)
    workers = [
        AppContext.create(settings, clock=clock, db=Database(settings.resolved_database_url))
        for _ in range(4)
    ]
    fired = [0] * len(workers)
    start = threading.Barrier(len(workers))

    def work(index: int) -> None:
        start.wait()
        while True:
            n = fire_due(workers[index], limit=7)
            fired[index] += n
            if n == 0 and next_deadline(workers[index]) is None:
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for worker in workers:
        worker.close()
    assert sum(fired) == count
    for pk in pks:
        assert [c["operation"]["code"] for c in callback_bodies(ctx, pk)] == ["3191", "603"]


@pytest.mark.usefixtures("project")
def test_several_running_loops_decline_each_payment_exactly_once(
    ctx: AppContext, settings: Settings, clock: FakeClock
) -> None:
    with ctx.db.write() as conn:
        pks = [
            waiting_payment(ctx, project_id=PROJECT, payment_id=f"p-{n}", conn=conn)
            for n in range(30)
        ]
    contexts = [
        AppContext.create(settings, clock=clock, db=Database(settings.resolved_database_url))
        for _ in range(3)
    ]
    loops = [TimerLoop(c, batch=5) for c in contexts]

    async def main() -> None:
        tasks = [asyncio.create_task(timer.run()) for timer in loops]
        clock.advance(minutes=30)
        await asyncio.to_thread(wait_until, lambda: sum(t.fired for t in loops) >= 30)
        for timer in loops:
            timer.stop()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    for c in contexts:
        c.close()
    assert sum(t.fired for t in loops) == 30
    for pk in pks:
        assert [c["operation"]["code"] for c in callback_bodies(ctx, pk)] == ["3191", "603"]


@pytest.mark.usefixtures("project")
def test_a_deadline_left_on_a_finished_payment_is_cleared_not_fired(
    ctx: AppContext, clock: FakeClock
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id="p-1")
    submit_clarification(ctx, PROJECT, "p-1", {"customer": {"psu_consent": "1"}})
    with ctx.db.write() as conn:
        conn.execute(
            update(payments)
            .where(payments.c.id == pk)
            .values(clarification_deadline=clock.now() - timedelta(seconds=1))
        )
    assert fire_due(ctx) == 0
    assert next_deadline(ctx) is None
    assert statuses(ctx) == {"p-1": "success"}


def _statements(ctx: AppContext) -> tuple[list[tuple[str, Any]], Callable[[], None]]:
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if not statement.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK")):
            seen.append((statement, parameters))

    event.listen(ctx.db.engine, "before_cursor_execute", record)
    return seen, lambda: event.remove(ctx.db.engine, "before_cursor_execute", record)


@pytest.mark.usefixtures("project")
def test_an_idle_scheduler_pass_is_one_query_on_the_deadline_index(
    ctx: AppContext, clock: FakeClock
) -> None:
    for n in range(20):
        waiting_payment(ctx, project_id=PROJECT, payment_id=f"p-{n}")
    seen, stop = _statements(ctx)
    try:
        fired, sleep = TimerLoop(ctx).pass_once()
    finally:
        stop()
    assert fired == 0 and 0 < sleep <= 0.5
    assert len(seen) == 1
    [(query, parameters)] = seen
    with ctx.db.read() as conn:
        if ctx.db.is_postgres:
            # A tiny table would be read sequentially; show that the index serves the query.
            conn.execute(text("SET LOCAL enable_seqscan = off"))
            explain = "EXPLAIN "
        else:
            explain = "EXPLAIN QUERY PLAN "
        rows = conn.exec_driver_sql(explain + query, parameters).all()
        plan = " ".join(str(row[-1]) for row in rows)
    assert "ix_payments_clarification_due" in plan
    assert "SCAN payments " not in plan + " " and "Seq Scan" not in plan


@pytest.mark.usefixtures("project")
def test_a_backlog_is_worked_off_batch_after_batch_with_only_a_short_pause(
    ctx: AppContext, clock: FakeClock
) -> None:
    with ctx.db.write() as conn:
        for n in range(12):
            waiting_payment(ctx, project_id=PROJECT, payment_id=f"p-{n}", conn=conn)
    clock.advance(minutes=30)
    timer = TimerLoop(ctx, batch=5)
    assert timer.pass_once() == (5, BACKLOG_PAUSE)
    assert timer.pass_once() == (5, BACKLOG_PAUSE)
    assert timer.pass_once() == (2, BACKLOG_PAUSE)
    assert timer.pass_once() == (0, MAX_SLEEP)


def test_timer_declines_queue_the_same_callbacks_as_a_single_transition(
    ctx: AppContext, clock: FakeClock
) -> None:
    create_project(ctx, project_id=PROJECT, name="Shop", callback_url="http://x/cb")
    create_project(ctx, project_id=OTHER, name="No URL", callback_url=None)
    plain = waiting_payment(ctx, project_id=PROJECT, payment_id="plain")
    own_url = waiting_payment(ctx, project_id=PROJECT, payment_id="own-url")
    no_url = waiting_payment(ctx, project_id=OTHER, payment_id="no-url")
    with ctx.db.write() as conn:
        conn.execute(
            update(payments)
            .where(payments.c.id == own_url)
            .values(params=json.dumps({"merchant_callback_url": "http://merchant/own"}))
        )
        # The request callback of "plain" was delivered; the others' are still pending.
        conn.execute(
            update(callbacks)
            .where(callbacks.c.payment_pk == plain)
            .values(state="delivered", next_attempt_at=None)
        )
    clock.advance(minutes=30)
    assert fire_due(ctx) == 3
    with ctx.db.read() as conn:
        queued = {
            row.payment_pk: row
            for row in conn.execute(select(callbacks).where(callbacks.c.body.contains('"603"')))
        }
        assert set(queued) == {plain, own_url, no_url}
        for pk, row in queued.items():
            # The queued body is exactly what the status request answers now.
            assert row.body == callback_body_for(ctx, conn, pk)
    assert (queued[plain].url, queued[plain].state) == ("http://x/cb", "pending")
    assert queued[plain].next_attempt_at == clock.now()
    # An earlier callback of the payment is still pending: this one waits for its turn.
    assert (queued[own_url].url, queued[own_url].next_attempt_at) == ("http://merchant/own", None)
    assert queued[no_url].state == "failed"


def test_transition_many_refuses_changes_that_move_money_or_ask_for_data(
    ctx: AppContext,
) -> None:
    with ctx.db.write() as conn, pytest.raises(ValueError):
        transition_many(ctx, conn, [1], Change(Status.SUCCESS, "0"), expect=[Status.PROCESSING])
