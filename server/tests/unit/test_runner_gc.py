"""A serving process hides what it built at start-up from the garbage collector and collects
its youngest generation less often (see ``runner.tune_gc``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from payplane_server import runner


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_tuning_freezes_what_exists_and_raises_the_young_threshold(restored_gc: None) -> None:
    assert gc.get_freeze_count() == 0
    _, middle, oldest = gc.get_threshold()
    runner.tune_gc()
    # Everything this process built so far: its modules' functions and classes at least.
    assert gc.get_freeze_count() > 10_000
    assert gc.get_threshold() == (runner.GC_YOUNG_THRESHOLD, middle, oldest)
