"""A clarification arriving exactly as the timer fires: exactly one outcome, and the callbacks
tell the same story as the payment. Run many times on both engines, each side on its own
engine (its own connection pool), started together by a barrier."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from payplane_server.clock import FakeClock
from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.db import Database
from payplane_server.db.tables import payments
from payplane_server.errors import GateError
from payplane_server.services.clarification import Answer, fire_due, submit_clarification
from payplane_server.services.projects import create_project
from payplane_server.testing.clarification import callback_bodies, waiting_payment

PROJECT = 402
ROUNDS = 25
WAIT = timedelta(minutes=30)


def _race(
    merchant: AppContext, timer: AppContext, payment_id: str, data: dict[str, Any]
) -> tuple[Answer | GateError, int]:
    start = threading.Barrier(2)
    results: dict[str, Any] = {}

    def answer() -> None:
        start.wait()
        try:
            results["answer"] = submit_clarification(merchant, PROJECT, payment_id, data)
        except GateError as error:
            results["answer"] = error

    def fire() -> None:
        start.wait()
        results["fired"] = fire_due(timer)

    threads = [threading.Thread(target=answer), threading.Thread(target=fire)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results["answer"], results["fired"]


def _row(ctx: AppContext, pk: int) -> Any:
    with ctx.db.read() as conn:
        return conn.execute(select(payments).where(payments.c.id == pk)).one()


@pytest.fixture
def timer_ctx(settings: Settings, clock: FakeClock) -> Any:
    other = AppContext.create(settings, clock=clock, db=Database(settings.resolved_database_url))
    yield other
    other.close()


def test_a_complete_clarification_racing_the_timer_has_exactly_one_outcome(
    ctx: AppContext, timer_ctx: AppContext, clock: FakeClock
) -> None:
    create_project(ctx, project_id=PROJECT, name="Shop", callback_url="http://x/cb")
    outcomes: Counter[str] = Counter()
    for n in range(ROUNDS):
        pk = waiting_payment(ctx, project_id=PROJECT, payment_id=f"p-{n}")
        # The exact instant of the deadline: both sides are in time.
        clock.set(_row(ctx, pk).clarification_deadline)
        answer, fired = _race(ctx, timer_ctx, f"p-{n}", {"customer": {"psu_consent": "1"}})
        row = _row(ctx, pk)
        codes = [c["operation"]["code"] for c in callback_bodies(ctx, pk)]
        statuses = [c["payment"]["status"] for c in callback_bodies(ctx, pk)]
        if isinstance(answer, Answer):
            assert answer.body()["status"] == "success"
            assert fired == 0
            assert row.status == "success"
            assert codes == ["3191", "0"]
        else:
            assert (answer.status, answer.code) == (409, "3060")
            assert fired == 1
            assert row.status == "decline"
            assert codes == ["3191", "603"]
        assert statuses == ["awaiting clarification", row.status]
        assert row.clarification_deadline is None
        outcomes[row.status] += 1
    assert sum(outcomes.values()) == ROUNDS
    print(f"outcomes on {ctx.db.engine.dialect.name}: {dict(outcomes)}")


def test_a_partial_clarification_racing_the_timer_either_restarts_the_wait_or_loses(
    ctx: AppContext, timer_ctx: AppContext, clock: FakeClock
) -> None:
    create_project(ctx, project_id=PROJECT, name="Shop", callback_url="http://x/cb")
    outcomes: Counter[str] = Counter()
    for n in range(ROUNDS):
        pk = waiting_payment(ctx, project_id=PROJECT, payment_id=f"p-{n}")
        clock.set(_row(ctx, pk).clarification_deadline)
        answer, fired = _race(ctx, timer_ctx, f"p-{n}", {"customer": {"psu_consent_text": "OK"}})
        row = _row(ctx, pk)
        codes = [c["operation"]["code"] for c in callback_bodies(ctx, pk)]
        if isinstance(answer, Answer):
            assert answer.body()["status"] == "awaiting clarification"
            assert fired == 0
            assert row.status == "awaiting clarification"
            assert row.clarification_deadline == clock.now() + WAIT
            assert codes == ["3191", "3191"]
            # Settle it so the next round's timer sees only its own payment.
            submit_clarification(ctx, PROJECT, f"p-{n}", {"customer": {"psu_consent": "1"}})
        else:
            assert (answer.status, fired, row.status) == (409, 1, "decline")
            assert codes == ["3191", "603"]
        outcomes[row.status] += 1
    assert sum(outcomes.values()) == ROUNDS
    print(f"outcomes on {ctx.db.engine.dialect.name}: {dict(outcomes)}")
