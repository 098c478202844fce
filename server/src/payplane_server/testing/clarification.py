"""Payments put on hold for clarification, for tests and benchmarks of the Gate API and timers.

Payments are inserted as registration would leave them (``new``, with the processing threshold
from the settings), then moved through the real ``start_operation`` and
``request_clarification``.
"""

from __future__ import annotations

import copy
import json
import secrets
from datetime import timedelta
from typing import Any

from payplane import sign
from sqlalchemy import Connection, insert, select

from ..context import AppContext
from ..db.tables import callbacks, payments
from ..services.clarification import request_clarification
from ..services.processing import load_payment, start_operation

__all__ = ["callback_bodies", "gate_body", "insert_new_payment", "waiting_payment"]


def insert_new_payment(
    ctx: AppContext,
    conn: Connection,
    *,
    project_id: int,
    payment_id: str,
    amount: int = 1000,
    currency: str = "EUR",
    customer_id: str = "customer-1",
) -> int:
    """Insert a registered (``new``) payment and return its primary key."""
    now = ctx.clock.now()
    result = conn.execute(
        insert(payments)
        .values(
            project_id=project_id,
            payment_id=payment_id,
            status="new",
            amount=amount,
            currency=currency,
            customer_id=customer_id,
            params=json.dumps({"payment_id": payment_id}),
            processing_deadline=now + timedelta(seconds=ctx.settings.processing_threshold_seconds),
            page_token=secrets.token_urlsafe(24),
            created_at=now,
            updated_at=now,
        )
        .returning(payments.c.id)
    )
    return int(result.scalar_one())


def waiting_payment(
    ctx: AppContext,
    *,
    project_id: int,
    payment_id: str,
    kind: str = "customer",
    conn: Connection | None = None,
) -> int:
    """A payment that waits for clarification of ``kind``; returns its primary key."""
    if conn is None:
        with ctx.db.write() as own:
            return waiting_payment(
                ctx, project_id=project_id, payment_id=payment_id, kind=kind, conn=own
            )
    pk = insert_new_payment(ctx, conn, project_id=project_id, payment_id=payment_id)
    payment = load_payment(conn, pk)
    assert payment is not None
    start_operation(ctx, conn, payment)
    if not request_clarification(ctx, conn, pk, kind):
        raise RuntimeError("the payment did not move to awaiting clarification")
    return pk


def gate_body(
    secret: str,
    project_id: int,
    payment_id: str,
    additional_data: Any = None,
    **extra: Any,
) -> dict[str, Any]:
    """A Gate request body signed with ``secret`` (``additional_data`` left out when None)."""
    body: dict[str, Any] = {"general": {"project_id": project_id, "payment_id": payment_id}}
    if additional_data is not None:
        body["additional_data"] = copy.deepcopy(additional_data)
    body.update(extra)
    body["general"]["signature"] = sign(body, secret)
    return body


def callback_bodies(ctx: AppContext, payment_pk: int) -> list[dict[str, Any]]:
    """Every callback queued for the payment, oldest first, as parsed JSON."""
    with ctx.db.read() as conn:
        rows = conn.execute(
            select(callbacks.c.body)
            .where(callbacks.c.payment_pk == payment_pk)
            .order_by(callbacks.c.id)
        ).all()
    return [json.loads(row.body) for row in rows]
