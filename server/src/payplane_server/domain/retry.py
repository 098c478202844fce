"""The callback retry schedule (protocol.md section 5) as data plus one pure function.

Attempts are numbered from 1. Attempt 1 is the first delivery, made as soon as the callback is
due. How long to wait *before* attempt ``n``, measured from the end of attempt ``n - 1``:

- ``n`` = 2 to 7 (the six retries 10 s apart): 10 seconds;
- ``n`` >= 8: ``70 + 10 * 1.12 ** (n - 4)`` seconds, capped at 4 hours. The formula passes
  4 hours between attempts 68 and 69, so every gap from attempt 69 on is exactly 4 hours.

The callback is given up (marked failed) after attempt 120, or earlier when the next attempt
would start more than 11 days after attempt 1. With nominal timing attempt 120 starts about
10.3 days after attempt 1, so the 11-day window only bites when attempts were delayed (a worker
was down, or each attempt ran into the 30 s timeout).

Pure: no I/O, no clock reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = ["SCHEDULE", "RetrySchedule", "next_attempt_at"]


@dataclass(frozen=True)
class RetrySchedule:
    """The schedule's numbers; ``SCHEDULE`` holds the platform's."""

    fast_retries: int = 6
    fast_gap: float = 10.0
    base: float = 70.0
    scale: float = 10.0
    growth: float = 1.12
    shift: int = 4
    cap: float = 4 * 60 * 60.0
    max_attempts: int = 120
    window: timedelta = timedelta(days=11)

    def gap_before(self, attempt: int) -> float:
        """Seconds to wait after attempt ``attempt - 1`` ends before attempt ``attempt`` starts."""
        if attempt < 2:
            raise ValueError("attempt 1 is the first delivery; gaps start before attempt 2")
        if attempt <= 1 + self.fast_retries:
            return self.fast_gap
        # Past the cap the power would only grow; stop computing it (and never overflow).
        exponent = attempt - self.shift
        if exponent > 200:
            return self.cap
        return min(self.base + self.scale * self.growth**exponent, self.cap)

    def gaps(self) -> list[tuple[int, float]]:
        """``(attempt, gap before it)`` for every retry the schedule allows."""
        return [(n, self.gap_before(n)) for n in range(2, self.max_attempts + 1)]

    def nominal_offsets(self) -> list[tuple[int, float]]:
        """``(attempt, seconds after attempt 1)`` when every attempt takes no time."""
        offsets = [(1, 0.0)]
        total = 0.0
        for attempt, gap in self.gaps():
            total += gap
            offsets.append((attempt, total))
        return offsets


SCHEDULE = RetrySchedule()


def next_attempt_at(
    attempts_made: int,
    first_attempt_at: datetime,
    last_attempt_ended_at: datetime,
    schedule: RetrySchedule = SCHEDULE,
) -> datetime | None:
    """When the next attempt is due after ``attempts_made`` failed attempts, or None when the
    callback is to be marked failed (the attempt limit or the window is used up).

    ``first_attempt_at`` is when attempt 1 started (the window's origin);
    ``last_attempt_ended_at`` is when the latest failed attempt ended (the gap's origin).
    """
    if attempts_made < 1:
        raise ValueError("at least one attempt must have been made")
    upcoming = attempts_made + 1
    if upcoming > schedule.max_attempts:
        return None
    due = last_attempt_ended_at + timedelta(seconds=schedule.gap_before(upcoming))
    if due > first_attempt_at + schedule.window:
        return None
    return due
