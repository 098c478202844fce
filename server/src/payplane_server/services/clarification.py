"""Clarification use cases: asking the merchant for more data, taking their answer, and
declining payments whose wait ran out (protocol.md section 6).

Exactly one outcome per payment, whoever races: every change goes through
``processing.transition`` with ``expect={AWAITING_CLARIFICATION}`` (a conditional UPDATE), the
merchant's answer holds the payment row (``FOR UPDATE`` on PostgreSQL, the single writer lock on
SQLite) while it decides, and the timer claims due rows with ``FOR UPDATE SKIP LOCKED``.

At the exact instant of the deadline both a complete answer and the timer are in time; whichever
takes the row first wins and the other changes nothing.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, select, update

from ..context import AppContext
from ..db.tables import operations, payments
from ..domain.clarification import KINDS, ClarificationState, check_structure, wait_deadline
from ..domain.payments import Code, Status
from ..errors import GateError
from .processing import Change, transition, transition_many

__all__ = [
    "CONSENT_REFUSED_MESSAGE",
    "TIMERS_CHANNEL",
    "Answer",
    "fire_due",
    "next_deadline",
    "request_clarification",
    "submit_clarification",
]

CONSENT_REFUSED_MESSAGE = "The customer refused consent"
TIMERS_CHANNEL = "timers"

_AWAITING = frozenset({Status.AWAITING_CLARIFICATION})


def request_clarification(ctx: AppContext, conn: Connection, payment_pk: int, kind: str) -> bool:
    """Ask the merchant for every parameter of ``kind`` (``"customer"`` or ``"avs_data"``).

    Moves a PROCESSING payment to ``awaiting clarification`` (code 3191), starts the wait and
    queues the callback carrying ``clarification_fields``, all in the caller's transaction.
    Returns False, changing nothing, when the payment was not PROCESSING.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown clarification kind {kind!r}")
    payment = conn.execute(
        select(payments.c.processing_deadline).where(payments.c.id == payment_pk)
    ).first()
    if payment is None:
        return False
    state = ClarificationState.request(kind)
    deadline = wait_deadline(
        ctx.clock.now(), payment.processing_deadline, ctx.settings.clarification_wait_seconds
    )
    return _wait(ctx, conn, payment_pk, state, deadline, expect=frozenset({Status.PROCESSING}))


def _wait(
    ctx: AppContext,
    conn: Connection,
    payment_pk: int,
    state: ClarificationState,
    deadline: datetime,
    *,
    expect: frozenset[Status],
) -> bool:
    moved = transition(
        ctx,
        conn,
        payment_pk,
        Change(
            status=Status.AWAITING_CLARIFICATION,
            code=Code.NEED_CLARIFICATION,
            clarification_fields=state.fields(),
            set_deadline=True,
            clarification_deadline=deadline,
        ),
        expect=expect,
    )
    if moved:
        _store_state(conn, payment_pk, state)
        ctx.db.notify(conn, TIMERS_CHANNEL)
    return moved


def _store_state(conn: Connection, payment_pk: int, state: ClarificationState) -> None:
    conn.execute(
        update(payments)
        .where(payments.c.id == payment_pk)
        .values(clarification_state=state.to_json())
    )


def _state_of(payment: Row[Any]) -> ClarificationState:
    if payment.clarification_state:
        return ClarificationState.from_json(payment.clarification_state)
    # A payment put on hold without a recorded state: what it shows is what it asked for.
    fields = json.loads(payment.clarification_fields or "{}")
    requested = {
        kind: tuple(name for name in group.get("properties", {}) if name in KINDS[kind].params)
        for kind, group in fields.items()
        if kind in KINDS
    }
    return ClarificationState(requested={k: v for k, v in requested.items() if v})


@dataclass(frozen=True)
class Answer:
    """The Gate API's 200 answer to a clarification: complete, or what is still missing."""

    project_id: int
    payment_id: str
    request_id: str
    clarification_fields: dict[str, Any] | None = None

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": "success" if self.clarification_fields is None else "awaiting clarification",
            "project_id": self.project_id,
            "payment_id": self.payment_id,
            "request_id": self.request_id,
        }
        if self.clarification_fields is not None:
            out["clarification_fields"] = self.clarification_fields
        return out


def _not_found() -> GateError:
    return GateError(404, "3061", "Payment not found")


def _not_waiting(message: str = "The payment is not awaiting clarification") -> GateError:
    return GateError(409, "3060", message)


def submit_clarification(
    ctx: AppContext,
    project_id: int,
    payment_id: str,
    additional_data: Mapping[str, Mapping[str, str]],
) -> Answer:
    """Take the merchant's (authenticated, well-formed) answer for a waiting payment.

    Complete: the payment continues (success, or decline on refused consent) and a final
    callback is queued. Incomplete or invalid: the payment keeps waiting, the wait restarts and a
    callback lists what is still missing. Raises ``GateError`` (404, 409, 400) changing nothing,
    except that an answer after the deadline declines the payment as the timer would.
    """
    expired = False
    with ctx.db.write() as conn:
        payment = conn.execute(
            select(payments)
            .where(payments.c.project_id == project_id, payments.c.payment_id == payment_id)
            .with_for_update()
        ).first()
        if payment is None:
            raise _not_found()
        if payment.status != Status.AWAITING_CLARIFICATION.value:
            raise _not_waiting()
        now = ctx.clock.now()
        deadline = payment.clarification_deadline
        if deadline is not None and deadline < now:
            expired = _expire(ctx, conn, int(payment.id))
        else:
            return _answer(ctx, conn, payment, additional_data, now)
    assert expired
    raise _not_waiting("The wait for clarification has run out; the payment was declined")


def _answer(
    ctx: AppContext,
    conn: Connection,
    payment: Row[Any],
    additional_data: Mapping[str, Mapping[str, str]],
    now: datetime,
) -> Answer:
    state = _state_of(payment)
    problems = check_structure(additional_data, state.requested)
    if problems:
        raise GateError(
            400,
            "2004",
            "Invalid request",
            [{"field": p.field, "message": p.message} for p in problems],
        )
    result = state.apply(additional_data)
    pk = int(payment.id)
    if result.refused:
        change = Change(
            status=Status.DECLINE, code=Code.GENERAL_DECLINE, message=CONSENT_REFUSED_MESSAGE
        )
    elif result.complete:
        # The simulated acquirer approves once it has the data it asked for.
        change = Change(
            status=Status.SUCCESS,
            code=Code.SUCCESS,
            provider_payment_id="sim-" + secrets.token_hex(8),
            provider_auth_code=f"{secrets.randbelow(10**6):06d}",
        )
    else:
        deadline = wait_deadline(
            now, payment.processing_deadline, ctx.settings.clarification_wait_seconds
        )
        moved = _wait(ctx, conn, pk, result.state, deadline, expect=_AWAITING)
        assert moved, "the row is held by this transaction"
        return Answer(
            int(payment.project_id),
            payment.payment_id,
            _request_id(conn, pk),
            result.state.fields(),
        )
    moved = transition(ctx, conn, pk, change, expect=_AWAITING)
    assert moved, "the row is held by this transaction"
    _store_state(conn, pk, result.state)
    return Answer(int(payment.project_id), payment.payment_id, _request_id(conn, pk))


def _request_id(conn: Connection, payment_pk: int) -> str:
    value = conn.execute(
        select(operations.c.request_id)
        .where(operations.c.payment_pk == payment_pk)
        .order_by(operations.c.id.desc())
        .limit(1)
    ).scalar()
    return str(value or "")


def _expire(ctx: AppContext, conn: Connection, payment_pk: int) -> bool:
    return transition(
        ctx,
        conn,
        payment_pk,
        Change(status=Status.DECLINE, code=Code.AUTO_DECLINE),
        expect=_AWAITING,
    )


def next_deadline(ctx: AppContext) -> datetime | None:
    """The earliest pending clarification deadline: one probe of the partial index
    ``ix_payments_clarification_due``, whatever the number of waiting payments."""
    with ctx.db.read() as conn:
        value: datetime | None = conn.execute(_next_deadline_query()).scalar()
        return value


def _next_deadline_query() -> Any:
    deadline = payments.c.clarification_deadline
    return select(deadline).where(deadline.is_not(None)).order_by(deadline).limit(1)


def fire_due(ctx: AppContext, *, limit: int = 500) -> int:
    """Decline (code 603, with a callback) up to ``limit`` payments whose wait has run out, in
    one transaction. Returns how many were declined.

    Rows are claimed with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so several workers share the
    work and each payment is declined once; the claim re-checks the deadline under the lock, so a
    wait that a concurrent answer just restarted or ended is left alone.
    """
    now = ctx.clock.now()
    deadline = payments.c.clarification_deadline
    with ctx.db.write() as conn:
        query = (
            select(payments.c.id, payments.c.status)
            .where(deadline.is_not(None), deadline <= now)
            .order_by(deadline)
            .limit(limit)
        )
        if ctx.db.is_postgres:
            query = query.with_for_update(skip_locked=True)
        rows = conn.execute(query).all()
        due = [int(r.id) for r in rows if r.status == Status.AWAITING_CLARIFICATION.value]
        stale = [int(r.id) for r in rows if r.status != Status.AWAITING_CLARIFICATION.value]
        if stale:
            # A deadline left on a payment that no longer waits would be found forever.
            conn.execute(
                update(payments).where(payments.c.id.in_(stale)).values(clarification_deadline=None)
            )
        fired = transition_many(
            ctx, conn, due, Change(status=Status.DECLINE, code=Code.AUTO_DECLINE), expect=_AWAITING
        )
    return len(fired)
