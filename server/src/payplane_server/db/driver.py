"""Statements run straight on the database driver, in a SQLAlchemy connection's transaction.

For the few statements that every request of a hot path runs. SQLAlchemy's execution of a
statement (cache lookup, parameter processing, a result's metadata, ``Row`` objects) costs
several times the statement itself on SQLite, measured in a loop: a point query through
``exec_driver_sql`` 35 µs against 6 µs; the Payment Page's lookup 21 µs against 3 µs, and
registering a payment (its values, the INSERT) 68 µs against 33 µs. The driver's cursor does
not. Errors are the driver's own exceptions (``conn.dialect.loaded_dbapi.IntegrityError``
and so on), not SQLAlchemy's.

- ``driver_rows``: hand-written SQL, the same text on both engines.
- ``DriverStatement``: a Core statement, compiled once per dialect, whose parameters go
  through the column types' own conversions (so a time is stored exactly as SQLAlchemy
  stores it). Results come back as the driver gives them: select only columns whose driver
  value is already the Python value (integers, text).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

__all__ = ["DriverStatement", "driver_rows"]


def _run(conn: Connection, sql: str, params: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
    if conn.dialect.name == "sqlite":
        # sqlite3 runs a statement on the connection itself, on a cursor it makes in C.
        driver: Any = conn.connection.dbapi_connection
        rows: list[Any] = driver.execute(sql, params).fetchall()
        return rows
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description is not None else []
    finally:
        cursor.close()


def driver_rows(conn: Connection, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run hand-written SQL (``?`` placeholders, the same text on both engines) straight on
    the driver, in ``conn``'s transaction: the rows, as plain tuples (none for a statement
    without a result)."""
    if conn.dialect.name != "sqlite":
        sql = sql.replace("?", "%s")
    return _run(conn, sql, tuple(params))


Converter = Callable[[Any], Any] | None


class DriverStatement:
    """A Core statement run on the driver (see the module). Its bound parameters are named
    with ``bindparam``; ``rows(conn, values)`` takes them by name."""

    __slots__ = ("_compiled", "_statement")

    def __init__(self, statement: ClauseElement) -> None:
        self._statement = statement
        # Per dialect name: the SQL text, whether its parameters are positional, and each
        # parameter's name and conversion.
        self._compiled: dict[str, tuple[str, bool, list[tuple[str, Converter]]]] = {}

    def _compile(self, dialect: Dialect) -> tuple[str, bool, list[tuple[str, Converter]]]:
        compiled = self._statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        names = list(compiled.positiontup or []) if compiled.positional else list(compiled.binds)
        binds: list[tuple[str, Converter]] = [
            (name, compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect))
            for name in names
        ]
        entry = (compiled.string, compiled.positional, binds)
        self._compiled[dialect.name] = entry
        return entry

    def rows(self, conn: Connection, values: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """The statement's rows (none for a statement without a result), as plain tuples."""
        entry = self._compiled.get(conn.dialect.name)
        if entry is None:
            entry = self._compile(conn.dialect)
        sql, positional, binds = entry
        if positional:
            params: Sequence[Any] | Mapping[str, Any] = tuple(
                values[name] if convert is None else convert(values[name])
                for name, convert in binds
            )
        else:
            params = {
                name: values[name] if convert is None else convert(values[name])
                for name, convert in binds
            }
        return _run(conn, sql, params)
