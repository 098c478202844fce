"""Background work that runs beside (or instead of) the web surfaces: callback delivery and
clarification timers. Each loop is an async context manager taking the AppContext; the runner
starts every loop in ``LOOPS`` for ``serve --role all`` and ``--role worker``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..context import AppContext

__all__ = ["LOOPS", "Loop"]

Loop = Callable[[AppContext], contextlib.AbstractAsyncContextManager[None]]

# Filled by the delivery and timer modules (see their ``loop`` functions).
LOOPS: list[Loop] = []

# After LOOPS: the loop modules register themselves here.
from . import delivery, timers  # noqa: E402

LOOPS.append(delivery.loop)
LOOPS.append(timers.loop)
