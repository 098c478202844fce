"""bench/data_api: the Data API over TLS against the same framework's JSON echo over TLS, and
``operations/get`` pages with 10,000 and with 1,000,000 operations stored, on SQLite and
PostgreSQL.

    uv run python bench/data_api/run.py [--seconds 5] [--rounds 5] [--large 1000000]
        [--engines sqlite,postgres]

Servers run in their own processes with identical uvicorn settings (httptools, uvloop, TLS 1.2+
from ``payplane_server.tls``); the load generator is a lean asyncio client in this process that
replays one pre-signed request over keep-alive TLS connections (a signed request carries no
nonce, so replaying it is valid). The rate limit is raised for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.db import migrate
from payplane_server.testing import TempPostgres, free_port, postgres_available
from payplane_server.testing.data_api import build_world
from payplane_server.testing.operations import seed_operations
from payplane_server.tls import ensure_certificate

MASTER_KEY = base64.b64encode(b"b" * 32).decode()
HERE = Path(__file__).resolve()


# ---------------------------------------------------------------- servers (child processes)


def _echo_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def echo(request: Request) -> JSONResponse:
        return JSONResponse(json.loads(await request.body()))

    return Starlette(routes=[Route("/echo", echo, methods=["POST"])])


def _serve_child(kind: str, port: int, data_dir: str, database_url: str) -> None:
    import uvicorn
    from payplane_server.runner import tune_gc
    from payplane_server.tls import server_ssl_context
    from payplane_server.web import create_data_api_app

    settings = _settings(Path(data_dir), database_url)
    cert, key, _ = ensure_certificate(settings)
    app = _echo_app() if kind == "echo" else create_data_api_app(AppContext.create(settings))
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        lifespan="off",
        log_level="warning",
        access_log=False,
        http="httptools",
        loop="uvloop",
        server_header=False,
    )
    config.load()
    config.ssl = server_ssl_context(cert, key)
    # Both servers run with the garbage collector as ``serve`` sets it up.
    tune_gc()
    uvicorn.Server(config).run()


def _settings(data_dir: Path, database_url: str) -> Settings:
    return Settings(
        data_dir=data_dir,
        database_url=database_url,
        master_key=MASTER_KEY,
        rate_limit_per_minute=1_000_000_000,
    )


class Child:
    def __init__(self, kind: str, data_dir: Path, database_url: str) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(HERE),
                "--child",
                kind,
                str(self.port),
                str(data_dir),
                database_url,
            ]
        )
        self.cert = data_dir / "tls" / "data-api.crt"

    def wait(self) -> Child:
        deadline = time.monotonic() + 120
        context = ssl.create_default_context(cafile=str(self.cert))
        while time.monotonic() < deadline:
            try:
                httpx.post(f"https://127.0.0.1:{self.port}/", verify=context, timeout=2)
                return self
            except (httpx.HTTPError, OSError, ssl.SSLError):
                time.sleep(0.2)
        raise RuntimeError(f"the {self.port} server did not start")

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


# ---------------------------------------------------------------- load generator


def _request(path: str, body: bytes, port: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    await reader.readexactly(length)
    return status


async def _throughput(
    port: int, cert: Path, message: bytes, seconds: float, conns: int
) -> tuple[float, int]:
    """Requests per second over ``seconds`` (after a 1 s warm-up), and all requests made."""
    context = ssl.create_default_context(cafile=str(cert))
    done = 0
    everything = 0
    stop_at = 0.0

    async def worker() -> None:
        nonlocal done, everything
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        try:
            while time.perf_counter() < stop_at:
                writer.write(message)
                status = await _read_response(reader)
                if status != 200:
                    raise RuntimeError(f"status {status}")
                done += 1
                everything += 1
        finally:
            writer.close()

    stop_at = time.perf_counter() + 1.0  # warm-up
    await asyncio.gather(*(worker() for _ in range(conns)))
    done = 0
    started = time.perf_counter()
    stop_at = started + seconds
    await asyncio.gather(*(worker() for _ in range(conns)))
    return done / (time.perf_counter() - started), everything


async def _latencies(port: int, cert: Path, message: bytes, count: int) -> list[float]:
    context = ssl.create_default_context(cafile=str(cert))
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    times = []
    try:
        for index in range(count + 3):
            started = time.perf_counter()
            writer.write(message)
            status = await _read_response(reader)
            if status != 200:
                raise RuntimeError(f"status {status}")
            if index >= 3:
                times.append((time.perf_counter() - started) * 1000)
    finally:
        writer.close()
    return times


# ---------------------------------------------------------------- the two benchmarks


def bench_balance(root: Path, seconds: float, conns: int, rounds: int) -> None:
    """``rounds`` runs of balance/get, each between two runs of the echo (echo, api, echo,
    api, ..., echo): a round's ratio is its balance/get rate over the mean of the echo runs
    on either side of it, so that drift of the machine shows in one round, not in the result.
    Prints every round and the median."""
    data_dir = root / "balance"
    url = f"sqlite:///{data_dir / 'payplane.db'}"
    data_dir.mkdir(parents=True)
    migrate(url)
    ctx = AppContext.create(_settings(data_dir, url))
    world = build_world(ctx)
    ctx.close()
    ensure_certificate(_settings(data_dir, url))
    echo = Child("echo", data_dir, url).wait()
    api = Child("api", data_dir, url).wait()
    balance_body = world.body("admin")
    echo_message = _request("/echo", balance_body, echo.port)
    api_message = _request("/v1/v1/balance/get", balance_body, api.port)

    def run(child: Child, message: bytes) -> tuple[float, float]:
        """Requests per second, and server CPU per request in ms."""
        cpu = child.cpu_seconds()
        rate, count = asyncio.run(_throughput(child.port, child.cert, message, seconds, conns))
        return rate, (child.cpu_seconds() - cpu) * 1000 / count

    try:
        echoes = [run(echo, echo_message)]
        apis = []
        for _ in range(rounds):
            apis.append(run(api, api_message))
            echoes.append(run(echo, echo_message))
    finally:
        echo.stop()
        api.stop()
    print(
        f"balance/get over TLS, SQLite, {conns} connections, {rounds} rounds of"
        f" {seconds:.0f} s runs (echo, balance/get, echo, ...)"
    )
    ratios = []
    for index, (rate, cpu) in enumerate(apis):
        baseline = (echoes[index][0] + echoes[index + 1][0]) / 2
        ratios.append(rate / baseline)
        print(
            f"  round {index + 1}: echo {baseline:7.0f} req/s (mean of the runs around it),"
            f" balance/get {rate:6.0f} req/s, ratio {rate / baseline:.2f};"
            f" server CPU per request: echo {echoes[index + 1][1]:.3f} ms,"
            f" balance/get {cpu:.3f} ms"
        )
    print(
        f"  ratio balance/echo, median of {rounds} rounds: {statistics.median(ratios):.2f}"
        "  (target >= 0.4)"
    )


def _load(ctx: AppContext, count: int) -> tuple[Any, datetime]:
    """``count`` operations at 10,000 a day, split over the admin's two projects."""
    world = build_world(ctx, seed=False)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    spacing = timedelta(seconds=86400 / 10_000 * 2)
    half = count // 2
    seed_operations(ctx, project_id=101, count=half, start=start, spacing=spacing)
    seed_operations(
        ctx,
        project_id=102,
        count=count - half,
        start=start + spacing / 2,
        spacing=spacing,
        payment_prefix="b-",
    )
    with ctx.db.engine.connect() as conn:
        if ctx.db.is_sqlite:
            conn.exec_driver_sql("ANALYZE")
            conn.commit()
        else:
            auto = conn.execution_options(isolation_level="AUTOCOMMIT")
            auto.exec_driver_sql("VACUUM ANALYZE operations")
            auto.exec_driver_sql("VACUUM ANALYZE payments")
    return world, start


def _explain(ctx: AppContext) -> None:
    from payplane_server.services.reporting import OperationQuery, _page_keys
    from sqlalchemy.dialects import postgresql, sqlite

    query = OperationQuery(
        project_ids=[101, 102],
        start=datetime(2026, 1, 1, tzinfo=UTC),
        end=datetime(2026, 1, 2, tzinfo=UTC),
    )
    statement = _page_keys(query)
    dialect = sqlite.dialect() if ctx.db.is_sqlite else postgresql.dialect()
    compiled = statement.compile(dialect=dialect, compile_kwargs={"literal_binds": True})
    prefix = "EXPLAIN QUERY PLAN " if ctx.db.is_sqlite else "EXPLAIN "
    with ctx.db.engine.connect() as conn:
        rows = conn.exec_driver_sql(prefix + str(compiled)).fetchall()
    for row in rows:
        print("      " + str(row[-1] if ctx.db.is_sqlite else row[0]))


def bench_operations(root: Path, engine: str, counts: list[int], requests: int) -> None:
    results: dict[int, float] = {}
    cpu: dict[int, float] = {}
    whole: dict[int, float] = {}
    postgres = TempPostgres().start() if engine == "postgres" else None
    try:
        for count in counts:
            data_dir = root / f"{engine}-{count}"
            data_dir.mkdir(parents=True)
            if postgres is not None:
                name = f"bench_{count}"
                postgres.create_database(name)
                url = postgres.url(name)
            else:
                url = f"sqlite:///{data_dir / 'payplane.db'}"
            migrate(url)
            ctx = AppContext.create(_settings(data_dir, url))
            loaded = time.perf_counter()
            world, start = _load(ctx, count)
            load_seconds = time.perf_counter() - loaded
            print(f"  {engine}: {count:>9,} operations loaded in {load_seconds:.1f} s; plan:")
            _explain(ctx)
            ctx.close()
            ensure_certificate(_settings(data_dir, url))
            api = Child("api", data_dir, url).wait()
            try:
                day = {"from": "2026-01-01 00:00:00", "to": "2026-01-01 23:59:59"}
                body = world.body("admin", {"interval": day, "limit": 1000, "offset": 2000})
                path = "/v1/v1/operations/get"
                message = _request(path, body, api.port)
                cpu_before = api.cpu_seconds()
                times = asyncio.run(_latencies(api.port, api.cert, message, requests))
                cpu[count] = (api.cpu_seconds() - cpu_before) * 1000 / (requests + 3)
                results[count] = statistics.median(times)
                days = max(1, count // 10_000)
                last = (start + timedelta(days=days - 1)).strftime("%Y-%m-%d 23:59:59")
                span = {"from": "2026-01-01 00:00:00", "to": last}
                body = world.body("admin", {"interval": span, "limit": 1000, "offset": 2000})
                message = _request(path, body, api.port)
                whole[count] = statistics.median(
                    asyncio.run(_latencies(api.port, api.cert, message, max(5, requests // 4)))
                )
            finally:
                api.stop()
    finally:
        if postgres is not None:
            postgres.stop()
    small, large = counts[0], counts[-1]
    print(f"  {engine}: operations/get, page of 1000 (offset 2000) of one day (~10,000 matches)")
    for count in counts:
        print(
            f"    {count:>9,} stored: p50 {results[count]:6.1f} ms  (target < 50 ms);"
            f" server CPU {cpu[count]:5.1f} ms/request"
        )
    print(f"    ratio large/small: {results[large] / results[small]:.2f}  (target <= 1.5)")
    print("  the same page over the whole stored range (total counts every match):")
    for count in counts:
        print(f"    {count:>9,} stored: p50 {whole[count]:6.1f} ms")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _serve_child(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--skip-balance", action="store_true")
    args = parser.parse_args()
    print(f"bench/data_api  {datetime.now(UTC):%Y-%m-%d %H:%M} UTC  cpus={os.cpu_count()}")
    print(f"  load average at start: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if not args.skip_balance:
            bench_balance(root, args.seconds, args.connections, args.rounds)
        for engine in filter(None, args.engines.split(",")):
            if engine == "postgres" and not postgres_available():
                print("  postgres: not installed, skipped")
                continue
            bench_operations(root, engine, [args.small, args.large], args.requests)
    print(f"  load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
