"""Crash safety and scale-out with real ``payplane-server serve`` processes on loopback.

The chaos tests open and pay 3,000 payments per engine across the simulator's cards (3-D Secure
challenges answered right and wrong, clarifications answered through the Gate API, refused, or
left to their 2-second timer), 24 customers at a time, while a seeded chaos thread SIGKILLs web
and worker processes at random moments and restarts them; afterwards no payment is lost or
duplicated, every final status's callback was received (at least once, in order per payment), no
timer was lost and the balance equals the successful payments. SQLite: two ``--role all``
processes on one database file (as ``serve --workers 2``); PostgreSQL: two ``--role web`` and
two ``--role worker`` processes.
``PAYPLANE_CHAOS_PAYMENTS``, ``PAYPLANE_CHAOS_KILLS`` and ``PAYPLANE_CHAOS_SEED`` change the
run (docs/reliability.md)."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path

import httpx
import pytest
from payplane import sign

from payplane_server.services.accounts import create_user
from payplane_server.services.projects import create_merchant
from payplane_server.services.tokens import new_token
from payplane_server.testing import CallbackReceiver, TempPostgres

sys.path.insert(0, str(Path(__file__).parent))
from cluster import Cluster, chaos, run_load, settle_and_check

pytestmark = pytest.mark.slow

PAYMENTS = int(os.environ.get("PAYPLANE_CHAOS_PAYMENTS", "3000"))
KILLS = int(os.environ.get("PAYPLANE_CHAOS_KILLS", "12"))
SEED = int(os.environ.get("PAYPLANE_CHAOS_SEED", "8"))
REPORT = os.environ.get("PAYPLANE_CHAOS_REPORT")


def _chaos_run(cluster: Cluster, engine: str) -> None:
    with CallbackReceiver() as receiver:
        cluster.prepare(receiver.url)
        with cluster:
            stop = threading.Event()
            killed: list[str] = []
            killer = threading.Thread(
                target=lambda: killed.extend(chaos(cluster, stop, SEED, KILLS))
            )
            killer.start()
            try:
                load, elapsed = run_load(cluster, PAYMENTS, prefix=engine)
            finally:
                stop.set()
                killer.join()
            verdict = settle_and_check(cluster, load, receiver)
    timer_declines = {
        body["payment"]["id"]
        for body in (request.json() for request in receiver.requests)
        if body["operation"]["code"] == "603"
    }
    figures = {
        "engine": engine,
        "payments": verdict.payments,
        "registered_by_generator": len(load.registered),
        "clarified_via_gate": len(load.clarified),
        "final": verdict.final,
        "callbacks_delivered": verdict.callbacks_delivered,
        "callback_requests_received": len(receiver.requests),
        "timer_declines": len(timer_declines),
        "kills": len(killed),
        "killed": dict(Counter(killed)),
        "restarts": sum(p.restarts for p in cluster.processes),
        "client_retries": sum(load.errors.values()),
        "seconds": round(elapsed, 1),
        "violations": len(verdict.violations),
    }
    print(json.dumps(figures))
    if REPORT:
        with open(REPORT, "a") as out:
            out.write(json.dumps(figures) + "\n")
    assert verdict.violations == [], verdict.violations[:20]
    assert len(load.registered) == PAYMENTS == verdict.payments
    assert timer_declines, "no clarification timer fired"
    roles = {next(p.role for p in cluster.processes if p.name == name) for name in killed}
    assert roles == {p.role for p in cluster.processes}, f"only {roles} processes were killed"


def test_sigkilled_all_in_one_processes_on_sqlite_lose_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'payplane.db'}"
    _chaos_run(Cluster(url, tmp_path, webs=2, workers=0), "sqlite")


@pytest.mark.postgres
def test_sigkilled_web_and_worker_processes_on_postgres_lose_nothing(
    postgres: TempPostgres, tmp_path: Path
) -> None:
    url = postgres.create_database("chaos")
    _chaos_run(Cluster(url, tmp_path, webs=2, workers=2), "postgres")


@pytest.mark.postgres
def test_two_web_and_two_worker_processes_share_the_flow_timers_and_rate_limit(
    postgres: TempPostgres, tmp_path: Path
) -> None:
    url = postgres.create_database("scale")
    cluster = Cluster(
        url, tmp_path, webs=2, workers=2, env={"PAYPLANE_RATE_LIMIT_PER_MINUTE": "10"}
    )
    with CallbackReceiver() as receiver:
        cluster.prepare(receiver.url)
        ctx = cluster.context()
        try:
            merchant = create_merchant(ctx, "Scale")
            user = create_user(
                ctx,
                merchant_id=merchant,
                email="scale@example.test",
                name="Scale",
                role="Merchant admin",
                can_manage_tokens=True,
                project_ids=(),
            )
            issued = new_token(ctx, user)
        finally:
            ctx.close()
        with cluster:
            load, _ = run_load(cluster, 12, customers=2, prefix="scale")
            verdict = settle_and_check(cluster, load, receiver)
            assert verdict.violations == [], verdict.violations
            assert verdict.payments == 12
            # Clarification payments with an odd index were left to the timer: declined, 603.
            timed_out = [
                json.loads(r.body)
                for r in receiver.requests
                if json.loads(r.body)["operation"]["code"] == "603"
            ]
            assert timed_out, "no clarification timer fired"
            statuses = []
            for n in range(16):
                web = cluster.webs[n % 2]
                body = {"token": issued.token}
                body["signature"] = sign(body, issued.secret)
                answer = httpx.post(
                    f"http://127.0.0.1:{web.api_port}/v1/balance/get", json=body, timeout=30
                )
                statuses.append(answer.status_code)
            assert statuses.count(200) == 10, statuses
            assert statuses.count(429) == 6, statuses
