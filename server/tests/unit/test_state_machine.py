"""Every allowed and every forbidden move of the payment state machine (domain/payments.py)."""

from __future__ import annotations

import itertools

import pytest

from payplane_server.domain.payments import (
    FINAL,
    IllegalTransition,
    Status,
    can_transition,
    check_transition,
    sources_of,
)

S = Status
# Written out by hand from protocol.md sections 4 and 6, not derived from the code under test.
ALLOWED = {
    (S.NEW, S.PROCESSING),  # the customer submits the card form
    (S.NEW, S.DECLINE),  # best_before passed before any card was submitted
    (S.PROCESSING, S.AWAITING_3DS),
    (S.PROCESSING, S.AWAITING_CLARIFICATION),
    (S.PROCESSING, S.SUCCESS),
    (S.PROCESSING, S.DECLINE),
    (S.PROCESSING, S.ERROR),
    (S.AWAITING_3DS, S.PROCESSING),
    (S.AWAITING_3DS, S.SUCCESS),
    (S.AWAITING_3DS, S.DECLINE),
    (S.AWAITING_CLARIFICATION, S.AWAITING_CLARIFICATION),  # partial answer: ask again
    (S.AWAITING_CLARIFICATION, S.PROCESSING),
    (S.AWAITING_CLARIFICATION, S.SUCCESS),
    (S.AWAITING_CLARIFICATION, S.DECLINE),  # refusal, or the 30-minute wait ran out
}
PAIRS = list(itertools.product(Status, Status))


@pytest.mark.parametrize(("old", "new"), sorted(ALLOWED), ids=lambda s: s.name)
def test_an_allowed_move_passes(old: Status, new: Status) -> None:
    assert can_transition(old, new)
    check_transition(old, new)
    assert old in sources_of(new)


FORBIDDEN = sorted(pair for pair in PAIRS if pair not in ALLOWED)


@pytest.mark.parametrize(("old", "new"), FORBIDDEN, ids=lambda s: s.name)
def test_a_forbidden_move_is_refused(old: Status, new: Status) -> None:
    assert not can_transition(old, new)
    with pytest.raises(IllegalTransition) as raised:
        check_transition(old, new)
    assert raised.value.old is old and raised.value.new is new
    assert old not in sources_of(new)


def test_the_table_covers_every_pair_of_statuses() -> None:
    assert len(ALLOWED) + len(FORBIDDEN) == len(Status) ** 2 == 49


@pytest.mark.parametrize("final", sorted(FINAL))
def test_a_final_status_never_changes(final: Status) -> None:
    assert not any(can_transition(final, new) for new in Status)


def test_success_and_decline_are_final_and_error_too() -> None:
    assert {S.SUCCESS, S.DECLINE, S.ERROR} == FINAL


def test_nothing_leads_back_to_new() -> None:
    assert sources_of(S.NEW) == frozenset()
