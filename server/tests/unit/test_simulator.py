"""The simulator's table (protocol.md section 4), card by card, and its acquirer adapter."""

from __future__ import annotations

import time

import pytest

from payplane_server.acquirer import Authorization, SimulatorAcquirer, Verdict
from payplane_server.domain.cards import Card, luhn_valid
from payplane_server.domain.payments import Code
from payplane_server.domain.simulator import (
    SIMULATOR_CARDS,
    Kind,
    challenge_result,
    outcome_for,
)

TABLE = [
    ("4000000000000077", Kind.SUCCESS, "0"),
    ("4111111111111111", Kind.DECLINE, "10000"),
    ("4000000000000119", Kind.DECLINE, "10102"),
    ("4000000000000135", Kind.DECLINE, "10105"),
    ("4539121411168251", Kind.TIMEOUT, "10602"),
    ("4314220000000056", Kind.CHALLENGE, "0"),
    ("5413330000000019", Kind.CHALLENGE, "0"),
    ("5544330000000045", Kind.CHALLENGE, "0"),
    ("4477000000000006", Kind.FRICTIONLESS, "0"),
    ("5252000000000004", Kind.FRICTIONLESS, "0"),
    ("4000000000000200", Kind.CLARIFICATION, "3191"),
    ("4000000000000218", Kind.CLARIFICATION, "3191"),
]


@pytest.mark.parametrize(("pan", "kind", "code"), TABLE)
def test_each_table_card_has_its_outcome(pan: str, kind: Kind, code: str) -> None:
    outcome = outcome_for(pan)
    assert outcome.kind is kind
    assert outcome.code == code


def test_the_table_has_exactly_the_protocol_cards_and_all_pass_luhn() -> None:
    assert set(SIMULATOR_CARDS) == {pan for pan, _, _ in TABLE}
    assert all(luhn_valid(pan) for pan in SIMULATOR_CARDS)


def test_any_other_valid_card_succeeds() -> None:
    assert outcome_for("5555555555554444").kind is Kind.SUCCESS
    assert outcome_for("4242424242424242").kind is Kind.SUCCESS


def test_clarification_cards_name_what_is_missing() -> None:
    assert outcome_for("4000000000000200").clarification == "customer"
    assert outcome_for("4000000000000218").clarification == "avs_data"


def test_only_5544_declines_every_challenge() -> None:
    assert outcome_for("5544330000000045").challenge_declines
    assert not outcome_for("4314220000000056").challenge_declines
    assert not outcome_for("5413330000000019").challenge_declines


@pytest.mark.parametrize(
    ("declines", "code", "result"),
    [
        (False, "1234", Code.SUCCESS),
        (False, " 1234 ", Code.SUCCESS),
        (False, "1235", Code.THREE_DS_FAILED),
        (False, "", Code.THREE_DS_FAILED),
        (True, "1234", Code.THREE_DS_FAILED),
    ],
)
def test_a_challenge_passes_only_with_1234(declines: bool, code: str, result: str) -> None:
    assert challenge_result(declines, code) == result


def _authorize(acquirer: SimulatorAcquirer, pan: str) -> Verdict:
    card = Card(pan=pan, expiry_month=12, expiry_year=2030, holder="A B")
    return acquirer.authorize(Authorization(1, "p", 100, "USD", card)).verdict


@pytest.mark.parametrize(
    ("pan", "verdict"),
    [
        ("4000000000000077", Verdict.SUCCESS),
        ("4477000000000006", Verdict.SUCCESS),
        ("4111111111111111", Verdict.DECLINE),
        ("4539121411168251", Verdict.DECLINE),
        ("5413330000000019", Verdict.CHALLENGE),
        ("4000000000000218", Verdict.CLARIFICATION),
    ],
)
def test_the_simulator_acquirer_maps_the_table_to_verdicts(pan: str, verdict: Verdict) -> None:
    assert _authorize(SimulatorAcquirer(0), pan) is verdict


def test_a_challenge_reference_carries_its_fate_to_any_process() -> None:
    started = SimulatorAcquirer(0)
    card = Card(pan="5544330000000045", expiry_month=1, expiry_year=2031, holder="A B")
    reference = started.authorize(Authorization(1, "p", 1, "USD", card)).reference
    other = SimulatorAcquirer(0)
    assert other.complete_challenge(reference, "1234").code == Code.THREE_DS_FAILED
    good = Card(pan="4314220000000056", expiry_month=1, expiry_year=2031, holder="A B")
    reference = started.authorize(Authorization(1, "p", 1, "USD", good)).reference
    finished = other.complete_challenge(reference, "1234")
    assert finished.verdict is Verdict.SUCCESS and finished.auth_code


def test_the_time_out_card_waits_the_configured_delay() -> None:
    begin = time.monotonic()
    assert _authorize(SimulatorAcquirer(0.2), "4539121411168251") is Verdict.DECLINE
    assert time.monotonic() - begin >= 0.2


@pytest.mark.parametrize(
    ("pan", "delay", "blocks"),
    [
        ("4539121411168251", 0.2, True),  # the time-out card sleeps
        ("4539121411168251", 0, False),
        ("4000000000000077", 0.2, False),
        ("4111111111111111", 0.2, False),
        ("5413330000000019", 0.2, False),
        ("4000000000000218", 0.2, False),
    ],
)
def test_the_simulator_says_which_cards_may_block(pan: str, delay: float, blocks: bool) -> None:
    card = Card(pan=pan, expiry_month=12, expiry_year=2030, holder="A B")
    assert SimulatorAcquirer(delay).may_block(card) is blocks
