"""Payment Page use cases: register or reopen a payment from a signed URL, take the card,
finish a 3-D Secure challenge, and enforce ``best_before``.

Each use case reads, asks the acquirer (outside any transaction: it may block), then records
the decision in one write transaction through ``processing.start_operation`` and
``processing.transition``, whose conditional UPDATEs make double submits and races harmless.
Nothing here keeps state in memory, so any number of processes can serve one payment.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

import orjson
from payplane import verify
from sqlalchemy import Connection, Row, and_, bindparam, insert, select
from sqlalchemy.exc import IntegrityError

from ..acquirer import Authorization, Decision, Verdict, get_acquirer
from ..context import AppContext
from ..crypto import mask_pan
from ..db import DriverStatement
from ..db.tables import operations, payments, projects
from ..domain.cards import Card, CardProblem, check_card
from ..domain.payments import Code, Status
from ..domain.validation import PaymentRequest, expired_problem, validate
from ..errors import (
    InvalidParameters,
    ParamProblem,
    PaymentIdConflict,
    PaymentNotFound,
    SignatureMismatch,
)
from .callbacks import validate_callback_url
from .clarification import request_clarification
from .processing import Change, start_operation, transition_row
from .projects import decrypt_secret

__all__ = [
    "PageState",
    "Payment",
    "Registered",
    "Submission",
    "SubmitResult",
    "acquirer_may_block",
    "authorize",
    "callback_url_problem",
    "check_submission",
    "complete_challenge",
    "expire_if_due",
    "find_by_token",
    "open_payment",
    "page_state",
    "record_submission",
    "submit_card",
]

_PROJECT_ID_LIMIT = 2**63 - 1


@dataclass(frozen=True)
class PageState:
    """A payment and its latest operation (None before the customer submitted)."""

    payment: Row[Any]
    operation: Row[Any] | None


@dataclass(frozen=True)
class Submission:
    """A checked card form: the payment, and the card or why it was refused. No card and no
    problems means the payment is no longer waiting for a card."""

    payment: Row[Any]
    card: Card | None
    problems: list[CardProblem]


@dataclass(frozen=True)
class SubmitResult:
    """The payment after a card submission; ``problems`` when the form was refused."""

    payment: Row[Any]
    problems: list[CardProblem]


def _project_id(params: Mapping[str, str]) -> int | None:
    text = params.get("project_id", "")
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    number = int(text)
    return number if 0 < number <= _PROJECT_ID_LIMIT else None


# The hot path's statements are built once: constructing and cache-keying a statement costs
# more than running it on SQLite. The two that every new payment runs go straight to the
# driver (``DriverStatement``).
_LOOKUP = DriverStatement(
    select(projects.c.secret_enc, payments.c.id)
    .select_from(
        projects.outerjoin(
            payments,
            and_(
                payments.c.project_id == projects.c.id,
                payments.c.payment_id == bindparam("payment_id"),
            ),
        )
    )
    .where(projects.c.id == bindparam("project_id"))
)
_BY_KEY = select(payments).where(
    payments.c.project_id == bindparam("project_id"),
    payments.c.payment_id == bindparam("payment_id"),
)
_BY_TOKEN = select(payments).where(payments.c.page_token == bindparam("token"))
_BY_PK = select(payments).where(payments.c.id == bindparam("pk"))
_LATEST_OPERATION = (
    select(operations)
    .where(operations.c.payment_pk == bindparam("pk"))
    .order_by(operations.c.id.desc())
    .limit(1)
)


@dataclass(frozen=True, slots=True)
class Registered:
    """A payment just registered: the values it was inserted with and its id, which is what
    reading the row back would give (``open_payment`` does not read it back). Its card and
    clarification columns are all still empty."""

    id: int
    project_id: int
    payment_id: str
    status: str
    amount: int
    currency: str
    customer_id: str
    description: str | None
    best_before: datetime | None
    language_code: str | None
    interface_type: str | None
    params: str
    processing_deadline: datetime
    page_token: str
    created_at: datetime
    updated_at: datetime


# What the Payment Page reads of a payment: a row, or one just registered.
Payment = Row[Any] | Registered

_REGISTERED = tuple(field.name for field in fields(Registered) if field.name != "id")
_INSERT = DriverStatement(
    insert(payments)
    .values({name: bindparam(name) for name in _REGISTERED})
    .returning(payments.c.id)
)


def _lookup(
    conn: Connection, project_id: int, payment_id: str | None
) -> tuple[str, int | None] | None:
    """The project's encrypted secret and the id of the payment, if it exists (one query)."""
    found = _LOOKUP.rows(conn, {"project_id": project_id, "payment_id": payment_id})
    return (found[0][0], found[0][1]) if found else None


def _by_key(conn: Connection, project_id: int, payment_id: str) -> Row[Any] | None:
    found = conn.execute(_BY_KEY, {"project_id": project_id, "payment_id": payment_id})
    return found.first()


def _same_payment(existing: Row[Any], request: PaymentRequest) -> None:
    if existing.amount != request.amount or existing.currency != request.currency:
        raise PaymentIdConflict()


def open_payment(ctx: AppContext, params: Mapping[str, str], signature: str | None) -> Payment:
    """Register the payment of a signed URL, or reopen it (idempotent).

    Raises ``SignatureMismatch`` (bad or missing signature, or unknown project: nothing is
    revealed about which projects exist), ``InvalidParameters`` or ``PaymentIdConflict``.
    """
    project_id = _project_id(params)
    if project_id is None:
        _, problems = validate(params)
        raise InvalidParameters(problems or [ParamProblem("project_id", "Invalid project.")])
    payment_id = params.get("payment_id")
    # Worked out before the transaction (it may look up this machine's names once): it
    # refuses only a payment about to be registered, below.
    unreachable = callback_url_problem(ctx, params)
    try:
        # One transaction: reading the secret and inserting cost one BEGIN/COMMIT, and a
        # refused URL rolls back having written nothing.
        with ctx.db.write() as conn:
            found = _lookup(conn, project_id, payment_id)
            if found is None or not signature:
                raise SignatureMismatch()
            secret_enc, existing_pk = found
            secret = decrypt_secret(ctx, project_id, secret_enc)
            if not verify(params, signature, secret):
                raise SignatureMismatch()
            request, problems = validate(params)
            if request is None:
                raise InvalidParameters(problems)
            if existing_pk is not None:
                existing = _reload(conn, existing_pk)
                _same_payment(existing, request)
            else:
                now = ctx.clock.now()
                refused = [
                    problem
                    for problem in (expired_problem(request.best_before, now), unreachable)
                    if problem is not None
                ]
                if refused:
                    raise InvalidParameters(refused)
                return _register(ctx, conn, request, now)
    except (IntegrityError, ctx.db.engine.dialect.loaded_dbapi.IntegrityError):
        # Someone registered the same payment at the same moment: theirs is the payment.
        request, _ = validate(params)
        assert request is not None
        with ctx.db.read() as conn:
            again = _by_key(conn, request.project_id, request.payment_id)
        if again is None:
            raise
        _same_payment(again, request)
        existing = again
    return expire_if_due(ctx, existing)


def callback_url_problem(ctx: AppContext, params: Mapping[str, Any]) -> ParamProblem | None:
    """Why the payment's ``merchant_callback_url`` cannot receive callbacks, if it cannot.

    The same rule as a project's callback URL (the platform itself, and private addresses
    unless allowed, are refused), applied when the payment is registered rather than found
    out at the first delivery."""
    url = params.get("merchant_callback_url")
    if not isinstance(url, str) or not url:
        return None
    reason = validate_callback_url(url, ctx.settings)
    if reason is None:
        return None
    return ParamProblem("merchant_callback_url", f"{reason[:1].upper()}{reason[1:]}.")


def _register(
    ctx: AppContext, conn: Connection, request: PaymentRequest, now: datetime
) -> Registered:
    values: dict[str, Any] = {
        "project_id": request.project_id,
        "payment_id": request.payment_id,
        "status": Status.NEW.value,
        "amount": request.amount,
        "currency": request.currency,
        "customer_id": request.customer_id,
        "description": request.description,
        "best_before": request.best_before,
        "language_code": request.language_code,
        "interface_type": request.interface_type,
        # As received, non-ASCII kept as it is (orjson writes UTF-8, compact).
        "params": orjson.dumps(request.params).decode(),
        "processing_deadline": now + timedelta(seconds=ctx.settings.processing_threshold_seconds),
        "page_token": secrets.token_urlsafe(24),
        "created_at": now,
        "updated_at": now,
    }
    (pk,) = _INSERT.rows(conn, values)[0]
    return Registered(id=int(pk), **values)


def find_by_token(ctx: AppContext, token: str) -> Row[Any]:
    """The payment behind a page token, or ``PaymentNotFound``."""
    with ctx.db.read() as conn:
        return _by_token(conn, token)


def _by_token(conn: Connection, token: str) -> Row[Any]:
    if not 16 <= len(token) <= 64 or not token.replace("-", "").replace("_", "").isalnum():
        raise PaymentNotFound()
    row = conn.execute(_BY_TOKEN, {"token": token}).first()
    if row is None:
        raise PaymentNotFound()
    return row


def _latest_operation(conn: Connection, payment_pk: int) -> Row[Any] | None:
    return conn.execute(_LATEST_OPERATION, {"pk": payment_pk}).first()


def page_state(ctx: AppContext, token: str) -> PageState:
    """The payment behind a page token with its latest operation."""
    # One read transaction for the payment and its operation.
    with ctx.db.read() as conn:
        payment = _by_token(conn, token)
        if payment.status != Status.NEW.value:
            return PageState(payment, _latest_operation(conn, payment.id))
    return PageState(expire_if_due(ctx, payment), None)


def _reload(conn: Connection, payment_pk: int) -> Row[Any]:
    return conn.execute(_BY_PK, {"pk": payment_pk}).one()


def expire_if_due(ctx: AppContext, payment: Row[Any]) -> Row[Any]:
    """Decline (code 10101, with a callback) a NEW payment whose ``best_before`` has passed.

    Expiry is applied when the customer comes back (any page or submit), not by a timer.
    """
    if payment.status != Status.NEW.value or payment.best_before is None:
        return payment
    if payment.best_before > ctx.clock.now():
        return payment
    with ctx.db.write() as conn:
        if start_operation(ctx, conn, payment) is not None:
            moved = transition_row(ctx, conn, payment.id, Change(Status.DECLINE, Code.EXPIRED))
            if moved is not None:
                return moved
        return _reload(conn, payment.id)


def _record(
    ctx: AppContext, conn: Connection, payment_pk: int, decision: Decision
) -> Row[Any] | None:
    """Record the acquirer's decision; the payment row as updated (None: read it back)."""
    if decision.verdict == Verdict.SUCCESS:
        change = Change(
            Status.SUCCESS,
            Code.SUCCESS,
            provider_payment_id=decision.reference,
            provider_auth_code=decision.auth_code,
        )
    elif decision.verdict == Verdict.CHALLENGE:
        change = Change(
            Status.AWAITING_3DS,
            Code.AWAITING_PROCESSING,
            provider_payment_id=decision.reference,
            notify_merchant=False,
        )
    elif decision.verdict == Verdict.CLARIFICATION:
        request_clarification(ctx, conn, payment_pk, decision.clarification or "customer")
        return None
    else:
        change = Change(Status.DECLINE, decision.code, provider_payment_id=decision.reference)
    return transition_row(ctx, conn, payment_pk, change)


def check_submission(
    ctx: AppContext, payment: Row[Any], *, pan: str, expiry: str, cvv: str, holder: str
) -> Submission:
    """Step 1 of a card submission: is the payment still open, is the card data good?

    The CVV is checked and dropped here: it is in no returned value.
    """
    payment = expire_if_due(ctx, payment)
    if payment.status != Status.NEW.value:
        return Submission(payment, None, [])
    card, problems = check_card(pan, expiry, cvv, holder, ctx.clock.now().date())
    return Submission(payment, card, problems)


def acquirer_may_block(ctx: AppContext, card: Card) -> bool:
    """Whether asking the acquirer about ``card`` may block. An acquirer says it does not
    with a ``may_block(card)`` method; one without it is taken to block."""
    check = getattr(get_acquirer(ctx), "may_block", None)
    return True if check is None else bool(check(card))


def authorize(ctx: AppContext, payment: Row[Any], card: Card) -> Decision:
    """Step 2: ask the acquirer. May block: call it from a thread that holds nothing, unless
    ``acquirer_may_block`` says that it will not."""
    return get_acquirer(ctx).authorize(
        Authorization(
            project_id=int(payment.project_id),
            payment_id=payment.payment_id,
            amount=int(payment.amount),
            currency=payment.currency,
            card=card,
        )
    )


def record_submission(
    ctx: AppContext, payment: Row[Any], card: Card, decision: Decision
) -> Row[Any]:
    """Step 3: record the card and the decision in one transaction; a payment that another
    submission took meanwhile is returned unchanged."""
    card_columns = {
        "method": "card",
        "account_number": mask_pan(card.pan),
        "card_fingerprint": ctx.box.fingerprint(card.pan),
        "card_holder": card.holder,
        "card_type": card.type,
        "expiry_month": f"{card.expiry_month:02d}",
        "expiry_year": f"{card.expiry_year:04d}",
    }
    with ctx.db.write() as conn:
        # The card is stored by the same conditional UPDATE that takes the payment from NEW.
        if start_operation(ctx, conn, payment, also=card_columns) is None:
            return _reload(conn, payment.id)
        recorded = _record(ctx, conn, payment.id, decision)
        return recorded if recorded is not None else _reload(conn, payment.id)


def submit_card(
    ctx: AppContext, payment: Row[Any], *, pan: str, expiry: str, cvv: str, holder: str
) -> SubmitResult:
    """Take the card form of ``payment`` (a row from ``find_by_token``): the three steps in
    one call. Refused card data returns ``problems`` and changes nothing; a payment that is no
    longer NEW (double submit, another tab) is returned as it is."""
    submission = check_submission(ctx, payment, pan=pan, expiry=expiry, cvv=cvv, holder=holder)
    if submission.card is None:
        return SubmitResult(submission.payment, submission.problems)
    decision = authorize(ctx, submission.payment, submission.card)
    return SubmitResult(record_submission(ctx, submission.payment, submission.card, decision), [])


def complete_challenge(ctx: AppContext, payment: Row[Any], code: str) -> Row[Any]:
    """Answer the 3-D Secure challenge of ``payment`` (a row from ``find_by_token``)."""
    if payment.status != Status.AWAITING_3DS.value:
        return payment
    with ctx.db.read() as conn:
        operation = _latest_operation(conn, payment.id)
    reference = operation.provider_payment_id if operation is not None else ""
    decision = get_acquirer(ctx).complete_challenge(reference, code[:64])
    if decision.verdict == Verdict.SUCCESS:
        change = Change(
            Status.SUCCESS,
            Code.SUCCESS,
            provider_payment_id=decision.reference,
            provider_auth_code=decision.auth_code,
        )
    else:
        change = Change(Status.DECLINE, decision.code or Code.THREE_DS_FAILED)
    with ctx.db.write() as conn:
        moved = transition_row(ctx, conn, payment.id, change, expect={Status.AWAITING_3DS})
        return moved if moved is not None else _reload(conn, payment.id)
