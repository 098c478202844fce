"""Dashboard sign-in sessions and the slowdown after repeated sign-in failures.

Everything lives in the database (tables ``dashboard_sessions`` and ``login_failures``), never
in one process's memory, because several processes on several machines serve the Dashboard.

Sessions: the browser holds a random session id; the table stores only its SHA-256, so a
leaked database does not hand out live sessions. Each session has its own CSRF token, an idle
timeout (sliding, refreshed at most every few minutes so that reads stay reads) and an
absolute lifetime. A session of a deleted account is no session.

Throttling: each failed sign-in counts against the e-mail address and against the client
address (both stored as hashes). Past a free allowance every further attempt must wait an
exponentially growing delay after the latest failure, capped; a success clears the e-mail's
count. While a subject has to wait, attempts are refused without checking the password and do
not count, so the wait never grows beyond the cap.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, case, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from ..context import AppContext
from ..db.tables import dashboard_sessions, login_failures, users

__all__ = [
    "ABSOLUTE_LIFETIME",
    "IDLE_TIMEOUT",
    "Session",
    "Throttle",
    "check_csrf",
    "clear_failures",
    "client_subject",
    "email_subject",
    "end_other_sessions",
    "end_session",
    "load_session",
    "purge_stale",
    "read_session",
    "record_failure",
    "slide_session",
    "start_session",
    "wait_before_attempt",
]

IDLE_TIMEOUT = timedelta(hours=2)
ABSOLUTE_LIFETIME = timedelta(hours=12)
# A sliding expiry is written back only when it moved by more than this (fewer writes).
_REFRESH_STEP = timedelta(minutes=5)


@dataclass(frozen=True)
class Session:
    """A live Dashboard session: whose it is and the token its forms must carry."""

    user_id: int
    csrf_token: str
    expires_at: datetime
    created_at: datetime


@dataclass(frozen=True)
class Throttle:
    """The slowdown policy: ``free`` failures cost nothing, then the wait doubles from
    ``base`` up to ``cap``; a subject's count is forgotten ``forget_after`` its last failure."""

    free: int
    base: timedelta = timedelta(seconds=1)
    cap: timedelta = timedelta(minutes=15)
    forget_after: timedelta = timedelta(hours=1)

    def wait(self, failures: int) -> timedelta:
        """How long after the latest failure the next attempt must wait."""
        if failures < self.free:
            return timedelta(0)
        grown: timedelta = self.base * (2 ** min(failures - self.free, 30))
        return min(self.cap, grown)


# Per e-mail address: a person mistyping gets five free tries. Per client address: more room,
# because one office behind NAT shares an address.
EMAIL_THROTTLE = Throttle(free=5)
CLIENT_THROTTLE = Throttle(free=20)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def email_subject(email: str) -> str:
    return "email:" + _digest(email.strip().lower())


def client_subject(address: str) -> str:
    return "client:" + _digest(address)


def _policy(subject: str) -> Throttle:
    return EMAIL_THROTTLE if subject.startswith("email:") else CLIENT_THROTTLE


# ---------------------------------------------------------------------------------- sessions


def start_session(ctx: AppContext, user_id: int, *, replaces: str | None = None) -> str:
    """Open a session for ``user_id`` and return its id (for the cookie; never stored).

    ``replaces``: the session id the browser held before signing in, ended here so that a
    session id planted before sign-in is worthless afterwards.
    """
    session_id = secrets.token_urlsafe(32)
    now = ctx.clock.now()
    with ctx.db.write() as conn:
        if replaces:
            conn.execute(
                delete(dashboard_sessions).where(dashboard_sessions.c.id_hash == _digest(replaces))
            )
        conn.execute(
            dashboard_sessions.insert().values(
                id_hash=_digest(session_id),
                user_id=user_id,
                csrf_token=secrets.token_urlsafe(32),
                created_at=now,
                expires_at=now + IDLE_TIMEOUT,
            )
        )
    return session_id


def read_session(conn: Connection, session_id: str | None, now: datetime) -> Session | None:
    """The live session for ``session_id`` as of ``now``, read in the caller's transaction,
    or None (unknown, expired, signed out, or the account deleted). Call ``slide_session``
    afterwards to keep it alive."""
    if not session_id or len(session_id) > 100:
        return None
    row = conn.execute(
        select(
            dashboard_sessions.c.user_id,
            dashboard_sessions.c.csrf_token,
            dashboard_sessions.c.created_at,
            dashboard_sessions.c.expires_at,
        )
        .join(users, users.c.id == dashboard_sessions.c.user_id)
        .where(dashboard_sessions.c.id_hash == _digest(session_id), users.c.deleted_at.is_(None))
    ).first()
    if row is None or row.expires_at <= now:
        return None
    return Session(int(row.user_id), row.csrf_token, row.expires_at, row.created_at)


def slide_session(ctx: AppContext, session_id: str, session: Session) -> Session:
    """Move the idle expiry forward (written only when it moved by more than a few minutes,
    so that most requests stay read-only), never past the absolute lifetime."""
    expires_at = min(ctx.clock.now() + IDLE_TIMEOUT, session.created_at + ABSOLUTE_LIFETIME)
    if expires_at - session.expires_at <= _REFRESH_STEP:
        return session
    with ctx.db.write() as conn:
        conn.execute(
            update(dashboard_sessions)
            .where(dashboard_sessions.c.id_hash == _digest(session_id))
            .values(expires_at=expires_at)
        )
    return dataclasses.replace(session, expires_at=expires_at)


def load_session(ctx: AppContext, session_id: str | None) -> Session | None:
    """``read_session`` in its own transaction, then ``slide_session``."""
    with ctx.db.read() as conn:
        session = read_session(conn, session_id, ctx.clock.now())
    if session is None or session_id is None:
        return None
    return slide_session(ctx, session_id, session)


def check_csrf(session: Session, presented: str | None) -> bool:
    """True when ``presented`` is this session's CSRF token (constant-time comparison)."""
    if not presented:
        return False
    return hmac.compare_digest(session.csrf_token.encode(), presented.encode("utf-8", "replace"))


def end_session(ctx: AppContext, session_id: str | None) -> None:
    """Sign out: the session id stops working everywhere at once."""
    if not session_id:
        return
    with ctx.db.write() as conn:
        conn.execute(
            delete(dashboard_sessions).where(dashboard_sessions.c.id_hash == _digest(session_id))
        )


def purge_stale(ctx: AppContext) -> int:
    """Delete expired sessions and failure counts past their forget window; returns how many
    rows went. Run after each successful sign-in, which is often enough to keep both tables
    small without a timer."""
    now = ctx.clock.now()
    forget = max(EMAIL_THROTTLE.forget_after, CLIENT_THROTTLE.forget_after)
    with ctx.db.write() as conn:
        gone = conn.execute(
            delete(dashboard_sessions).where(dashboard_sessions.c.expires_at <= now)
        ).rowcount
        gone += conn.execute(
            delete(login_failures).where(login_failures.c.last_failure_at <= now - forget)
        ).rowcount
    return int(gone)


# -------------------------------------------------------------------------------- throttling


def wait_before_attempt(ctx: AppContext, subjects: Iterable[str]) -> int:
    """Seconds the caller must still wait before a sign-in attempt for these subjects may be
    checked (0: go ahead)."""
    subjects = list(subjects)
    now = ctx.clock.now()
    with ctx.db.read() as conn:
        rows = conn.execute(
            select(
                login_failures.c.subject,
                login_failures.c.failures,
                login_failures.c.last_failure_at,
            ).where(login_failures.c.subject.in_(subjects))
        ).all()
    longest = timedelta(0)
    for row in rows:
        policy = _policy(row.subject)
        if now - row.last_failure_at >= policy.forget_after:
            continue
        remaining = row.last_failure_at + policy.wait(int(row.failures)) - now
        longest = max(longest, remaining)
    if longest <= timedelta(0):
        return 0
    return int(-(-longest.total_seconds() // 1))


def record_failure(ctx: AppContext, subjects: Iterable[str]) -> None:
    """Count one failed sign-in against each subject (an atomic upsert: concurrent failures
    from several processes all count)."""
    now = ctx.clock.now()
    with ctx.db.write() as conn:
        for subject in subjects:
            forget_before = now - _policy(subject).forget_after
            dialect = postgresql if ctx.db.is_postgres else sqlite
            stmt = dialect.insert(login_failures).values(
                subject=subject, failures=1, last_failure_at=now
            )
            # A count older than the forget window starts again from one.
            failures = case(
                (login_failures.c.last_failure_at <= forget_before, 1),
                else_=login_failures.c.failures + 1,
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=[login_failures.c.subject],
                    set_={"failures": failures, "last_failure_at": now},
                )
            )


def clear_failures(ctx: AppContext, subjects: Iterable[str]) -> None:
    """Forget the failures of these subjects. After a successful sign-in the caller clears
    only the e-mail address: clearing the client address too would let an attacker reset
    their own counter by signing in to an account of their own between guesses."""
    with ctx.db.write() as conn:
        conn.execute(delete(login_failures).where(login_failures.c.subject.in_(list(subjects))))


def end_other_sessions(ctx: AppContext, user_id: int, keep: str) -> None:
    """End every session of the account except the one with id ``keep`` (after a password
    change, other browsers must sign in again)."""
    with ctx.db.write() as conn:
        conn.execute(
            delete(dashboard_sessions).where(
                dashboard_sessions.c.user_id == user_id,
                dashboard_sessions.c.id_hash != _digest(keep),
            )
        )
