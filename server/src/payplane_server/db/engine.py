"""The unit of work: one ``Database`` per process, transactions as context managers.

SQLite (the embedded default) runs in WAL mode; write transactions start with
``BEGIN IMMEDIATE`` so that concurrent writers queue on the busy timeout instead of failing
with a deadlock on lock upgrade. PostgreSQL runs at READ COMMITTED; code that needs a row for
itself uses ``FOR UPDATE`` (SKIP LOCKED for work queues) or a conditional UPDATE.

``notify(conn, channel)`` wakes waiting workers once the transaction commits: through
``pg_notify`` on PostgreSQL (every process) and an in-process signal on both engines.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.pool import NullPool

__all__ = ["Database"]

log = logging.getLogger("payplane.db")

Listener = Callable[[str], None]


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
        self._sqlite_writer = threading.RLock()
        if self.is_sqlite:
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

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
            conn.exec_driver_sql(f"BEGIN {mode}")

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A read-write transaction, committed on success, rolled back on any exception."""
        if self.is_sqlite:
            # SQLite has one writer; threads of this process queue here instead of in
            # SQLite's busy handler, which sleeps up to 100 ms between retries.
            with self._sqlite_writer, self._write() as conn:
                yield conn
        else:
            with self._write() as conn:
                yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            if self.is_sqlite:
                conn = conn.execution_options(sqlite_begin="IMMEDIATE")
            with conn.begin():
                yield conn
            channels: set[str] = conn.info.pop("payplane_notify", set())
        for channel in channels:
            self._fire(channel)

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction (a consistent snapshot on both engines)."""
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
