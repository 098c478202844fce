"""The unit of work: one ``Database`` per process, transactions as context managers.

SQLite (the embedded default) runs in WAL mode; write transactions start with
``BEGIN IMMEDIATE`` so that concurrent writers queue instead of failing with a deadlock on lock
upgrade. They queue on a lock of their own (``WriterLock``), not in SQLite's busy handler.
PostgreSQL runs at READ COMMITTED; code that needs a row for itself uses ``FOR UPDATE``
(SKIP LOCKED for work queues) or a conditional UPDATE.

Short SQLite work run on an event loop (``on_event_loop``, used by
``web.offload.run_database_work``) shares one write transaction per turn of the loop (a few
turns for work that agrees to linger): a group commit. Each piece of work writes inside a
savepoint of it, so a failing piece undoes only its own writes, and waits for the commit
before it answers.

``notify(conn, channel)`` wakes waiting workers once the transaction commits: through
``pg_notify`` on PostgreSQL (every process) and an in-process signal on both engines.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: SQLite's busy handler queues processes
    fcntl = None  # type: ignore[assignment]

__all__ = ["Database", "GroupCommit", "LoopWork", "WriterBusy", "WriterLock"]

log = logging.getLogger("payplane.db")

Listener = Callable[[str], None]


class WriterLock:
    """SQLite's one writer, taken before ``BEGIN IMMEDIATE``: threads of this process queue on
    an RLock, processes on an exclusive ``flock`` of ``<database>.writer.lock``.

    SQLite's own busy handler makes a waiting writer sleep and retry (1, 2, 5, … up to 100 ms
    between tries), so with several processes (``serve --workers N``, a worker process, the
    CLI) a write waits far longer than the one before it takes; a blocked ``flock`` wakes as
    soon as the lock is free. The kernel drops the lock of a process that dies. Re-entrant:
    only the outermost acquisition of a thread takes the file lock.
    """

    def __init__(self, path: str | None) -> None:
        self._path = path if fcntl is not None else None
        self._threads = threading.RLock()
        self._depth = threading.local()
        # Threads of this process blocked in acquire() (see waited_for()).
        self._waiting = 0
        self._waiting_guard = threading.Lock()
        self._fd: int | None = None
        self._pid = 0

    def _file(self) -> int:
        # Opened lazily, and again in a child process: a descriptor inherited over fork()
        # shares its lock with the parent.
        if self._fd is None or self._pid != os.getpid():
            assert self._path is not None
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._pid = os.getpid()
        return self._fd

    def acquire(self, *, blocking: bool = True) -> bool:
        """Take the lock; without ``blocking``, only if no other thread or process has it."""
        if blocking:
            with self._waiting_guard:
                self._waiting += 1
            try:
                self._threads.acquire()
            finally:
                with self._waiting_guard:
                    self._waiting -= 1
        elif not self._threads.acquire(blocking=False):
            return False
        depth = getattr(self._depth, "value", 0)
        if depth == 0 and self._path is not None:
            try:
                fcntl.flock(
                    self._file(), fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB
                )
            except BlockingIOError:
                self._threads.release()
                return False
            except BaseException:
                self._threads.release()
                raise
        self._depth.value = depth + 1
        return True

    def waited_for(self) -> bool:
        """Whether another thread of this process is blocked waiting for the lock (other
        processes' waits on the file lock cannot be seen)."""
        return self._waiting > 0

    def held_here(self) -> bool:
        """Whether this thread holds the lock."""
        return getattr(self._depth, "value", 0) > 0

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        self._depth.value -= 1
        try:
            if self._depth.value == 0 and self._path is not None:
                fcntl.flock(self._file(), fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None


class WriterBusy(Exception):
    """Raised by ``Database.write()`` inside ``Database.without_waiting()`` when another thread
    or process holds SQLite's writer lock: the caller goes and waits for it elsewhere."""


class GroupCommit:
    """The write transaction shared by the on-loop work of a few turns of an event loop.

    Opened by the first write (taking the writer lock without waiting), committed by a callback
    the loop runs after the work of this turn (or of two more, see GROUP_COMMIT_POLLS), which
    then tells every waiting piece of work whether its writes are durable."""

    __slots__ = ("connection", "linger", "transaction", "waiters")

    def __init__(self, connection: Connection, transaction: Any) -> None:
        self.connection = connection
        self.transaction = transaction
        self.waiters: list[asyncio.Future[bool]] = []
        #: Whether every piece so far may wait a few turns for the commit.
        self.linger = True

    def committed(self, *, linger: bool = False) -> asyncio.Future[bool]:
        """A future of the commit: True once it is durable, False if it failed (and rolled
        back). One per waiter, so that cancelling one waiter leaves the others waiting.

        ``linger``: this piece may wait while the group stays open for more work. One piece
        that may not is enough for the group to commit at the next turn."""
        if not linger:
            self.linger = False
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        return waiter


class LoopWork:
    """One piece of work run by ``Database.on_event_loop``: the group commit it wrote or read
    in, which it must wait for before it answers (None: it touched no group). A context
    manager that makes it the work of this thread's loop for its duration."""

    __slots__ = ("_local", "_previous", "group")

    def __init__(self, local: threading.local) -> None:
        self.group: GroupCommit | None = None
        self._local = local
        self._previous: LoopWork | None = None

    def __enter__(self) -> LoopWork:
        self._previous = getattr(self._local, "work", None)
        self._local.work = self
        return self

    def __exit__(self, *exc: object) -> None:
        self._local.work = self._previous


class _Savepoint:
    """The writes of one piece of on-loop work: a savepoint of the loop's group commit,
    released on success and rolled back on any exception. (A class, not a generator: every
    on-loop write enters one.)"""

    __slots__ = ("_db", "_driver", "_work")

    def __init__(self, db: Database, work: LoopWork) -> None:
        self._db = db
        self._work = work
        self._driver: Any = None

    def __enter__(self) -> Connection:
        group = self._db._group()
        self._work.group = group
        conn = group.connection
        self._driver = conn.connection.driver_connection
        self._driver.execute("SAVEPOINT payplane_work")
        return conn

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            self._driver.execute("ROLLBACK TO payplane_work")
        self._driver.execute("RELEASE payplane_work")


# The key of a pooled SQLite connection's ``info`` that asks do_begin for BEGIN IMMEDIATE.
_BEGIN_MODE = "payplane_begin"

_shared_writers: dict[str, tuple[WriterLock, int]] = {}
_shared_guard = threading.Lock()

# A group commit of fewer than GROUP_COMMIT_ENOUGH pieces of work, all of which agreed to
# linger (``GroupCommit.committed``), stays open while the loop polls for I/O up to
# GROUP_COMMIT_POLLS more times, so that requests whose bytes arrive meanwhile join it. For
# short work (a Data API request) a turn costs far less than a commit. Work whose turns are
# long (rendering pages) does not linger: every piece of the group would wait those turns too.
# A group also commits at once when it has enough already and when a thread of the process waits
# for the writer lock (a payment's acquirer step, a worker), which would otherwise wait longer.
GROUP_COMMIT_POLLS = 2
GROUP_COMMIT_ENOUGH = 16


def _writer_for(path: str) -> WriterLock:
    """The one ``WriterLock`` of this process for a database file, shared by every
    ``Database`` on it: two of them in one thread then queue on one RLock (and meet SQLite's
    own busy timeout, as before) instead of one's ``flock`` waiting forever on the other's."""
    with _shared_guard:
        lock, users = _shared_writers.get(path, (None, 0))
        if lock is None:
            lock = WriterLock(path)
        _shared_writers[path] = (lock, users + 1)
        return lock


def _release_writer(path: str) -> None:
    with _shared_guard:
        lock, users = _shared_writers[path]
        if users > 1:
            _shared_writers[path] = (lock, users - 1)
            return
        del _shared_writers[path]
    lock.close()


def _sqlite_file(url: str) -> str | None:
    """The database file of a SQLite URL; None for an in-memory database."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return database


class Database:
    """An engine plus the transaction discipline that every caller uses."""

    def __init__(self, url: str, *, pool_size: int = 10, null_pool: bool = False) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.is_postgres = url.startswith("postgresql")
        kwargs: dict[str, Any] = {}
        if null_pool:
            kwargs["poolclass"] = NullPool
        elif self.is_sqlite:
            kwargs.update(pool_size=pool_size, max_overflow=pool_size * 4, pool_timeout=60)
        else:
            kwargs.update(pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        self.engine: Engine = create_engine(url, **kwargs)
        self._listeners: dict[str, list[Listener]] = {}
        self._lock = threading.Lock()
        self._sqlite_writer: WriterLock | None = None
        self._not_waiting = threading.local()
        # Per thread (so per event loop): .work, the LoopWork being run; .group, the open
        # GroupCommit.
        self._loop = threading.local()
        self._writer_path: str | None = None
        if self.is_sqlite:
            database = _sqlite_file(url)
            if database is None:
                self._sqlite_writer = WriterLock(None)
            else:
                self._writer_path = os.path.abspath(database) + ".writer.lock"
                self._sqlite_writer = _writer_for(self._writer_path)
            self._configure_sqlite(self.engine)

    @staticmethod
    def _configure_sqlite(engine: Engine) -> None:
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        # pysqlite in autocommit mode (isolation_level None, above) never begins a transaction
        # itself, so the dialect's begin step sends BEGIN, IMMEDIATE for write() (one writer:
        # take the lock up front rather than fail on upgrading it later). Done in the
        # dialect rather than in a "begin" event listener: any engine event listener sends
        # every statement of the engine through SQLAlchemy's event dispatch, and going
        # straight to the driver costs a fraction of a statement through SQLAlchemy.
        def do_begin(dbapi_connection: Any) -> None:
            dbapi_connection.driver_connection.execute(
                dbapi_connection.info.get(_BEGIN_MODE, "BEGIN DEFERRED")
            )

        engine.dialect.do_begin = do_begin  # type: ignore[method-assign]

    def write(self) -> AbstractContextManager[Connection]:
        """A read-write transaction, committed on success, rolled back on any exception.

        Inside ``on_event_loop`` on SQLite: a savepoint of the loop's group commit instead,
        released on success and rolled back on any exception; it commits with the group."""
        if self._sqlite_writer is not None:
            work: LoopWork | None = getattr(self._loop, "work", None)
            if work is not None:
                return _Savepoint(self, work)
        return self._write_alone()

    @contextmanager
    def _write_alone(self) -> Iterator[Connection]:
        writer = self._sqlite_writer
        if writer is not None:
            if getattr(self._loop, "group", None) is not None:
                # Waiting here would wait for a commit that only this thread can make.
                raise RuntimeError("a write on an event loop runs through run_database_work")
            # SQLite has one writer: queue for it here (see WriterLock).
            if not writer.acquire(blocking=not getattr(self._not_waiting, "on", False)):
                raise WriterBusy()
        try:
            with self._write() as conn:
                yield conn
        finally:
            if writer is not None:
                writer.release()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            transaction = self._begin(conn, "BEGIN IMMEDIATE" if self.is_sqlite else None)
            with transaction:
                yield conn
            channels: set[str] = conn.info.pop("payplane_notify", set())
        for channel in channels:
            self._fire(channel)

    @staticmethod
    def _begin(conn: Connection, sqlite_mode: str | None) -> Any:
        if sqlite_mode is None:
            return conn.begin()
        # Read by _configure_sqlite's do_begin, which runs inside conn.begin().
        info = conn.connection.info
        info[_BEGIN_MODE] = sqlite_mode
        try:
            return conn.begin()
        finally:
            del info[_BEGIN_MODE]

    def on_event_loop(self) -> LoopWork:
        """Run SQLite work on the event loop of this thread: ``write()`` joins the loop's
        group commit (opening it if need be, and raising ``WriterBusy`` if another thread or
        process holds the writer lock), and ``read()`` reads in the group while one is open.

        The caller must wait for ``work.group.committed()`` (when ``work.group`` is set)
        before it tells anyone what the work did."""
        assert self._sqlite_writer is not None, "only SQLite work runs on the event loop"
        return LoopWork(self._loop)

    def _group(self) -> GroupCommit:
        """The open group commit of this thread's event loop, or a new one."""
        group: GroupCommit | None = getattr(self._loop, "group", None)
        if group is not None:
            return group
        writer = self._sqlite_writer
        assert writer is not None
        # Held here but not by a group of this database: an enclosing write, or another
        # Database on the same file, whose lock this thread cannot wait for.
        if writer.held_here() or not writer.acquire(blocking=False):
            raise WriterBusy()
        try:
            conn = self.engine.connect()
            try:
                transaction = self._begin(conn, "BEGIN IMMEDIATE")
            except BaseException:
                conn.close()
                raise
        except BaseException:
            writer.release()
            raise
        group = self._loop.group = GroupCommit(conn, transaction)
        asyncio.get_running_loop().call_soon(self._commit_after, group, GROUP_COMMIT_POLLS)
        return group

    def _commit_after(self, group: GroupCommit, polls: int) -> None:
        """Commit ``group`` once the loop has polled ``polls`` more times, or at once unless
        it should linger (see GROUP_COMMIT_POLLS)."""
        writer = self._sqlite_writer
        assert writer is not None
        if (
            polls > 0
            and group.linger
            and len(group.waiters) < GROUP_COMMIT_ENOUGH
            and not writer.waited_for()
        ):
            asyncio.get_running_loop().call_soon(self._commit_after, group, polls - 1)
        else:
            self._commit_group(group)

    def _commit_group(self, group: GroupCommit) -> None:
        self._loop.group = None
        conn = group.connection
        channels: set[str] = conn.info.pop("payplane_notify", set())
        try:
            group.transaction.commit()
            durable = True
        except Exception:
            log.exception("a group commit failed; its work runs again")
            durable = False
            try:
                group.transaction.rollback()
            except Exception:
                log.exception("rolling back the failed group commit failed")
        finally:
            try:
                conn.close()
            finally:
                assert self._sqlite_writer is not None
                self._sqlite_writer.release()
        for waiter in group.waiters:
            if not waiter.done():
                waiter.set_result(durable)
        if durable:
            for channel in channels:
                self._fire(channel)

    @contextmanager
    def without_waiting(self) -> Iterator[None]:
        """Within the block, on this thread, ``write()`` raises ``WriterBusy`` instead of
        waiting for another writer. For running short SQLite work on an event loop: reads in
        WAL mode never wait, and a write runs only when nobody else holds the lock."""
        previous = getattr(self._not_waiting, "on", False)
        self._not_waiting.on = True
        try:
            yield
        finally:
            self._not_waiting.on = previous

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction (a consistent snapshot on both engines). Inside
        ``on_event_loop`` while the loop's group commit is open: a read in the group, which
        sees its writes (so the work must wait for the group to commit before answering)."""
        work: LoopWork | None = getattr(self._loop, "work", None)
        if work is not None:
            group: GroupCommit | None = getattr(self._loop, "group", None)
            if group is not None:
                work.group = group
                yield group.connection
                return
        with self.engine.connect() as conn, conn.begin():
            yield conn

    def notify(self, conn: Connection, channel: str) -> None:
        """Wake listeners of ``channel`` when the current transaction commits."""
        conn.info.setdefault("payplane_notify", set()).add(channel)
        if self.is_postgres:
            conn.exec_driver_sql(f"NOTIFY payplane_{channel}")

    def listen(self, channel: str, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` (from any thread) after commits that notified ``channel``."""
        with self._lock:
            self._listeners.setdefault(channel, []).append(listener)

        def remove() -> None:
            with self._lock:
                self._listeners.get(channel, []).remove(listener)

        return remove

    def _fire(self, channel: str) -> None:
        with self._lock:
            listeners = list(self._listeners.get(channel, ()))
        for listener in listeners:
            try:
                listener(channel)
            except Exception:
                log.exception("a %s listener failed", channel)

    def dispose(self) -> None:
        self.engine.dispose()
        if self._writer_path is not None:
            path, self._writer_path = self._writer_path, None
            _release_writer(path)
