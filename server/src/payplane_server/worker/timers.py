"""The clarification timer loop: declines payments whose wait for clarification ran out.

The deadlines live in the database (``payments.clarification_deadline``), so they survive
restarts and any number of processes can run this loop against one database. While nothing is
due a pass is one probe of the partial index ``ix_payments_clarification_due`` (the earliest
deadline); the loop then sleeps until that deadline, at most ``MAX_SLEEP`` seconds, and wakes
early when a new deadline is set in this process (``db.listen("timers")``). Other processes'
new deadlines are seen within ``MAX_SLEEP``, so a timer fires within a second of being due.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from ..context import AppContext
from ..services.clarification import TIMERS_CHANNEL, fire_due, next_deadline

__all__ = ["MAX_SLEEP", "TimerLoop", "loop"]

log = logging.getLogger("payplane.timers")

MAX_SLEEP = 0.5
# How many payments one transaction declines. A backlog is worked off batch after batch, with a
# short pause between them so that other writers (SQLite has one write lock) get their turn.
BATCH = 1000
BACKLOG_PAUSE = 0.005
# Due rows that another worker holds: look again shortly rather than spin.
BUSY_SLEEP = 0.05
ERROR_SLEEP = 1.0


@dataclass
class TimerLoop:
    """One process's timer scheduler; ``run`` until ``stop``."""

    ctx: AppContext
    batch: int = BATCH
    fired: int = 0
    _stopping: bool = False
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    def pass_once(self) -> tuple[int, float]:
        """One scheduler pass (blocking): fire what is due; return how many payments were
        declined and how long to sleep before the next pass."""
        earliest = next_deadline(self.ctx)
        if earliest is None:
            return 0, MAX_SLEEP
        now = self.ctx.clock.now()
        if earliest > now:
            return 0, min(MAX_SLEEP, (earliest - now).total_seconds())
        fired = fire_due(self.ctx, limit=self.batch)
        return fired, BACKLOG_PAUSE if fired else BUSY_SLEEP

    async def run(self) -> None:
        loop = asyncio.get_running_loop()

        def on_new_deadline(_: str) -> None:
            loop.call_soon_threadsafe(self.wake)

        remove = self.ctx.db.listen(TIMERS_CHANNEL, on_new_deadline)
        try:
            while not self._stopping:
                try:
                    fired, sleep = await asyncio.to_thread(self.pass_once)
                except Exception:
                    log.exception("timer pass failed; retrying")
                    fired, sleep = 0, ERROR_SLEEP
                self.fired += fired
                if sleep > 0 and not self._stopping:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), sleep)
                self._wake.clear()
        finally:
            remove()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()


@contextlib.asynccontextmanager
async def loop(ctx: AppContext) -> AsyncIterator[None]:
    """Run the timer loop for the lifetime of the context (a ``worker.LOOPS`` entry)."""
    timers = TimerLoop(ctx)
    task = asyncio.create_task(timers.run(), name="payplane-timers")
    try:
        yield
    finally:
        timers.stop()
        await task
