"""The test-card simulator of protocol.md section 4, as data.

Pure: ``outcome_for(pan)`` says what the simulated acquirer does with a card, and
``challenge_result(outcome, code)`` decides a 3-D Secure challenge. The acquirer adapter
(``payplane_server.acquirer``) turns these into status changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .payments import Code

__all__ = [
    "CHALLENGE_CODE",
    "SIMULATOR_CARDS",
    "Kind",
    "Outcome",
    "challenge_result",
    "outcome_for",
]

# The one code that passes the simulated ACS page.
CHALLENGE_CODE = "1234"


class Kind(StrEnum):
    SUCCESS = "success"
    DECLINE = "decline"
    # Decline after the acquirer's (simulated) time-out.
    TIMEOUT = "timeout"
    # A simulated ACS page; ``CHALLENGE_CODE`` succeeds unless ``challenge_declines``.
    CHALLENGE = "3ds challenge"
    FRICTIONLESS = "3ds frictionless"
    CLARIFICATION = "clarification"


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    code: str = Code.SUCCESS
    # For CHALLENGE: every code is refused (10104).
    challenge_declines: bool = False
    # For CLARIFICATION: the object the missing data belongs to (customer, avs_data).
    clarification: str | None = None


_SUCCESS = Outcome(Kind.SUCCESS)

SIMULATOR_CARDS: dict[str, Outcome] = {
    "4000000000000077": _SUCCESS,
    "4111111111111111": Outcome(Kind.DECLINE, Code.GENERAL_DECLINE),
    "4000000000000119": Outcome(Kind.DECLINE, Code.INCORRECT_DATA),
    "4000000000000135": Outcome(Kind.DECLINE, Code.INSUFFICIENT_FUNDS),
    "4539121411168251": Outcome(Kind.TIMEOUT, Code.TIMEOUT),
    "4314220000000056": Outcome(Kind.CHALLENGE),
    "5413330000000019": Outcome(Kind.CHALLENGE),
    "5544330000000045": Outcome(Kind.CHALLENGE, challenge_declines=True),
    "4477000000000006": Outcome(Kind.FRICTIONLESS),
    "5252000000000004": Outcome(Kind.FRICTIONLESS),
    "4000000000000200": Outcome(
        Kind.CLARIFICATION, Code.NEED_CLARIFICATION, clarification="customer"
    ),
    "4000000000000218": Outcome(
        Kind.CLARIFICATION, Code.NEED_CLARIFICATION, clarification="avs_data"
    ),
}


def outcome_for(pan: str) -> Outcome:
    """What the simulator does with a (Luhn-valid) card number: the table, else success."""
    return SIMULATOR_CARDS.get(pan, _SUCCESS)


def challenge_result(challenge_declines: bool, code: str) -> str:
    """The result code of a 3-D Secure challenge answered with ``code``."""
    if not challenge_declines and code.strip() == CHALLENGE_CODE:
        return Code.SUCCESS
    return Code.THREE_DS_FAILED
