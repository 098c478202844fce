"""Delivery by real ``payplane-server serve --role worker`` processes on the test database:
a worker killed with SIGKILL mid-delivery loses nothing, and two workers on one PostgreSQL
deliver each callback exactly once."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from payplane_server.clock import SystemClock
from payplane_server.context import AppContext
from payplane_server.domain.payments import Code, Status
from payplane_server.services.processing import Change, transition
from payplane_server.testing import CallbackReceiver
from payplane_server.testing.outbox import (
    callback_rows,
    make_project,
    seed_payment,
)

PROJECT = 903


class Worker:
    """``payplane-server serve --role worker`` as a child process."""

    def __init__(self, ctx: AppContext, log: Path, timeout: float = 1.0) -> None:
        env = {
            **os.environ,
            "PAYPLANE_DATABASE_URL": ctx.settings.resolved_database_url,
            "PAYPLANE_MASTER_KEY": ctx.settings.master_key or "",
            "PAYPLANE_CALLBACK_TIMEOUT_SECONDS": str(timeout),
            "PAYPLANE_LOG_LEVEL": "warning",
        }
        self.log = log
        self._file = log.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "payplane_server",
                "serve",
                "--role",
                "worker",
                "--data-dir",
                str(ctx.settings.data_dir),
            ],
            env=env,
            stdout=self._file,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 90  # a loaded CI machine imports slowly
        while b"role=worker" not in log.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start:\n{log.read_text()}")
            time.sleep(0.05)

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self._file.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._file.close()


def wait_until(check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("the condition did not hold in time")
        time.sleep(0.05)


@pytest.fixture
def real_time(ctx: AppContext) -> AppContext:
    # Child processes run on the system clock; so must the rows this test queues.
    return dataclasses.replace(ctx, clock=SystemClock())


def queue_many(ctx: AppContext, count: int, prefix: str) -> None:
    with ctx.db.write() as conn:
        for n in range(count):
            pk = seed_payment(ctx, conn, project_id=PROJECT, payment_id=f"{prefix}-{n}")
            assert transition(ctx, conn, pk, Change(Status.SUCCESS, Code.SUCCESS))


# PostgreSQL only: the engine of multi-process deployments. The same lease expiry is proven on
# both engines in-process by test_delivery.py (a dead worker's lease expires).
@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_worker_killed_mid_delivery_loses_nothing(real_time: AppContext, tmp_path: Path) -> None:
    ctx = real_time
    release = threading.Event()

    def first_hangs(n: int, request: Any) -> tuple[int, float, bytes]:
        if n == 1:
            release.wait(30)
        return 200, 0.0, b"ok"

    with CallbackReceiver(first_hangs) as receiver:
        make_project(ctx, PROJECT, receiver.url)
        first = Worker(ctx, tmp_path / "worker-1.log")
        try:
            queue_many(ctx, 1, "killed")
            receiver.wait_for(1, 60)  # the worker is in the middle of delivering it
            first.kill()
        finally:
            if first.process.poll() is None:
                first.kill()
        [row] = callback_rows(ctx)
        assert (row.state, row.attempts) == ("pending", 0)
        assert row.claimed_until is not None, "the dead worker's lease is still there"
        release.set()

        second = Worker(ctx, tmp_path / "worker-2.log")
        try:
            wait_until(lambda: callback_rows(ctx)[0].state == "delivered")
        finally:
            second.stop()
        requests = receiver.requests
    assert len(requests) == 2, "delivered again after the restart (at least once)"
    assert requests[0].body == requests[1].body == row.body.encode()
    [row] = callback_rows(ctx)
    assert (row.state, row.attempts, row.claimed_until) == ("delivered", 1, None)


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_two_worker_processes_deliver_each_callback_exactly_once(
    real_time: AppContext, tmp_path: Path
) -> None:
    ctx = real_time
    count = 300
    with CallbackReceiver() as receiver:
        make_project(ctx, PROJECT, receiver.url)
        workers = [Worker(ctx, tmp_path / f"worker-{n}.log") for n in range(2)]
        try:
            time.sleep(0.5)  # both are listening
            queue_many(ctx, count // 2, "a")
            queue_many(ctx, count // 2, "b")
            receiver.wait_for(count, 120)
            wait_until(lambda: all(r.state == "delivered" for r in callback_rows(ctx)))
            time.sleep(1.5)  # a duplicate would arrive within a poll interval
        finally:
            for worker in workers:
                worker.stop()
        requests = receiver.requests
    ids = Counter(r.json()["payment"]["id"] for r in requests)
    assert len(ids) == count
    assert set(ids.values()) == {1}, "a callback was delivered twice"
    rows = callback_rows(ctx)
    assert len(rows) == count
    assert {(r.state, r.attempts) for r in rows} == {("delivered", 1)}
