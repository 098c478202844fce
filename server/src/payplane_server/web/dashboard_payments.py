"""Payments (search, one payment with its operations and callbacks, Resend) and balances.

Everything is scoped to the projects the signed-in user may see at this request; a payment or
callback outside them is "not found", whatever its ID.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..domain.payments import Status
from ..services import callbacks
from ..services import dashboard_queries as queries
from .dashboard_kit import Forbidden, NotFound, Visitor, context_of, render, see_other, signed_in

__all__ = ["routes"]

_MAX_PK = 2**63 - 1
STATUSES = [status.value for status in Status]

NOTICES = {
    "queued": "The callback was queued again as a new callback; it is sent shortly.",
    "due-now": "The callback is being retried now.",
    "in-flight": "The callback is being delivered right now; nothing was changed.",
    "waiting": "The callback waits for an earlier callback of this payment; nothing was changed.",
}


class BadQuery(ValueError):
    """A search parameter that cannot be used (shown on the page, status 400)."""


def _day(value: str, name: str) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise BadQuery(f"The {name} date must look like 2026-11-22.") from exc


def _parse_search(
    request: Request, visitor: Visitor
) -> tuple[dict[str, str], queries.PaymentFilter, dict[str, Any]]:
    params = request.query_params
    form = {
        name: params.get(name, "").strip()
        for name in ("payment_id", "status", "project", "from", "to")
    }
    if any(len(value) > 255 for value in form.values()):
        raise BadQuery("A search field is longer than 255 characters.")
    if any("\x00" in value for value in form.values()):
        raise BadQuery("A search field contains a NUL character.")
    if form["status"] and form["status"] not in STATUSES:
        raise BadQuery("Choose a status from the list.")
    project: int | None = None
    if form["project"]:
        raw = form["project"]
        if not (raw.isascii() and raw.isdigit()) or int(raw) not in visitor.project_ids:
            raise Forbidden("You do not have access to that project.")
        project = int(raw)
    start, end = _day(form["from"], "From"), _day(form["to"], "To")
    if start and end and end < start:
        raise BadQuery("The To date is before the From date.")
    where = queries.PaymentFilter(
        payment_id=form["payment_id"] or None,
        status=form["status"] or None,
        project_id=project,
        created_from=datetime(start.year, start.month, start.day, tzinfo=UTC) if start else None,
        # The To day is inclusive; the last representable day has no upper bound at all.
        created_to=(
            datetime(end.year, end.month, end.day, tzinfo=UTC) + timedelta(days=1)
            if end and end < date.max
            else None
        ),
    )
    paging: dict[str, Any] = {}
    for name, key in (("older", "older_than"), ("newer", "newer_than")):
        cursor_text = params.get(name)
        if cursor_text:
            cursor = queries.Cursor.decode(cursor_text)
            if cursor is None:
                raise BadQuery("The page link is broken; start the search again.")
            paging[key] = cursor
    return form, where, paging


def payments(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    values = {"payment_id": "", "status": "", "project": "", "from": "", "to": ""}
    try:
        values, where, paging = _parse_search(request, visitor)
    except BadQuery as exc:
        with context_of(request).db.read() as conn:
            names = queries.project_names(conn, visitor.project_ids)
        return _payments_page(request, visitor, values, None, names, error=str(exc), status=400)
    with context_of(request).db.read() as conn:
        page = queries.search_payments(conn, visitor.project_ids, where, **paging)
        names = queries.project_names(conn, visitor.project_ids)
    return _payments_page(request, visitor, values, page, names)


def _payments_page(
    request: Request,
    visitor: Visitor,
    values: dict[str, str],
    page: queries.PaymentPage | None,
    names: dict[int, str],
    *,
    error: str | None = None,
    status: int = 200,
) -> Response:
    query = {name: value for name, value in values.items() if value}
    return render(
        request,
        "payments.html",
        visitor,
        status=status,
        values=values,
        query=query,
        page=page,
        statuses=STATUSES,
        projects=names,
        error=error,
    )


def _pk(request: Request, name: str) -> int:
    value: int = request.path_params[name]
    if value > _MAX_PK:
        raise NotFound("There is no such payment among your projects.")
    return value


def payment(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    with context_of(request).db.read() as conn:
        detail = queries.payment_detail(conn, visitor.project_ids, _pk(request, "pk"))
    if detail is None:
        raise NotFound("There is no such payment among your projects.")
    return render(
        request,
        "payment.html",
        visitor,
        payment=detail,
        bodies={cb.id: _pretty(cb.body) for cb in detail.callbacks},
        notice=NOTICES.get(request.query_params.get("notice", "")),
    )


def _pretty(body: str) -> str:
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except ValueError:
        return body


def resend(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    ctx = context_of(request)
    pk, callback_id = _pk(request, "pk"), _pk(request, "callback_id")
    with ctx.db.read() as conn:
        owner = queries.callback_payment(conn, visitor.project_ids, callback_id)
    if owner is None or owner != pk:
        raise NotFound("There is no such callback among your projects.")
    outcome = callbacks.resend(ctx, callback_id)
    if outcome is None:
        raise NotFound("There is no such callback among your projects.")
    anchor = outcome.new_id or callback_id
    return see_other(f"/dashboard/payments/{pk}?notice={outcome.action}#callback-{anchor}")


def balances(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    if not visitor.sees_balances:
        raise Forbidden("Your role does not show balances.")
    with context_of(request).db.read() as conn:
        lines = queries.list_balances(conn, visitor.project_ids)
    return render(request, "balances.html", visitor, lines=lines)


routes: list[BaseRoute] = [
    Route("/dashboard/payments", signed_in(payments), methods=["GET"]),
    Route("/dashboard/payments/{pk:int}", signed_in(payment), methods=["GET"]),
    Route(
        "/dashboard/payments/{pk:int}/callbacks/{callback_id:int}/resend",
        signed_in(resend),
        methods=["POST"],
    ),
    Route("/dashboard/balances", signed_in(balances), methods=["GET"]),
]
