"""What the Dashboard reads: payment search, one payment with its history, balances.

Every query takes the projects the signed-in user may see and never returns anything outside
them; a payment of another merchant is simply not found. The payment list pages with a keyset
cursor on ``(created_at, id)``, so the hundredth page costs what the first does and rows that
arrive while someone pages do not shift the pages.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Integer,
    Select,
    String,
    bindparam,
    or_,
    select,
    union_all,
)

from ..db.tables import balances, callback_attempts, callbacks, operations, payments, projects

__all__ = [
    "PAGE_SIZE",
    "Attempt",
    "BalanceLine",
    "CallbackRecord",
    "Cursor",
    "OperationRecord",
    "PaymentDetail",
    "PaymentFilter",
    "PaymentPage",
    "PaymentSummary",
    "callback_payment",
    "list_balances",
    "payment_detail",
    "project_names",
    "search_payments",
    "search_statement",
]

PAGE_SIZE = 50
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Cursor:
    """A position in the list ordered newest first: ``(created_at, id)`` of a row."""

    created_at: datetime
    pk: int

    def encode(self) -> str:
        # Integer arithmetic: a float timestamp can be off by a microsecond, and a cursor one
        # microsecond early would skip rows that share the last row's time.
        micros = (self.created_at - _EPOCH) // timedelta(microseconds=1)
        return f"{micros}.{self.pk}"

    @classmethod
    def decode(cls, text: str) -> Cursor | None:
        """The cursor in ``text``, or None when it is not one (never an exception)."""
        micros, _, pk = text.partition(".")
        if not (text.isascii() and micros.isdigit() and pk.isdigit()):
            return None
        if len(micros) > 18 or len(pk) > 18:
            return None
        try:
            at = _EPOCH + timedelta(microseconds=int(micros))
        except OverflowError:
            return None
        return cls(at, int(pk))


@dataclass(frozen=True)
class PaymentFilter:
    """Search criteria; None means any. Dates are half-open: ``created_from <= t < created_to``."""

    payment_id: str | None = None
    status: str | None = None
    project_id: int | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None


@dataclass(frozen=True)
class PaymentSummary:
    pk: int
    project_id: int
    payment_id: str
    status: str
    amount: int
    currency: str
    customer_id: str
    created_at: datetime


@dataclass(frozen=True)
class PaymentPage:
    rows: list[PaymentSummary]
    # Cursors for the neighbouring pages, None when there is none.
    newer: Cursor | None
    older: Cursor | None


@dataclass(frozen=True)
class OperationRecord:
    id: int
    type: str
    status: str
    code: str
    message: str
    sum_initial: tuple[int, str]
    sum_converted: tuple[int, str]
    request_id: str
    created_at: datetime
    completed_at: datetime | None


@dataclass(frozen=True)
class Attempt:
    number: int
    started_at: datetime
    http_status: int | None
    latency_ms: int | None
    error: str | None


@dataclass(frozen=True)
class CallbackRecord:
    id: int
    operation_id: int | None
    url: str
    body: str
    state: str
    attempts: int
    next_attempt_at: datetime | None
    created_at: datetime
    delivered_at: datetime | None
    last_error: str | None
    history: list[Attempt]


@dataclass(frozen=True)
class PaymentDetail:
    pk: int
    project_id: int
    project_name: str
    payment_id: str
    status: str
    amount: int
    currency: str
    customer_id: str
    description: str | None
    method: str | None
    account_number: str | None
    card_holder: str | None
    language_code: str | None
    created_at: datetime
    updated_at: datetime
    operations: list[OperationRecord]
    callbacks: list[CallbackRecord]


@dataclass(frozen=True)
class BalanceLine:
    project_id: int
    project_name: str
    currency: str
    amount: int


_SUMMARY_COLUMNS = (
    payments.c.id,
    payments.c.project_id,
    payments.c.payment_id,
    payments.c.status,
    payments.c.amount,
    payments.c.currency,
    payments.c.customer_id,
    payments.c.created_at,
)


@dataclass(frozen=True)
class _Shape:
    """What a search statement's SQL depends on; the values travel as bound parameters."""

    projects: int
    payment_id: bool
    status: bool
    created_from: bool
    created_to: bool
    # "first" (newest first), "older" (after a cursor), "newer" (before a cursor, ascending)
    direction: str


def _page_part(index: int, shape: _Shape) -> Select[Any]:
    """One project's slice of the page: an index range scan on (project_id, created_at)."""
    created, pk = payments.c.created_at, payments.c.id
    query = select(*_SUMMARY_COLUMNS).where(
        payments.c.project_id == bindparam(f"project_{index}", type_=BigInteger)
    )
    if shape.payment_id:
        query = query.where(payments.c.payment_id == bindparam("payment_id", type_=String))
    if shape.status:
        query = query.where(payments.c.status == bindparam("status", type_=String))
    if shape.created_from:
        query = query.where(created >= bindparam("created_from", type_=created.type))
    if shape.created_to:
        query = query.where(created < bindparam("created_to", type_=created.type))
    at = bindparam("cursor_at", type_=created.type)
    cursor_pk = bindparam("cursor_pk", type_=BigInteger)
    # The plain bound on created_at lets both engines bound the index scan; the OR breaks
    # ties on equal times by id.
    if shape.direction == "newer":
        query = query.where(created >= at, or_(created > at, pk > cursor_pk))
        return query.order_by(created.asc(), pk.asc()).limit(bindparam("limit", type_=Integer))
    if shape.direction == "older":
        query = query.where(created <= at, or_(created < at, pk < cursor_pk))
    return query.order_by(created.desc(), pk.desc()).limit(bindparam("limit", type_=Integer))


@functools.lru_cache(maxsize=256)
def _statement(shape: _Shape) -> Select[Any]:
    # Built once per shape: assembling a UNION of subqueries costs SQLAlchemy milliseconds,
    # more than running it.
    parts = [_page_part(index, shape) for index in range(shape.projects)]
    if len(parts) == 1:
        return parts[0]
    merged = union_all(*(select(part.subquery()) for part in parts)).subquery()
    if shape.direction == "newer":
        order = (merged.c.created_at.asc(), merged.c.id.asc())
    else:
        order = (merged.c.created_at.desc(), merged.c.id.desc())
    return select(merged).order_by(*order).limit(bindparam("limit", type_=Integer))


def search_statement(
    project_ids: Sequence[int],
    where: PaymentFilter,
    older_than: Cursor | None,
    newer_than: Cursor | None,
    limit: int,
) -> tuple[Select[Any], dict[str, Any]]:
    """The query behind ``search_payments`` and its parameters (at least one project must be
    visible).

    Per project, then merged: each part walks its own index range on (project_id, created_at)
    and stops after ``limit`` rows, so a page costs the same however many payments are stored
    and however deep the page is.
    """
    visible = [p for p in dict.fromkeys(project_ids) if where.project_id in (None, p)]
    cursor = newer_than or older_than
    shape = _Shape(
        projects=len(visible),
        payment_id=where.payment_id is not None,
        status=where.status is not None,
        created_from=where.created_from is not None,
        created_to=where.created_to is not None,
        direction="newer" if newer_than else "older" if older_than else "first",
    )
    params: dict[str, Any] = {f"project_{i}": p for i, p in enumerate(visible)}
    params.update(
        payment_id=where.payment_id,
        status=where.status,
        created_from=where.created_from,
        created_to=where.created_to,
        limit=limit,
    )
    if cursor is not None:
        params.update(cursor_at=cursor.created_at, cursor_pk=cursor.pk)
    return _statement(shape), params


def _summary(row: Any) -> PaymentSummary:
    return PaymentSummary(
        pk=int(row.id),
        project_id=int(row.project_id),
        payment_id=row.payment_id,
        status=row.status,
        amount=int(row.amount),
        currency=row.currency,
        customer_id=row.customer_id,
        created_at=row.created_at,
    )


def search_payments(
    conn: Connection,
    project_ids: Sequence[int],
    where: PaymentFilter,
    *,
    older_than: Cursor | None = None,
    newer_than: Cursor | None = None,
    limit: int = PAGE_SIZE,
) -> PaymentPage:
    """One page of payments matching ``where`` in ``project_ids``, newest first.

    ``older_than`` continues towards older payments, ``newer_than`` goes back towards newer
    ones; with neither the page starts at the newest payment.
    """
    if not any(where.project_id in (None, p) for p in project_ids):
        return PaymentPage([], None, None)
    query, params = search_statement(project_ids, where, older_than, newer_than, limit + 1)
    fetched = [_summary(row) for row in conn.execute(query, params)]
    more = len(fetched) > limit
    rows = fetched[:limit]
    if newer_than is not None:
        rows.reverse()
    if not rows:
        return PaymentPage([], None, None)
    first, last = Cursor(rows[0].created_at, rows[0].pk), Cursor(rows[-1].created_at, rows[-1].pk)
    if newer_than is not None:
        # Came back from an older page: there is always an older one; newer only if more.
        return PaymentPage(rows, first if more else None, last)
    return PaymentPage(rows, first if older_than is not None else None, last if more else None)


def payment_detail(
    conn: Connection, project_ids: Sequence[int], payment_pk: int
) -> PaymentDetail | None:
    """A payment with its operations, callbacks and every delivery attempt, or None when it
    does not exist in ``project_ids``."""
    if not project_ids:
        return None
    row = conn.execute(
        select(payments, projects.c.name.label("project_name"))
        .join(projects, projects.c.id == payments.c.project_id)
        .where(payments.c.id == payment_pk, payments.c.project_id.in_(list(project_ids)))
    ).first()
    if row is None:
        return None
    ops = [
        OperationRecord(
            id=int(op.id),
            type=op.type,
            status=op.status,
            code=op.code,
            message=op.message,
            sum_initial=(int(op.sum_initial_amount), op.sum_initial_currency),
            sum_converted=(int(op.sum_converted_amount), op.sum_converted_currency),
            request_id=op.request_id,
            created_at=op.created_at,
            completed_at=op.completed_at,
        )
        for op in conn.execute(
            select(operations)
            .where(operations.c.payment_pk == payment_pk)
            .order_by(operations.c.id)
        )
    ]
    history: dict[int, list[Attempt]] = {}
    for attempt in conn.execute(
        select(callback_attempts)
        .join(callbacks, callbacks.c.id == callback_attempts.c.callback_id)
        .where(callbacks.c.payment_pk == payment_pk)
        .order_by(callback_attempts.c.callback_id, callback_attempts.c.number)
    ):
        history.setdefault(int(attempt.callback_id), []).append(
            Attempt(
                number=int(attempt.number),
                started_at=attempt.started_at,
                http_status=attempt.http_status,
                latency_ms=attempt.latency_ms,
                error=attempt.error,
            )
        )
    sent = [
        CallbackRecord(
            id=int(cb.id),
            operation_id=cb.operation_id,
            url=cb.url,
            body=cb.body,
            state=cb.state,
            attempts=int(cb.attempts),
            next_attempt_at=cb.next_attempt_at,
            created_at=cb.created_at,
            delivered_at=cb.delivered_at,
            last_error=cb.last_error,
            history=history.get(int(cb.id), []),
        )
        for cb in conn.execute(
            select(callbacks).where(callbacks.c.payment_pk == payment_pk).order_by(callbacks.c.id)
        )
    ]
    return PaymentDetail(
        pk=int(row.id),
        project_id=int(row.project_id),
        project_name=row.project_name,
        payment_id=row.payment_id,
        status=row.status,
        amount=int(row.amount),
        currency=row.currency,
        customer_id=row.customer_id,
        description=row.description,
        method=row.method,
        account_number=row.account_number,
        card_holder=row.card_holder,
        language_code=row.language_code,
        created_at=row.created_at,
        updated_at=row.updated_at,
        operations=ops,
        callbacks=sent,
    )


def callback_payment(conn: Connection, project_ids: Sequence[int], callback_id: int) -> int | None:
    """The payment (primary key) a callback belongs to, if the callback is in ``project_ids``."""
    if not project_ids:
        return None
    pk = conn.execute(
        select(callbacks.c.payment_pk).where(
            callbacks.c.id == callback_id, callbacks.c.project_id.in_(list(project_ids))
        )
    ).scalar()
    return None if pk is None else int(pk)


def list_balances(conn: Connection, project_ids: Sequence[int]) -> list[BalanceLine]:
    """Every balance of ``project_ids``, by project and currency."""
    if not project_ids:
        return []
    return [
        BalanceLine(int(row.project_id), row.name, row.currency, int(row.amount))
        for row in conn.execute(
            select(balances.c.project_id, projects.c.name, balances.c.currency, balances.c.amount)
            .join(projects, projects.c.id == balances.c.project_id)
            .where(balances.c.project_id.in_(list(project_ids)))
            .order_by(balances.c.project_id, balances.c.currency)
        )
    ]


def project_names(conn: Connection, project_ids: Sequence[int]) -> dict[int, str]:
    """``{project ID: name}`` for ``project_ids``, in ID order."""
    if not project_ids:
        return {}
    rows = conn.execute(
        select(projects.c.id, projects.c.name)
        .where(projects.c.id.in_(list(project_ids)))
        .order_by(projects.c.id)
    )
    return {int(row.id): row.name for row in rows}
