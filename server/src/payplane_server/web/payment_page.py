"""The Payment Page (protocol.md section 3): ``GET /payment`` and the pages of one payment.

Customer URLs carry the payment's random ``page_token`` (``/pay/<token>/...``), never a
sequential id. Each page is the view of one payment status; asking for another page than the
status calls for answers 303 to the right one, so reloading, the back button and a second tab
all land where the payment is.

    /payment?<signed params>   register or reopen, then the method page (or where it is)
    /pay/<t>                   where the payment is now
    /pay/<t>/card              card form (GET) and submission (POST)
    /pay/<t>/3ds               the simulated ACS page (GET) and its answer (POST)
    /pay/<t>/waiting           waiting for additional information
    /pay/<t>/result            success or decline, then back to the merchant
    /pay/<t>/status            {"status", "final", "next"} for the waiting page's script

Every POST carries a CSRF token: an HMAC of the page token, the form and the time it was
issued, under a key derived once per process from the master key (no state in memory, so any
process can check a form another one rendered). A token older than two hours is stale.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import lru_cache
from typing import Any

import anyio.to_thread
from anyio import CapacityLimiter
from sqlalchemy import Row
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ..context import AppContext
from ..domain.cards import CardProblem
from ..domain.money import format_amount
from ..domain.payments import FINAL, Code, Status
from ..domain.validation import parse_query
from ..errors import FormExpired, InvalidParameters, PageError
from ..services import payments as service
from .i18n import negotiate
from .offload import run_database_work
from .pages import NO_STORE, gettext_for, render_page

__all__ = ["CSRF_TTL_SECONDS", "csrf_token", "routes"]

CSRF_TTL_SECONDS = 2 * 60 * 60
REDIRECT_DELAY_SECONDS = 3


def N_(message: str) -> str:
    """Marks a message for the catalogs; it is translated where it is shown."""
    return message


# Decline reasons as the customer reads them (operation codes of protocol.md section 4).
_REASONS = {
    Code.GENERAL_DECLINE: N_("The payment was declined by the card issuer."),
    Code.INCORRECT_DATA: N_("Incorrect card data was entered."),
    Code.THREE_DS_FAILED: N_("3-D Secure authentication failed."),
    Code.INSUFFICIENT_FUNDS: N_("There are not enough funds on the card."),
    Code.TIMEOUT: N_("The card issuer did not answer in time."),
    Code.EXPIRED: N_("The time for this payment has run out."),
    Code.AUTO_DECLINE: N_("The store did not provide the additional information in time."),
}
_DEFAULT_REASON = N_("The payment was declined.")
_TITLES = {
    "SignatureMismatch": N_("Invalid payment link"),
    "InvalidParameters": N_("Invalid payment parameters"),
    "PaymentIdConflict": N_("Payment ID already exists"),
    "PaymentNotFound": N_("Payment not found"),
    "FormExpired": N_("The form has expired"),
}
_MESSAGES = {
    "SignatureMismatch": N_(
        "The payment link is not signed correctly. Please go back to the store."
    ),
    "InvalidParameters": N_("The payment link has invalid parameters:"),
    "PaymentIdConflict": N_(
        "A payment with this ID but a different amount or currency already exists."
    ),
    "PaymentNotFound": N_("This payment does not exist."),
    "FormExpired": N_("The form has expired. Please open the payment link again."),
}


# --- CSRF --------------------------------------------------------------------------------


def _csrf_key(ctx: AppContext) -> bytes:
    key = ctx.extras.get("payment_page_csrf_key")
    if key is None:
        # A keyed PRF of a fixed label is a subkey of the master key's fingerprint key: derived
        # once per process, and never equal to a card fingerprint (no PAN is this text).
        key = bytes.fromhex(ctx.box.fingerprint("payplane payment page csrf key v1"))
        ctx.extras["payment_page_csrf_key"] = key
    assert isinstance(key, bytes)
    return key


def _csrf_mac(ctx: AppContext, token: str, form: str, issued: int) -> str:
    message = f"{token}|{form}|{issued}".encode()
    digest = hmac.digest(_csrf_key(ctx), message, hashlib.sha256)
    return base64.urlsafe_b64encode(digest[:24]).decode("ascii")


def csrf_token(ctx: AppContext, token: str, form: str) -> str:
    """The CSRF token of ``form`` (``card``, ``3ds``) on the pages of ``token``."""
    issued = int(ctx.clock.now().timestamp())
    return f"{issued}.{_csrf_mac(ctx, token, form, issued)}"


def _check_csrf(ctx: AppContext, token: str, form: str, value: str) -> None:
    issued_text, _, mac = value.partition(".")
    if not issued_text.isascii() or not issued_text.isdigit() or len(issued_text) > 12:
        raise FormExpired()
    issued = int(issued_text)
    age = ctx.clock.now().timestamp() - issued
    expected = _csrf_mac(ctx, token, form, issued)
    if not hmac.compare_digest(expected, mac) or not -60 <= age <= CSRF_TTL_SECONDS:
        raise FormExpired()


# --- rendering -----------------------------------------------------------------------------


def _context(request: Request) -> AppContext:
    ctx = request.app.state.context
    assert isinstance(ctx, AppContext)
    return ctx


def _language(payment: service.Payment) -> str:
    return negotiate(payment.language_code)


# Babel's pattern application costs more than the rest of a page's values; the function is
# pure, so the amounts shown recently are kept.
_format_amount = lru_cache(maxsize=4096)(format_amount)


def _summary(payment: service.Payment, language: str) -> dict[str, Any]:
    return {
        "amount": _format_amount(int(payment.amount), payment.currency, language),
        "description": payment.description,
        "payment_id": payment.payment_id,
        "token": payment.page_token,
    }


def _path(payment: service.Payment) -> str:
    """The page that shows ``payment`` in its current status."""
    base = f"/pay/{payment.page_token}"
    status = payment.status
    if status == Status.NEW.value:
        return base + "/card"
    if status == Status.AWAITING_3DS.value:
        return base + "/3ds"
    if status in (Status.PROCESSING.value, Status.AWAITING_CLARIFICATION.value):
        return base + "/waiting"
    return base + "/result"


def _see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers=NO_STORE)


def _error_page(error: PageError, language: str) -> Response:
    name = type(error).__name__
    problems = getattr(error, "problems", None)
    _ = gettext_for(language)
    return render_page(
        "error.html",
        language,
        status=error.status,
        title=_(_TITLES.get(name, "Payment error")),
        message=_(_MESSAGES.get(name, error.message)),
        problems=problems,
        code=error.code,
    )


def _method_page(payment: service.Payment) -> Response:
    language = _language(payment)
    return render_page("method.html", language, **_summary(payment, language))


def _remaining(deadline: datetime, now: datetime) -> str:
    left = max(0, int((deadline - now).total_seconds()))
    hours, rest = divmod(left, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{seconds:02d}"
    return f"{minutes}:{seconds:02d}"


def _card_page(
    ctx: AppContext,
    payment: service.Payment,
    problems: list[CardProblem] | None = None,
    expiry: str = "",
    holder: str = "",
) -> Response:
    language = _language(payment)
    deadline = payment.best_before
    return render_page(
        "card.html",
        language,
        status=400 if problems else 200,
        csrf_token=csrf_token(ctx, payment.page_token, "card"),
        deadline=deadline.isoformat().replace("+00:00", "Z") if deadline else None,
        remaining=_remaining(deadline, ctx.clock.now()) if deadline else None,
        problems={problem.field: problem.reason for problem in problems or []},
        expiry=expiry,
        holder=holder,
        **_summary(payment, language),
    )


def _return_url(payment: Row[Any]) -> str | None:
    params = json.loads(payment.params)
    if payment.status == Status.SUCCESS.value:
        names = ("merchant_success_url", "redirect_success_url")
    else:
        names = ("merchant_fail_url", "redirect_fail_url")
    for name in names:
        value = params.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _result_page(payment: Row[Any], operation: Row[Any] | None) -> Response:
    language = _language(payment)
    _ = gettext_for(language)
    success = payment.status == Status.SUCCESS.value
    code = operation.code if operation is not None else ""
    return render_page(
        "result.html",
        language,
        outcome="success" if success else "decline",
        payment_status=payment.status,
        heading=_("Payment successful") if success else _("Payment declined"),
        reason=None if success else _(_REASONS.get(code, _DEFAULT_REASON)),
        card=payment.account_number,
        return_url=_return_url(payment),
        redirect_delay=REDIRECT_DELAY_SECONDS,
        **_summary(payment, language),
    )


# --- endpoints -----------------------------------------------------------------------------

Page = Callable[[Request], Awaitable[Response]]


class _InLanguage(Exception):
    """A page error of a known payment, shown in the payment's language."""

    def __init__(self, error: PageError, payment: Row[Any]) -> None:
        super().__init__(error.message)
        self.error = error
        self.language = _language(payment)


def _limiter(request: Request) -> CapacityLimiter:
    """Threads that may do page work at once, per app (so per event loop).

    Dozens of runnable threads fight for the GIL and a thread holding SQLite's single write
    lock waits its turn among them (a lock convoy); a few threads keep the lock holder
    running. PostgreSQL waits on the network, so more threads pay off there.
    """
    limiter = getattr(request.app.state, "payment_page_limiter", None)
    if limiter is None:
        limiter = CapacityLimiter(4 if _context(request).db.is_sqlite else 16)
        request.app.state.payment_page_limiter = limiter
    assert isinstance(limiter, CapacityLimiter)
    return limiter


async def _database_work(request: Request, function: Callable[..., Any], *args: Any) -> Any:
    """Page work that reads and writes the database (see ``offload``: on SQLite it runs on the
    event loop unless it would wait, so it must be safe to start again)."""
    return await run_database_work(_context(request).db, function, *args, limiter=_limiter(request))


async def _in_thread(request: Request, function: Callable[..., Any], *args: Any) -> Any:
    """Page work that may block or must run once: always in a worker thread."""
    return await anyio.to_thread.run_sync(function, *args, limiter=_limiter(request))


def _pages(handler: Callable[[Request], Response]) -> Page:
    """Run ``handler`` (database work: on the event loop or a worker thread, see
    ``_database_work``) and render page errors."""

    async def endpoint(request: Request) -> Response:
        try:
            response: Response = await _database_work(request, handler, request)
            return response
        except _InLanguage as wrapped:
            return _error_page(wrapped.error, wrapped.language)
        except PageError as error:
            return _error_page(error, negotiate(request.query_params.get("language_code")))

    return endpoint


def open_payment(request: Request) -> Response:
    """``GET /payment``: verify, validate, register or reopen, render."""
    ctx = _context(request)
    params, problems = parse_query(request.scope.get("query_string", b""))
    if problems:
        raise InvalidParameters(problems)
    signature = params.pop("signature", None)
    if signature is not None:
        # A '+' of the Base64 signature left unencoded arrives as a space.
        signature = signature.replace(" ", "+")
    payment = service.open_payment(ctx, params, signature)
    if payment.status != Status.NEW.value:
        return _see_other(_path(payment))
    if params.get("force_payment_method") == "card":
        # The merchant chose the method: straight to the card form.
        return _card_page(ctx, payment)
    return _method_page(payment)


def current(request: Request) -> Response:
    ctx = _context(request)
    state = service.page_state(ctx, request.path_params["token"])
    if state.payment.status == Status.NEW.value:
        return _method_page(state.payment)
    return _see_other(_path(state.payment))


def _page_for(status: Status, request: Request) -> service.PageState | Response:
    """The payment's state when it is in ``status``, else a redirect to its page."""
    state = service.page_state(_context(request), request.path_params["token"])
    if state.payment.status != status.value:
        return _see_other(_path(state.payment))
    return state


def card_form(request: Request) -> Response:
    state = _page_for(Status.NEW, request)
    if isinstance(state, Response):
        return state
    return _card_page(_context(request), state.payment)


def _field(form: Any, name: str, limit: int = 256) -> str:
    value = form.get(name)
    if value is None or isinstance(value, UploadFile):
        return ""
    return str(value)[:limit]


async def card_submit(request: Request) -> Response:
    form = await request.form(max_files=0, max_fields=20)
    ctx = _context(request)
    token = request.path_params["token"]
    expiry, holder = _field(form, "expiry", 16), _field(form, "holder", 200)

    def check() -> service.Submission:
        payment = service.find_by_token(ctx, token)
        try:
            _check_csrf(ctx, token, "card", _field(form, "csrf_token"))
        except FormExpired as error:
            raise _InLanguage(error, payment) from None
        return service.check_submission(
            ctx, payment, pan=_field(form, "pan", 40), expiry=expiry,
            cvv=_field(form, "cvv", 8), holder=holder,
        )  # fmt: skip

    def check_and_record() -> tuple[service.Submission, Row[Any] | None]:
        """The check, and when the acquirer will not block (the simulator), its decision
        recorded too: one piece of database work. Asking the acquirer again, should the work
        start again, is harmless for such an acquirer (see ``acquirer``)."""
        submission = check()
        card = submission.card
        if card is None or service.acquirer_may_block(ctx, card):
            return submission, None
        decision = service.authorize(ctx, submission.payment, card)
        return submission, service.record_submission(ctx, submission.payment, card, decision)

    try:
        submission, recorded = await _database_work(request, check_and_record)
        if recorded is not None:
            return _see_other(_path(recorded))
        if submission.card is None:
            if submission.problems:
                return _card_page(ctx, submission.payment, submission.problems, expiry, holder)
            return _see_other(_path(submission.payment))
        # A call that may block (a network acquirer, the simulator's time-out card) runs on
        # the general thread pool, not on one of the few threads kept for page work.
        decision = await anyio.to_thread.run_sync(
            service.authorize, ctx, submission.payment, submission.card
        )
        # Recording is a conditional UPDATE from NEW: safe to start again.
        payment = await _database_work(
            request, service.record_submission, ctx, submission.payment, submission.card, decision
        )
        return _see_other(_path(payment))
    except _InLanguage as wrapped:
        return _error_page(wrapped.error, wrapped.language)
    except PageError as error:
        return _error_page(error, negotiate(None))


def challenge_form(request: Request) -> Response:
    state = _page_for(Status.AWAITING_3DS, request)
    if isinstance(state, Response):
        return state
    payment = state.payment
    language = _language(payment)
    return render_page(
        "acs.html",
        language,
        csrf_token=csrf_token(_context(request), payment.page_token, "3ds"),
        **_summary(payment, language),
    )


async def challenge_submit(request: Request) -> Response:
    form = await request.form(max_files=0, max_fields=20)
    ctx = _context(request)
    token = request.path_params["token"]

    def work() -> Response:
        payment = service.find_by_token(ctx, token)
        try:
            _check_csrf(ctx, token, "3ds", _field(form, "csrf_token"))
        except FormExpired as error:
            raise _InLanguage(error, payment) from None
        payment = service.complete_challenge(ctx, payment, _field(form, "code", 64))
        return _see_other(_path(payment))

    # The acquirer is asked inside: a worker thread, so that it is asked once.
    try:
        response: Response = await _in_thread(request, work)
        return response
    except _InLanguage as wrapped:
        return _error_page(wrapped.error, wrapped.language)
    except PageError as error:
        return _error_page(error, negotiate(None))


def waiting(request: Request) -> Response:
    state = service.page_state(_context(request), request.path_params["token"])
    payment = state.payment
    if payment.status not in (Status.PROCESSING.value, Status.AWAITING_CLARIFICATION.value):
        return _see_other(_path(payment))
    language = _language(payment)
    return render_page(
        "waiting.html", language, payment_status=payment.status, **_summary(payment, language)
    )


def result(request: Request) -> Response:
    state = service.page_state(_context(request), request.path_params["token"])
    if state.payment.status not in {status.value for status in FINAL}:
        return _see_other(_path(state.payment))
    return _result_page(state.payment, state.operation)


async def status(request: Request) -> Response:
    ctx = _context(request)
    try:
        payment = await _database_work(
            request, service.find_by_token, ctx, request.path_params["token"]
        )
    except PageError as error:
        return JSONResponse({"error": error.message}, status_code=error.status, headers=NO_STORE)
    return JSONResponse(
        {
            "status": payment.status,
            "final": payment.status in {status.value for status in FINAL},
            "next": _path(payment),
        },
        headers=NO_STORE,
    )


routes: list[BaseRoute] = [
    Route("/payment", _pages(open_payment), methods=["GET"]),
    Route("/pay/{token}", _pages(current), methods=["GET"]),
    Route("/pay/{token}/card", _pages(card_form), methods=["GET"]),
    Route("/pay/{token}/card", card_submit, methods=["POST"]),
    Route("/pay/{token}/3ds", _pages(challenge_form), methods=["GET"]),
    Route("/pay/{token}/3ds", challenge_submit, methods=["POST"]),
    Route("/pay/{token}/waiting", _pages(waiting), methods=["GET"]),
    Route("/pay/{token}/result", _pages(result), methods=["GET"]),
    Route("/pay/{token}/status", status, methods=["GET"]),
]
