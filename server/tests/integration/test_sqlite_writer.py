"""SQLite's single writer is queued on a lock that spans processes and dies with its holder."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from payplane_server.db import engine, migrate
from payplane_server.db.engine import Database, WriterBusy, WriterLock
from payplane_server.testing.writer import writer_held_elsewhere
from payplane_server.web.offload import run_database_work

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


@pytest.fixture
def holder(sqlite_url: str) -> Iterator[subprocess.Popen[str]]:
    """Another process, inside a write transaction until a line arrives on its stdin."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, sqlite_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "held"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


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
    sqlite_url: str, holder: subprocess.Popen[str], tmp_path: Path
) -> None:
    db = Database(sqlite_url)
    try:
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
        db.dispose()


# --- work that must not wait (run on an event loop) --------------------------------------


def _merchant_names(db: Database) -> list[str]:
    with db.read() as conn:
        return list(conn.execute(text("SELECT name FROM merchants ORDER BY id")).scalars())


def _insert_merchant(db: Database, name: str) -> None:
    with db.write() as conn:
        conn.execute(
            text("INSERT INTO merchants (name, created_at) VALUES (:name, '2026-01-01')"),
            {"name": name},
        )


def test_without_waiting_a_free_writer_writes(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    try:
        with db.without_waiting():
            _insert_merchant(db, "inline")
        assert _merchant_names(db) == ["inline"]
    finally:
        db.dispose()


def test_without_waiting_a_writer_held_by_another_thread_is_busy(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    with writer_held_elsewhere(db) as holder:
        with db.without_waiting(), pytest.raises(WriterBusy):
            _insert_merchant(db, "inline")
        # Outside the block the same write waits its turn again.
        holder.release()
        _insert_merchant(db, "waited")
    assert _merchant_names(db) == ["waited"]
    db.dispose()


def test_without_waiting_a_writer_held_by_another_process_is_busy(
    sqlite_url: str, holder: subprocess.Popen[str]
) -> None:
    db = Database(sqlite_url)
    try:
        with db.without_waiting(), pytest.raises(WriterBusy):
            _insert_merchant(db, "inline")
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=30) == 0
        with db.without_waiting():
            _insert_merchant(db, "inline")
        assert _merchant_names(db) == ["child", "inline"]
    finally:
        db.dispose()


def test_database_work_runs_on_the_loop_or_again_in_a_thread(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    threads: list[int] = []

    def work(name: str) -> str:
        threads.append(threading.get_ident())
        _insert_merchant(db, name)
        return name

    async def scenario() -> None:
        loop_thread = threading.get_ident()
        assert await run_database_work(db, work, "free") == "free"
        assert threads == [loop_thread]

        threads.clear()
        with writer_held_elsewhere(db) as holder:
            asyncio.get_running_loop().call_later(0.2, holder.release)
            # Busy on the loop: started again in a worker thread, which waits for the holder.
            assert await run_database_work(db, work, "busy") == "busy"
        assert threads[0] == loop_thread and threads[1] != loop_thread
        assert len(threads) == 2

    try:
        asyncio.run(scenario())
        assert _merchant_names(db) == ["free", "busy"]
    finally:
        db.dispose()


def test_postgres_work_goes_to_a_thread_and_sqlite_work_stays_on_the_loop(
    database_url: str,
) -> None:
    db = Database(database_url)
    try:

        async def scenario() -> tuple[int, int]:
            return threading.get_ident(), await run_database_work(db, threading.get_ident)

        loop_thread, worker_thread = asyncio.run(scenario())
        assert (loop_thread == worker_thread) is db.is_sqlite
    finally:
        db.dispose()


def _other_writer_is_locked_out(path: Path) -> bool:
    """Whether a plain sqlite3 connection fails to start a write transaction right now."""
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        other.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return True
    else:
        other.execute("ROLLBACK")
        return False
    finally:
        other.close()


def test_write_takes_sqlite_write_lock_at_once_and_read_does_not(
    sqlite_url: str, tmp_path: Path
) -> None:
    db = Database(sqlite_url)
    path = tmp_path / "payplane.db"
    try:
        with db.write() as conn:
            # Before any statement: BEGIN IMMEDIATE holds the write lock.
            assert conn.connection.driver_connection.in_transaction  # type: ignore[union-attr]
            assert _other_writer_is_locked_out(path)
        assert not _other_writer_is_locked_out(path)
        with db.read() as conn:
            # A read transaction is open (one snapshot) but leaves writers alone.
            assert conn.connection.driver_connection.in_transaction  # type: ignore[union-attr]
            conn.execute(text("SELECT count(*) FROM merchants")).scalar_one()
            assert not _other_writer_is_locked_out(path)
        with pytest.raises(RuntimeError), db.write() as conn:
            conn.execute(text("INSERT INTO merchants (name, created_at) VALUES ('x', '2026')"))
            raise RuntimeError("rolled back")
        assert _merchant_names(db) == []
    finally:
        db.dispose()
