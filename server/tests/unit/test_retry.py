"""The callback retry schedule (protocol.md section 5), attempt by attempt."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from payplane_server.domain.retry import SCHEDULE, RetrySchedule, next_attempt_at

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
FOUR_HOURS = 4 * 60 * 60


def expected_gap(attempt: int) -> float:
    """The protocol's words, written independently of the module under test."""
    if 2 <= attempt <= 7:  # attempt 1 is the first delivery; six retries 10 s apart
        return 10.0
    return min(70 + 10 * 1.12 ** (attempt - 4), FOUR_HOURS)


def test_every_gap_of_all_120_attempts_matches_the_protocol() -> None:
    gaps = SCHEDULE.gaps()
    assert [n for n, _ in gaps] == list(range(2, 121))
    for attempt, gap in gaps:
        assert gap == pytest.approx(expected_gap(attempt), rel=1e-12), attempt


def test_the_six_retries_after_the_first_delivery_are_ten_seconds_apart() -> None:
    assert [SCHEDULE.gap_before(n) for n in range(2, 8)] == [10.0] * 6
    assert SCHEDULE.gap_before(8) == pytest.approx(70 + 10 * 1.12**4)
    assert SCHEDULE.gap_before(8) == pytest.approx(85.735, abs=1e-3)


def test_gaps_grow_until_four_hours_then_stay_at_four_hours() -> None:
    growing = [SCHEDULE.gap_before(n) for n in range(8, 69)]
    assert all(a < b for a, b in itertools.pairwise(growing))
    assert SCHEDULE.gap_before(68) == pytest.approx(14193.9, abs=0.1)
    assert SCHEDULE.gap_before(68) < FOUR_HOURS
    assert [SCHEDULE.gap_before(n) for n in range(69, 121)] == [FOUR_HOURS] * 52


def test_attempt_one_has_no_gap() -> None:
    with pytest.raises(ValueError):
        SCHEDULE.gap_before(1)
    with pytest.raises(ValueError):
        next_attempt_at(0, T0, T0)


def test_nominal_schedule_makes_120_attempts_in_about_ten_and_a_quarter_days() -> None:
    offsets = SCHEDULE.nominal_offsets()
    assert len(offsets) == 120
    assert offsets[0] == (1, 0.0)
    assert offsets[6] == (7, 60.0)
    last_attempt, last_offset = offsets[-1]
    assert last_attempt == 120
    assert 10.2 * 86400 < last_offset < 11 * 86400


def test_walking_the_schedule_gives_up_after_attempt_120() -> None:
    now = T0
    due_times = [now]
    for made in range(1, 200):
        due = next_attempt_at(made, T0, now)
        if due is None:
            break
        assert (due - now).total_seconds() == pytest.approx(expected_gap(made + 1))
        due_times.append(due)
        now = due
    assert len(due_times) == 120
    assert made == 120


def test_gaps_are_measured_from_the_end_of_the_failed_attempt() -> None:
    ended = T0 + timedelta(seconds=30)  # attempt 1 ran into the 30 s timeout
    assert next_attempt_at(1, T0, ended) == ended + timedelta(seconds=10)


def test_no_attempt_is_scheduled_after_eleven_days() -> None:
    late = T0 + timedelta(days=11) - timedelta(hours=3)
    # Attempt 80 would come 4 hours later: past the window, so the callback fails instead.
    assert next_attempt_at(79, T0, late) is None
    early = T0 + timedelta(days=11) - timedelta(hours=4)
    assert next_attempt_at(79, T0, early) == T0 + timedelta(days=11)


def test_a_delayed_callback_fails_at_the_window_even_with_attempts_left() -> None:
    # The worker was down for 11 days after attempt 2: the next attempt would fall outside.
    assert next_attempt_at(2, T0, T0 + timedelta(days=11)) is None


def test_a_custom_schedule_is_plain_data() -> None:
    short = RetrySchedule(fast_retries=1, max_attempts=3)
    assert short.gaps() == [(2, 10.0), (3, pytest.approx(70 + 10 * 1.12 ** (3 - 4)))]
    assert next_attempt_at(3, T0, T0, short) is None


@given(st.integers(min_value=2, max_value=10_000))
def test_the_gap_formula_never_overflows_or_exceeds_the_cap(attempt: int) -> None:
    gap = SCHEDULE.gap_before(attempt)
    assert 10.0 <= gap <= FOUR_HOURS
    assert gap == pytest.approx(expected_gap(attempt)) if attempt < 300 else gap == FOUR_HOURS


@given(
    made=st.integers(min_value=1, max_value=130),
    elapsed=st.floats(min_value=0, max_value=12 * 86400, allow_nan=False),
)
def test_next_attempt_is_after_the_last_one_and_inside_the_window(
    made: int, elapsed: float
) -> None:
    ended = T0 + timedelta(seconds=elapsed)
    due = next_attempt_at(made, T0, ended)
    if made >= 120:
        assert due is None
    elif due is not None:
        assert due > ended
        assert due <= T0 + timedelta(days=11)
        assert (due - ended).total_seconds() == pytest.approx(expected_gap(made + 1))
    else:
        assert ended + timedelta(seconds=expected_gap(made + 1)) > T0 + timedelta(days=11)
