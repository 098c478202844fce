"""Payments with queued callbacks, for tests and benchmarks of callback delivery.

Projects go through ``services.projects.create_project``; payments are inserted as registration
leaves them (with a masked card, as a card submission leaves them) and then moved through the
real ``processing.start_operation`` and ``processing.transition``, which queue the signed
callbacks in the outbox.
"""

from __future__ import annotations

import json
import secrets
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, insert, select

from ..context import AppContext
from ..db.tables import callbacks, payments
from ..domain.payments import Code, Status
from ..services.processing import Change, load_payment, start_operation, transition
from ..services.projects import create_project

__all__ = ["callback_rows", "decide", "make_project", "queued_payment", "seed_payment"]


def make_project(ctx: AppContext, project_id: int, callback_url: str | None) -> str:
    """Create a project and return its secret key."""
    return create_project(
        ctx, project_id=project_id, name=f"Project {project_id}", callback_url=callback_url
    )


def seed_payment(
    ctx: AppContext,
    conn: Connection,
    *,
    project_id: int,
    payment_id: str,
    amount: int = 1000,
    currency: str = "EUR",
    merchant_callback_url: str | None = None,
    card: bool = True,
) -> int:
    """Insert a payment that is ready for ``start_operation`` and return its primary key."""
    now = ctx.clock.now()
    params: dict[str, Any] = {"payment_id": payment_id, "project_id": str(project_id)}
    if merchant_callback_url is not None:
        params["merchant_callback_url"] = merchant_callback_url
    card_values: dict[str, Any] = {}
    if card:
        card_values = {
            "method": "card",
            "account_number": "400000******0077",
            "card_holder": "JANE DOE",
            "card_type": "visa",
            "expiry_month": "12",
            "expiry_year": "2031",
        }
    result = conn.execute(
        insert(payments)
        .values(
            project_id=project_id,
            payment_id=payment_id,
            status=Status.NEW.value,
            amount=amount,
            currency=currency,
            customer_id="customer-1",
            params=json.dumps(params),
            processing_deadline=now + timedelta(seconds=ctx.settings.processing_threshold_seconds),
            page_token=secrets.token_urlsafe(24),
            created_at=now,
            updated_at=now,
            **card_values,
        )
        .returning(payments.c.id)
    )
    pk = int(result.scalar_one())
    payment = load_payment(conn, pk)
    assert payment is not None
    start_operation(ctx, conn, payment)
    return pk


def decide(
    ctx: AppContext,
    payment_pk: int,
    status: Status = Status.SUCCESS,
    code: str = Code.SUCCESS,
    **change: Any,
) -> None:
    """Apply a status change (queueing its callback) in its own transaction."""
    with ctx.db.write() as conn:
        if not transition(ctx, conn, payment_pk, Change(status, code, **change)):
            raise RuntimeError(f"payment {payment_pk} cannot move to {status.value!r}")


def queued_payment(
    ctx: AppContext,
    *,
    project_id: int,
    payment_id: str,
    merchant_callback_url: str | None = None,
    status: Status = Status.SUCCESS,
    code: str = Code.SUCCESS,
) -> int:
    """A payment moved to a final status in one transaction: one callback queued."""
    with ctx.db.write() as conn:
        pk = seed_payment(
            ctx,
            conn,
            project_id=project_id,
            payment_id=payment_id,
            merchant_callback_url=merchant_callback_url,
        )
        if not transition(ctx, conn, pk, Change(status, code)):
            raise RuntimeError("the payment did not move")
    return pk


def callback_rows(ctx: AppContext, payment_pk: int | None = None) -> list[Any]:
    """The callbacks table (of one payment), oldest first."""
    query = select(callbacks).order_by(callbacks.c.id)
    if payment_pk is not None:
        query = query.where(callbacks.c.payment_pk == payment_pk)
    with ctx.db.read() as conn:
        return list(conn.execute(query).all())
