"""Callback delivery: claim due callbacks from the outbox, POST them, record every attempt.

One ``DeliveryWorker`` per process, with one pooled HTTP client. It keeps up to
``callback_concurrency`` deliveries in flight and at most ``callback_per_host_concurrency`` per
merchant origin (``scheme://host:port`` as written in the URL), so a hanging merchant endpoint
holds only its own slots: while an origin is at its cap the worker stops claiming that origin's
callbacks and keeps serving everyone else.

Only HTTP 200 counts as delivered. Redirects are not followed (a failed attempt), the answer's
body is read to at most ``MAX_RESPONSE_BYTES`` and the whole attempt is bounded by
``callback_timeout_seconds``. Failed attempts are retried on ``domain.retry``'s schedule.

The worker wakes when a callback is queued: an in-process signal after commit (every engine),
``LISTEN payplane_callbacks`` on PostgreSQL for other processes' commits, and a poll every
``poll_interval`` seconds as the fallback (retries that come due, expired leases).
All scheduling decisions read ``ctx.clock``; ``run_once()`` drives one round deterministically.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import ipaddress
import logging
import socket
import ssl
import time
from collections import OrderedDict, defaultdict, deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import aiohttp
import certifi
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from sqlalchemy import make_url

from ..context import AppContext
from ..services.callbacks import validate_callback_url
from .outbox import (
    AttemptResult,
    Claimed,
    claim_due,
    extend_lease,
    has_due,
    record_results,
    release_claims,
)

__all__ = [
    "MAX_RESPONSE_BYTES",
    "DeliveryWorker",
    "PublicAddressesOnly",
    "deliver_due",
    "loop",
    "make_session",
    "post_callback",
]

log = logging.getLogger("payplane.callbacks")

# How much of a merchant's answer is read; the rest is dropped with the connection.
MAX_RESPONSE_BYTES = 4096
# At most this many saturated origins are named in one claim's exclusion list.
_MAX_EXCLUDED = 64
USER_AGENT = "Payplane-Callbacks/1"
T = TypeVar("T")


@functools.cache
def _trust() -> ssl.SSLContext:
    # Loading the CA bundle takes tens of milliseconds: once per process is enough.
    return ssl.create_default_context(cafile=certifi.where())


def _is_public(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_global
    except ValueError:
        return False


class PublicAddressesOnly(AbstractResolver):
    """aiohttp's resolver without the addresses that are not public (loopback, private,
    link-local, shared, reserved): with ``allow_private_callback_urls`` off, a merchant host
    *name* that resolves to such an address is refused at connection time, as an IP literal is
    refused when the URL is checked. The check is on the addresses actually connected to, so a
    name whose DNS answer changes between the check and the connection gains nothing."""

    def __init__(self) -> None:
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        public = [entry for entry in found if _is_public(entry["host"])]
        if not public:
            raise OSError(errno.EACCES, f"{host} resolves only to private or local addresses")
        return public

    async def close(self) -> None:
        await self._inner.close()


def make_session(
    timeout: float, concurrency: int, per_origin: int, *, public_only: bool = False
) -> aiohttp.ClientSession:
    """The worker's one shared HTTP client: pooled per origin, never following redirects;
    with ``public_only``, connecting to public addresses only (``PublicAddressesOnly``).

    aiohttp rather than httpx here: delivery is the one hot HTTP client path, and on the
    same machine in the same run httpx posts several times fewer callbacks per second (see
    bench/RESULTS.md); everything else in Payplane uses httpx.
    """
    connector = aiohttp.TCPConnector(
        limit=concurrency,
        limit_per_host=per_origin,
        ssl=_trust(),
        ttl_dns_cache=60,
        keepalive_timeout=30,
        resolver=PublicAddressesOnly() if public_only else None,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=timeout),
        headers={"User-Agent": USER_AGENT},
        skip_auto_headers=("Accept-Encoding",),
        auto_decompress=False,
        trust_env=False,
    )


def _describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


_JSON = {"Content-Type": "application/json"}


async def post_callback(
    session: aiohttp.ClientSession,
    claimed: Claimed,
    timeout: float,
    now: Callable[[], Any],
) -> AttemptResult:
    """POST one callback; never raises (every failure is an attempt's error)."""
    started_at = now()
    began = time.perf_counter()
    status: int | None = None
    location: str | None = None
    error: str | None = None
    try:
        # The session's total timeout bounds the whole attempt, reading included.
        async with session.post(
            claimed.url,
            data=claimed.body.encode("utf-8"),
            headers=_JSON,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response:
            status = response.status
            location = response.headers.get("Location")
            received = 0
            # Read a little (so a small answer leaves the connection reusable), never more.
            while received < MAX_RESPONSE_BYTES:
                chunk = await response.content.read(MAX_RESPONSE_BYTES - received)
                if not chunk:
                    break
                received += len(chunk)
    except TimeoutError:
        if status is None:
            error = f"no answer within {timeout:g} s"
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        if status is None:
            error = _describe(exc)
    except Exception as exc:  # a worker must survive any merchant endpoint
        log.exception("callback %s: unexpected error", claimed.id)
        error = _describe(exc)
    latency_ms = round((time.perf_counter() - began) * 1000)
    if error is None and status != 200:
        if status is not None and 300 <= status < 400:
            error = f"HTTP {status}: redirect to {location or '(no Location)'} not followed"
        else:
            error = f"HTTP {status}: only 200 counts as delivered"
    return AttemptResult(claimed, started_at, now(), status, latency_ms, error)


class DeliveryWorker:
    """``async with DeliveryWorker(ctx) as worker: await worker.run_once()`` (tests), or
    ``await worker.start()`` ... ``await worker.stop()`` for the background loop."""

    def __init__(
        self,
        ctx: AppContext,
        *,
        poll_interval: float = 1.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        settings = ctx.settings
        self.ctx = ctx
        self.timeout = float(settings.callback_timeout_seconds)
        self.concurrency = max(1, settings.callback_concurrency)
        self.per_host = max(1, settings.callback_per_host_concurrency)
        # Long enough for any attempt (bounded by the timeout) plus the time to record it.
        self.lease_seconds = self.timeout + min(10.0, max(1.0, self.timeout))
        self.poll_interval = poll_interval
        self._session = session
        self._own_session = session is None
        self._executor: ThreadPoolExecutor | None = None
        self._wake = asyncio.Event()
        self._flush_wanted = asyncio.Event()
        # Held while results are being recorded, so that stop() never cancels a flush that
        # has taken the buffered results but not yet written them.
        self._flushing = asyncio.Lock()
        self._results: list[AttemptResult] = []
        self._claims: dict[int, Claimed] = {}
        self._claimed_at: dict[int, float] = {}
        self._inflight: defaultdict[str, int] = defaultdict(int)
        self._queues: defaultdict[str, deque[Claimed]] = defaultdict(deque)
        self._tasks: set[asyncio.Task[None]] = set()
        self._background: list[asyncio.Task[None]] = []
        self._more_due = False
        # Slots freed since the last claim; completions wake the claimer only every few
        # slots, so one claim transaction serves several deliveries.
        self._freed = 0
        self._claim_every = max(1, min(self.concurrency // 8, self.per_host))
        self._stopping = False
        self._refusals: OrderedDict[str, str | None] = OrderedDict()
        self._unlisten: Callable[[], None] | None = None
        self._listening = asyncio.Event()
        self.delivered = 0

    # -- plumbing ---------------------------------------------------------------------------

    async def __aenter__(self) -> DeliveryWorker:
        self._open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _open(self) -> None:
        if self._session is None:
            self._session = make_session(
                self.timeout,
                self.concurrency,
                self.per_host,
                public_only=not self.ctx.settings.allow_private_callback_urls,
            )
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="payplane-callbacks-db")

    async def _db(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._executor is not None
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def wake(self) -> None:
        """Look for due callbacks now (safe to call often; wakes coalesce)."""
        self._wake.set()

    @property
    def listening(self) -> bool:
        """Whether ``LISTEN payplane_callbacks`` is in place (PostgreSQL only)."""
        return self._listening.is_set()

    @property
    def in_flight(self) -> int:
        return sum(self._inflight.values())

    def _held(self, origin: str) -> int:
        return self._inflight[origin] + len(self._queues[origin])

    # -- claiming and dispatching -----------------------------------------------------------

    async def _claim_once(self) -> int:
        free = self.concurrency - self.in_flight
        queued = sum(len(q) for q in self._queues.values())
        if free <= 0 or queued >= self.concurrency:
            self._more_due = True
            return 0
        saturated = [o for o in self._inflight if self._held(o) >= self.per_host]
        claiming = asyncio.ensure_future(
            self._db(
                claim_due,
                self.ctx.db,
                self.ctx.clock.now(),
                free,
                self.lease_seconds,
                saturated[:_MAX_EXCLUDED],
            )
        )
        try:
            claims = await asyncio.shield(claiming)
        except asyncio.CancelledError:
            # stop() cancelled this loop while the claim ran in its thread: the claim commits
            # all the same, so wait for it and keep what it took for stop() to give back,
            # rather than leaving the rows leased to no one until the lease runs out.
            for claimed in await claiming:
                self._claims[claimed.id] = claimed
            raise
        self._more_due = len(claims) == free or bool(saturated)
        self._freed = 0
        stamp = time.monotonic()
        for claimed in claims:
            self._claims[claimed.id] = claimed
            self._claimed_at[claimed.id] = stamp
            origin = claimed.origin
            if self._inflight[origin] < self.per_host:
                self._start(claimed)
            else:
                self._queues[origin].append(claimed)
        return len(claims)

    def _start(self, claimed: Claimed) -> None:
        self._inflight[claimed.origin] += 1
        task = asyncio.get_running_loop().create_task(self._deliver(claimed))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _refusal(self, url: str) -> str | None:
        if url in self._refusals:
            self._refusals.move_to_end(url)
            return self._refusals[url]
        reason = validate_callback_url(url, self.ctx.settings)
        self._refusals[url] = reason
        if len(self._refusals) > 4096:
            self._refusals.popitem(last=False)
        return reason

    async def _deliver(self, claimed: Claimed) -> None:
        origin = claimed.origin
        try:
            waited = time.monotonic() - self._claimed_at.get(claimed.id, time.monotonic())
            if waited > self.lease_seconds / 3:
                try:
                    claimed = await self._db(
                        extend_lease,
                        self.ctx.db,
                        claimed,
                        self.ctx.clock.now(),
                        self.lease_seconds,
                    )
                    self._claims[claimed.id] = claimed
                except LookupError:
                    log.warning("callback %s: lease lost while queued; skipped", claimed.id)
                    self._forget(claimed)
                    return
            reason = self._refusal(claimed.url)
            if reason is not None:
                now = self.ctx.clock.now()
                result = AttemptResult(
                    claimed, now, now, None, 0, f"refused: {reason}", permanent=True
                )
            else:
                assert self._session is not None
                result = await post_callback(
                    self._session, claimed, self.timeout, self.ctx.clock.now
                )
            self._results.append(result)
            self._flush_wanted.set()
        finally:
            self._inflight[origin] -= 1
            queue = self._queues.get(origin)
            if queue and not self._stopping:
                self._start(queue.popleft())
            if not self._inflight[origin] and not queue:
                self._inflight.pop(origin, None)
                self._queues.pop(origin, None)
            self._freed += 1
            if self._more_due and (self._freed >= self._claim_every or not self.in_flight):
                self.wake()

    def _forget(self, claimed: Claimed) -> None:
        self._claims.pop(claimed.id, None)
        self._claimed_at.pop(claimed.id, None)

    async def _flush(self) -> int:
        """Record buffered results; returns how many callbacks were released by them."""
        async with self._flushing:
            batch, self._results = self._results, []
            if not batch:
                return 0
            try:
                recorded = await self._db(record_results, self.ctx.db, batch, self.ctx.clock.now())
            except Exception:
                log.exception("recording %d callback attempts failed; retrying", len(batch))
                self._results = batch + self._results
                raise
            for result in batch:
                self._forget(result.claimed)
        self.delivered += recorded.delivered
        if recorded.lost:
            log.warning("%d callback results dropped: their leases were lost", recorded.lost)
        return recorded.released

    # -- driving ------------------------------------------------------------------------------

    async def run_once(self) -> int:
        """Deliver every callback due now (and those its deliveries release), record the
        attempts, and return how many attempts were made."""
        self._open()
        attempts = 0
        while True:
            claimed = await self._claim_once()
            while self._tasks:
                await asyncio.gather(*list(self._tasks))
            attempts += len(self._results)
            await self._flush()
            if not claimed and not self._tasks and not any(self._queues.values()):
                return attempts

    async def start(self) -> None:
        """Run in the background until ``stop()``."""
        self._open()
        loop = asyncio.get_running_loop()

        def signal(_channel: str) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(self.wake)

        self._unlisten = self.ctx.db.listen("callbacks", signal)
        self._background.append(loop.create_task(self._flush_loop(), name="callbacks-flush"))
        if self.ctx.db.is_postgres:
            self._background.append(loop.create_task(self._listen_pg(), name="callbacks-listen"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._listening.wait(), 10)
        self._background.append(loop.create_task(self._claim_loop(), name="callbacks-claim"))
        self.wake()

    async def _claim_loop(self) -> None:
        # Claim in batches: with deliveries in flight, wait until a useful number of slots is
        # free rather than paying a transaction for every single freed slot. Claim again at
        # once only after a full claim; after a short one (nothing else due, or only for
        # merchants at their cap) wait to be woken, never spin.
        batch = max(1, self.concurrency // 8)
        while not self._stopping:
            self._wake.clear()
            full = False
            try:
                free = self.concurrency - self.in_flight
                if self.in_flight and free < batch:
                    self._more_due = True  # completions wake this loop again
                elif self._more_due or await self._db(has_due, self.ctx.db, self.ctx.clock.now()):
                    got = await self._claim_once()
                    full = 0 < got == free
            except Exception:
                log.exception("claiming callbacks failed")
                await asyncio.sleep(1)
            if full and self.concurrency - self.in_flight >= batch:
                await asyncio.sleep(0)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)

    async def _flush_loop(self) -> None:
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted.clear()
            try:
                if await self._flush():
                    self.wake()
            except Exception:
                await asyncio.sleep(1)
                self._flush_wanted.set()

    async def _listen_pg(self) -> None:
        import psycopg  # only PostgreSQL deployments pay for importing the driver here

        url = make_url(self.ctx.db.url).set(drivername="postgresql")
        conninfo = url.render_as_string(hide_password=False)
        while not self._stopping:
            try:
                async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                    await conn.execute("LISTEN payplane_callbacks")
                    self._listening.set()
                    self.wake()
                    async for _ in conn.notifies():
                        self.wake()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("LISTEN payplane_callbacks failed (%s); retrying", _describe(exc))
                await asyncio.sleep(1)

    async def stop(self, grace: float = 5.0) -> None:
        """Stop claiming, let deliveries in flight finish (up to ``grace`` seconds), give back
        the leases of everything else, and record what was done."""
        self._stopping = True
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        async with self._flushing:  # a flush under way finishes recording first
            for task in self._background:
                task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=min(grace, self.timeout))
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._executor is not None:
            with contextlib.suppress(Exception):
                await self._flush()
            leftover = list(self._claims.values())
            self._queues.clear()
            if leftover:
                with contextlib.suppress(Exception):
                    await self._db(release_claims, self.ctx.db, leftover, self.ctx.clock.now())
            self._claims.clear()
            # A lease renewal of a cancelled delivery may still be running on it: wait for it
            # off the event loop.
            executor, self._executor = self._executor, None
            await asyncio.to_thread(executor.shutdown, wait=True)
        if self._session is not None and self._own_session:
            await self._session.close()
            self._session = None


@contextlib.asynccontextmanager
async def loop(ctx: AppContext) -> AsyncIterator[None]:
    """The background delivery loop for ``serve --role all|worker`` (see ``worker.LOOPS``)."""
    worker = DeliveryWorker(ctx)
    await worker.start()
    ctx.extras["callback_worker"] = worker
    try:
        yield
    finally:
        ctx.extras.pop("callback_worker", None)
        await worker.stop()


def deliver_due(ctx: AppContext) -> int:
    """Synchronously run one delivery round (``DeliveryWorker.run_once``) on a fresh loop."""

    async def once() -> int:
        async with DeliveryWorker(ctx) as worker:
            return await worker.run_once()

    return asyncio.run(once())
