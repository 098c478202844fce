"""Read models of the Data API: balances and operations, with pages that stay cheap.

``find_operations`` returns a page ordered by (created_at, id). A page costs the same whatever
the table size: each project's part is an ordered range scan of
``ix_operations_project_created`` (on SQLite the index carries the rowid, i.e. ``id``), and for
several projects (up to ``UNION_MAX_PROJECTS``) the parts are combined with ``UNION ALL`` under
one ``ORDER BY .. LIMIT .. OFFSET`` that the engines answer by merging the ordered scans and
stopping after ``offset + limit`` rows; more projects walk ``ix_operations_created`` in order.
The ``total`` is a COUNT over the same index ranges: its cost grows with the number of
operations inside the interval (not with the table), which is why intervals are capped
(``MAX_INTERVAL``); the last page (fewer rows than ``limit``) needs no COUNT at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    CompoundSelect,
    Connection,
    Select,
    String,
    and_,
    func,
    select,
    type_coerce,
    union_all,
)

from ..db import driver_rows
from ..db.tables import operations, payments

__all__ = [
    "MAX_INTERVAL",
    "UNION_MAX_PROJECTS",
    "BalanceLine",
    "OperationQuery",
    "OperationRow",
    "StoredTime",
    "balances_of",
    "balances_of_merchant",
    "find_operations",
    "operations_of_payment",
    "stored_utc",
]

MAX_INTERVAL = timedelta(days=366)
UNION_MAX_PROJECTS = 32


@dataclass(frozen=True)
class BalanceLine:
    project_id: int
    project_name: str
    currency: str
    amount: int


@dataclass(frozen=True)
class OperationQuery:
    """``start`` inclusive, ``end`` exclusive, both aware UTC."""

    project_ids: Sequence[int]
    start: datetime
    end: datetime
    types: Sequence[str] = ()
    statuses: Sequence[str] = ()
    limit: int = 1000
    offset: int = 0
    with_total: bool = True


StoredTime = str | datetime


def stored_utc(value: StoredTime) -> datetime:
    """An aware UTC datetime from a stored time (text on SQLite, naive on PostgreSQL)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class OperationRow(NamedTuple):
    """One operation with its payment's details, in the column order of the page query.

    ``created_at`` and ``completed_at`` are UTC as stored: text ``YYYY-MM-DD hh:mm:ss.ffffff``
    on SQLite, a naive datetime on PostgreSQL (``stored_utc`` reads either).
    """

    project_id: int
    operation_id: int
    payment_id: str
    operation_type: str
    operation_status: str
    payment_method: str | None
    account_number: str | None
    customer_id: str
    description: str | None
    created_at: StoredTime
    completed_at: StoredTime | None
    initial_amount: int
    initial_currency: str
    converted_amount: int
    converted_currency: str
    code: str
    message: str


def balances_of(conn: Connection, project_ids: Sequence[int]) -> list[BalanceLine]:
    """Balances per project and currency, ordered by project then currency."""
    if not project_ids:
        return []
    ids = [int(pid) for pid in project_ids]
    where = "b.project_id IN ({})".format(", ".join(["?"] * len(ids)))
    return _balance_lines(conn, where, ids)


def balances_of_merchant(conn: Connection, merchant_id: int) -> list[BalanceLine]:
    """Balances of every project of the merchant, ordered as ``balances_of``: one statement
    where ``balances_of(projects of the merchant)`` would be two."""
    return _balance_lines(conn, "p.merchant_id = ?", (int(merchant_id),))


def _balance_lines(conn: Connection, where: str, params: Sequence[int]) -> list[BalanceLine]:
    # Hand-written SQL run on the driver: every balance/get runs it (``driver_rows``).
    rows = driver_rows(conn, _BALANCES.format(where), params)
    return [
        BalanceLine(int(project_id), name, currency, int(amount))
        for project_id, name, currency, amount in rows
    ]


_BALANCES = (
    "SELECT b.project_id, p.name, b.currency, b.amount FROM balances b"
    " JOIN projects p ON p.id = b.project_id WHERE {}"
    " ORDER BY b.project_id, b.currency"
)


def _filters(query: OperationQuery) -> list[Any]:
    conditions = [operations.c.created_at >= query.start, operations.c.created_at < query.end]
    if query.types:
        conditions.append(operations.c.type.in_(list(query.types)))
    if query.statuses:
        conditions.append(operations.c.status.in_(list(query.statuses)))
    return conditions


def _page_keys(query: OperationQuery) -> Select[Any] | CompoundSelect[Any]:
    """(id, created_at) of the page, walking one ordered index range per project.

    For several projects the ranges are combined with ``UNION ALL`` under one ``ORDER BY``:
    SQLite merges the ordered index scans (``MERGE (UNION ALL)``) and PostgreSQL plans a
    Merge Append, so both stop after ``offset + limit`` rows instead of sorting every match.
    """
    conditions = _filters(query)
    if len(query.project_ids) == 1 or len(query.project_ids) > UNION_MAX_PROJECTS:
        return (
            select(operations.c.id, operations.c.created_at)
            .where(operations.c.project_id.in_(list(query.project_ids)), *conditions)
            .order_by(operations.c.created_at, operations.c.id)
            .limit(query.limit)
            .offset(query.offset)
        )
    merged = union_all(
        *(
            select(operations.c.id, operations.c.created_at).where(
                operations.c.project_id == project_id, *conditions
            )
            for project_id in query.project_ids
        )
    )
    columns = merged.selected_columns
    return merged.order_by(columns.created_at, columns.id).limit(query.limit).offset(query.offset)


_ROW_COLUMNS = (
    operations.c.project_id,
    operations.c.id,
    payments.c.payment_id,
    operations.c.type,
    operations.c.status,
    payments.c.method,
    payments.c.account_number,
    payments.c.customer_id,
    payments.c.description,
    # Times as the driver gives them (see OperationRow): converting two values per row through
    # the column type cost more than the rest of the row.
    type_coerce(operations.c.created_at, String).label("created_at"),
    type_coerce(operations.c.completed_at, String).label("completed_at"),
    operations.c.sum_initial_amount,
    operations.c.sum_initial_currency,
    operations.c.sum_converted_amount,
    operations.c.sum_converted_currency,
    operations.c.code,
    operations.c.message,
)


def find_operations(conn: Connection, query: OperationQuery) -> tuple[list[OperationRow], int]:
    """One page of operations and the number of all matches (-1 when not asked for)."""
    if not query.project_ids:
        return [], 0
    keys = _page_keys(query).subquery("page")
    rows = conn.execute(
        select(*_ROW_COLUMNS)
        .select_from(keys)
        .join(operations, operations.c.id == keys.c.id)
        .join(payments, payments.c.id == operations.c.payment_pk)
        .order_by(keys.c.created_at, keys.c.id)
    )
    page = [OperationRow._make(row) for row in rows]
    total = -1
    if query.with_total:
        if len(page) < query.limit and (page or query.offset == 0):
            total = query.offset + len(page)
        else:
            total = int(
                conn.execute(
                    select(func.count())
                    .select_from(operations)
                    .where(
                        and_(
                            operations.c.project_id.in_(list(query.project_ids)),
                            *_filters(query),
                        )
                    )
                ).scalar_one()
            )
    return page, total


def operations_of_payment(
    conn: Connection, project_id: int, payment_id: str
) -> list[OperationRow] | None:
    """Every operation of one payment, oldest first; None when the payment does not exist."""
    payment_pk = conn.execute(
        select(payments.c.id).where(
            payments.c.project_id == project_id, payments.c.payment_id == payment_id
        )
    ).scalar()
    if payment_pk is None:
        return None
    rows = conn.execute(
        select(*_ROW_COLUMNS)
        .join(payments, payments.c.id == operations.c.payment_pk)
        .where(operations.c.payment_pk == payment_pk)
        .order_by(operations.c.created_at, operations.c.id)
    )
    return [OperationRow._make(row) for row in rows]
