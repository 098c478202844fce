"""The Gate API (protocol.md section 6): ``POST /v2/payment/clarification`` and
``POST /v2/payment/status``.

Both take ``{"general": {"project_id", "payment_id", "signature"}, ...}`` signed with the
project's secret key. Checks run cheapest and least revealing first: the body's shape (400,
code 2004), then the signature (401, code 3003; an unknown project is indistinguishable from a
wrong key), then the payment (404, code 3061), then its state (409, code 3060). Every error
has the Gate error body ``{"status": "error", "code", "message", "errors": [{"field",
"message"}]}``; nothing a client sends can produce a 500 or a stack trace.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from payplane import verify
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Scope

from ..context import AppContext
from ..db.tables import payments
from ..domain.clarification import check_structure
from ..errors import GateError
from ..services.clarification import submit_clarification
from ..services.processing import callback_body_for
from ..services.projects import project_secret

__all__ = ["PREFIX", "error_response", "routes", "too_large"]

log = logging.getLogger("payplane.gate")

PREFIX = "/v2/"
_GENERAL_KEYS = frozenset({"project_id", "payment_id", "signature"})
_MAX_PROJECT_ID = 2**63 - 1
_MAX_PAYMENT_ID = 255


def error_response(error: GateError) -> JSONResponse:
    """The Gate error body for ``error``."""
    return JSONResponse(
        {
            "status": "error",
            "code": error.code,
            "message": error.message,
            "errors": error.errors,
        },
        status_code=error.status,
    )


def too_large(scope: Scope) -> Response:
    """``BodyLimit``'s refusal (413 or 408) in the Gate error shape."""
    if scope.get("payplane_refusal") == 408:
        return error_response(GateError(408, "2004", "The request body arrived too slowly"))
    return error_response(GateError(413, "2004", "The request body is too large"))


def _bad(field: str, message: str, text: str = "Invalid request") -> GateError:
    return GateError(400, "2004", text, [{"field": field, "message": message}])


@dataclass(frozen=True)
class GateRequest:
    """A well-formed Gate request: the parsed body and its ``general`` identification."""

    body: dict[str, Any]
    project_id: int
    payment_id: str
    signature: str


def _parse(raw: bytes, allowed: frozenset[str]) -> GateRequest:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise _bad("body", "must be a JSON object", "The request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise _bad("body", "must be a JSON object")
    errors = [{"field": key, "message": "unknown key"} for key in body if key not in allowed]
    general = body.get("general")
    if general is None:
        errors.append({"field": "general", "message": "is required"})
    elif not isinstance(general, dict):
        errors.append({"field": "general", "message": "must be an object"})
    else:
        errors.extend(_general_problems(general))
    if errors:
        raise GateError(400, "2004", "Invalid request", errors)
    assert isinstance(general, dict)
    return GateRequest(body, general["project_id"], general["payment_id"], general["signature"])


def _general_problems(general: dict[str, Any]) -> list[dict[str, str]]:
    errors = [
        {"field": f"general.{key}", "message": "unknown key"}
        for key in general
        if key not in _GENERAL_KEYS
    ]
    project_id = general.get("project_id")
    if project_id is None:
        errors.append({"field": "general.project_id", "message": "is required"})
    elif type(project_id) is not int or not 0 < project_id <= _MAX_PROJECT_ID:
        errors.append({"field": "general.project_id", "message": "must be a positive integer"})
    payment_id = general.get("payment_id")
    if payment_id is None:
        errors.append({"field": "general.payment_id", "message": "is required"})
    elif not isinstance(payment_id, str) or not 0 < len(payment_id) <= _MAX_PAYMENT_ID:
        errors.append(
            {
                "field": "general.payment_id",
                "message": f"must be a string of 1 to {_MAX_PAYMENT_ID} characters",
            }
        )
    signature = general.get("signature")
    if signature is None:
        errors.append({"field": "general.signature", "message": "is required"})
    elif not isinstance(signature, str):
        errors.append({"field": "general.signature", "message": "must be a string"})
    return errors


def _authenticate(ctx: AppContext, request: GateRequest) -> None:
    with ctx.db.read() as conn:
        secret = project_secret(ctx, conn, request.project_id)
    if secret is None or not verify(request.body, request.signature, secret):
        raise GateError(
            401,
            "3003",
            "Invalid signature",
            [{"field": "general.signature", "message": "does not match the request"}],
        )


def _clarify(ctx: AppContext, raw: bytes) -> Response:
    request = _parse(raw, frozenset({"general", "additional_data"}))
    if "additional_data" not in request.body:
        raise _bad("additional_data", "is required", "The request has no additional_data")
    additional_data = request.body["additional_data"]
    problems = check_structure(additional_data)
    if problems:
        raise GateError(
            400,
            "2004",
            "Invalid request",
            [{"field": p.field, "message": p.message} for p in problems],
        )
    _authenticate(ctx, request)
    answer = submit_clarification(ctx, request.project_id, request.payment_id, additional_data)
    return JSONResponse(answer.body())


def _status(ctx: AppContext, raw: bytes) -> Response:
    request = _parse(raw, frozenset({"general"}))
    _authenticate(ctx, request)
    with ctx.db.read() as conn:
        pk = conn.execute(
            payments.select()
            .with_only_columns(payments.c.id)
            .where(
                payments.c.project_id == request.project_id,
                payments.c.payment_id == request.payment_id,
            )
        ).scalar()
        if pk is None:
            raise GateError(404, "3061", "Payment not found")
        body = callback_body_for(ctx, conn, int(pk))
    return Response(body, media_type="application/json")


def _endpoint(
    work: Callable[[AppContext, bytes], Response],
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        ctx: AppContext = request.app.state.context
        raw = await request.body()
        try:
            return await run_in_threadpool(work, ctx, raw)
        except GateError as error:
            return error_response(error)
        except Exception:
            log.exception("gate request failed: %s", request.url.path)
            return error_response(GateError(500, "0", "Internal error"))

    return endpoint


routes: list[BaseRoute] = [
    Route("/v2/payment/clarification", _endpoint(_clarify), methods=["POST"]),
    Route("/v2/payment/status", _endpoint(_status), methods=["POST"]),
]
