"""A Payplane installation of real ``payplane-server serve --role web|worker|all`` processes on
loopback against one database, a load generator that opens and pays payments through them,
and the end-state checks of the chaos and scale-out tests (also used by bench/scale)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from payplane import sign
from sqlalchemy import func, select

from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.db import Database, migrate
from payplane_server.db.tables import balances, callbacks, payments
from payplane_server.services.projects import create_project
from payplane_server.testing import CallbackReceiver, free_port
from payplane_server.testing.customer import csrf_of, signed_url

MASTER_KEY = base64.b64encode(b"c" * 32).decode()
PROJECT = 402
SECRET = "chaos-project-secret"
SUCCESS = "4000000000000077"
DECLINE = "4111111111111111"
INSUFFICIENT = "4000000000000135"
TIMEOUT_CARD = "4539121411168251"
CHALLENGE = "4314220000000056"
FRICTIONLESS = "4477000000000006"
CLARIFY = "4000000000000200"
AVS = "4000000000000218"
FINAL = ("success", "decline")


@dataclass
class Process:
    name: str
    role: str
    port: int
    api_port: int
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    restarts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Cluster:
    """``with Cluster(url, tmp, webs=2, workers=2) as cluster: ...``"""

    def __init__(
        self,
        database_url: str,
        directory: Path,
        *,
        webs: int,
        workers: int,
        env: dict[str, str] | None = None,
    ) -> None:
        self.database_url = database_url
        self.directory = directory
        log_dir = Path(os.environ.get("PAYPLANE_TEST_LOG_DIR") or directory)
        self.env = dict(
            os.environ,
            PAYPLANE_DATABASE_URL=database_url,
            PAYPLANE_MASTER_KEY=MASTER_KEY,
            PAYPLANE_DATA_DIR=str(directory / "data"),
            PAYPLANE_DATA_API_PLAIN_HTTP="1",
            PAYPLANE_CLARIFICATION_WAIT_SECONDS="2",
            PAYPLANE_CALLBACK_TIMEOUT_SECONDS="2",
            PAYPLANE_SIMULATOR_DELAY_SECONDS="0.05",
            PAYPLANE_LOG_LEVEL="warning",
            **(env or {}),
        )
        stamp = f"{os.getpid()}-{int(time.time() * 1000)}"
        self.processes: list[Process] = []
        role_of_web = "web" if workers else "all"
        for n in range(webs):
            self.processes.append(
                Process(
                    f"web{n}",
                    role_of_web,
                    free_port(),
                    free_port(),
                    log_dir / f"chaos-{stamp}-web{n}.log",
                )
            )
        for n in range(workers):
            self.processes.append(
                Process(f"worker{n}", "worker", 0, 0, log_dir / f"chaos-{stamp}-worker{n}.log")
            )
        self.lock = threading.Lock()

    @property
    def webs(self) -> list[Process]:
        return [p for p in self.processes if p.role in ("web", "all")]

    def context(self) -> AppContext:
        settings = Settings(
            data_dir=self.directory / "data", database_url=self.database_url, master_key=MASTER_KEY
        )
        return AppContext.create(settings, db=Database(self.database_url))

    def prepare(self, callback_url: str) -> None:
        migrate(self.database_url)
        ctx = self.context()
        try:
            create_project(
                ctx, project_id=PROJECT, name="Chaos", callback_url=callback_url, secret=SECRET
            )
        finally:
            ctx.close()

    def start(self, process: Process) -> None:
        args = [sys.executable, "-m", "payplane_server", "serve", "--role", process.role]
        if process.role != "worker":
            args += ["--port", str(process.port), "--data-api-port", str(process.api_port)]
        with process.log.open("ab") as out:
            process.popen = subprocess.Popen(
                args, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def wait_ready(self, process: Process, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert process.popen is not None
            if process.popen.poll() is not None:
                raise AssertionError(process.log.read_text(errors="replace")[-3000:])
            if process.role == "worker":
                if time.monotonic() > deadline - timeout + 1:
                    return
            else:
                try:
                    if httpx.get(process.url + "/healthz", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        raise AssertionError(f"{process.name} did not come up")

    def kill(self, process: Process) -> None:
        """SIGKILL, then start it again (on the same ports)."""
        with self.lock:
            assert process.popen is not None
            process.popen.send_signal(signal.SIGKILL)
            process.popen.wait(timeout=30)
            process.restarts += 1
            self.start(process)

    def __enter__(self) -> Cluster:
        for process in self.processes:
            self.start(process)
        for process in self.processes:
            self.wait_ready(process)
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            if process.popen is not None and process.popen.poll() is None:
                process.popen.send_signal(signal.SIGTERM)
        for process in self.processes:
            if process.popen is not None:
                try:
                    process.popen.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.popen.kill()


@dataclass
class Load:
    """What the load generator saw: payment IDs it registered and Gate answers it got."""

    registered: set[str] = field(default_factory=set)
    clarified: set[str] = field(default_factory=set)
    errors: Counter[str] = field(default_factory=Counter)


# The mix of the simulator's cards: what payment n pays with, and how the generator answers
# what follows (a 3-D Secure code, a clarification or nothing). Clarifications of payments
# with n % 5 == 2 are not answered: their timer declines them with 603.
CARD_PLAN: list[tuple[str, str | None]] = [
    (SUCCESS, None),
    (DECLINE, None),
    (CLARIFY, "consent"),
    (FRICTIONLESS, None),
    (CHALLENGE, "1234"),
    (INSUFFICIENT, None),
    (SUCCESS, None),
    (AVS, "avs"),
    (CHALLENGE, "0000"),  # a wrong code: declined with 10104
    (TIMEOUT_CARD, None),
    (CLARIFY, "refuse"),  # psu_consent "0": declined
    (SUCCESS, None),
]
_LOCATION_TOKEN = re.compile(r"/pay/([A-Za-z0-9_-]{16,64})(/[a-z0-9]+)?")
_CLARIFICATION_ANSWERS: dict[str, dict[str, Any]] = {
    "consent": {"customer": {"psu_consent": "1"}},
    "refuse": {"customer": {"psu_consent": "0"}},
    "avs": {"avs_data": {"avs_post_code": "SW1A 1AA", "avs_street_address": "10 Downing St"}},
}


class _Retry(Exception):
    """The step met a process that was down or restarting: try again through the next one."""


async def _step(client: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> httpx.Response:
    try:
        response = await client.request(method, path, follow_redirects=False, **kwargs)
    except httpx.HTTPError as error:
        raise _Retry(type(error).__name__) from None
    if response.status_code >= 500:
        raise _Retry(f"HTTP {response.status_code}")
    return response


def _where(response: httpx.Response) -> tuple[str, str]:
    """(page token, page) of a Payment Page answer: a page of its own or a 303 to one."""
    if response.status_code == 303:
        match = _LOCATION_TOKEN.search(response.headers.get("location", ""))
        if match is None:
            raise AssertionError(f"303 to {response.headers.get('location')!r}")
        return match.group(1), (match.group(2) or "/")[1:]
    if response.status_code != 200:
        raise AssertionError(f"HTTP {response.status_code}: {response.text[:200]}")
    match = _LOCATION_TOKEN.search(response.text)
    if match is None:
        raise AssertionError("no page token on the page")
    page = "card" if 'name="pan"' in response.text else "method"
    return match.group(1), page


async def _pay_one(clients: list[httpx.AsyncClient], load: Load, index: int, prefix: str) -> None:
    """Open and pay payment ``index`` as a customer would, through the web processes in turn.

    Every step that meets a dead process is retried through the next one, starting again from
    the signed URL (opening it again is idempotent and shows where the payment is), so the
    generator learns the payment's state from the Payment Page alone, as a browser does."""
    payment_id = f"{prefix}-{index}"
    card, follow_up = CARD_PLAN[index % len(CARD_PLAN)]
    params = {
        "project_id": str(PROJECT),
        "payment_id": payment_id,
        "payment_amount": str(100 + index),
        "payment_currency": "EUR",
        "customer_id": f"c-{index}",
    }
    if index % 2:
        params["force_payment_method"] = "card"
    url = signed_url(params, SECRET)
    for attempt in range(400):
        client = clients[(index + attempt) % len(clients)]
        try:
            form = await _step(client, "GET", url)
            token, page = _where(form)
            load.registered.add(payment_id)
            if page == "method":
                form = await _step(client, "GET", f"/pay/{token}/card")
                _, page = _where(form)
            if page == "card":
                data = {
                    "csrf_token": csrf_of(form.text),
                    "pan": card,
                    "expiry": "12/30",
                    "cvv": "123",
                    "holder": "Chaos Customer",
                }
                _, page = _where(await _step(client, "POST", f"/pay/{token}/card", data=data))
            if page == "3ds":
                form = await _step(client, "GET", f"/pay/{token}/3ds")
                if form.status_code == 200:
                    data = {"csrf_token": csrf_of(form.text), "code": follow_up or ""}
                    _, page = _where(await _step(client, "POST", f"/pay/{token}/3ds", data=data))
            if page in ("3ds", "method", "card"):
                raise _Retry(f"still on {page}")
            answer = _CLARIFICATION_ANSWERS.get(follow_up or "")
            if page == "waiting" and answer is not None and index % 5 != 2:
                body: dict[str, Any] = {
                    "general": {"project_id": PROJECT, "payment_id": payment_id},
                    "additional_data": answer,
                }
                body["general"]["signature"] = sign(body, SECRET)
                gate = await _step(client, "POST", "/v2/payment/clarification", json=body)
                if gate.status_code == 200:
                    load.clarified.add(payment_id)
                elif gate.status_code != 409:  # 409: not (or no longer) waiting
                    raise AssertionError(f"gate answered {gate.status_code}: {gate.text}")
            return
        except _Retry as retry:
            load.errors[str(retry)] += 1
            await asyncio.sleep(0.1)
    raise AssertionError(f"payment {payment_id} could not be completed")


def run_load(
    cluster: Cluster, count: int, *, customers: int = 24, prefix: str = "p"
) -> tuple[Load, float]:
    """``customers`` concurrent customers pay ``count`` payments through the web processes."""
    load = Load()

    async def main() -> None:
        indexes = iter(range(count))
        limits = httpx.Limits(max_connections=customers, max_keepalive_connections=customers)
        clients = [
            httpx.AsyncClient(base_url=web.url, timeout=30, limits=limits) for web in cluster.webs
        ]

        async def customer() -> None:
            for index in indexes:
                await _pay_one(clients, load, index, prefix)

        try:
            await asyncio.gather(*(customer() for _ in range(customers)))
        finally:
            for client in clients:
                await client.aclose()

    started = time.monotonic()
    asyncio.run(main())
    return load, time.monotonic() - started


def chaos(cluster: Cluster, stop: threading.Event, seed: int, kills: int) -> list[str]:
    """Kill a seeded-random process at seeded-random moments, ``kills`` times or until stopped."""
    rng = random.Random(seed)
    done: list[str] = []
    while len(done) < kills and not stop.wait(rng.uniform(0.5, 2.0)):
        process = rng.choice(cluster.processes)
        cluster.kill(process)
        done.append(process.name)
        cluster.wait_ready(process)
    return done


@dataclass
class Verdict:
    payments: int
    final: int
    callbacks_delivered: int
    violations: list[str]


def settle_and_check(
    cluster: Cluster, load: Load, receiver: CallbackReceiver, timeout: float = 90
) -> Verdict:
    """Wait until every payment is final and every callback delivered, then check the
    invariants: no payment lost or duplicated, every final status's callback received, in
    order per payment, no timer lost, balances equal the successful payments."""
    db = Database(cluster.database_url)
    try:
        deadline = time.monotonic() + timeout
        while True:
            with db.read() as conn:
                open_payments = conn.execute(
                    select(func.count())
                    .select_from(payments)
                    .where(payments.c.status.not_in(FINAL))
                ).scalar_one()
                pending = conn.execute(
                    select(func.count())
                    .select_from(callbacks)
                    .where(callbacks.c.state == "pending")
                ).scalar_one()
            if (open_payments == 0 and pending == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        return _check(db, load, receiver)
    finally:
        db.dispose()


def _check(db: Database, load: Load, receiver: CallbackReceiver) -> Verdict:
    violations: list[str] = []
    with db.read() as conn:
        rows = conn.execute(
            select(
                payments.c.id, payments.c.payment_id, payments.c.status, payments.c.amount
            ).where(payments.c.project_id == PROJECT)
        ).all()
        queued = conn.execute(
            select(
                callbacks.c.id, callbacks.c.payment_pk, callbacks.c.body, callbacks.c.state
            ).order_by(callbacks.c.id)
        ).all()
        balance = conn.execute(
            select(balances.c.amount).where(
                balances.c.project_id == PROJECT, balances.c.currency == "EUR"
            )
        ).scalar()
    ids = Counter(row.payment_id for row in rows)
    violations += [f"duplicated {pid}" for pid, n in ids.items() if n > 1]
    violations += [f"lost {pid}" for pid in load.registered if pid not in ids]
    violations += [f"not final {r.payment_id}: {r.status}" for r in rows if r.status not in FINAL]
    violations += [f"callback {q.id} not delivered" for q in queued if q.state != "delivered"]
    success_sum = sum(int(r.amount) for r in rows if r.status == "success")
    if int(balance or 0) != success_sum:
        violations.append(f"balance {balance} != successful payments {success_sum}")
    callback_of = {q.body: (q.id, q.payment_pk) for q in queued}
    received: dict[int, list[int]] = defaultdict(list)
    for request in receiver.requests:
        known = callback_of.get(request.body.decode())
        if known is None:
            violations.append("a received callback was never queued")
            continue
        callback_id, payment_pk = known
        if callback_id not in received[payment_pk]:
            received[payment_pk].append(callback_id)
    for payment_pk, order in received.items():
        if order != sorted(order):
            violations.append(f"callbacks of payment {payment_pk} out of order: {order}")
    last_of: dict[int, Any] = {q.payment_pk: q for q in queued}  # queued is in id order
    for row in rows:
        if row.status in FINAL:
            last = last_of.get(row.id)
            if last is None or last.id not in received.get(row.id, []):
                violations.append(f"final callback of {row.payment_id} not received")
            elif json.loads(last.body)["payment"]["status"] != row.status:
                violations.append(f"last callback of {row.payment_id} is not its final status")
    return Verdict(
        payments=len(rows),
        final=sum(r.status in FINAL for r in rows),
        callbacks_delivered=sum(q.state == "delivered" for q in queued),
        violations=violations,
    )
