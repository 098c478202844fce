"""Callback delivery: drain rate, commit-to-POST latency, and isolation from a hanging merchant.

    uv run python bench/callbacks/run.py [--count 10000] [--latency 300] [--no-postgres]

Figures (each with a baseline measured in the same run, and the ratio):

1. Drain: ``--count`` callbacks queued in one transaction (16 merchants, one port each, on a
   fast asyncio receiver in its own process) until the receiver has them all.
   SQLite: one worker in the committing process (as ``serve --role all``).
   PostgreSQL: two ``payplane-server serve --role worker`` processes.
   Baseline: the same bodies POSTed by the same HTTP client setup (aiohttp, 64 in flight,
   4 per merchant) with no database at all: the HTTP ceiling of one process. httpx is measured
   too, for the record of why delivery does not use it.
2. Latency: with an idle queue, one status change (``processing.transition``) at a time; from
   its commit to the receiver reading the POST. p50 and p99. Baseline: a bare POST (same
   client) from before the call to the receiver reading it.
3. Hanging merchant: 8 merchants, the callbacks spread evenly; one merchant answers after 5 s.
   The other merchants' delivery rate, against the same run with nobody hanging.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ctypes
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.sharedctypes import RawArray, RawValue
from pathlib import Path
from typing import Any

import httpx
from payplane import sign
from payplane_server.clock import SystemClock
from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.db import Database, migrate
from payplane_server.db.tables import callbacks, operations, payments
from payplane_server.domain.callback_body import CallbackFacts, build_callback_body
from payplane_server.domain.payments import Code, Status
from payplane_server.services.processing import Change, load_payment, start_operation, transition
from payplane_server.services.projects import create_project
from payplane_server.testing import TempPostgres, free_port, postgres_available
from payplane_server.worker.delivery import DeliveryWorker, make_session
from sqlalchemy import func, insert, select, text

MASTER_KEY = base64.b64encode(b"c" * 32).decode()
HANG_SECONDS = 5.0
MAX_REQUESTS = 1_000_000

# -- the receiver: a bare asyncio HTTP/1.1 server in its own process ---------------------------


class Shared:
    """Counters the receiver process writes and the benchmark reads, without any I/O."""

    def __init__(self, ports: int) -> None:
        self.count: Any = RawValue(ctypes.c_long, 0)
        self.arrivals: Any = RawArray(ctypes.c_double, MAX_REQUESTS)
        self.per_port: Any = RawArray(ctypes.c_long, ports)
        self.port_last: Any = RawArray(ctypes.c_double, ports)
        self.hang: Any = RawArray(ctypes.c_int, ports)

    def reset(self) -> None:
        self.count.value = 0
        for i in range(len(self.per_port)):
            self.per_port[i] = 0
            self.port_last[i] = 0.0


def _receiver_main(ports: list[int], shared: Shared, ready: Any) -> None:  # child process
    import uvloop

    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    class Merchant(asyncio.Protocol):
        def __init__(self, index: int) -> None:
            self.index = index
            self.buffer = b""
            self.transport: Any = None

        def connection_made(self, transport: Any) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while True:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                length = 0
                for line in self.buffer[:end].split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if len(self.buffer) < end + 4 + length:
                    return
                self.buffer = self.buffer[end + 4 + length :]
                now = time.monotonic()
                n = shared.count.value
                if n < MAX_REQUESTS:
                    shared.arrivals[n] = now
                shared.count.value = n + 1
                shared.per_port[self.index] += 1
                shared.port_last[self.index] = now
                if shared.hang[self.index]:
                    asyncio.get_running_loop().call_later(HANG_SECONDS, self._answer)
                else:
                    self.transport.write(ok)

        def _answer(self) -> None:
            if not self.transport.is_closing():
                self.transport.write(ok)

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        for index, port in enumerate(ports):
            await loop.create_server(lambda i=index: Merchant(i), "127.0.0.1", port, backlog=1024)
        ready.set()
        await asyncio.Event().wait()

    uvloop.run(serve())


class Receiver:
    def __init__(self, merchants: int) -> None:
        self.ports = [free_port() for _ in range(merchants)]
        self.shared = Shared(merchants)
        ready = multiprocessing.get_context("fork").Event()
        self.process = multiprocessing.get_context("fork").Process(
            target=_receiver_main, args=(self.ports, self.shared, ready), daemon=True
        )
        self.process.start()
        if not ready.wait(30):
            raise RuntimeError("the receiver did not start")

    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}/callback" for port in self.ports]

    def wait_count(self, target: int, timeout: float = 600) -> float:
        deadline = time.monotonic() + timeout
        while self.shared.count.value < target:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.shared.count.value} of {target} arrived")
            time.sleep(0.002)
        return float(self.shared.arrivals[target - 1])

    def stop(self) -> None:
        self.process.kill()
        self.process.join(10)


# -- queueing -----------------------------------------------------------------------------


def make_context(url: str, data_dir: Path, **settings: Any) -> AppContext:
    migrate(url)
    config = Settings(data_dir=data_dir, database_url=url, master_key=MASTER_KEY, **settings)
    return AppContext.create(config, clock=SystemClock(), db=Database(url))


def make_projects(ctx: AppContext, urls: list[str], first: int) -> dict[int, str]:
    secrets_ = {}
    for offset, url in enumerate(urls):
        project = first + offset
        secrets_[project] = create_project(
            ctx, project_id=project, name=f"Merchant {project}", callback_url=url
        )
    return secrets_


def queue_bulk(
    ctx: AppContext, projects: dict[int, str], urls: list[str], count: int, tag: str
) -> None:
    """``count`` success callbacks, round-robin over the projects, in one transaction."""
    now = ctx.clock.now()
    ids = list(projects)
    with ctx.db.read() as conn:
        base = int(conn.execute(select(func.coalesce(func.max(payments.c.id), 0))).scalar_one())
        op_base = int(
            conn.execute(select(func.coalesce(func.max(operations.c.id), 0))).scalar_one()
        )
    pay_rows, op_rows, cb_rows = [], [], []
    for n in range(count):
        project = ids[n % len(ids)]
        pk, op = base + 1 + n, op_base + 1 + n
        facts = CallbackFacts(
            project_id=project,
            payment_id=f"{tag}-{n}",
            payment_status="success",
            payment_date=now,
            payment_method="card",
            amount=1000 + n,
            currency="EUR",
            customer_id=f"customer-{n}",
            operation_id=op,
            operation_type="sale",
            operation_status="success",
            operation_date=now,
            operation_created_date=now,
            request_id=f"req-{tag}-{n}",
            sum_initial=(1000 + n, "EUR"),
            sum_converted=(1000 + n, "EUR"),
            code=Code.SUCCESS,
            message="Success",
            provider_id=1,
            provider_payment_id=f"prov-{n}",
            provider_auth_code="123456",
            account_number="400000******0077",
            card_type="visa",
            card_holder="JANE DOE",
            expiry_month="12",
            expiry_year="2031",
        )
        body = build_callback_body(facts)
        body["signature"] = sign(body, projects[project])
        pay_rows.append(
            {
                "id": pk,
                "project_id": project,
                "payment_id": f"{tag}-{n}",
                "status": Status.SUCCESS.value,
                "amount": 1000 + n,
                "currency": "EUR",
                "customer_id": f"customer-{n}",
                "params": "{}",
                "processing_deadline": now,
                "page_token": f"{tag}-{n}",
                "created_at": now,
                "updated_at": now,
            }
        )
        op_rows.append(
            {
                "id": op,
                "payment_pk": pk,
                "project_id": project,
                "type": "sale",
                "status": "success",
                "code": "0",
                "message": "Success",
                "sum_initial_amount": 1000 + n,
                "sum_initial_currency": "EUR",
                "sum_converted_amount": 1000 + n,
                "sum_converted_currency": "EUR",
                "provider_id": 1,
                "request_id": f"req-{tag}-{n}",
                "created_at": now,
            }
        )
        cb_rows.append(
            {
                "payment_pk": pk,
                "project_id": project,
                "operation_id": op,
                "url": urls[ids.index(project)],
                "body": json.dumps(body, separators=(",", ":")),
                "state": "pending",
                "attempts": 0,
                "next_attempt_at": now,
                "created_at": now,
            }
        )
    with ctx.db.write() as conn:
        conn.execute(insert(payments), pay_rows)
        conn.execute(insert(operations), op_rows)
        if ctx.db.is_postgres:  # explicit ids do not move the sequences
            for table in ("payments", "operations"):
                conn.execute(
                    text(
                        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                        f" (SELECT max(id) FROM {table}))"
                    )
                )
    with ctx.db.write() as conn:
        conn.execute(insert(callbacks), cb_rows)
        ctx.db.notify(conn, "callbacks")


def delivered(ctx: AppContext) -> int:
    with ctx.db.read() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(callbacks).where(callbacks.c.state == "delivered")
            ).scalar_one()
        )


# -- workers ------------------------------------------------------------------------------


class ThreadWorker:
    """A ``DeliveryWorker`` on its own event loop in a thread of this process."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._started.wait(30)

    def _run(self) -> None:
        import uvloop

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            worker = DeliveryWorker(self.ctx)
            await worker.start()
            self._started.set()
            await self._stop.wait()
            await worker.stop(grace=0.1)

        uvloop.run(main())

    def stop(self) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)


class ProcessWorkers:
    """``payplane-server serve --role worker`` processes."""

    def __init__(self, ctx: AppContext, count: int, log_dir: Path) -> None:
        env = {
            **os.environ,
            "PAYPLANE_DATABASE_URL": ctx.settings.resolved_database_url,
            "PAYPLANE_MASTER_KEY": MASTER_KEY,
            "PAYPLANE_LOG_LEVEL": "warning",
        }
        self.processes = []
        self.logs = []
        for n in range(count):
            log = log_dir / f"worker-{n}.log"
            self.logs.append(log)
            self.processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "payplane_server",
                        "serve",
                        "--role",
                        "worker",
                        "--data-dir",
                        str(log_dir / f"data-{n}"),
                    ],
                    env=env,
                    stdout=log.open("wb"),
                    stderr=subprocess.STDOUT,
                )
            )
        deadline = time.monotonic() + 60
        for log in self.logs:
            while b"role=worker" not in log.read_bytes():
                if time.monotonic() > deadline:
                    raise RuntimeError(log.read_text())
                time.sleep(0.05)
        time.sleep(1.0)  # LISTEN is set up

    def stop(self) -> None:
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            process.wait(60)


# -- baselines ----------------------------------------------------------------------------


def http_ceiling(
    urls: list[str], bodies: list[bytes], concurrency: int, per_host: int, library: str
) -> float:
    """Requests per second of one process POSTing with no database at all."""

    async def with_aiohttp() -> float:
        session = make_session(30.0, concurrency, per_host)

        async def post(url: str, body: bytes) -> None:
            async with session.post(url, data=body, allow_redirects=False) as response:
                await response.content.read(4096)

        began = time.perf_counter()
        await asyncio.gather(*(post(urls[n % len(urls)], b) for n, b in enumerate(bodies)))
        took = time.perf_counter() - began
        await session.close()
        return len(bodies) / took

    async def with_httpx() -> float:
        limits = httpx.Limits(max_connections=concurrency)
        client = httpx.AsyncClient(limits=limits, follow_redirects=False)
        total = asyncio.Semaphore(concurrency)
        hosts = {url: asyncio.Semaphore(per_host) for url in urls}

        async def post(url: str, body: bytes) -> None:
            async with (
                total,
                hosts[url],
                client.stream("POST", url, content=body) as response,
            ):
                async for _ in response.aiter_raw():
                    pass

        began = time.perf_counter()
        await asyncio.gather(*(post(urls[n % len(urls)], b) for n, b in enumerate(bodies)))
        took = time.perf_counter() - began
        await client.aclose()
        return len(bodies) / took

    async def with_httpx_per_origin() -> float:
        # One client per merchant origin: each pool holds only that origin's connections.
        limits = httpx.Limits(max_connections=per_host, max_keepalive_connections=per_host)
        clients = {url: httpx.AsyncClient(limits=limits, follow_redirects=False) for url in urls}
        total = asyncio.Semaphore(concurrency)

        async def post(url: str, body: bytes) -> None:
            async with total, clients[url].stream("POST", url, content=body) as response:
                async for _ in response.aiter_raw():
                    pass

        began = time.perf_counter()
        await asyncio.gather(*(post(urls[n % len(urls)], b) for n, b in enumerate(bodies)))
        took = time.perf_counter() - began
        for client in clients.values():
            await client.aclose()
        return len(bodies) / took

    import uvloop

    variants = {
        "aiohttp": with_aiohttp,
        "httpx": with_httpx,
        "httpx-per-origin": with_httpx_per_origin,
    }
    return uvloop.run(variants[library]())


def http_latency(receiver: Receiver, url: str, rounds: int) -> list[float]:
    async def main() -> list[float]:
        session = make_session(30.0, 4, 4)
        samples = []
        for n in range(rounds):
            before = receiver.shared.count.value
            began = time.monotonic()
            async with session.post(url, data=b'{"n":%d}' % n) as response:
                await response.read()
            while receiver.shared.count.value <= before:
                await asyncio.sleep(0)
            samples.append((receiver.shared.arrivals[before] - began) * 1000)
            await asyncio.sleep(0.01)
        await session.close()
        return samples

    import uvloop

    return uvloop.run(main())


# -- scenarios ----------------------------------------------------------------------------


def drain(
    ctx: AppContext,
    receiver: Receiver,
    projects: dict[int, str],
    count: int,
    tag: str,
    start_workers: Callable[[], Any],
) -> float:
    receiver.shared.reset()
    workers = start_workers()
    try:
        before = receiver.shared.count.value
        queue_bulk(ctx, projects, receiver.urls(), count, tag)
        committed = time.monotonic()
        last = receiver.wait_count(before + count)
        rate = count / (last - committed)
        deadline = time.monotonic() + 60
        while delivered(ctx) < count and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        workers.stop()
    return rate


def latency(
    ctx: AppContext, receiver: Receiver, project: int, rounds: int, tag: str
) -> list[float]:
    samples = []
    for n in range(rounds):
        before = receiver.shared.count.value
        with ctx.db.write() as conn:
            now = ctx.clock.now()
            pk = int(
                conn.execute(
                    insert(payments)
                    .values(
                        project_id=project,
                        payment_id=f"{tag}-{n}",
                        status=Status.NEW.value,
                        amount=1000,
                        currency="EUR",
                        customer_id="c",
                        params="{}",
                        method="card",
                        account_number="400000******0077",
                        processing_deadline=now,
                        page_token=f"{tag}-{n}",
                        created_at=now,
                        updated_at=now,
                    )
                    .returning(payments.c.id)
                ).scalar_one()
            )
            payment = load_payment(conn, pk)
            assert payment is not None
            start_operation(ctx, conn, payment)
        with ctx.db.write() as conn:
            assert transition(ctx, conn, pk, Change(Status.SUCCESS, Code.SUCCESS))
        committed = time.monotonic()
        receiver.wait_count(before + 1, timeout=30)
        samples.append((receiver.shared.arrivals[before] - committed) * 1000)
        time.sleep(0.01)  # an idle queue between changes
    return samples


def isolation(
    ctx: AppContext, receiver: Receiver, projects: dict[int, str], count: int, tag: str, hang: bool
) -> float:
    """Rate of the healthy merchants (all but the first) while the first one hangs or not."""
    receiver.shared.reset()
    receiver.shared.hang[0] = 1 if hang else 0
    worker = ThreadWorker(ctx)
    try:
        queue_bulk(ctx, projects, receiver.urls(), count, tag)
        committed = time.monotonic()
        healthy_target = sum(1 for n in range(count) if n % len(projects) != 0)
        deadline = time.monotonic() + 600
        while sum(receiver.shared.per_port[i] for i in range(1, len(projects))) < healthy_target:
            if time.monotonic() > deadline:
                raise TimeoutError("healthy merchants did not finish")
            time.sleep(0.002)
        last = max(receiver.shared.port_last[i] for i in range(1, len(projects)))
        return healthy_target / (last - committed)
    finally:
        worker.stop()
        receiver.shared.hang[0] = 0


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(name: str, value: float, unit: str, baseline: float, base_name: str) -> None:
    print(
        f"{name}: {value:,.1f} {unit}; baseline ({base_name}): {baseline:,.1f} {unit};"
        f" ratio {value / baseline:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--latency", type=int, default=300)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}  cpus: {os.cpu_count()}")
    root = Path(tempfile.mkdtemp(prefix="payplane-bench-callbacks-"))
    receiver = Receiver(16)
    try:
        bodies = [b'{"payment":{"id":"%d"},"x":"%s"}' % (n, b"y" * 1400) for n in range(args.count)]
        ceiling = http_ceiling(receiver.urls(), bodies, 64, 4, "aiohttp")
        slow = http_ceiling(receiver.urls(), bodies[: len(bodies) // 4], 64, 4, "httpx")
        split = http_ceiling(receiver.urls(), bodies[: len(bodies) // 4], 64, 4, "httpx-per-origin")
        print(
            f"HTTP ceiling, no database, 16 merchants: aiohttp {ceiling:,.0f}/s;"
            f" httpx, one client {slow:,.0f}/s (ratio {slow / ceiling:.2f});"
            f" httpx, one client per merchant origin {split:,.0f}/s"
            f" (ratio {split / ceiling:.2f}): why delivery uses aiohttp"
        )

        url = f"sqlite:///{root / 'bench.db'}"
        ctx = make_context(url, root / "sqlite")
        projects = make_projects(ctx, receiver.urls(), 1000)
        rate = drain(ctx, receiver, projects, args.count, "s", lambda: ThreadWorker(ctx))
        report(
            "drain, SQLite, 1 worker", rate, "callbacks/s", ceiling, "the same HTTP client alone"
        )

        base = http_latency(receiver, receiver.urls()[0], args.latency)
        worker = ThreadWorker(ctx)
        try:
            ours = latency(ctx, receiver, 1000, args.latency, "lat")
        finally:
            worker.stop()
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            report(
                f"commit-to-POST latency, SQLite, {label}",
                percentile(ours, q),
                "ms",
                percentile(base, q),
                "a bare POST",
            )

        iso_ctx = make_context(f"sqlite:///{root / 'iso.db'}", root / "iso")
        iso_receiver = Receiver(8)
        try:
            iso_projects = make_projects(iso_ctx, iso_receiver.urls(), 2000)
            calm = isolation(iso_ctx, iso_receiver, iso_projects, args.count // 2, "calm", False)
            stormy = isolation(iso_ctx, iso_receiver, iso_projects, args.count // 2, "hang", True)
            report(
                "other merchants while one hangs 5 s, SQLite",
                stormy,
                "callbacks/s",
                calm,
                "nobody hanging",
            )
        finally:
            iso_receiver.stop()
        ctx.close()
        iso_ctx.close()

        if not args.no_postgres and postgres_available():
            pg = TempPostgres().start()
            try:
                pg_url = pg.create_database("bench")
                pg_ctx = make_context(pg_url, root / "pg")
                pg_projects = make_projects(pg_ctx, receiver.urls(), 1000)
                rate = drain(
                    pg_ctx,
                    receiver,
                    pg_projects,
                    args.count,
                    "p",
                    lambda: ProcessWorkers(pg_ctx, 2, root),
                )
                report(
                    "drain, PostgreSQL, 2 worker processes",
                    rate,
                    "callbacks/s",
                    ceiling,
                    "the same HTTP client alone",
                )
                workers = ProcessWorkers(pg_ctx, 2, root)
                try:
                    ours = latency(pg_ctx, receiver, 1000, args.latency, "plat")
                finally:
                    workers.stop()
                for q, label in ((0.5, "p50"), (0.99, "p99")):
                    report(
                        f"commit-to-POST latency, PostgreSQL (NOTIFY to another process), {label}",
                        percentile(ours, q),
                        "ms",
                        percentile(base, q),
                        "a bare POST",
                    )
                pg_ctx.close()
            finally:
                pg.stop()
    finally:
        receiver.stop()
    print(f"load average after: {os.getloadavg()}")
    print(f"medians for reference: ours {statistics.median(ours):.2f} ms")


if __name__ == "__main__":
    main()
