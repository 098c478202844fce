"""The parameter check service (protocol.md section 9): the client libraries' test mode asks
it whether a set of Payment Page parameters is valid before building a URL.

``GET /params/check`` and ``GET /v1/params/check`` take the parameters as a query string,
``POST /params/check`` as a JSON object (a form-encoded body is read like a query string).
No signature is needed and nothing is stored: the answer is the verdict of the same validator
that ``GET /payment`` uses, ``200 {"status": "ok"}`` or ``400 {"errors": [{"param", "reason"}]}``.
Whether the project exists is not checked (the service does not reveal which projects exist).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ..context import AppContext
from ..domain.validation import parse_query, validate
from ..errors import ParamProblem
from ..services.payments import callback_url_problem

__all__ = ["routes"]

_NO_STORE = {"Cache-Control": "no-store"}


def _verdict(request: Request, params: dict[str, Any], problems: list[ParamProblem]) -> Response:
    if not problems:
        ctx = request.app.state.context
        assert isinstance(ctx, AppContext)
        _, problems = validate(params, now=ctx.clock.now())
        if not problems:
            refused = callback_url_problem(ctx, params)
            problems = [refused] if refused is not None else []
    if problems:
        errors = [{"param": problem.param, "reason": problem.reason} for problem in problems]
        return JSONResponse({"errors": errors}, status_code=400, headers=_NO_STORE)
    return JSONResponse({"status": "ok"}, headers=_NO_STORE)


async def check_query(request: Request) -> Response:
    params, problems = parse_query(request.scope.get("query_string", b""))
    return _verdict(request, dict(params), problems)


async def check_body(request: Request) -> Response:
    body = await request.body()
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/x-www-form-urlencoded":
        params, problems = parse_query(body)
        return _verdict(request, dict(params), problems)
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        problem = ParamProblem("body", "The body must be a JSON object of parameters.")
        return _verdict(request, {}, [problem])
    return _verdict(request, data, [])


routes: list[BaseRoute] = [
    Route("/params/check", check_query, methods=["GET"]),
    Route("/v1/params/check", check_query, methods=["GET"]),
    Route("/params/check", check_body, methods=["POST"]),
    Route("/v1/params/check", check_body, methods=["POST"]),
]
