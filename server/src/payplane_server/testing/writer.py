"""Another thread inside a write transaction: how tests make SQLite's writer lock busy."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..db import Database

__all__ = ["HeldWriter", "writer_held_elsewhere"]


class HeldWriter:
    """A thread holding a write transaction of ``db`` (on SQLite, its writer lock) until
    ``release()``. ``released`` is set as the transaction ends, before the lock is given
    back: whatever waited for the lock finds it set."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._held = threading.Event()
        self._release = threading.Event()
        self.released = threading.Event()
        self._thread = threading.Thread(target=self._hold, name="held-writer")

    def _hold(self) -> None:
        with self._db.write():
            self._held.set()
            self._release.wait(30)
            self.released.set()

    def start(self) -> None:
        self._thread.start()
        if not self._held.wait(10):
            raise RuntimeError("the writer was not taken")

    def release(self) -> None:
        self._release.set()

    def join(self) -> None:
        self._thread.join()


@contextmanager
def writer_held_elsewhere(db: Database) -> Iterator[HeldWriter]:
    """Another thread holds a write transaction of ``db`` from the start of the block until
    ``release()`` is called on the yielded holder, at the latest until the block ends."""
    holder = HeldWriter(db)
    holder.start()
    try:
        yield holder
    finally:
        holder.release()
        holder.join()
