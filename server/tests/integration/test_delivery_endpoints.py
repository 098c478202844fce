"""Hostile or broken merchant endpoints: redirects, huge and trickling bodies, bad TLS, and a
hanging endpoint next to healthy ones. None may crash the worker or hold up other merchants."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trustme
from sqlalchemy import select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from payplane_server.context import AppContext
from payplane_server.db.tables import callback_attempts, projects
from payplane_server.testing import CallbackReceiver, LiveServer
from payplane_server.testing.outbox import callback_rows, make_project, queued_payment
from payplane_server.worker.delivery import DeliveryWorker, PublicAddressesOnly, deliver_due

PROJECT = 77


class Merchant:
    """A misbehaving merchant site; counts what it was asked and how much it sent."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}
        self.streamed = 0
        self.lock = threading.Lock()

    def _hit(self, name: str) -> None:
        with self.lock:
            self.hits[name] = self.hits.get(name, 0) + 1

    async def redirect(self, request: Request) -> Response:
        self._hit("redirect")
        return Response(status_code=302, headers={"Location": "/landing"})

    async def landing(self, request: Request) -> Response:
        self._hit("landing")
        return Response("ok")

    def _endless(self) -> AsyncIterator[bytes]:
        async def chunks() -> AsyncIterator[bytes]:
            chunk = b"x" * 65536
            while True:
                with self.lock:
                    self.streamed += len(chunk)
                yield chunk
                await asyncio.sleep(0)

        return chunks()

    async def huge(self, request: Request) -> Response:
        self._hit("huge")
        return StreamingResponse(self._endless(), status_code=200)

    async def huge_error(self, request: Request) -> Response:
        self._hit("huge_error")
        return StreamingResponse(self._endless(), status_code=500)

    async def trickle(self, request: Request) -> Response:
        self._hit("trickle")

        async def slowly() -> AsyncIterator[bytes]:
            while True:
                yield b"."
                await asyncio.sleep(0.2)

        return StreamingResponse(slowly(), status_code=200)

    def app(self) -> Starlette:
        methods = ["POST", "GET"]
        return Starlette(
            routes=[
                Route("/redirect", self.redirect, methods=methods),
                Route("/landing", self.landing, methods=methods),
                Route("/huge", self.huge, methods=methods),
                Route("/huge-error", self.huge_error, methods=methods),
                Route("/trickle", self.trickle, methods=methods),
            ]
        )


@pytest.fixture
def merchant() -> Iterator[tuple[Merchant, str]]:
    site = Merchant()
    with LiveServer(site.app(), lifespan="off") as server:
        yield site, server.url


def attempt_of(ctx: AppContext, callback_id: int) -> Any:
    with ctx.db.read() as conn:
        return conn.execute(
            select(callback_attempts).where(callback_attempts.c.callback_id == callback_id)
        ).one()


def test_a_redirect_is_not_followed_and_not_delivered(
    ctx: AppContext, merchant: tuple[Merchant, str]
) -> None:
    site, url = merchant
    make_project(ctx, PROJECT, url + "/redirect")
    pk = queued_payment(ctx, project_id=PROJECT, payment_id="p-redirect")
    assert deliver_due(ctx) == 1
    [row] = callback_rows(ctx, pk)
    assert (row.state, row.attempts) == ("pending", 1)
    attempt = attempt_of(ctx, row.id)
    assert attempt.http_status == 302
    assert attempt.error == "HTTP 302: redirect to /landing not followed"
    assert site.hits == {"redirect": 1}


def test_a_huge_200_body_is_delivered_without_reading_it(
    ctx: AppContext, merchant: tuple[Merchant, str]
) -> None:
    site, url = merchant
    make_project(ctx, PROJECT, url + "/huge")
    pk = queued_payment(ctx, project_id=PROJECT, payment_id="p-huge")
    began = time.monotonic()
    assert deliver_due(ctx) == 1
    assert time.monotonic() - began < 20
    [row] = callback_rows(ctx, pk)
    assert row.state == "delivered"
    # The body never ends; the worker stopped after a few KiB (socket buffers hold the rest).
    assert site.streamed < 64 * 1024 * 1024


def test_a_huge_error_body_is_a_failed_attempt(
    ctx: AppContext, merchant: tuple[Merchant, str]
) -> None:
    _, url = merchant
    make_project(ctx, PROJECT, url + "/huge-error")
    pk = queued_payment(ctx, project_id=PROJECT, payment_id="p-huge-error")
    assert deliver_due(ctx) == 1
    [row] = callback_rows(ctx, pk)
    assert (row.state, row.attempts) == ("pending", 1)
    assert attempt_of(ctx, row.id).http_status == 500


def test_a_200_with_a_body_trickling_forever_is_delivered_within_the_timeout(
    ctx: AppContext, merchant: tuple[Merchant, str]
) -> None:
    _, url = merchant
    short = dataclasses.replace(ctx, settings=ctx.settings.replace(callback_timeout_seconds=1.0))
    make_project(short, PROJECT, url + "/trickle")
    pk = queued_payment(short, project_id=PROJECT, payment_id="p-trickle")
    began = time.monotonic()
    assert deliver_due(short) == 1
    assert time.monotonic() - began < 10
    [row] = callback_rows(ctx, pk)
    assert row.state == "delivered"


def test_an_untrusted_tls_certificate_is_an_error_attempt_retried_by_schedule(
    ctx: AppContext,
) -> None:
    authority = trustme.CA()  # not in the worker's trust store
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)
    seen: list[str] = []

    async def endpoint(request: Request) -> Response:
        seen.append(request.url.path)
        return Response("ok")

    app = Starlette(routes=[Route("/cb", endpoint, methods=["POST"])])
    with LiveServer(app, ssl_context=server_context, lifespan="off") as server:
        make_project(ctx, PROJECT, server.url + "/cb")
        pk = queued_payment(ctx, project_id=PROJECT, payment_id="p-tls")
        assert deliver_due(ctx) == 1
    [row] = callback_rows(ctx, pk)
    assert (row.state, row.attempts) == ("pending", 1)
    assert row.next_attempt_at is not None
    error = attempt_of(ctx, row.id).error
    assert "Cannot connect" in error
    assert "CERTIFICATE_VERIFY_FAILED" in error
    assert seen == []


def test_the_public_only_resolver_drops_every_address_that_is_not_public() -> None:
    async def resolve(host: str) -> Any:
        resolver = PublicAddressesOnly()
        try:
            return await resolver.resolve(host, 443, socket.AF_UNSPEC)
        finally:
            await resolver.close()

    for host in ("localhost", "127.0.0.1", "10.1.2.3", "169.254.169.254", "::1"):
        with pytest.raises(OSError, match="only to private or local addresses"):
            asyncio.run(resolve(host))
    [public] = asyncio.run(resolve("8.8.8.8"))
    assert (public["host"], public["port"]) == ("8.8.8.8", 443)


def test_a_host_name_resolving_to_a_private_address_is_refused_when_private_urls_are(
    ctx: AppContext,
) -> None:
    # The URL check cannot see what a *name* resolves to; the connection must refuse it.
    name = socket.gethostname().lower()
    addresses = {info[4][0] for info in socket.getaddrinfo(name, None)}
    if addresses != {"127.0.0.1"}:
        pytest.skip(f"this machine's name {name!r} does not resolve to 127.0.0.1 only")
    strict = dataclasses.replace(
        ctx, settings=ctx.settings.replace(allow_private_callback_urls=False)
    )
    with CallbackReceiver() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        url = f"http://{name}:{port}/cb"
        make_project(strict, PROJECT, url)  # a name passes the URL check
        pk = queued_payment(strict, project_id=PROJECT, payment_id="p-private-name")
        assert deliver_due(strict) == 1
        [row] = callback_rows(strict, pk)
        assert (row.state, row.attempts) == ("pending", 1)  # retried on the schedule
        assert "resolves only to private or local addresses" in attempt_of(strict, row.id).error
        assert receiver.requests == []
        # The same URL with private addresses allowed is delivered: the refusal was the rule.
        assert all(not ipaddress.ip_address(a).is_global for a in addresses)
        other = queued_payment(ctx, project_id=PROJECT, payment_id="p-allowed")
        assert deliver_due(ctx) >= 1
        receiver.wait_for(1)
        assert [r.state for r in callback_rows(ctx, other)] == ["delivered"]


def test_a_hanging_merchant_never_holds_up_other_merchants(ctx: AppContext) -> None:
    settings = ctx.settings.replace(
        callback_timeout_seconds=30.0, callback_concurrency=8, callback_per_host_concurrency=2
    )
    busy = dataclasses.replace(ctx, settings=settings)
    release = threading.Event()

    def hang(n: int, request: Any) -> tuple[int, float, bytes]:
        release.wait(30)
        return 200, 0.0, b"late"

    with CallbackReceiver(hang) as stuck, CallbackReceiver() as healthy:
        make_project(busy, PROJECT, stuck.url)
        make_project(busy, PROJECT + 1, healthy.url)
        for n in range(10):
            queued_payment(busy, project_id=PROJECT, payment_id=f"stuck-{n}")

        async def scenario() -> tuple[int, int]:
            worker = DeliveryWorker(busy, poll_interval=0.2)
            await worker.start()
            try:
                await asyncio.to_thread(stuck.wait_for, 2, 30)
                for n in range(20):
                    await asyncio.to_thread(
                        queued_payment, busy, project_id=PROJECT + 1, payment_id=f"ok-{n}"
                    )
                await asyncio.to_thread(healthy.wait_for, 20, 30)
                stuck_seen = len(stuck.requests)
                for _ in range(200):  # their answers are being recorded
                    rows = await asyncio.to_thread(callback_rows, busy)
                    if sum(r.state == "delivered" for r in rows) >= 20:
                        break
                    await asyncio.sleep(0.05)
                return stuck_seen, len(healthy.requests)
            finally:
                release.set()
                await worker.stop(grace=0.1)

        stuck_seen, healthy_seen = asyncio.run(scenario())
    # All 20 healthy callbacks went out while the stuck merchant held its two slots only.
    assert healthy_seen == 20
    assert stuck_seen == 2
    rows = callback_rows(ctx)
    healthy_rows = [r for r in rows if r.project_id == PROJECT + 1]
    assert all(r.state == "delivered" for r in healthy_rows)
    # The stuck merchant's callbacks are all still owed: nothing was lost or dropped.
    stuck_rows = [r for r in rows if r.project_id == PROJECT]
    assert len(stuck_rows) == 10
    assert all(r.state in ("pending", "delivered") for r in stuck_rows)


def test_a_project_url_changed_to_an_unusable_one_does_not_stop_the_worker(
    ctx: AppContext,
) -> None:
    with CallbackReceiver() as receiver:
        make_project(ctx, PROJECT, receiver.url)
        queued_payment(ctx, project_id=PROJECT, payment_id="before")
        with ctx.db.write() as conn:
            conn.execute(projects.update().values(callback_url="http://[::1"))
        queued_payment(ctx, project_id=PROJECT, payment_id="broken")
        assert deliver_due(ctx) == 2
        [request] = receiver.wait_for(1)
    assert request.json()["payment"]["id"] == "before"
    states = {r.url: r.state for r in callback_rows(ctx)}
    assert states == {receiver.url: "delivered", "http://[::1": "failed"}
