"""A rate limiter shared by every process and machine: counters live in the database.

Sliding-window counter: requests are counted per subject in fixed one-minute windows, and a
request is admitted while

    previous window's count × (share of the previous window still inside the last 60 s)
    + current window's count  ≤  limit

so that no rolling minute holds much more than ``limit`` requests, even across a window
boundary (a plain fixed window would admit 2 × limit around it). Refused requests are not
counted: a client that keeps knocking does not push its own wait further out.

Each subject has one row holding its latest window, that window's count and the count of the
window before it; counting a request is one atomic ``INSERT .. ON CONFLICT DO UPDATE ..
RETURNING`` (the same text on SQLite and PostgreSQL) that moves the row on to a new window
when one begins. A row never moves back: a machine whose clock lags a little counts into the
window another machine has already opened.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from ..db import driver_rows

__all__ = ["WINDOW_SECONDS", "Decision", "admit", "count", "estimate", "retry_after"]

WINDOW_SECONDS = 60


@dataclass(frozen=True)
class Decision:
    allowed: bool
    #: Seconds to wait before the next request can succeed (0 when allowed).
    retry_after: int


_ADMITTED = Decision(True, 0)


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


def count(
    conn: Connection,
    now: datetime,
    subject: str,
    limit: int,
    *,
    minimum_retry_after: int = 3,
) -> Decision:
    """Count a request of ``subject`` and decide, in the caller's write transaction, so that
    what the request then reads shares it. A refused request is taken back at once; a
    rollback of the caller's transaction takes back an admitted one too."""
    window, elapsed = _window_of(now)
    ((current, previous),) = driver_rows(conn, _BUMP, (subject, window))
    current, previous = int(current), int(previous)
    if admit(previous, current, elapsed, limit):
        return _ADMITTED
    driver_rows(conn, _TAKE_BACK, (subject,))
    wait = retry_after(previous, current - 1, elapsed, limit, max(3, minimum_retry_after))
    return Decision(False, wait)


def _window_of(now: datetime) -> tuple[int, float]:
    seconds = now.timestamp()
    window = int(seconds // WINDOW_SECONDS)
    return window, seconds - window * WINDOW_SECONDS


# Each Data API request runs these: hand-written SQL, the same text on both engines, run on the
# driver (``driver_rows``). In an UPDATE every right-hand side reads the row as it was.
_BUMP = (
    "INSERT INTO rate_limits (subject, window_start, count, previous) VALUES (?, ?, 1, 0)"
    " ON CONFLICT (subject) DO UPDATE SET"
    " window_start = CASE WHEN rate_limits.window_start > excluded.window_start"
    " THEN rate_limits.window_start ELSE excluded.window_start END,"
    " count = CASE WHEN rate_limits.window_start >= excluded.window_start"
    " THEN rate_limits.count + 1 ELSE 1 END,"
    " previous = CASE WHEN rate_limits.window_start >= excluded.window_start"
    " THEN rate_limits.previous"
    " WHEN rate_limits.window_start = excluded.window_start - 1 THEN rate_limits.count"
    " ELSE 0 END"
    " RETURNING count, previous"
)
_TAKE_BACK = "UPDATE rate_limits SET count = count - 1 WHERE subject = ?"
