"""The Data API (protocol.md section 7): ``v1/balance/get``, ``v1/operations/get`` and
``v1/operations/get-by-payment``, each at ``/v1/v1/...`` and ``/v1/...``.

Every request goes through the same steps, each with its own answer when it fails:
Host header (400), POST (405), body read within the size limit (413), JSON object (400), token
(401), signature with the token's secret key (401), rate limit of the token's account (429),
then the endpoint's parameters (400) and project access read now from the account (401).
Success bodies carry a top-level ``signature`` made with the token's secret key; errors are the
unsigned envelope ``{"name", "message", "code": "0", "status"}``, and an unexpected failure is a
plain 500 envelope that never shows internals.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any

import orjson
from payplane import sign, verify
from sqlalchemy import Connection
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ..context import AppContext
from ..domain.accounts import Permission, role_permits, sees_all_projects
from ..errors import DataApiError
from ..services import ratelimit
from ..services.accounts import User, projects_of
from ..services.reporting import (
    OperationQuery,
    balances_of,
    balances_of_merchant,
    find_operations,
)
from ..services.reporting import operations_of_payment as payment_operations
from ..services.tokens import authenticate_token
from .data_api_params import (
    parse_balance,
    parse_body,
    parse_by_payment,
    parse_operations,
    render_operation,
)
from .middleware import BodyRefused, read_body
from .offload import run_database_work

__all__ = ["ENDPOINTS", "envelope", "exception_handlers", "routes"]

log = logging.getLogger("payplane.data_api")

Handler = Callable[[Connection, User, dict[str, Any]], dict[str, Any]]

# Requests may legitimately take minutes; the body itself must arrive within five.
BODY_TIMEOUT_SECONDS = 300.0
_BODY_REFUSALS = {
    408: "The request body did not arrive in time.",
    413: "The request body is larger than the platform accepts.",
}


def envelope(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    """The error body of the specification: name, message, code "0", status as a string."""
    name = DataApiError.REASONS.get(status) or HTTPStatus(status).phrase
    body = {"name": name, "message": message, "code": "0", "status": str(status)}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def _visible(conn: Connection, user: User, asked: tuple[int, ...] | None) -> list[int]:
    """The projects to answer for: all the account sees now, or the asked ones if all visible."""
    visible = projects_of(conn, user)
    if asked is None:
        return visible
    allowed = set(visible)
    for project_id in asked:
        if project_id not in allowed:
            raise DataApiError(401, f"Project {project_id} cannot be accessed with this token.")
    return list(asked)


def balance_get(conn: Connection, user: User, params: dict[str, Any]) -> dict[str, Any]:
    asked = parse_balance(params)
    if not role_permits(user.role, Permission.VIEW_BALANCES):
        raise DataApiError(401, f"The role {user.role} may not read balances.")
    if asked is None and sees_all_projects(user.role):
        lines = balances_of_merchant(conn, user.merchant_id)
    else:
        lines = balances_of(conn, _visible(conn, user, asked))
    return {
        "balance": [
            {
                "name": f"{line.project_name}_balance_{line.currency}",
                line.currency: str(line.amount),
            }
            for line in lines
        ]
    }


def operations_get(conn: Connection, user: User, params: dict[str, Any]) -> dict[str, Any]:
    request = parse_operations(params)
    query = OperationQuery(
        project_ids=_visible(conn, user, request.project_ids),
        start=request.start,
        end=request.end,
        types=request.types,
        statuses=request.statuses,
        limit=request.limit,
        offset=request.offset,
    )
    rows, total = find_operations(conn, query)
    return {
        "operations": [render_operation(row, request.zone, request.fields) for row in rows],
        "total": total,
        "limit": request.limit,
        "offset": request.offset,
    }


def operations_get_by_payment(
    conn: Connection, user: User, params: dict[str, Any]
) -> dict[str, Any]:
    request = parse_by_payment(params)
    _visible(conn, user, (request.project_id,))
    rows = payment_operations(conn, request.project_id, request.payment_id)
    if rows is None:
        raise DataApiError(
            404, f"Payment {request.payment_id} was not found in project {request.project_id}."
        )
    return {"operations": [render_operation(row, request.zone, request.fields) for row in rows]}


# Answered inside the request's write transaction (a few indexed rows), saving a transaction
# per request; the others may read for long and get their own read transaction.
_LIGHT: frozenset[Handler] = frozenset({balance_get, operations_get_by_payment})

ENDPOINTS: dict[str, Handler] = {
    "balance/get": balance_get,
    "operations/get": operations_get,
    "operations/get-by-payment": operations_get_by_payment,
}


def _process(ctx: AppContext, handler: Handler, raw: bytes) -> Response:
    """Everything after the body has arrived, in one write transaction: the token, the
    signature, the rate limiter's counter and, for light endpoints, the answer. Its one write
    is the counter, with nothing committed before it, so it may start again
    (``run_database_work``)."""
    params = parse_body(raw)
    token = params.get("token")
    if token is None:
        raise DataApiError(401, "The token is missing.")
    if not isinstance(token, str):
        raise DataApiError(401, "The token is not valid.")
    settings = ctx.settings
    light = handler in _LIGHT
    payload: dict[str, Any] | DataApiError | None = None
    with ctx.db.write() as conn:
        user, secret = _authenticate(ctx, conn, token, params)
        decision = ratelimit.count(
            conn,
            ctx.clock.now(),
            f"data-api:user:{user.id}",
            settings.rate_limit_per_minute,
            minimum_retry_after=settings.rate_limit_retry_after,
        )
        if decision.allowed and light:
            payload = _answer(handler, conn, user, params)
    if not decision.allowed:
        raise DataApiError(
            429,
            f"More than {settings.rate_limit_per_minute} requests in a minute for this account;"
            f" retry in {decision.retry_after} seconds.",
            retry_after=decision.retry_after,
        )
    if payload is None:
        with ctx.db.read() as conn:
            payload = _answer(handler, conn, user, params)
    if isinstance(payload, DataApiError):
        raise payload
    payload["signature"] = sign(payload, secret)
    return Response(orjson.dumps(payload), media_type="application/json")


def _authenticate(
    ctx: AppContext, conn: Connection, token: str, params: dict[str, Any]
) -> tuple[User, str]:
    """The token's account and secret key, once the request's signature is checked (401)."""
    found = authenticate_token(ctx, conn, token)
    if found is None:
        raise DataApiError(401, "The token is not valid.")
    secret = found[1]
    signature = params.get("signature")
    if signature is None:
        raise DataApiError(401, "The signature is missing.")
    try:
        signed = verify(params, signature, secret)
    except (TypeError, ValueError):
        raise DataApiError(400, "The request parameters cannot be signed.") from None
    if not signed:
        raise DataApiError(401, "The signature is not valid.")
    return found


def _answer(
    handler: Handler, conn: Connection, user: User, params: dict[str, Any]
) -> dict[str, Any] | DataApiError:
    # An error is returned, not raised, so that the request still counts against the limit.
    try:
        return handler(conn, user, params)
    except DataApiError as exc:
        return exc


def _endpoint(handler: Handler) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        for name, _ in request.scope["headers"]:
            if name == b"host":
                break
        else:
            raise DataApiError(400, "The Host header is required.")
        if request.method != "POST":
            raise DataApiError(405, "Only POST is allowed.")
        context: AppContext = request.app.state.context
        try:
            raw = await read_body(
                request.scope,
                request.receive,
                context.settings.max_body_bytes,
                BODY_TIMEOUT_SECONDS,
            )
        except BodyRefused as refused:
            raise DataApiError(refused.status, _BODY_REFUSALS[refused.status]) from None
        if raw is None:  # the client went away: nobody to answer
            return Response(status_code=400)
        response: Response
        if handler in _LIGHT:
            # A few indexed rows: on SQLite, on the event loop unless it would wait, in a group
            # commit that may stay open a few turns for more requests.
            response = await run_database_work(
                context.db, _process, context, handler, raw, linger=True
            )
        else:
            # A page of up to 1000 operations takes milliseconds: never on the event loop.
            response = await run_in_threadpool(_process, context, handler, raw)
        return response

    return endpoint


routes: list[BaseRoute] = [
    Route(f"{prefix}/{path}", _endpoint(handler), methods=None, name=f"{prefix}/{path}")
    for path, handler in ENDPOINTS.items()
    for prefix in ("/v1/v1", "/v1")
]
for _route in routes:
    assert isinstance(_route, Route)
    _route.methods = None  # every method reaches the endpoint, which answers 405 itself


async def _on_data_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DataApiError)
    headers = {}
    if exc.status == 405:
        headers["Allow"] = "POST"
    if exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    return envelope(exc.status, exc.message, headers)


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return envelope(404, "There is no such Data API endpoint.")
    return envelope(exc.status_code, HTTPStatus(exc.status_code).phrase)


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    log.error("Data API request failed: %s", type(exc).__name__, exc_info=exc)
    return envelope(500, "The platform could not process the request; try again later.")


exception_handlers: dict[Any, Callable[[Request, Exception], Any]] = {
    DataApiError: _on_data_api_error,
    HTTPException: _on_http_error,
    Exception: _on_unexpected,
}
