"""A rate limiter shared by every process and machine: counters live in the database.

Sliding-window counter: requests are counted per subject in fixed one-minute windows (one row
per subject and window, bumped with an atomic ``INSERT .. ON CONFLICT DO UPDATE .. RETURNING``
on SQLite and PostgreSQL alike), and a request is admitted while

    previous window's count × (share of the previous window still inside the last 60 s)
    + current window's count  ≤  limit

so that no rolling minute holds much more than ``limit`` requests, even across a window
boundary (a plain fixed window would admit 2 × limit around it). Refused requests are not
counted: a client that keeps knocking does not push its own wait further out. Rows older than
the previous window are removed when a subject opens a new window.
"""

from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from ..context import AppContext
from ..db.tables import rate_limits

__all__ = ["WINDOW_SECONDS", "Decision", "admit", "estimate", "hit", "retry_after"]

WINDOW_SECONDS = 60

# SQLite has one writer at a time, and threads that find the write lock taken back off in
# sleeps of up to 100 ms; queueing this process's counter updates on a mutex instead keeps a
# burst of concurrent requests from turning into a train of such sleeps.
_SQLITE_WRITER = threading.Lock()


@dataclass(frozen=True)
class Decision:
    allowed: bool
    #: Seconds to wait before the next request can succeed (0 when allowed).
    retry_after: int


def estimate(previous: int, current: int, elapsed: float) -> float:
    """Requests in the rolling minute ending now (``elapsed`` seconds into the window)."""
    return previous * (WINDOW_SECONDS - elapsed) / WINDOW_SECONDS + current


def admit(previous: int, current: int, elapsed: float, limit: int) -> bool:
    """Whether one more request (already included in ``current``) stays within ``limit``."""
    return estimate(previous, current, elapsed) <= limit + 1e-9


def retry_after(previous: int, current: int, elapsed: float, limit: int, minimum: int) -> int:
    """Whole seconds until a request would be admitted again (``current`` excludes it)."""
    if current + 1 > limit:
        # Only the next window helps, once this window's count has decayed enough.
        needed = WINDOW_SECONDS * (1 - (limit - 1) / current) if current else 0.0
        wait = (WINDOW_SECONDS - elapsed) + max(needed, 0.0)
    else:
        room = limit - 1 - current
        needed = WINDOW_SECONDS * (1 - room / previous) if previous else 0.0
        wait = max(needed - elapsed, 0.0)
    return max(minimum, math.ceil(wait))


def hit(ctx: AppContext, subject: str, limit: int, *, minimum_retry_after: int = 3) -> Decision:
    """Count a request of ``subject`` and decide; one short write transaction."""
    now = ctx.clock.now()
    window, elapsed = _window_of(now)
    guard = _SQLITE_WRITER if ctx.db.is_sqlite else contextlib.nullcontext()
    keys = {"who": subject, "window": window, "before": window - 1}
    with guard, ctx.db.write() as conn:
        upsert = _SQLITE_BUMP if ctx.db.is_sqlite else _POSTGRES_BUMP
        current = int(conn.execute(upsert, keys).scalar_one())
        if current == 1:
            conn.execute(_FORGET_OLD, keys)
        previous = int(conn.execute(_PREVIOUS, keys).scalar() or 0)
        if admit(previous, current, elapsed, limit):
            return Decision(True, 0)
        conn.execute(_TAKE_BACK, keys)
        wait = retry_after(previous, current - 1, elapsed, limit, max(3, minimum_retry_after))
        return Decision(False, wait)


def _window_of(now: datetime) -> tuple[int, float]:
    seconds = now.timestamp()
    window = int(seconds // WINDOW_SECONDS)
    return window, seconds - window * WINDOW_SECONDS


# Built once: each Data API request runs them.
_ROW = {"subject": bindparam("who"), "window_start": bindparam("window"), "count": 1}
_KEY = [rate_limits.c.subject, rate_limits.c.window_start]
_SQLITE_BUMP = (
    sqlite.insert(rate_limits)
    .values(_ROW)
    .on_conflict_do_update(index_elements=_KEY, set_={"count": rate_limits.c.count + 1})
    .returning(rate_limits.c.count)
)
_POSTGRES_BUMP = (
    postgresql.insert(rate_limits)
    .values(_ROW)
    .on_conflict_do_update(index_elements=_KEY, set_={"count": rate_limits.c.count + 1})
    .returning(rate_limits.c.count)
)
_THIS = (rate_limits.c.subject == bindparam("who"),)
_PREVIOUS = select(rate_limits.c.count).where(
    *_THIS, rate_limits.c.window_start == bindparam("before")
)
_FORGET_OLD = delete(rate_limits).where(*_THIS, rate_limits.c.window_start < bindparam("before"))
_TAKE_BACK = (
    update(rate_limits)
    .where(*_THIS, rate_limits.c.window_start == bindparam("window"))
    .values(count=rate_limits.c.count - 1)
)
