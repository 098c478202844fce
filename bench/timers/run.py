"""Clarification timers: how fast due timers fire, and what an idle scheduler pass costs.

    uv run python bench/timers/run.py [--due 10000] [--idle 10000,100000] [--no-postgres]

Figures (each with a baseline measured in the same run, and the ratio):

1. Firing: N payments waiting, all due at once; the scheduler passes decline them all (code
   603, a signed callback each). Baseline: the same declines one ``transition`` at a time.
   Ceiling: building and signing the same callback bodies with no database at all.
2. Idle pass: nothing due, W payments waiting; the cost of one scheduler pass (one probe of
   the partial index). Compared between W = 10,000 and W = 100,000, and against a query
   that does grow with W (counting the waiting payments).

The query plans of the idle pass are printed (EXPLAIN QUERY PLAN on SQLite, EXPLAIN on
PostgreSQL).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from payplane import sign
from payplane_server.clock import FakeClock
from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.db import Database, migrate
from payplane_server.db.tables import operations, payments
from payplane_server.domain.callback_body import CallbackFacts, build_callback_body
from payplane_server.domain.clarification import ClarificationState
from payplane_server.domain.payments import Code, Status
from payplane_server.services.processing import Change, transition
from payplane_server.services.projects import create_project
from payplane_server.testing import TempPostgres, postgres_available
from payplane_server.worker.timers import BATCH, TimerLoop
from sqlalchemy import event, func, insert, select, text

PROJECT = 402
MASTER_KEY = base64.b64encode(b"b" * 32).decode()
WAIT = timedelta(minutes=30)


def make_context(url: str, data_dir: Path, clock: FakeClock) -> AppContext:
    migrate(url)
    settings = Settings(data_dir=data_dir, database_url=url, master_key=MASTER_KEY)
    return AppContext.create(settings, clock=clock, db=Database(url))


def seed(ctx: AppContext, count: int, first: int, deadline_in: timedelta) -> None:
    """Insert ``count`` payments waiting for clarification (with their operations) in bulk."""
    now = ctx.clock.now()
    state = ClarificationState.request("customer")
    fields = json.dumps(state.fields())
    state_json = state.to_json()
    chunk = 5000
    for start in range(first, first + count, chunk):
        ids = range(start, min(start + chunk, first + count))
        with ctx.db.write() as conn:
            conn.execute(
                insert(payments),
                [
                    {
                        "id": i,
                        "project_id": PROJECT,
                        "payment_id": f"bench-{i}",
                        "status": Status.AWAITING_CLARIFICATION.value,
                        "amount": 1000,
                        "currency": "EUR",
                        "customer_id": f"customer-{i}",
                        "params": "{}",
                        "method": "card",
                        "account_number": "400000******0200",
                        "card_type": "visa",
                        "card_holder": "BENCH HOLDER",
                        "expiry_month": "12",
                        "expiry_year": "2030",
                        "clarification_fields": fields,
                        "clarification_deadline": now + deadline_in,
                        "clarification_state": state_json,
                        "processing_deadline": now + timedelta(hours=24),
                        "page_token": f"bench-token-{i}",
                        "created_at": now,
                        "updated_at": now,
                    }
                    for i in ids
                ],
            )
            conn.execute(
                insert(operations),
                [
                    {
                        "id": i,
                        "payment_pk": i,
                        "project_id": PROJECT,
                        "type": "sale",
                        "status": Status.AWAITING_CLARIFICATION.value,
                        "code": Code.NEED_CLARIFICATION,
                        "message": Code.message(Code.NEED_CLARIFICATION),
                        "sum_initial_amount": 1000,
                        "sum_initial_currency": "EUR",
                        "sum_converted_amount": 1000,
                        "sum_converted_currency": "EUR",
                        "provider_id": 1,
                        "request_id": f"{i:032x}",
                        "created_at": now,
                    }
                    for i in ids
                ],
            )
    if ctx.db.is_postgres:
        with ctx.db.write() as conn:
            conn.execute(text("ANALYZE payments"))


def declined(ctx: AppContext) -> int:
    with ctx.db.read() as conn:
        return int(
            conn.execute(
                select(func.count())
                .select_from(payments)
                .where(payments.c.status == Status.DECLINE.value)
            ).scalar_one()
        )


def fire_with_passes(ctx: AppContext, expected: int) -> tuple[float, float]:
    """Decline everything that is due with the scheduler's own passes; (wall seconds, CPU
    seconds of this process) taken."""
    timer = TimerLoop(ctx)
    started = time.perf_counter()
    cpu_started = time.process_time()
    total = 0
    while total < expected:
        fired, _ = timer.pass_once()
        if fired == 0:
            break
        total += fired
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    assert total == expected == declined(ctx), (total, expected)
    return elapsed, cpu


def fire_with_running_loop(ctx: AppContext, clock: FakeClock, expected: int) -> float:
    """The real loop: started idle, then the clock passes every deadline; seconds from then
    until the last payment is declined (includes waking up)."""

    async def main() -> float:
        timer = TimerLoop(ctx)
        task = asyncio.create_task(timer.run())
        await asyncio.sleep(0.2)
        clock.advance(seconds=WAIT.total_seconds())
        started = time.perf_counter()
        timer.wake()
        while timer.fired < expected:
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - started
        timer.stop()
        await task
        return elapsed

    return asyncio.run(main())


def fire_one_by_one(ctx: AppContext, count: int) -> float:
    """Baseline: the same decline through ``transition``, one payment per call."""
    now = ctx.clock.now()
    with ctx.db.read() as conn:
        pks = list(
            conn.execute(
                select(payments.c.id)
                .where(payments.c.clarification_deadline <= now)
                .order_by(payments.c.clarification_deadline)
                .limit(count)
            ).scalars()
        )
    started = time.perf_counter()
    for chunk_start in range(0, len(pks), 500):
        with ctx.db.write() as conn:
            for pk in pks[chunk_start : chunk_start + 500]:
                transition(
                    ctx,
                    conn,
                    pk,
                    Change(Status.DECLINE, Code.AUTO_DECLINE),
                    expect={Status.AWAITING_CLARIFICATION},
                )
    return time.perf_counter() - started


def sign_only(count: int, secret: str, clock: FakeClock) -> tuple[float, float]:
    """Ceiling: build and sign the same callback bodies, no database; (wall, CPU) seconds."""
    now = clock.now()
    started = time.perf_counter()
    cpu_started = time.process_time()
    for i in range(count):
        facts = CallbackFacts(
            project_id=PROJECT,
            payment_id=f"bench-{i}",
            payment_status="decline",
            payment_date=now,
            payment_method="card",
            amount=1000,
            currency="EUR",
            customer_id=f"customer-{i}",
            operation_id=i,
            operation_type="sale",
            operation_status="decline",
            operation_date=now,
            operation_created_date=now,
            request_id=f"{i:032x}",
            sum_initial=(1000, "EUR"),
            sum_converted=(1000, "EUR"),
            code="603",
            message="Auto decline",
            provider_id=1,
            provider_payment_id="",
            provider_auth_code="",
            account_number="400000******0200",
            card_type="visa",
            card_holder="BENCH HOLDER",
            expiry_month="12",
            expiry_year="2030",
        )
        body = build_callback_body(facts)
        body["signature"] = sign(body, secret)
        json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return time.perf_counter() - started, time.process_time() - cpu_started


def time_per_call(fn: Callable[[], Any], seconds: float = 2.0) -> float:
    """Mean time per call over as many calls as fit in ``seconds`` (after a warm-up)."""
    for _ in range(20):
        fn()
    calls = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        fn()
        calls += 1
    return (time.perf_counter() - started) / calls


def idle_pass_statements(ctx: AppContext) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if not statement.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK")):
            seen.append((statement, parameters))

    event.listen(ctx.db.engine, "before_cursor_execute", record)
    try:
        fired, _ = TimerLoop(ctx).pass_once()
        assert fired == 0
    finally:
        event.remove(ctx.db.engine, "before_cursor_execute", record)
    return seen


def plan_of(ctx: AppContext, statement: str, parameters: Any) -> list[str]:
    with ctx.db.read() as conn:
        if ctx.db.is_postgres:
            rows = conn.exec_driver_sql("EXPLAIN " + statement, parameters).all()
            return [str(row[0]) for row in rows]
        rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
        return [str(row[-1]) for row in rows]


def count_waiting(ctx: AppContext) -> None:
    with ctx.db.read() as conn:
        conn.execute(
            select(func.count())
            .select_from(payments)
            .where(payments.c.status == Status.AWAITING_CLARIFICATION.value)
        ).scalar_one()


def line(name: str, value: str, baseline: str, ratio: float) -> None:
    print(f"  {name:<58} {value:>14}   baseline {baseline:>14}   ratio {ratio:6.2f}")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def bench_engine(
    engine: str, url_for: Callable[[str], str], due: int, idle_sizes: list[int], tmp: Path
) -> None:
    print(f"\n== {engine} ==   ({load()})")
    clock = FakeClock()
    ctx = make_context(url_for("fire"), tmp / f"{engine}-fire", clock)
    secret = create_project(
        ctx, project_id=PROJECT, name="Bench", callback_url="http://127.0.0.1:9/cb"
    )
    seed(ctx, due, 1, WAIT)
    clock.advance(seconds=WAIT.total_seconds())
    elapsed, cpu = fire_with_passes(ctx, due)
    rate = due / elapsed

    baseline_n = min(due, 1000)
    clock2 = FakeClock()
    ctx2 = make_context(url_for("baseline"), tmp / f"{engine}-baseline", clock2)
    create_project(ctx2, project_id=PROJECT, name="Bench", callback_url="http://127.0.0.1:9/cb")
    seed(ctx2, baseline_n, 1, WAIT)
    clock2.advance(seconds=WAIT.total_seconds())
    base_rate = baseline_n / fire_one_by_one(ctx2, baseline_n)
    sign_wall, sign_cpu = sign_only(due, secret, clock)
    ceiling_rate = due / sign_wall
    print(f"Firing {due:,} payments due at once (each: decline 603 + a signed callback queued)")
    line(
        f"scheduler passes (batches of {BATCH:,})",
        f"{rate:,.0f}/s",
        f"{base_rate:,.0f}/s",
        rate / base_rate,
    )
    print(
        f"  {'':<58} {'':>14}   (baseline: one transition() per payment, {baseline_n:,} payments)"
    )
    line(
        "same, vs. signing the bodies alone (no database)",
        f"{rate:,.0f}/s",
        f"{ceiling_rate:,.0f}/s",
        rate / ceiling_rate,
    )
    # CPU time is what the machine's load hardly moves. SQLite works inside this process, so
    # this is the rate one unshared core would give; PostgreSQL's own work is not counted.
    what = "all the work" if ctx.db.is_sqlite else "client side only"
    line(
        f"scheduler passes per CPU-second of this process ({what})",
        f"{due / cpu:,.0f}/s",
        f"{due / sign_cpu:,.0f}/s",
        sign_cpu / cpu,
    )
    print(f"  {'':<58} {'':>14}   (baseline: signing alone, per CPU-second)")
    ctx2.close()

    clock3 = FakeClock()
    ctx3 = make_context(url_for("loop"), tmp / f"{engine}-loop", clock3)
    create_project(ctx3, project_id=PROJECT, name="Bench", callback_url="http://127.0.0.1:9/cb")
    seed(ctx3, due, 1, WAIT)
    loop_elapsed = fire_with_running_loop(ctx3, clock3, due)
    loop_rate = due / loop_elapsed
    line(
        "running loop, from the clock passing the deadlines",
        f"{loop_rate:,.0f}/s",
        f"{rate:,.0f}/s",
        loop_rate / rate,
    )
    print(
        f"  {'':<58} {'':>14}   (baseline: scheduler passes above;"
        f" last decline after {loop_elapsed:.2f} s)"
    )
    ctx3.close()
    ctx.close()

    print(
        "Idle scheduler pass (nothing due), waiting payments:",
        ", ".join(f"{n:,}" for n in idle_sizes),
    )
    # One database per size, measured in alternating rounds so that the machine's load
    # drifts over all sizes alike; the median round is reported.
    contexts = []
    for size in idle_sizes:
        clock4 = FakeClock()
        ctx4 = make_context(url_for(f"idle{size}"), tmp / f"{engine}-idle{size}", clock4)
        create_project(ctx4, project_id=PROJECT, name="Bench", callback_url="http://x/cb")
        seed(ctx4, size, 1, timedelta(hours=1))
        statements = idle_pass_statements(ctx4)
        assert len(statements) == 1, statements
        print(f"  {size:,} waiting: {len(statements)} statement per pass")
        contexts.append((size, ctx4, statements[0]))
    passes: dict[int, list[float]] = {size: [] for size in idle_sizes}
    counts: dict[int, list[float]] = {size: [] for size in idle_sizes}
    for _ in range(7):
        for size, ctx4, _statement in contexts:
            timer = TimerLoop(ctx4)
            passes[size].append(time_per_call(timer.pass_once, seconds=0.4))
            counts[size].append(time_per_call(lambda c=ctx4: count_waiting(c), seconds=0.3))
    size, largest, (statement, parameters) = contexts[-1]
    print(f"  the pass's only statement ({size:,} waiting):", " ".join(statement.split()))
    print("  its plan:")
    for row in plan_of(largest, statement, parameters):
        print("    " + row)
    first_pass = statistics.median(passes[idle_sizes[0]])
    first_count = statistics.median(counts[idle_sizes[0]])
    for size in idle_sizes:
        per_pass = statistics.median(passes[size])
        line(
            f"one idle pass, {size:,} waiting",
            f"{per_pass * 1e6:,.0f} µs",
            f"{first_pass * 1e6:,.0f} µs",
            per_pass / first_pass,
        )
    for size in idle_sizes:
        per_count = statistics.median(counts[size])
        line(
            f"contrast: counting the waiting payments, {size:,} waiting",
            f"{per_count * 1e6:,.0f} µs",
            f"{first_count * 1e6:,.0f} µs",
            per_count / first_count,
        )
    for _, ctx4, _statement in contexts:
        ctx4.close()
    print(f"  ({load()} at the end)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--due", type=int, default=10_000)
    parser.add_argument("--idle", default="10000,100000")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    idle_sizes = [int(n) for n in args.idle.split(",")]
    with tempfile.TemporaryDirectory(prefix="payplane-bench-timers-") as name:
        tmp = Path(name)
        bench_engine(
            "SQLite", lambda db: f"sqlite:///{tmp / (db + '.db')}", args.due, idle_sizes, tmp
        )
        if args.no_postgres:
            return
        if not postgres_available():
            print("\nPostgreSQL not installed: skipped")
            return
        server = TempPostgres().start()
        try:
            bench_engine(
                "PostgreSQL 15",
                lambda db: server.create_database(f"bench_{db}"),
                args.due,
                idle_sizes,
                tmp,
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
