"""SQLite's single writer is queued on a lock that spans processes and dies with its holder."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from payplane_server.db import engine, migrate
from payplane_server.db.engine import Database, WriterLock

HOLDER = """
import sys
from sqlalchemy import text
from payplane_server.db.engine import Database

db = Database(sys.argv[1])
with db.write() as conn:
    conn.execute(text("INSERT INTO merchants (name, created_at) VALUES ('child', '2026-01-01')"))
    print("held", flush=True)
    sys.stdin.readline()
"""


def _locked_elsewhere(path: Path) -> bool:
    """Whether another open file description holds an exclusive flock on ``path``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'payplane.db'}"
    migrate(url)
    yield url


def test_a_write_holds_the_file_lock_only_while_it_runs(sqlite_url: str, tmp_path: Path) -> None:
    lock = tmp_path / "payplane.db.writer.lock"
    db = Database(sqlite_url)
    try:
        with db.write() as conn:
            conn.execute(text("SELECT 1"))
            assert _locked_elsewhere(lock)
        assert not _locked_elsewhere(lock)
    finally:
        db.dispose()


def test_databases_on_one_file_share_the_process_lock(sqlite_url: str, tmp_path: Path) -> None:
    first, second = Database(sqlite_url), Database(sqlite_url)
    relative = Database(f"sqlite:///{os.path.relpath(tmp_path / 'payplane.db')}")
    try:
        assert first._sqlite_writer is second._sqlite_writer is relative._sqlite_writer
        held = threading.Event()
        order: list[str] = []

        def hold() -> None:
            with first.write():
                held.set()
                order.append("first")
                threading.Event().wait(0.2)
                order.append("first done")

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(10)
        with second.write() as conn:  # another thread of the process: waits its turn
            conn.execute(text("SELECT 1"))
            order.append("second")
        holder.join()
        assert order == ["first", "first done", "second"]
    finally:
        for db in (first, second, relative):
            db.dispose()
    assert str(tmp_path / "payplane.db.writer.lock") not in engine._shared_writers


def test_nested_acquisition_releases_the_file_lock_at_the_outermost_exit(tmp_path: Path) -> None:
    path = tmp_path / "nested.lock"
    lock = WriterLock(str(path))
    with lock:
        with lock:
            assert _locked_elsewhere(path)
        assert _locked_elsewhere(path)
    assert not _locked_elsewhere(path)
    lock.close()


def test_another_process_waits_for_the_writer_and_goes_on_when_it_is_killed(
    sqlite_url: str, tmp_path: Path
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, sqlite_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    db = Database(sqlite_url)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        assert _locked_elsewhere(tmp_path / "payplane.db.writer.lock")
        done = threading.Event()
        failures: list[BaseException] = []

        def write() -> None:
            try:
                with db.write() as conn:
                    conn.execute(
                        text("INSERT INTO merchants (name, created_at) VALUES ('parent', '2026')")
                    )
            except BaseException as error:  # reported to the test thread
                failures.append(error)
            finally:
                done.set()

        writer = threading.Thread(target=write)
        writer.start()
        # The parent's write queues behind the child's (no "database is locked").
        assert not done.wait(0.5)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        assert done.wait(30), "the write did not go on after the holder died"
        writer.join()
        assert failures == []
        with db.read() as conn:
            names = conn.execute(text("SELECT name FROM merchants")).scalars().all()
        # The killed writer's transaction rolled back; the waiting one committed.
        assert names == ["parent"]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        db.dispose()
