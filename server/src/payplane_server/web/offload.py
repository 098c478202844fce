"""Running a request's synchronous database work without stalling the event loop.

PostgreSQL work waits on the network, so it always runs in a worker thread. SQLite work on the
hot paths is a few point queries that take tens of microseconds, less than handing them to a
thread and back costs (a wake-up, a GIL hand-off, a future): it runs on the event loop itself,
as long as it never has to wait. Reads in WAL mode never wait; a write goes ahead only if no
other thread or process holds the writer lock. If one does, the work is abandoned before its
write began and run again, from the start, in a worker thread, where waiting is harmless.

The writes of all the work run on the loop in one turn share one transaction
(``Database.on_event_loop``, a group commit), which short work may keep open a few turns more
(``linger``): each piece of work waits for that commit before its answer goes out. Should the
commit fail, the work runs again in a worker thread.

So a function given to ``run_database_work`` must be safe to start again after any of its
transactions committed: idempotent registration, conditional UPDATEs, reads. A function that
calls out (an acquirer that may block or must not be asked twice) does not belong here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio.to_thread
from anyio import CapacityLimiter

from ..db import Database, WriterBusy

__all__ = ["run_database_work"]

T = TypeVar("T")


async def run_database_work(
    db: Database,
    function: Callable[..., T],
    *args: object,
    limiter: CapacityLimiter | None = None,
    linger: bool = False,
) -> T:
    """``function(*args)``: on the event loop when it is SQLite work that need not wait,
    else in a worker thread (at most ``limiter``'s number at once).

    ``linger``: the answer may wait a few turns of the loop while the group commit takes in
    more work (``db.engine.GROUP_COMMIT_POLLS``); for short work whose callers are many."""
    if db.is_sqlite:
        error: Exception | None = None
        with db.on_event_loop() as work:
            try:
                result = function(*args)
            except WriterBusy:
                busy = True
            except Exception as exc:
                busy, error = False, exc
            else:
                busy = False
        # What the work wrote, or read of others' writes, is told only once it is durable.
        if not busy and (work.group is None or await work.group.committed(linger=linger)):
            if error is not None:
                raise error
            return result
    return await anyio.to_thread.run_sync(function, *args, limiter=limiter)
