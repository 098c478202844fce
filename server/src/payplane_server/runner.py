"""``payplane-server serve``: the process model.

The parent binds the listening sockets (the Payment Page host, and the Data API over TLS), then
runs ``workers`` serving processes that share them. Each serving process runs, by ``role``:

- ``web``: the HTTP surfaces only;
- ``worker``: callback delivery and timers only (no sockets);
- ``all``: both, in one process (the embedded default).

With ``workers`` > 1 the parent supervises its children and restarts any that dies. Nothing
correctness-relevant lives in a process's memory, so any number of such processes on any number
of machines can share one PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from .config import Settings
from .context import AppContext
from .db import migrate
from .tls import ensure_certificate, server_ssl_context

__all__ = ["bind", "serve", "tune_gc"]

log = logging.getLogger("payplane.runner")
ROLES = ("all", "web", "worker")

# Collect the youngest generation after this many new container objects instead of 700: with
# dozens of requests in flight, most young objects are still alive at a collection, so frequent
# collections traverse the same objects again and again (they cost ~7% of the CPU and gave
# the slowest payments tens of milliseconds of pause in bench/payment_page).
GC_YOUNG_THRESHOLD = 20_000


def tune_gc() -> None:
    """Once the process has built everything it keeps (modules, apps, caches of code): move
    those objects out of the collector's sight (``gc.freeze``), so that the full collections
    of a long-running server do not traverse them again, and collect less often."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, oldest)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """A uvicorn server whose signals are handled by the process, not by each server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _worker_only(ctx: AppContext, stop: asyncio.Event) -> None:
    from .worker import LOOPS

    async with contextlib.AsyncExitStack() as stack:
        for loop in LOOPS:
            await stack.enter_async_context(loop(ctx))
        await stop.wait()


async def _serve_process(
    settings: Settings,
    web_sock: socket.socket | None,
    api_sock: socket.socket | None,
) -> None:
    from .web import create_app, create_data_api_app
    from .worker import LOOPS

    ctx = AppContext.create(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)

    servers: list[_Server] = []
    common: dict[str, Any] = dict(
        log_level=settings.log_level,
        access_log=False,
        timeout_keep_alive=75,
        server_header=False,
        date_header=True,
        http="httptools",
        loop="uvloop",
    )
    if web_sock is not None:
        background = list(LOOPS) if settings.role == "all" else []
        app = create_app(ctx, background=background)
        servers.append(_Server(uvicorn.Config(app, **common)))
    if api_sock is not None:
        api_config = uvicorn.Config(create_data_api_app(ctx), lifespan="off", **common)
        if not settings.data_api_plain_http:
            cert, key, _ = ensure_certificate(settings)
            api_config.load()
            api_config.ssl = server_ssl_context(cert, key)
        servers.append(_Server(api_config))

    tune_gc()

    async def run_servers() -> None:
        tasks = []
        if web_sock is not None:
            tasks.append(asyncio.create_task(servers[0].serve(sockets=[web_sock])))
        if api_sock is not None:
            tasks.append(asyncio.create_task(servers[-1].serve(sockets=[api_sock])))
        await stop.wait()
        for server in servers:
            server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        if web_sock is None and api_sock is None:
            await _worker_only(ctx, stop)
        else:
            await run_servers()
    finally:
        ctx.close()


def _child_main(
    settings: Settings, web_fd: int | None, api_fd: int | None
) -> None:  # pragma: no cover - runs in a child process
    web_sock = socket.socket(fileno=web_fd) if web_fd is not None else None
    api_sock = socket.socket(fileno=api_fd) if api_fd is not None else None
    _run(settings, web_sock, api_sock)


def _run(
    settings: Settings, web_sock: socket.socket | None, api_sock: socket.socket | None
) -> None:
    try:
        import uvloop

        uvloop.run(_serve_process(settings, web_sock, api_sock))
    except ImportError:  # pragma: no cover
        asyncio.run(_serve_process(settings, web_sock, api_sock))


def _announce(settings: Settings, cert_path: Any, created: bool) -> None:
    out = sys.stderr
    if settings.role in ("all", "web"):
        print(f"Payplane Payment Page: {settings.payment_page_url}/payment", file=out)
        scheme = "http" if settings.data_api_plain_http else "https"
        host = settings.data_api_host or settings.host
        print(f"Payplane Data API:     {scheme}://{host}:{settings.data_api_port}/v1", file=out)
        if settings.data_api_plain_http:
            print(
                "WARNING: the Data API is served over plain HTTP; put it behind a proxy that"
                " terminates TLS 1.2 or newer.",
                file=out,
            )
        elif cert_path is not None:
            note = "created a self-signed certificate" if created else "certificate"
            print(f"Data API TLS {note}: {cert_path}", file=out)
    if settings.workers > 1 and settings.resolved_database_url.startswith("sqlite"):
        print(
            "NOTE: on SQLite one serving process is faster than several (they queue for its one"
            " writer); use PostgreSQL to serve from several processes. See docs/deployment.md.",
            file=out,
        )
    print(
        f"role={settings.role} workers={settings.workers} pid={os.getpid()}", file=out, flush=True
    )


def serve(settings: Settings) -> None:
    """Run the platform until SIGINT or SIGTERM."""
    if settings.role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate(settings.resolved_database_url)
    web_sock = api_sock = None
    cert_path = None
    created = False
    if settings.role in ("all", "web"):
        web_sock = bind(settings.host, settings.port)
        api_sock = bind(settings.data_api_host or settings.host, settings.data_api_port)
        if not settings.data_api_plain_http:
            cert_path, _, created = ensure_certificate(settings)
    _announce(settings, cert_path, created)
    if settings.workers <= 1:
        _run(settings, web_sock, api_sock)
        return
    _supervise(settings, web_sock, api_sock)


def _supervise(
    settings: Settings, web_sock: socket.socket | None, api_sock: socket.socket | None
) -> None:
    spawn = multiprocessing.get_context("fork")
    web_fd = web_sock.fileno() if web_sock else None
    api_fd = api_sock.fileno() if api_sock else None
    stopping = False

    def start() -> multiprocessing.process.BaseProcess:
        process = spawn.Process(target=_child_main, args=(settings, web_fd, api_fd), daemon=False)
        process.start()
        return process

    children = [start() for _ in range(settings.workers)]

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stopping:
        time.sleep(0.5)
        for index, child in enumerate(children):
            if not child.is_alive() and not stopping:
                log.warning("serving process %s exited (%s); restarting", child.pid, child.exitcode)
                children[index] = start()
    for child in children:
        if child.pid is not None and child.is_alive():
            os.kill(child.pid, signal.SIGTERM)
    for child in children:
        child.join(timeout=30)
