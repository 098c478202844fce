"""What every Dashboard page shares: the signed-in visitor, the session cookie, CSRF checks,
templates and the error pages.

A page handler is a plain synchronous function ``(request, visitor, form) -> Response``
wrapped by ``signed_in``; the wrapper loads the session, refuses a POST whose CSRF token is
missing or wrong before the handler runs, and runs the handler in the thread pool (database
calls and argon2 block). Every Dashboard response is ``Cache-Control: no-store``: the pages
are private, and the page that shows a new token's secret key must never come back from a
cache.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from babel.numbers import get_currency_symbol
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..context import AppContext
from ..domain.accounts import Permission, PermissionDenied, role_permits
from ..domain.money import CURRENCY_EXPONENTS, to_major
from ..services import sessions
from ..services.accounts import User, get_user, projects_of

__all__ = [
    "COOKIE",
    "MAX_FIELD",
    "Forbidden",
    "Handler",
    "NotFound",
    "Visitor",
    "context_of",
    "error_page",
    "field",
    "money",
    "read_form",
    "render",
    "safe_next",
    "see_other",
    "set_session_cookie",
    "signed_in",
]

COOKIE = "payplane_dashboard"
COOKIE_PATH = "/dashboard"
# No form of the Dashboard needs more; longer values are refused, not truncated.
MAX_FIELD = 1000
_TEMPLATES = Path(__file__).parent / "templates"


class Forbidden(Exception):
    """403: the signed-in user may not see or do this."""


class NotFound(Exception):
    """404: no such thing among what the signed-in user may see."""


@dataclass(frozen=True)
class Visitor:
    """The signed-in user of this request, as of this request (permissions are read anew)."""

    user: User
    session: sessions.Session
    session_id: str
    project_ids: list[int]

    @property
    def is_admin(self) -> bool:
        return role_permits(self.user.role, Permission.MANAGE_TEAM)

    @property
    def sees_balances(self) -> bool:
        return role_permits(self.user.role, Permission.VIEW_BALANCES)


Handler = Callable[[Request, Visitor, FormData | None], Response]


def context_of(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.context
    return ctx


@functools.lru_cache(maxsize=512)
def _currency_symbol(currency: str) -> str:
    return str(get_currency_symbol(currency, locale="en"))


def money(amount: int, currency: str) -> str:
    """``format_amount(amount, currency, "en")``, the Payment Page's formatting, written out
    for English: Babel's pattern machinery costs more than the rest of a 50-row page."""
    if currency not in CURRENCY_EXPONENTS:
        return f"{amount} {currency} (minor units)"
    exponent = CURRENCY_EXPONENTS[currency]
    major = abs(to_major(amount, currency))
    return f"{'-' if amount < 0 else ''}{_currency_symbol(currency)}{major:,.{exponent}f}"


def _when(value: datetime | None) -> str:
    return "—" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


_BADGES = {
    "success": "good",
    "delivered": "good",
    "decline": "bad",
    "error": "bad",
    "failed": "bad",
    "processing": "wait",
    "awaiting 3ds result": "wait",
    "awaiting clarification": "wait",
    "pending": "wait",
}


def _badge_kind(status: str) -> str:
    """The colour class of a payment, operation or callback status."""
    return _BADGES.get(status, "plain")


_env = Environment(
    loader=FileSystemLoader(_TEMPLATES),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["money"] = money
_env.filters["when"] = _when
_env.filters["badge_kind"] = _badge_kind


def render(
    request: Request,
    template: str,
    visitor: Visitor | None,
    status: int = 200,
    **values: Any,
) -> HTMLResponse:
    """A Dashboard page from ``templates/dashboard/<template>``."""
    html = _env.get_template(f"dashboard/{template}").render(
        request=request,
        visitor=visitor,
        csrf_token=visitor.session.csrf_token if visitor else values.pop("csrf_token", ""),
        path=request.url.path,
        **values,
    )
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


def see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers={"Cache-Control": "no-store"})


def is_https(request: Request) -> bool:
    """Cookies get the Secure flag when the Dashboard is reached over HTTPS (directly, or
    through a proxy that uvicorn trusts for X-Forwarded-Proto) or the public URL is https."""
    public = context_of(request).settings.public_url or ""
    return request.url.scheme == "https" or public.startswith("https://")


def set_session_cookie(request: Request, response: Response, session_id: str) -> None:
    response.set_cookie(
        COOKIE,
        session_id,
        max_age=int(sessions.ABSOLUTE_LIFETIME.total_seconds()),
        path=COOKIE_PATH,
        secure=is_https(request),
        httponly=True,
        samesite="lax",
    )


def clear_session_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(
        COOKIE, path=COOKIE_PATH, secure=is_https(request), httponly=True, samesite="lax"
    )


def field(form: FormData | Mapping[str, Any] | None, name: str, limit: int = MAX_FIELD) -> str:
    """A text field of the form, stripped; ValueError when it is too long."""
    value = form.get(name) if form is not None else None
    if not isinstance(value, str):
        return ""
    if len(value) > limit:
        raise ValueError(f"The field {name} is longer than {limit} characters.")
    if "\x00" in value:  # PostgreSQL cannot store it; nobody types it
        raise ValueError(f"The field {name} contains a NUL character.")
    return value.strip()


def sign_in_url(request: Request) -> str:
    target = request.url.path
    if request.method == "GET" and request.url.query:
        target += "?" + request.url.query
    return "/dashboard/sign-in?next=" + quote(target, safe="")


def safe_next(value: str | None) -> str:
    """Only a path inside the Dashboard may be a redirect target (no open redirect)."""
    if not value:
        return "/dashboard/payments"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not value.startswith("/dashboard/") or "\\" in value:
        return "/dashboard/payments"
    return value


def _visitor(ctx: AppContext, session_id: str | None) -> Visitor | None:
    # One read transaction for the session, the account and its projects: this runs on
    # every request.
    with ctx.db.read() as conn:
        session = sessions.read_session(conn, session_id, ctx.clock.now())
        if session is None or session_id is None:
            return None
        user = get_user(conn, session.user_id)
        if user is None:
            return None
        projects = projects_of(conn, user)
    session = sessions.slide_session(ctx, session_id, session)
    return Visitor(user, session, session_id, projects)


def error_page(request: Request, visitor: Visitor | None, status: int, message: str) -> Response:
    titles = {
        400: "Bad request",
        403: "Forbidden",
        404: "Not found",
        409: "Conflict",
        413: "Too large",
        429: "Too many attempts",
    }
    return render(
        request,
        "error.html",
        visitor,
        status=status,
        title=titles.get(status, "Error"),
        message=message,
    )


async def read_form(request: Request) -> FormData:
    return await request.form(max_files=0, max_fields=200)


def signed_in(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a page handler: sign-in required, CSRF on POST, errors as pages."""

    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        ctx = context_of(request)
        visitor = await run_in_threadpool(_visitor, ctx, request.cookies.get(COOKIE))
        if visitor is None:
            response: Response = see_other(sign_in_url(request))
            if COOKIE in request.cookies:
                clear_session_cookie(request, response)
            return response
        form: FormData | None = None
        if request.method == "POST":
            try:
                form = await read_form(request)
            except Exception:  # a malformed multipart body is the client's fault
                return error_page(request, visitor, 400, "The form could not be read.")
            presented = form.get("csrf_token")
            if not sessions.check_csrf(
                visitor.session, presented if isinstance(presented, str) else None
            ):
                return error_page(
                    request,
                    visitor,
                    403,
                    "The form was not accepted: it has expired or did not come from this "
                    "Dashboard. Nothing was changed. Reload the page and try again.",
                )
        try:
            return await run_in_threadpool(handler, request, visitor, form)
        except (Forbidden, PermissionDenied) as exc:
            return error_page(request, visitor, 403, str(exc) or "You may not open this page.")
        except NotFound as exc:
            return error_page(request, visitor, 404, str(exc) or "There is nothing here.")

    return endpoint
