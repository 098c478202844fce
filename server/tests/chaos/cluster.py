"""A Payplane installation of real ``payplane-server serve --role web|worker|all`` processes on
loopback against one database, a load generator that opens and pays payments through them,
and the end-state checks of the chaos and scale-out tests (also used by bench/scale)."""

from __future__ import annotations

import base64
import json
import os
import random
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
from payplane_server.testing.customer import Customer, signed_url

MASTER_KEY = base64.b64encode(b"c" * 32).decode()
PROJECT = 402
SECRET = "chaos-project-secret"
SUCCESS, DECLINE, CLARIFY, FRICTIONLESS = (
    "4000000000000077",
    "4111111111111111",
    "4000000000000200",
    "4477000000000006",
)
CARDS = [SUCCESS, DECLINE, CLARIFY, FRICTIONLESS, SUCCESS, CLARIFY]
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


def _status(db: Database, payment_id: str) -> str | None:
    with db.read() as conn:
        return conn.execute(
            select(payments.c.status).where(
                payments.c.project_id == PROJECT, payments.c.payment_id == payment_id
            )
        ).scalar()


def pay_one(cluster: Cluster, db: Database, load: Load, index: int, prefix: str) -> None:
    """Open and pay payment ``index`` through the web processes in turn, retrying through the
    next one whenever a process is down; clarification payments with an even index are
    answered through the Gate API, the others are left to their timer."""
    webs = cluster.webs
    payment_id = f"{prefix}-{index}"
    card = CARDS[index % len(CARDS)]
    params = {
        "project_id": str(PROJECT),
        "payment_id": payment_id,
        "payment_amount": str(100 + index),
        "payment_currency": "EUR",
        "customer_id": f"c-{index}",
    }
    url = signed_url(params, SECRET)
    token = None
    for attempt in range(200):
        web = webs[(index + attempt) % len(webs)]
        try:
            with httpx.Client(base_url=web.url, timeout=10) as client:
                if token is None:
                    _, token = Customer(client).open(url)
                    if token is None:
                        raise AssertionError("no page token")
                    load.registered.add(payment_id)
                if _status(db, payment_id) == "new":
                    Customer(client).pay(token, card)
                status = _status(db, payment_id)
                if status == "new":
                    raise AssertionError("still new")
                if card == CLARIFY and index % 2 == 0 and status == "awaiting clarification":
                    body: dict[str, Any] = {
                        "general": {"project_id": PROJECT, "payment_id": payment_id},
                        "additional_data": {"customer": {"psu_consent": "1"}},
                    }
                    body["general"]["signature"] = sign(body, SECRET)
                    answer = client.post("/v2/payment/clarification", json=body)
                    if answer.status_code == 200:
                        load.clarified.add(payment_id)
                    elif answer.status_code != 409:
                        raise AssertionError(f"gate {answer.status_code}")
                return
        except (httpx.HTTPError, AssertionError) as error:
            load.errors[type(error).__name__] += 1
            time.sleep(0.25)
    raise AssertionError(f"payment {payment_id} could not be completed")


def run_load(
    cluster: Cluster, count: int, *, threads: int = 4, prefix: str = "p"
) -> tuple[Load, float]:
    db = Database(cluster.database_url)
    load = Load()
    indexes = iter(range(count))
    lock = threading.Lock()
    failures: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                index = next(indexes, None)
            if index is None:
                return
            try:
                pay_one(cluster, db, load, index, prefix)
            except BaseException as error:
                failures.append(error)
                return

    started = time.monotonic()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.monotonic() - started
    db.dispose()
    if failures:
        raise failures[0]
    return load, elapsed


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
    for row in rows:
        if row.status in FINAL:
            last = [q.id for q in queued if q.payment_pk == row.id]
            if not last or last[-1] not in received.get(row.id, []):
                violations.append(f"final callback of {row.payment_id} not received")
            elif (
                json.loads(next(q.body for q in queued if q.id == last[-1]))["payment"]["status"]
                != row.status
            ):
                violations.append(f"last callback of {row.payment_id} is not its final status")
    return Verdict(
        payments=len(rows),
        final=sum(r.status in FINAL for r in rows),
        callbacks_delivered=sum(q.state == "delivered" for q in queued),
        violations=violations,
    )
