"""Callbacks for operators: validate callback URLs, list and show callbacks with their
attempts, and resend one.

``validate_callback_url`` is the one rule for every place a callback URL is accepted (a
project's URL, a payment's ``merchant_callback_url``) and is applied again by the delivery
worker before each attempt.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from sqlalchemy import insert, select, update

from ..config import Settings
from ..context import AppContext
from ..db.tables import callback_attempts, callbacks, payments

__all__ = [
    "Attempt",
    "CallbackDetail",
    "CallbackSummary",
    "ResendOutcome",
    "get_callback",
    "list_callbacks",
    "resend",
    "resend_callback",
    "validate_callback_url",
]

MAX_URL_LENGTH = 2048
_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address a host literal names, including legacy IPv4 forms like ``127.1``."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host and all(part.isdigit() or part.lower().startswith("0x") for part in host.split(".")):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _is_local(host: str) -> bool:
    if host in _LOCAL_NAMES or host.endswith(".localhost"):
        return True
    address = _address(host)
    return address is not None and (address.is_loopback or address.is_unspecified)


@functools.cache
def _machine_names() -> frozenset[str]:
    # getfqdn() may ask DNS: once per process.
    names = set()
    for name in (socket.gethostname(), socket.getfqdn()):
        if name:
            names.add(name.lower())
    return frozenset(names)


def _platform_endpoints(settings: Settings) -> list[tuple[str, int]]:
    endpoints = [
        (settings.host, settings.port),
        (settings.data_api_host or settings.host, settings.data_api_port),
    ]
    if settings.public_url:
        public = urlsplit(settings.public_url)
        if public.hostname:
            default = 443 if public.scheme == "https" else 80
            endpoints.append((public.hostname, public.port or default))
    return [(host.strip("[]").lower(), port) for host, port in endpoints]


def _same_host(url_host: str, platform_host: str) -> bool:
    if url_host == platform_host:
        return True
    url_address, platform_address = _address(url_host), _address(platform_host)
    if url_address is not None and url_address == platform_address:
        return True
    if platform_host not in _WILDCARDS and not _is_local(platform_host):
        return False
    # The machine's own name reaches a loopback listener on most hosts (/etc/hosts).
    return _is_local(url_host) or url_host in _machine_names()


def validate_callback_url(url: str, settings: Settings) -> str | None:
    """Why ``url`` cannot be a callback URL, or None when it can.

    Refused: anything but absolute ``http``/``https`` URLs with a host; spaces and control
    characters; more than 2048 characters; the platform's own listeners (Payment Page host,
    Data API, public URL, including loopback aliases of them); and, when
    ``allow_private_callback_urls`` is off, loopback, private, link-local and other
    non-public IP literals and ``localhost`` names. Host names are not resolved here: the
    delivery worker connects to public addresses only when private URLs are not allowed.
    """
    if not isinstance(url, str) or not url:
        return "the callback URL is empty"
    if len(url) > MAX_URL_LENGTH:
        return f"the callback URL is longer than {MAX_URL_LENGTH} characters"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return "the callback URL contains spaces or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "the callback URL is not a valid URL"
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        return "the callback URL must use http or https"
    host = (parts.hostname or "").lower()
    if not host:
        return "the callback URL must name a host"
    effective_port = port or (443 if scheme == "https" else 80)
    for platform_host, platform_port in _platform_endpoints(settings):
        if effective_port == platform_port and _same_host(host, platform_host):
            return "the callback URL points at this platform itself"
    if not settings.allow_private_callback_urls:
        address = _address(host)
        if _is_local(host) or (address is not None and not address.is_global):
            return "the callback URL points at a private or local address"
    return None


@dataclass(frozen=True)
class CallbackSummary:
    id: int
    project_id: int
    payment_id: str
    state: str
    attempts: int
    url: str
    created_at: datetime
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    last_error: str | None


@dataclass(frozen=True)
class Attempt:
    number: int
    started_at: datetime
    http_status: int | None
    latency_ms: int | None
    error: str | None


@dataclass(frozen=True)
class CallbackDetail:
    summary: CallbackSummary
    body: str
    claimed_until: datetime | None
    attempts: list[Attempt]


_SUMMARY_COLUMNS = (
    callbacks.c.id,
    callbacks.c.project_id,
    payments.c.payment_id,
    callbacks.c.state,
    callbacks.c.attempts,
    callbacks.c.url,
    callbacks.c.created_at,
    callbacks.c.next_attempt_at,
    callbacks.c.delivered_at,
    callbacks.c.last_error,
)


def _summary(row: object) -> CallbackSummary:
    return CallbackSummary(*(getattr(row, c.name) for c in _SUMMARY_COLUMNS))


def list_callbacks(
    ctx: AppContext,
    *,
    payment_id: str | None = None,
    project_id: int | None = None,
    failed: bool = False,
    limit: int = 50,
) -> list[CallbackSummary]:
    """Callbacks, newest first, optionally of one payment ID, one project, or failed only."""
    query = select(*_SUMMARY_COLUMNS).join(payments, payments.c.id == callbacks.c.payment_pk)
    if payment_id is not None:
        query = query.where(payments.c.payment_id == payment_id)
    if project_id is not None:
        query = query.where(callbacks.c.project_id == project_id)
    if failed:
        query = query.where(callbacks.c.state == "failed")
    query = query.order_by(callbacks.c.id.desc()).limit(max(1, limit))
    with ctx.db.read() as conn:
        return [_summary(row) for row in conn.execute(query)]


def get_callback(ctx: AppContext, callback_id: int) -> CallbackDetail | None:
    """One callback with its body and every attempt, oldest attempt first."""
    with ctx.db.read() as conn:
        row = conn.execute(
            select(*_SUMMARY_COLUMNS, callbacks.c.body, callbacks.c.claimed_until)
            .join(payments, payments.c.id == callbacks.c.payment_pk)
            .where(callbacks.c.id == callback_id)
        ).first()
        if row is None:
            return None
        attempts = [
            Attempt(a.number, a.started_at, a.http_status, a.latency_ms, a.error)
            for a in conn.execute(
                select(callback_attempts)
                .where(callback_attempts.c.callback_id == callback_id)
                .order_by(callback_attempts.c.number, callback_attempts.c.id)
            )
        ]
    return CallbackDetail(_summary(row), row.body, row.claimed_until, attempts)


@dataclass(frozen=True)
class ResendOutcome:
    """``action``: ``queued`` (a new callback ``new_id``), ``due-now`` (the pending callback is
    attempted at once), or a refusal: ``in-flight``, ``waiting`` (behind ``blocked_by``)."""

    action: str
    callback_id: int
    new_id: int | None = None
    blocked_by: int | None = None

    @property
    def ok(self) -> bool:
        return self.action in ("queued", "due-now")


def resend_callback(ctx: AppContext, callback_id: int) -> ResendOutcome | None:
    """Send a callback again; None when it does not exist.

    A delivered or failed callback is queued again as a new callback with the same URL and
    body (its history stays as it was). It takes its place behind anything still pending for
    the payment, so per-payment order holds. A pending callback that waits for its next
    attempt is made due now, keeping its attempt count; one being delivered right now, or
    one waiting for an earlier callback of its payment, is left alone.
    """
    now = ctx.clock.now()
    with ctx.db.write() as conn:
        row = conn.execute(select(callbacks).where(callbacks.c.id == callback_id)).first()
        if row is None:
            return None
        # The same lock a status change takes before queueing a callback (ordering).
        lock = select(payments.c.id).where(payments.c.id == row.payment_pk)
        if ctx.db.is_postgres:
            conn.execute(lock.with_for_update()).first()
            row = conn.execute(select(callbacks).where(callbacks.c.id == callback_id)).one()
        if row.state == "pending":
            if row.next_attempt_at is None:
                blocker = conn.execute(
                    select(callbacks.c.id)
                    .where(
                        callbacks.c.payment_pk == row.payment_pk,
                        callbacks.c.state == "pending",
                        callbacks.c.next_attempt_at.is_not(None),
                    )
                    .order_by(callbacks.c.id)
                    .limit(1)
                ).scalar()
                return ResendOutcome("waiting", callback_id, blocked_by=blocker)
            if row.claimed_until is not None and row.claimed_until > now:
                return ResendOutcome("in-flight", callback_id)
            conn.execute(
                update(callbacks)
                .where(callbacks.c.id == callback_id)
                .values(next_attempt_at=now, claimed_until=None)
            )
            ctx.db.notify(conn, "callbacks")
            return ResendOutcome("due-now", callback_id)
        active = conn.execute(
            select(callbacks.c.id)
            .where(
                callbacks.c.payment_pk == row.payment_pk,
                callbacks.c.state == "pending",
            )
            .limit(1)
        ).first()
        new_id: int = conn.execute(
            insert(callbacks)
            .values(
                payment_pk=row.payment_pk,
                project_id=row.project_id,
                operation_id=row.operation_id,
                url=row.url,
                body=row.body,
                state="pending",
                attempts=0,
                next_attempt_at=None if active else now,
                created_at=now,
            )
            .returning(callbacks.c.id)
        ).scalar_one()
        ctx.db.notify(conn, "callbacks")
    return ResendOutcome("queued", callback_id, new_id=int(new_id))


# The Dashboard's name for the same operation.
resend = resend_callback
