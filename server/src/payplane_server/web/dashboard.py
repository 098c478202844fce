"""The Dashboard (``/dashboard/...``): sign-in and sign-out here; My profile and My team in
``dashboard_account``, payments and balances in ``dashboard_payments``; shared plumbing in
``dashboard_kit``.

Sign-in form CSRF: before there is a session, the form's token is a random value also set in a
short-lived HTTP-only cookie (double submit), so another site cannot sign a browser in to an
account of the attacker's choosing.
"""

from __future__ import annotations

import hmac
import re
import secrets

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..services import sessions
from ..services.accounts import authenticate
from . import dashboard_account, dashboard_payments
from .dashboard_kit import (
    COOKIE,
    Visitor,
    clear_session_cookie,
    context_of,
    error_page,
    field,
    is_https,
    read_form,
    render,
    safe_next,
    see_other,
    set_session_cookie,
    signed_in,
)

__all__ = ["routes"]

SIGN_IN_COOKIE = "payplane_sign_in"
_SIGN_IN_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")
_SIGN_IN_PATH = "/dashboard/sign-in"


def _client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _sign_in_page(
    request: Request,
    *,
    status: int = 200,
    error: str | None = None,
    email: str = "",
    retry_after: int | None = None,
) -> Response:
    # Reused while it lives, so that two open sign-in tabs both work.
    token = request.cookies.get(SIGN_IN_COOKIE, "")
    if not _SIGN_IN_TOKEN.fullmatch(token):
        token = secrets.token_urlsafe(32)
    response = render(
        request,
        "sign_in.html",
        None,
        status=status,
        csrf_token=token,
        error=error,
        email=email,
        next=safe_next(request.query_params.get("next")),
        signed_out=request.query_params.get("signed-out") == "1",
    )
    response.set_cookie(
        SIGN_IN_COOKIE,
        token,
        max_age=3600,
        path=_SIGN_IN_PATH,
        secure=is_https(request),
        httponly=True,
        samesite="strict",
    )
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


async def sign_in_form(request: Request) -> Response:
    return _sign_in_page(request)


async def sign_in(request: Request) -> Response:
    ctx = context_of(request)
    try:
        form = await read_form(request)
    except Exception:  # a malformed multipart body is the client's fault
        return error_page(request, None, 400, "The form could not be read.")
    expected = request.cookies.get(SIGN_IN_COOKIE, "")
    presented = form.get("csrf_token")
    if not (
        expected
        and isinstance(presented, str)
        and hmac.compare_digest(expected.encode(), presented.encode("utf-8", "replace"))
    ):
        return _sign_in_page(
            request,
            status=403,
            error="The sign-in form had expired. Please enter your details again.",
        )
    try:
        email = field(form, "email", 320)
        password = form.get("password")
        if not isinstance(password, str) or len(password) > 1024:
            raise ValueError("The password is too long.")
    except ValueError as exc:
        return _sign_in_page(request, status=400, error=str(exc))
    if not email or not password:
        return _sign_in_page(
            request, status=400, error="Enter your email address and password.", email=email
        )
    subjects = [sessions.email_subject(email), sessions.client_subject(_client_address(request))]
    wait = await run_in_threadpool(sessions.wait_before_attempt, ctx, subjects)
    if wait:
        return _sign_in_page(
            request,
            status=429,
            error=f"Too many failed sign-in attempts. Try again in {wait} seconds.",
            email=email,
            retry_after=wait,
        )
    user = await run_in_threadpool(authenticate, ctx, email, password)
    if user is None:
        await run_in_threadpool(sessions.record_failure, ctx, subjects)
        return _sign_in_page(
            request, status=400, error="The email address or password is wrong.", email=email
        )
    await run_in_threadpool(sessions.clear_failures, ctx, subjects[:1])
    await run_in_threadpool(sessions.purge_stale, ctx)
    session_id = await run_in_threadpool(
        sessions.start_session, ctx, user.id, replaces=request.cookies.get(COOKIE)
    )
    next_field = form.get("next")
    response = see_other(safe_next(next_field if isinstance(next_field, str) else None))
    set_session_cookie(request, response, session_id)
    response.delete_cookie(SIGN_IN_COOKIE, path=_SIGN_IN_PATH)
    return response


def _sign_out(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    sessions.end_session(context_of(request), visitor.session_id)
    response = see_other(_SIGN_IN_PATH + "?signed-out=1")
    clear_session_cookie(request, response)
    return response


async def home(request: Request) -> Response:
    return see_other("/dashboard/payments")


async def not_found(request: Request) -> Response:
    return error_page(request, None, 404, "There is no such Dashboard page.")


routes: list[BaseRoute] = [
    Route("/dashboard", home, methods=["GET"]),
    Route("/dashboard/", home, methods=["GET"]),
    Route(_SIGN_IN_PATH, sign_in_form, methods=["GET"]),
    Route(_SIGN_IN_PATH, sign_in, methods=["POST"]),
    Route("/dashboard/sign-out", signed_in(_sign_out), methods=["POST"]),
    *dashboard_account.routes,
    *dashboard_payments.routes,
    Route("/dashboard/{rest:path}", not_found, methods=["GET", "POST"]),
]
