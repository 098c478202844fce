"""bench/payment_page: the Payment Page under load, against the framework's bare hello-world.

    uv run python bench/payment_page/run.py [--seconds 10] [--workers 1] [--engines sqlite,postgres]
                                            [--floor]

1. ``GET /payment`` with a fresh signed URL every time (verify, register, render) against a
   bare Starlette hello-world, both served by uvicorn with the same settings (httptools,
   uvloop, no access log, the same number of worker processes); 50 keep-alive connections.
2. Complete payments: 50 concurrent customers each open a fresh signed URL (with
   ``force_payment_method=card``, so the card form comes back at once), read the page token and
   the CSRF token from the HTML, and submit card 4000000000000077; a payment counts when the
   303 to its result page is back, i.e. its final state is committed. Checked afterwards in the
   database. On SQLite and on PostgreSQL (``TempPostgres(durable=True)``: fsync on).
3. With ``--floor``: ``floor.py``, the least a ``GET /payment`` handler must do (verify, one
   durable insert, a minimal page) with nothing of Payplane around it, measured as 1. is.

Servers run in their own processes (``payplane-server serve --role web``); the load generator
is a lean asyncio HTTP/1.1 client in this process, so on a 2-core machine it competes with the
server for the CPU (as it does for the hello-world baseline). Signed URLs are made before the
clock starts.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
from payplane import sign
from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.db import migrate
from payplane_server.services.projects import create_project
from payplane_server.testing import TempPostgres, free_port, postgres_available
from sqlalchemy import text

MASTER_KEY = base64.b64encode(b"b" * 32).decode()
SECRET = "bench-secret"
PROJECT = 402
HERE = Path(__file__).resolve()
CONCURRENCY = 50
_TOKEN = re.compile(rb'action="/pay/([A-Za-z0-9_-]+)/card"')
_CSRF = re.compile(rb'name="csrf_token" value="([^"]+)"')


# ------------------------------------------------------------------------------ servers


def hello_app() -> Any:
    from payplane_server.runner import tune_gc
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("Hello, world!")

    app = Starlette(routes=[Route("/", hello)])
    tune_gc()  # the garbage collector as ``serve`` sets it up
    return app


def _wait_up(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def start_uvicorn(
    factory: str, port: int, workers: int, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """An app factory of this folder under uvicorn, with the settings of every baseline."""
    command = [
        sys.executable, "-m", "uvicorn", factory, "--factory",
        "--app-dir", str(HERE.parent), "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(workers), "--http", "httptools", "--loop", "uvloop",
        "--no-access-log", "--log-level", "warning", "--no-server-header",
    ]  # fmt: skip
    process = subprocess.Popen(command, env=env)
    _wait_up(f"http://127.0.0.1:{port}/", process)
    return process


def start_hello(port: int, workers: int) -> subprocess.Popen[bytes]:
    return start_uvicorn("run:hello_app", port, workers)


def start_floor(port: int, workers: int, database: Path) -> subprocess.Popen[bytes]:
    """``floor.py``'s handler on a database file prepared like Payplane's (``prepare``)."""
    env = dict(os.environ, FLOOR_DATABASE=str(database), FLOOR_SECRET=SECRET)
    return start_uvicorn("floor:floor_app", port, workers, env)


def start_payplane(
    port: int, workers: int, data_dir: Path, database_url: str
) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        PAYPLANE_MASTER_KEY=MASTER_KEY,
        PAYPLANE_DATABASE_URL=database_url,
        PAYPLANE_LOG_LEVEL="warning",
    )
    command = [
        sys.executable, "-m", "payplane_server", "serve", "--host", "127.0.0.1",
        "--port", str(port), "--data-dir", str(data_dir), "--workers", str(workers),
        "--role", "web", "--data-api-port", str(free_port()), "--data-api-plain-http",
    ]  # fmt: skip
    process = subprocess.Popen(command, env=env)
    _wait_up(f"http://127.0.0.1:{port}/healthz", process)
    return process


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# ------------------------------------------------------------------------ load generator


class Connection:
    """A minimal keep-alive HTTP/1.1 client connection (Content-Length responses only)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, target: str, body: bytes = b"", content_type: str = ""
    ) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
        if body or method == "POST":
            head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode("latin-1") + b"\r\n" + body)
        header = await self.reader.readuntil(b"\r\n\r\n")
        status = int(header[9:12])
        length = 0
        for line in header.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        payload = await self.reader.readexactly(length) if length else b""
        return status, payload

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``): unlike a rate, the CPU
    a request costs the server hardly depends on how busy the rest of the machine is.

    With ``--workers N`` the server is a supervisor and N worker processes: the CPU of every
    live descendant counts."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        children.extend(int(child) for child in task.read_text().split())
    return own + sum(cpu_seconds(child) for child in children)


def signed_targets(count: int, prefix: str, *, force_card: bool) -> list[str]:
    targets = []
    for number in range(count):
        params: dict[str, Any] = {
            "project_id": PROJECT,
            "payment_id": f"{prefix}-{number}",
            "payment_amount": 1999,
            "payment_currency": "USD",
            "customer_id": f"customer-{number % 1000}",
            "payment_description": "Bench order",
            "language_code": "en",
        }
        if force_card:
            params["force_payment_method"] = "card"
        signature = quote(sign(params, SECRET), safe="")
        targets.append(f"/payment?{urlencode(params)}&signature={signature}")
    return targets


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else 0.0


async def load_get(
    port: int, targets: list[str], seconds: float, pid: int | None = None
) -> dict[str, float]:
    """``CONCURRENCY`` connections GET the targets (each once, in order) for ``seconds``."""
    queue = iter(targets)
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors
        connection = Connection(port)
        try:
            while time.perf_counter() < deadline:
                target = next(queue, None)
                if target is None:
                    raise RuntimeError("ran out of pre-signed URLs: raise the count")
                begin = time.perf_counter()
                status, _ = await connection.request("GET", target)
                latencies.append(time.perf_counter() - begin)
                errors += status != 200
        finally:
            connection.close()

    cpu = cpu_seconds(pid) if pid else 0.0
    begin = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    elapsed = time.perf_counter() - begin
    return {
        "cpu": (cpu_seconds(pid) - cpu) if pid else 0.0,
        "rate": len(latencies) / elapsed,
        "p50": percentile(latencies, 0.50) * 1000,
        "p99": percentile(latencies, 0.99) * 1000,
        "errors": errors,
        "count": len(latencies),
    }


async def load_payments(
    port: int, targets: list[str], seconds: float, pid: int | None = None
) -> dict[str, float]:
    """``CONCURRENCY`` customers open a URL and pay with 4000000000000077, over and over."""
    queue = iter(targets)
    payment_times: list[float] = []
    request_times: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def customer() -> None:
        nonlocal errors
        connection = Connection(port)
        try:
            while time.perf_counter() < deadline:
                target = next(queue, None)
                if target is None:
                    raise RuntimeError("ran out of pre-signed URLs: raise the count")
                begin = time.perf_counter()
                status, page = await connection.request("GET", target)
                opened = time.perf_counter()
                token, csrf = _TOKEN.search(page), _CSRF.search(page)
                if status != 200 or token is None or csrf is None:
                    errors += 1
                    continue
                form = urlencode(
                    {
                        "csrf_token": csrf.group(1).decode(),
                        "pan": "4000000000000077",
                        "expiry": "12/30",
                        "cvv": "123",
                        "holder": "Bench Customer",
                    }
                ).encode()
                status, _ = await connection.request(
                    "POST",
                    f"/pay/{token.group(1).decode()}/card",
                    form,
                    "application/x-www-form-urlencoded",
                )
                done = time.perf_counter()
                if status != 303:
                    errors += 1
                    continue
                payment_times.append(done - begin)
                request_times.extend((opened - begin, done - opened))
        finally:
            connection.close()

    cpu = cpu_seconds(pid) if pid else 0.0
    begin = time.perf_counter()
    await asyncio.gather(*(customer() for _ in range(CONCURRENCY)))
    elapsed = time.perf_counter() - begin
    return {
        "cpu": (cpu_seconds(pid) - cpu) if pid else 0.0,
        "rate": len(payment_times) / elapsed,
        "p50": percentile(payment_times, 0.50) * 1000,
        "p99": percentile(payment_times, 0.99) * 1000,
        "request_p99": percentile(request_times, 0.99) * 1000,
        "errors": errors,
        "count": len(payment_times),
    }


# --------------------------------------------------------------------------------- runs


def interleaved(
    port: int,
    hello_port: int,
    targets: list[str],
    seconds: float,
    pids: tuple[int, int],
    slices: int = 5,
) -> tuple[dict[str, float], dict[str, float]]:
    """Alternate short slices of the baseline and of the Payment Page, so that a change in
    the machine's load during the run hits both alike; figures are summed over the slices."""
    pool = iter(targets)
    runs: dict[str, list[dict[str, float]]] = {"base": [], "page": []}
    for _ in range(slices):
        base = load_get(hello_port, ["/"] * 10**6, seconds / slices, pids[1])
        runs["base"].append(asyncio.run(base))
        chunk = [next(pool) for _ in range(len(targets) // slices)]
        runs["page"].append(asyncio.run(load_get(port, chunk, seconds / slices, pids[0])))

    def total(parts: list[dict[str, float]]) -> dict[str, float]:
        return {
            "rate": sum(part["count"] for part in parts) / seconds,
            "p50": statistics.median(part["p50"] for part in parts),
            "p99": max(part["p99"] for part in parts),
            "errors": sum(part["errors"] for part in parts),
            "count": sum(part["count"] for part in parts),
            "cpu": sum(part["cpu"] for part in parts),
        }

    return total(runs["base"]), total(runs["page"])


def prepare(data_dir: Path, database_url: str) -> None:
    settings = Settings(data_dir=data_dir, database_url=database_url, master_key=MASTER_KEY)
    migrate(database_url)
    ctx = AppContext.create(settings)
    try:
        create_project(ctx, project_id=PROJECT, name="Bench", callback_url=None, secret=SECRET)
    finally:
        ctx.close()


def committed_successes(database_url: str, prefix: str) -> int:
    settings = Settings(database_url=database_url, master_key=MASTER_KEY)
    ctx = AppContext.create(settings)
    try:
        with ctx.db.read() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT count(*) FROM payments WHERE status = 'success' "
                        "AND payment_id LIKE :prefix"
                    ),
                    {"prefix": prefix + "-%"},
                ).scalar_one()
            )
    finally:
        ctx.close()


def cpu_per_request(figures: dict[str, float]) -> float:
    return figures["cpu"] * 1000 / max(1, figures["count"])


def show(label: str, figures: dict[str, float]) -> None:
    extra = f", request p99 {figures['request_p99']:.1f} ms" if "request_p99" in figures else ""
    print(
        f"  {label:<34} {figures['rate']:8.1f}/s  p50 {figures['p50']:6.1f} ms  "
        f"p99 {figures['p99']:6.1f} ms{extra}  errors {int(figures['errors'])}"
    )


def measure_floor(args: argparse.Namespace) -> None:
    """``floor.py`` against the hello-world, as ``GET /payment`` is measured."""
    with tempfile.TemporaryDirectory(prefix="payplane-floor-") as tmp:
        database = Path(tmp) / "floor.db"
        prepare(Path(tmp), f"sqlite:///{database}")
        ports = free_port(), free_port()
        floor, hello = start_floor(ports[0], args.workers, database), None
        try:
            hello = start_hello(ports[1], args.workers)
            targets = signed_targets(20000 * int(args.seconds), "floor", force_card=False)
            pids = (floor.pid, hello.pid)
            base, page = interleaved(ports[0], ports[1], targets, args.seconds, pids)
        finally:
            stop(floor)
            if hello is not None:
                stop(hello)
    print(f"The floor of GET /payment (floor.py), {CONCURRENCY} connections (sqlite):")
    show("bare Starlette hello-world", base)
    show("floor (verify+insert+minimal page)", page)
    print(f"  ratio {page['rate'] / base['rate']:.2f}")
    base_cpu, page_cpu = cpu_per_request(base), cpu_per_request(page)
    print(f"  server CPU per request: hello-world {base_cpu:.3f} ms, floor {page_cpu:.3f} ms")


def run_engine(engine: str, database_url: str, data_dir: Path, args: argparse.Namespace) -> None:
    prepare(data_dir, database_url)
    port = free_port()
    server = start_payplane(port, args.workers, data_dir, database_url)
    try:
        expected_rate = 5000
        if engine == "sqlite":
            hello_port = free_port()
            hello = start_hello(hello_port, args.workers)
            try:
                warm = signed_targets(5000, "warm", force_card=False)
                asyncio.run(load_get(port, warm, 1.0))
                targets = signed_targets(
                    expected_rate * int(args.seconds) * 2, "open", force_card=False
                )
                pids = (server.pid, hello.pid)
                base, page = interleaved(port, hello_port, targets, args.seconds, pids)
            finally:
                stop(hello)
            print(f"GET /payment, fresh signed URL, {CONCURRENCY} connections ({engine}):")
            show("bare Starlette hello-world", base)
            show("GET /payment (verify+register+render)", page)
            print(f"  ratio {page['rate'] / base['rate']:.2f} (target >= 0.35)")
            base_cpu, page_cpu = cpu_per_request(base), cpu_per_request(page)
            print(
                f"  server CPU per request: hello-world {base_cpu:.3f} ms, GET /payment "
                f"{page_cpu:.3f} ms, ratio {base_cpu / page_cpu:.2f}"
            )
            if args.floor:
                measure_floor(args)
        targets = signed_targets(int(1000 * args.seconds * 1.5), "pay", force_card=True)
        paid = asyncio.run(load_payments(port, targets, args.seconds, server.pid))
    finally:
        stop(server)
    committed = committed_successes(database_url, "pay")
    print(f"Complete payments, {CONCURRENCY} concurrent customers ({engine}):")
    show("open + submit 4000000000000077", paid)
    print(f"  server CPU per complete payment: {cpu_per_request(paid):.3f} ms")
    print(f"  committed as success in the database: {committed} (counted {int(paid['count'])})")
    print("  target >= 300/s with p99 < 100 ms (SQLite); PostgreSQL measured too")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument(
        "--floor", action="store_true", help="also measure floor.py, the least GET /payment does"
    )
    args = parser.parse_args()
    print(
        f"bench/payment_page: {os.cpu_count()} CPUs, workers={args.workers}, "
        f"{args.seconds:.0f} s per figure, load average {os.getloadavg()[0]:.2f}"
    )
    for engine in args.engines.split(","):
        with tempfile.TemporaryDirectory(prefix="payplane-bench-") as tmp:
            data_dir = Path(tmp)
            if engine == "sqlite":
                run_engine(engine, f"sqlite:///{data_dir / 'payplane.db'}", data_dir, args)
            elif engine == "postgres":
                if not postgres_available():
                    print("PostgreSQL is not installed: skipped")
                    continue
                cluster = TempPostgres(durable=True).start()
                try:
                    cluster.create_database("bench")
                    run_engine(engine, cluster.url("bench"), data_dir, args)
                finally:
                    cluster.stop()
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
