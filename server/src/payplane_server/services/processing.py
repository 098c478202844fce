"""Status changes of a payment and its operation, with their effects in the same transaction:
the balance on success, and the callback (the transactional outbox).

Every change is a conditional UPDATE (``WHERE status IN (allowed sources)``), so two writers
racing for one payment (a clarification and its timer, two workers) produce exactly one
outcome: the loser sees ``False`` and changes nothing.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from payplane import sign
from sqlalchemy import (
    Connection,
    Row,
    Update,
    bindparam,
    exists,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from ..context import AppContext
from ..db.tables import balances, callbacks, operations, payments, projects
from ..domain.callback_body import CallbackFacts, build_callback_body
from ..domain.payments import FINAL, Code, Status, sources_of
from .projects import decrypt_secret

__all__ = [
    "PROVIDER_ID",
    "Change",
    "callback_body_for",
    "callback_facts",
    "enqueue_callback",
    "load_payment",
    "start_operation",
    "transition",
    "transition_many",
    "transition_row",
]

# The simulator's provider id in callbacks (operation.provider.id).
PROVIDER_ID = 1


@dataclass(frozen=True)
class Change:
    """What happened to the payment: its new status, result code and message."""

    status: Status
    code: str
    message: str | None = None
    clarification_fields: dict[str, Any] | None = None
    provider_payment_id: str | None = None
    provider_auth_code: str | None = None
    # Set the clarification deadline (None clears it); ignored unless ``set_deadline``.
    clarification_deadline: Any = None
    set_deadline: bool = False
    # Send a callback for this change (final results and clarification requests do).
    notify_merchant: bool = True


# The single-payment path's statements are built once (with bind parameters): building and
# cache-keying a statement costs more than running it on SQLite. Statements whose SET clause
# depends on the change are built once per set of columns and kept.
_PAYMENT = select(payments).where(payments.c.id == bindparam("pk"))
_LATEST_OPERATION = (
    select(operations)
    .where(operations.c.payment_pk == bindparam("pk"))
    .order_by(operations.c.id.desc())
    .limit(1)
)
_LATEST_OPERATION_ID = (
    select(func.max(operations.c.id))
    .where(operations.c.payment_pk == bindparam("pk"))
    .scalar_subquery()
)
_INSERT_OPERATION = insert(operations).returning(operations.c.id)
# The project's secret and callback URL, and whether an earlier callback of the payment is
# still pending, in one query.
_CALLBACK_CONTEXT = select(
    projects.c.secret_enc,
    projects.c.callback_url,
    exists()
    .where(callbacks.c.payment_pk == bindparam("payment_pk"), callbacks.c.state == "pending")
    .label("waiting"),
).where(projects.c.id == bindparam("project_id"))
_INSERT_CALLBACK = insert(callbacks)
_INSERT_CALLBACK_ID = insert(callbacks).returning(callbacks.c.id)
_payment_updates: dict[tuple[bool, tuple[str, ...]], Update] = {}
_operation_updates: dict[tuple[str, ...], Update] = {}
_credits: dict[str, Any] = {}


def _set(table: Any, names: Sequence[str]) -> dict[str, Any]:
    # Bind names are prefixed: a bind named like its column is reserved by SQLAlchemy.
    return {name: bindparam(f"v_{name}", type_=table.c[name].type) for name in names}


def _payment_update(names: tuple[str, ...], *, from_new: bool) -> Update:
    """UPDATE payments SET <names> WHERE id = :pk AND status is NEW (``from_new``: RETURNING
    only the id, which says whether it moved) or one of :allowed (RETURNING the row)."""
    key = (from_new, names)
    statement = _payment_updates.get(key)
    if statement is None:
        status_ok = (
            payments.c.status == Status.NEW.value
            if from_new
            else payments.c.status.in_(bindparam("allowed", expanding=True))
        )
        statement = (
            update(payments)
            .where(payments.c.id == bindparam("pk"), status_ok)
            .values(**_set(payments, names))
            .returning(*((payments.c.id,) if from_new else payments.c))
        )
        _payment_updates[key] = statement
    return statement


def _operation_update(names: tuple[str, ...]) -> Update:
    """UPDATE the payment's latest operation SET <names>, RETURNING the row."""
    statement = _operation_updates.get(names)
    if statement is None:
        statement = (
            update(operations)
            .where(operations.c.id == _LATEST_OPERATION_ID)
            .values(**_set(operations, names))
            .returning(*operations.c)
        )
        _operation_updates[names] = statement
    return statement


def _bound(values: dict[str, Any]) -> dict[str, Any]:
    return {f"v_{name}": value for name, value in values.items()}


def load_payment(conn: Connection, payment_pk: int) -> Row[Any] | None:
    return conn.execute(_PAYMENT, {"pk": payment_pk}).first()


def _operation(conn: Connection, payment_pk: int) -> Row[Any] | None:
    return conn.execute(_LATEST_OPERATION, {"pk": payment_pk}).first()


def start_operation(
    ctx: AppContext,
    conn: Connection,
    payment: Row[Any],
    *,
    also: dict[str, Any] | None = None,
) -> int | None:
    """Move a NEW payment to PROCESSING and create its ``sale`` operation (code 9999).

    ``also``: more payment columns to set in the same conditional UPDATE (the card).
    Returns the operation id, or None when the payment was not NEW any more (a double submit).
    """
    now = ctx.clock.now()
    values: dict[str, Any] = {"status": Status.PROCESSING.value, "updated_at": now}
    if also:
        values.update(also)
    statement = _payment_update(tuple(values), from_new=True)
    moved = conn.execute(statement, {"pk": payment.id, **_bound(values)}).first()
    if moved is None:
        return None
    result = conn.execute(
        _INSERT_OPERATION,
        {
            "payment_pk": payment.id,
            "project_id": payment.project_id,
            "type": "sale",
            "status": Status.PROCESSING.value,
            "code": Code.AWAITING_PROCESSING,
            "message": Code.message(Code.AWAITING_PROCESSING),
            "sum_initial_amount": payment.amount,
            "sum_initial_currency": payment.currency,
            "sum_converted_amount": payment.amount,
            "sum_converted_currency": payment.currency,
            "provider_id": PROVIDER_ID,
            "request_id": secrets.token_hex(16),
            "created_at": now,
        },
    )
    return int(result.scalar_one())


def transition(
    ctx: AppContext,
    conn: Connection,
    payment_pk: int,
    change: Change,
    *,
    expect: Iterable[Status] | None = None,
) -> bool:
    """Apply ``change`` to the payment and its latest operation, if the payment is in one of
    ``expect`` (default: every status the state machine allows the move from).

    Returns False, changing nothing, when the payment was not in such a status.
    """
    return transition_row(ctx, conn, payment_pk, change, expect=expect) is not None


def transition_row(
    ctx: AppContext,
    conn: Connection,
    payment_pk: int,
    change: Change,
    *,
    expect: Iterable[Status] | None = None,
) -> Row[Any] | None:
    """``transition`` that returns the payment row as updated, or None when it did not move."""
    now = ctx.clock.now()
    allowed = frozenset(expect) if expect is not None else sources_of(change.status)
    values: dict[str, Any] = {"status": change.status.value, "updated_at": now}
    if change.clarification_fields is not None or change.status != Status.AWAITING_CLARIFICATION:
        values["clarification_fields"] = (
            json.dumps(change.clarification_fields) if change.clarification_fields else None
        )
    if change.set_deadline:
        values["clarification_deadline"] = change.clarification_deadline
    elif change.status != Status.AWAITING_CLARIFICATION:
        values["clarification_deadline"] = None
    # RETURNING gives the rows as updated: nothing is read back.
    payment = conn.execute(
        _payment_update(tuple(values), from_new=False),
        {"pk": payment_pk, "allowed": sorted(s.value for s in allowed), **_bound(values)},
    ).first()
    if payment is None:
        return None
    op_values = _operation_values(change, now)
    operation = conn.execute(
        _operation_update(tuple(op_values)), {"pk": payment_pk, **_bound(op_values)}
    ).first()
    assert operation is not None
    if change.notify_merchant:
        found = conn.execute(
            _CALLBACK_CONTEXT, {"payment_pk": payment.id, "project_id": payment.project_id}
        ).one()
        secret = decrypt_secret(ctx, int(payment.project_id), found.secret_enc)
        facts = callback_facts(payment, operation, change.clarification_fields)
        url = _callback_url(payment, found.callback_url)
        _queue(ctx, conn, payment, operation.id, _signed_body(facts, secret), url, found.waiting)
    if change.status == Status.SUCCESS:
        # Last: every successful payment of the project and currency updates this one row,
        # and on PostgreSQL holds its lock until the commit.
        _credit(
            ctx,
            conn,
            payment.project_id,
            operation.sum_converted_currency,
            operation.sum_converted_amount,
        )
    return payment


def transition_many(
    ctx: AppContext,
    conn: Connection,
    payment_pks: Sequence[int],
    change: Change,
    *,
    expect: Iterable[Status],
) -> list[int]:
    """``transition`` for many payments at once, with a few statements per batch instead of
    several per payment (the clarification timer declines thousands at a time).

    Only for changes that move no money and ask for nothing: not SUCCESS, no
    ``clarification_fields``, no deadline (the deadline is cleared). Returns the primary keys of
    the payments that were in one of ``expect`` and moved; the others are left alone.
    """
    if change.status == Status.SUCCESS or change.clarification_fields or change.set_deadline:
        raise ValueError("transition_many takes only changes without money or clarification")
    if not payment_pks:
        return []
    now = ctx.clock.now()
    # RETURNING gives the rows as updated: no reading back.
    moved_rows = conn.execute(
        update(payments)
        .where(
            payments.c.id.in_(list(payment_pks)),
            payments.c.status.in_([s.value for s in expect]),
        )
        .values(
            status=change.status.value,
            updated_at=now,
            clarification_fields=None,
            clarification_deadline=None,
        )
        .returning(*payments.c)
    ).all()
    if not moved_rows:
        return []
    moved = [int(row.id) for row in moved_rows]
    op_values = _operation_values(change, now)
    latest_ids = (
        select(func.max(operations.c.id))
        .where(operations.c.payment_pk.in_(moved))
        .group_by(operations.c.payment_pk)
    )
    updated_ops = {
        int(op.payment_pk): op
        for op in conn.execute(
            update(operations)
            .where(operations.c.id.in_(latest_ids.scalar_subquery()))
            .values(**op_values)
            .returning(*operations.c)
        )
    }
    if not change.notify_merchant:
        return moved
    project_ids = {int(row.project_id) for row in moved_rows}
    project_rows = {
        int(row.id): row
        for row in conn.execute(
            select(projects.c.id, projects.c.secret_enc, projects.c.callback_url).where(
                projects.c.id.in_(project_ids)
            )
        )
    }
    secrets_by_project = {
        pid: decrypt_secret(ctx, pid, row.secret_enc) for pid, row in project_rows.items()
    }
    waiting_turn: set[int] = set(
        conn.execute(
            select(callbacks.c.payment_pk)
            .where(callbacks.c.payment_pk.in_(moved), callbacks.c.state == "pending")
            .distinct()
        ).scalars()
    )
    queued: list[dict[str, Any]] = []
    for payment in sorted(moved_rows, key=lambda row: int(row.id)):
        project_id = int(payment.project_id)
        operation = updated_ops[int(payment.id)]
        body = _signed_body(callback_facts(payment, operation), secrets_by_project[project_id])
        url = _callback_url(payment, project_rows[project_id].callback_url)
        waiting = payment.id in waiting_turn
        queued.append(_callback_row(payment, operation.id, body, url, waiting, now))
    conn.execute(insert(callbacks), queued)
    ctx.db.notify(conn, "callbacks")
    return moved


def _credit(ctx: AppContext, conn: Connection, project_id: int, currency: str, amount: int) -> None:
    # One upsert: an UPDATE-then-INSERT lets two first payments of a currency race on
    # PostgreSQL, and the loser's whole transaction (its payment) fails on the primary key.
    dialect = conn.dialect.name
    statement = _credits.get(dialect)
    if statement is None:
        upsert = pg_insert if dialect == "postgresql" else sqlite_insert
        base = upsert(balances)
        statement = base.on_conflict_do_update(
            index_elements=[balances.c.project_id, balances.c.currency],
            set_={"amount": balances.c.amount + base.excluded.amount},
        )
        _credits[dialect] = statement
    conn.execute(statement, {"project_id": project_id, "currency": currency, "amount": amount})


def callback_body_for(
    ctx: AppContext,
    conn: Connection,
    payment_pk: int,
    clarification_fields: dict[str, Any] | None = None,
) -> str:
    """The signed JSON text of the payment's current state in the callback format."""
    payment = load_payment(conn, payment_pk)
    operation = _operation(conn, payment_pk)
    assert payment is not None
    found = conn.execute(
        _CALLBACK_CONTEXT, {"payment_pk": payment_pk, "project_id": payment.project_id}
    ).one()
    secret = decrypt_secret(ctx, int(payment.project_id), found.secret_enc)
    return _signed_body(callback_facts(payment, operation, clarification_fields), secret)


def callback_facts(
    payment: Row[Any],
    operation: Row[Any] | None,
    clarification_fields: dict[str, Any] | None = None,
) -> CallbackFacts:
    """The callback facts of a payment row and its latest operation row (None before the
    first operation)."""
    if clarification_fields is None and payment.clarification_fields:
        clarification_fields = json.loads(payment.clarification_fields)
    if operation is None:
        # Registered but never submitted: report the payment with a placeholder operation.
        op_id, op_status, op_code = 0, payment.status, Code.AWAITING_PROCESSING
        op_created, op_date, request_id = payment.created_at, payment.updated_at, ""
        sum_initial = sum_converted = (payment.amount, payment.currency)
        provider_payment_id = auth_code = ""
        message = Code.message(op_code)
    else:
        op_id, op_status, op_code = operation.id, operation.status, operation.code
        op_created = operation.created_at
        op_date = operation.completed_at or payment.updated_at
        request_id = operation.request_id
        sum_initial = (operation.sum_initial_amount, operation.sum_initial_currency)
        sum_converted = (operation.sum_converted_amount, operation.sum_converted_currency)
        provider_payment_id = operation.provider_payment_id
        auth_code = operation.provider_auth_code
        message = operation.message
    facts = CallbackFacts(
        project_id=int(payment.project_id),
        payment_id=payment.payment_id,
        payment_status=payment.status,
        payment_date=payment.updated_at,
        payment_method=payment.method or "card",
        amount=int(payment.amount),
        currency=payment.currency,
        customer_id=payment.customer_id,
        operation_id=int(op_id),
        operation_type="sale",
        operation_status=op_status,
        operation_date=op_date,
        operation_created_date=op_created,
        request_id=request_id,
        sum_initial=(int(sum_initial[0]), sum_initial[1]),
        sum_converted=(int(sum_converted[0]), sum_converted[1]),
        code=op_code,
        message=message,
        provider_id=PROVIDER_ID,
        provider_payment_id=provider_payment_id,
        provider_auth_code=auth_code,
        account_number=payment.account_number,
        card_type=payment.card_type,
        card_holder=payment.card_holder,
        expiry_month=payment.expiry_month,
        expiry_year=payment.expiry_year,
        clarification_fields=clarification_fields,
    )
    return facts


def _signed_body(facts: CallbackFacts, secret: str) -> str:
    body = build_callback_body(facts)
    body["signature"] = sign(body, secret)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def enqueue_callback(
    ctx: AppContext,
    conn: Connection,
    payment: Row[Any],
    operation_id: int | None,
    body: str,
) -> int:
    """Queue a callback in the current transaction (the outbox).

    Callbacks of one payment are delivered in order: a callback is due at once only when no
    earlier callback of the payment is still pending; otherwise it waits (``next_attempt_at``
    NULL) until the worker finishes the one before it.
    """
    found = conn.execute(
        _CALLBACK_CONTEXT, {"payment_pk": payment.id, "project_id": payment.project_id}
    ).one()
    url = _callback_url(payment, found.callback_url)
    return _queue(ctx, conn, payment, operation_id, body, url, found.waiting, with_id=True)


def _queue(
    ctx: AppContext,
    conn: Connection,
    payment: Row[Any],
    operation_id: int | None,
    body: str,
    url: str | None,
    waiting: bool,
    *,
    with_id: bool = False,
) -> int:
    values = _callback_row(payment, operation_id, body, url, waiting, ctx.clock.now())
    ctx.db.notify(conn, "callbacks")
    if not with_id:
        conn.execute(_INSERT_CALLBACK, values)
        return 0
    return int(conn.execute(_INSERT_CALLBACK_ID, values).scalar_one())


def _operation_values(change: Change, now: datetime) -> dict[str, Any]:
    """The columns of the latest operation that ``change`` sets."""
    values: dict[str, Any] = {
        "status": change.status.value,
        "code": change.code,
        "message": change.message or Code.message(change.code),
    }
    if change.status in FINAL:
        values["completed_at"] = now
    if change.provider_payment_id is not None:
        values["provider_payment_id"] = change.provider_payment_id
    if change.provider_auth_code is not None:
        values["provider_auth_code"] = change.provider_auth_code
    return values


def _callback_url(payment: Row[Any], project_url: str | None) -> str | None:
    """The payment's own ``merchant_callback_url``, else its project's callback URL."""
    own = json.loads(payment.params).get("merchant_callback_url")
    return str(own) if own else project_url


def _callback_row(
    payment: Row[Any],
    operation_id: int | None,
    body: str,
    url: str | None,
    waiting: bool,
    now: datetime,
) -> dict[str, Any]:
    """A queued callback: due now, or waiting (``next_attempt_at`` NULL) for the payment's
    earlier callback to finish; failed at once when there is nowhere to send it."""
    return {
        "payment_pk": payment.id,
        "project_id": payment.project_id,
        "operation_id": operation_id,
        "url": url or "",
        "body": body,
        "state": "pending" if url else "failed",
        "attempts": 0,
        "next_attempt_at": None if waiting or not url else now,
        "created_at": now,
        "last_error": None if url else "no callback URL configured",
    }
