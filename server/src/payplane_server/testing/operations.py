"""Bulk-loading payments and their ``sale`` operations for Data API tests and benchmarks.

Rows go straight into the tables (SQLite ``executemany`` on the driver connection, PostgreSQL
``COPY``), one payment per operation, created ``spacing`` apart from ``start``, in batches, so a
million operations load in seconds rather than minutes.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select

from ..context import AppContext
from ..db.tables import balances, operations, payments

__all__ = ["seed_operations"]

_PAYMENT_COLUMNS = (
    "id",
    "project_id",
    "payment_id",
    "status",
    "amount",
    "currency",
    "customer_id",
    "description",
    "params",
    "method",
    "account_number",
    "processing_deadline",
    "page_token",
    "created_at",
    "updated_at",
)
_OPERATION_COLUMNS = (
    "id",
    "payment_pk",
    "project_id",
    "type",
    "status",
    "code",
    "message",
    "sum_initial_amount",
    "sum_initial_currency",
    "sum_converted_amount",
    "sum_converted_currency",
    "provider_id",
    "request_id",
    "created_at",
    "completed_at",
)

_SQLITE_PAYMENTS = (
    "INSERT INTO payments (id, project_id, payment_id, status, amount, currency,"
    " customer_id, description, params, method, account_number, processing_deadline,"
    " page_token, created_at, updated_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SQLITE_OPERATIONS = (
    "INSERT INTO operations (id, payment_pk, project_id, type, status, code, message,"
    " sum_initial_amount, sum_initial_currency, sum_converted_amount,"
    " sum_converted_currency, provider_id, request_id, created_at, completed_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_COPY_PAYMENTS = f"COPY payments ({', '.join(_PAYMENT_COLUMNS)}) FROM STDIN"
_COPY_OPERATIONS = f"COPY operations ({', '.join(_OPERATION_COLUMNS)}) FROM STDIN"
_PG_RESET_SEQUENCES = (
    "SELECT setval(pg_get_serial_sequence('payments', 'id'), (SELECT max(id) FROM payments)),"
    " setval(pg_get_serial_sequence('operations', 'id'), (SELECT max(id) FROM operations))"
)


def _sqlite_time(value: datetime) -> str:
    # The text form SQLAlchemy's SQLite DateTime writes, so that comparisons stay lexical.
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _rows(
    *,
    project_id: int,
    count: int,
    start: datetime,
    spacing: timedelta,
    first_pk: int,
    first_op: int,
    amount: int,
    currency: str,
    status: str,
    sqlite: bool,
    prefix: str,
) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
    def stamp(value: datetime) -> Any:
        return _sqlite_time(value) if sqlite else value.astimezone(UTC).replace(tzinfo=None)

    for index in range(count):
        created = start + spacing * index
        pk = first_pk + index
        payment = (
            pk,
            project_id,
            f"{prefix}{index}",
            status,
            amount,
            currency,
            f"customer-{index % 97}",
            f"Order {index}",
            "{}",
            "card",
            "400000******0077",
            stamp(created + timedelta(days=1)),
            f"seed-{project_id}-{pk}",
            stamp(created),
            stamp(created),
        )
        operation = (
            first_op + index,
            pk,
            project_id,
            "sale",
            status,
            "0" if status == "success" else "10000",
            "Success" if status == "success" else "General decline",
            amount,
            currency,
            amount,
            currency,
            1,
            f"req-{pk}",
            stamp(created),
            stamp(created + timedelta(seconds=2)),
        )
        yield payment, operation


def seed_operations(
    ctx: AppContext,
    *,
    project_id: int,
    count: int,
    start: datetime,
    spacing: timedelta = timedelta(seconds=1),
    amount: int = 1000,
    currency: str = "EUR",
    status: str = "success",
    payment_prefix: str = "seed-",
    batch: int = 20_000,
) -> None:
    """Add ``count`` payments with one ``sale`` operation each to an existing project, and
    credit the project's balance when they succeeded."""
    with ctx.db.read() as conn:
        first_pk = int(conn.execute(select(func.coalesce(func.max(payments.c.id), 0))).scalar_one())
        first_op = int(
            conn.execute(select(func.coalesce(func.max(operations.c.id), 0))).scalar_one()
        )

    def rows() -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        return _rows(
            project_id=project_id,
            count=count,
            start=start,
            spacing=spacing,
            first_pk=first_pk + 1,
            first_op=first_op + 1,
            amount=amount,
            currency=currency,
            status=status,
            sqlite=ctx.db.is_sqlite,
            prefix=payment_prefix,
        )

    with ctx.db.engine.begin() as conn:
        raw: Any = conn.connection.driver_connection
        if ctx.db.is_sqlite:
            chunk: list[tuple[tuple[Any, ...], tuple[Any, ...]]] = []
            for pair in rows():
                chunk.append(pair)
                if len(chunk) >= batch:
                    raw.executemany(_SQLITE_PAYMENTS, [p for p, _ in chunk])
                    raw.executemany(_SQLITE_OPERATIONS, [o for _, o in chunk])
                    chunk.clear()
            if chunk:
                raw.executemany(_SQLITE_PAYMENTS, [p for p, _ in chunk])
                raw.executemany(_SQLITE_OPERATIONS, [o for _, o in chunk])
        else:
            with raw.cursor() as cursor:
                with cursor.copy(_COPY_PAYMENTS) as copy:
                    for payment, _ in rows():
                        copy.write_row(payment)
                with cursor.copy(_COPY_OPERATIONS) as copy:
                    for _, operation in rows():
                        copy.write_row(operation)
                cursor.execute(_PG_RESET_SEQUENCES)
        if status == "success" and count:
            credited = conn.execute(
                select(balances.c.amount).where(
                    balances.c.project_id == project_id, balances.c.currency == currency
                )
            ).scalar()
            if credited is None:
                conn.execute(
                    balances.insert().values(
                        project_id=project_id, currency=currency, amount=amount * count
                    )
                )
            else:
                conn.execute(
                    balances.update()
                    .where(balances.c.project_id == project_id, balances.c.currency == currency)
                    .values(amount=balances.c.amount + amount * count)
                )
