"""Dashboard pages with 100,000 payments stored: how long the payments list and a payment's
page take, served by real uvicorn on loopback, on SQLite and PostgreSQL.

    uv run python bench/dashboard/run.py [--payments 100000] [--requests 200] [--no-postgres]

Every payment has an operation, a callback and one or two delivery attempts, spread over three
projects of one merchant and 100 days. The signed-in user is the Merchant admin (sees all three
projects: the widest query). Figures, each as p50 / p95 over sequential requests:

* payments list, first page (50 rows, newest first);
* payments list, a page 20 pages deep (keyset cursor);
* payments list filtered by status (``decline``) and by a date range;
* payments list searched by payment ID;
* a payment's page (operations, callbacks, every attempt).

Baseline, measured in the same run on the same server: a bare Starlette hello-world endpoint
(the ceiling for any endpoint over this stack); the ratio is page p95 / baseline p95. The target
is p95 under 100 ms. The query plans of the list queries are printed.
"""

from __future__ import annotations

import argparse
import base64
import random
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from payplane_server.clock import FakeClock
from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.db import Database, migrate
from payplane_server.db.tables import callback_attempts, callbacks, operations, payments
from payplane_server.services import dashboard_queries as queries
from payplane_server.services import sessions
from payplane_server.services.accounts import create_user
from payplane_server.services.projects import create_project, get_project
from payplane_server.testing import LiveServer, TempPostgres, postgres_available
from payplane_server.web.app import create_app
from sqlalchemy import Connection, text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

MASTER_KEY = base64.b64encode(b"d" * 32).decode()
PROJECTS = (501, 502, 503)
START = datetime(2026, 8, 1, tzinfo=UTC)
STATUSES = ["success"] * 7 + ["decline", "decline", "processing"]


def make_context(url: str, data_dir: Path) -> AppContext:
    migrate(url)
    settings = Settings(data_dir=data_dir, database_url=url, master_key=MASTER_KEY)
    clock = FakeClock(START + timedelta(days=101))
    return AppContext.create(settings, clock=clock, db=Database(url))


def seed(ctx: AppContext, count: int) -> int:
    """Payments with their operation, callback and attempts, in bulk; returns the merchant."""
    create_project(ctx, project_id=PROJECTS[0], name="Shop", callback_url="http://127.0.0.1:9/")
    with ctx.db.read() as conn:
        project = get_project(conn, PROJECTS[0])
    assert project is not None
    for pid in PROJECTS[1:]:
        create_project(
            ctx,
            project_id=pid,
            name=f"Shop {pid}",
            callback_url="http://127.0.0.1:9/",
            merchant_id=project.merchant_id,
        )
    rng = random.Random(7)
    step = timedelta(days=100) / count
    chunk = 5000
    attempt_id = 0
    for first in range(1, count + 1, chunk):
        ids = range(first, min(first + chunk, count + 1))
        pays, ops, cbs, attempts = [], [], [], []
        for i in ids:
            at = START + step * i
            status = rng.choice(STATUSES)
            pid = PROJECTS[i % 3]
            pays.append(
                {
                    "id": i,
                    "project_id": pid,
                    "payment_id": f"order-{i:07d}",
                    "status": status,
                    "amount": rng.randrange(100, 100_000),
                    "currency": "EUR",
                    "customer_id": f"customer-{i % 5000}",
                    "params": "{}",
                    "method": "card",
                    "account_number": "400000******0077",
                    "processing_deadline": at + timedelta(days=1),
                    "page_token": secrets.token_hex(16),
                    "created_at": at,
                    "updated_at": at,
                }
            )
            ops.append(
                {
                    "id": i,
                    "payment_pk": i,
                    "project_id": pid,
                    "type": "sale",
                    "status": status,
                    "code": "0" if status == "success" else "10000",
                    "message": "Success" if status == "success" else "General decline",
                    "sum_initial_amount": 1000,
                    "sum_initial_currency": "EUR",
                    "sum_converted_amount": 1000,
                    "sum_converted_currency": "EUR",
                    "provider_id": 1,
                    "request_id": secrets.token_hex(8),
                    "created_at": at,
                    "completed_at": at + timedelta(seconds=3),
                }
            )
            cbs.append(
                {
                    "id": i,
                    "payment_pk": i,
                    "project_id": pid,
                    "operation_id": i,
                    "url": "http://127.0.0.1:9/",
                    "body": f'{{"payment": {{"id": "order-{i:07d}"}}, "signature": "x"}}',
                    "state": "delivered",
                    "attempts": 2 if i % 4 == 0 else 1,
                    "created_at": at,
                    "delivered_at": at + timedelta(seconds=20),
                }
            )
            for number in range(1, (3 if i % 4 == 0 else 2)):
                attempt_id += 1
                attempts.append(
                    {
                        "id": attempt_id,
                        "callback_id": i,
                        "number": number,
                        "started_at": at + timedelta(seconds=10 * number),
                        "http_status": 200 if number == 2 or i % 4 else 503,
                        "latency_ms": rng.randrange(5, 300),
                        "error": None,
                    }
                )
        with ctx.db.write() as conn:
            conn.execute(payments.insert(), pays)
            conn.execute(operations.insert(), ops)
            conn.execute(callbacks.insert(), cbs)
            conn.execute(callback_attempts.insert(), attempts)
    with ctx.db.write() as conn:
        conn.exec_driver_sql("ANALYZE")
    return project.merchant_id


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(client: httpx.Client, paths: Callable[[int], str], n: int) -> tuple[float, float]:
    for warm in range(5):
        client.get(paths(warm)).raise_for_status()
    samples = []
    for i in range(n):
        started = time.perf_counter()
        response = client.get(paths(i))
        samples.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"{paths(i)} answered {response.status_code}")
    return statistics.median(samples), percentile(samples, 0.95)


def plans(ctx: AppContext, project_ids: list[int], deep: queries.Cursor) -> list[str]:
    """The database's plans for the first page, a deep page and a status filter."""
    compiled = []
    with ctx.db.read() as conn:
        for where, cursor in (
            (queries.PaymentFilter(), None),
            (queries.PaymentFilter(), deep),
            (queries.PaymentFilter(status="decline"), None),
        ):
            query, params = queries.search_statement(project_ids, where, cursor, None, 51)
            bound = query.params({k: v for k, v in params.items() if v is not None})
            sql = str(bound.compile(conn.engine, compile_kwargs={"literal_binds": True}))
            compiled.append(_explain(conn, sql, ctx.db.is_postgres))
    return compiled


def _explain(conn: Connection, sql: str, postgres: bool) -> str:
    if postgres:
        rows = conn.execute(text("EXPLAIN ANALYZE " + sql)).scalars().all()
        return "\n".join(f"    {row}" for row in rows)
    rows = conn.execute(text("EXPLAIN QUERY PLAN " + sql)).all()
    return "\n".join(f"    {row[-1]}" for row in rows)


async def hello(request: Request) -> Response:
    return PlainTextResponse("hello")


def run_engine(name: str, url: str, data_dir: Path, count: int, n: int) -> None:
    ctx = make_context(url, data_dir)
    started = time.perf_counter()
    merchant = seed(ctx, count)
    print(f"\n== {name}: {count:,} payments seeded in {time.perf_counter() - started:.1f} s")
    admin = create_user(
        ctx, merchant_id=merchant, email="admin@bench.example", name="Admin", role="Merchant admin"
    )
    session_id = sessions.start_session(ctx, admin)
    with ctx.db.read() as conn:
        page = queries.search_payments(conn, list(PROJECTS), queries.PaymentFilter())
        cursor = page.older
        for _ in range(19):
            assert cursor is not None
            cursor = queries.search_payments(
                conn, list(PROJECTS), queries.PaymentFilter(), older_than=cursor
            ).older
    assert cursor is not None
    deep = cursor.encode()
    for plan in plans(ctx, list(PROJECTS), cursor):
        print("  plan:\n" + plan)

    baseline_app = Starlette(routes=[Route("/hello", hello)])
    rng = random.Random(11)
    pks = [rng.randrange(1, count + 1) for _ in range(n + 5)]
    figures: list[tuple[str, tuple[float, float]]] = []
    with LiveServer(create_app(ctx)) as web, LiveServer(baseline_app) as bare:
        cookies = {"payplane_dashboard": session_id}
        with httpx.Client(base_url=web.url, cookies=cookies, timeout=60) as client:
            cases: list[tuple[str, Callable[[int], str]]] = [
                ("payments list, first page", lambda i: "/dashboard/payments"),
                ("payments list, 20 pages deep", lambda i: f"/dashboard/payments?older={deep}"),
                ("payments list, status=decline", lambda i: "/dashboard/payments?status=decline"),
                (
                    "payments list, 10-day date range",
                    lambda i: "/dashboard/payments?from=2026-09-01&to=2026-09-10",
                ),
                (
                    "payments list, by payment ID",
                    lambda i: f"/dashboard/payments?payment_id=order-{pks[i]:07d}",
                ),
                ("payment page", lambda i: f"/dashboard/payments/{pks[i]}"),
            ]
            for label, paths in cases:
                figures.append((label, timed(client, paths, n)))
        with httpx.Client(base_url=bare.url, timeout=60) as client:
            base = timed(client, lambda i: "/hello", n)
    print(f"  baseline (Starlette hello-world): p50 {base[0]:.2f} ms, p95 {base[1]:.2f} ms")
    for label, (p50, p95) in figures:
        verdict = "under" if p95 < 100 else "OVER"
        print(
            f"  {label:34s} p50 {p50:6.2f} ms  p95 {p95:6.2f} ms  "
            f"(p95 {p95 / base[1]:5.1f}x baseline; {verdict} the 100 ms target)"
        )
    ctx.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payments", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="payplane-bench-") as tmp:
        root = Path(tmp)
        run_engine(
            "SQLite",
            f"sqlite:///{root / 'sqlite' / 'payplane.db'}",
            _mkdir(root / "sqlite"),
            args.payments,
            args.requests,
        )
        if args.no_postgres:
            return
        if not postgres_available():
            print("\n(PostgreSQL is not installed: skipped)")
            return
        server = TempPostgres().start()
        try:
            server.create_database("bench")
            run_engine(
                "PostgreSQL",
                server.url("bench"),
                _mkdir(root / "pg"),
                args.payments,
                args.requests,
            )
        finally:
            server.stop()


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":
    main()
