"""The acquirer seam: who authorises a card payment behind the Payment Page.

``Acquirer`` is the interface; ``SimulatorAcquirer`` (protocol.md section 4) is the default.
Another acquirer is plugged in through ``AppContext.extras["acquirer"]``.

Contract: ``authorize`` and ``complete_challenge`` may block (a network call, the simulator's
time-out delay); the Payment Page calls them from a worker thread and *outside* any database
transaction, then records the decision in one transaction. They never see the CVV. An acquirer
that can tell in advance that an authorisation will not block says so with an optional
``may_block(card) -> bool``. False also promises that the authorisation has no effect outside
Payplane, so that asking twice is harmless: the Payment Page then asks it on the event loop,
within the page's database work, which starts again if its commit fails (the simulator does
so for every card but its time-out card, which waits).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from .context import AppContext
from .domain.cards import Card
from .domain.payments import Code
from .domain.simulator import Kind, challenge_result, outcome_for

__all__ = [
    "Acquirer",
    "Authorization",
    "Decision",
    "SimulatorAcquirer",
    "Verdict",
    "get_acquirer",
]


class Verdict(StrEnum):
    SUCCESS = "success"
    DECLINE = "decline"
    # The customer must pass a 3-D Secure challenge (the ACS page); ``reference`` names it.
    CHALLENGE = "challenge"
    # The merchant must supply more data (``clarification``: customer, avs_data).
    CLARIFICATION = "clarification"


@dataclass(frozen=True)
class Authorization:
    project_id: int
    payment_id: str
    amount: int
    currency: str
    card: Card


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    code: str = Code.SUCCESS
    # The acquirer's own id of the transaction (operation.provider.payment_id).
    reference: str = ""
    auth_code: str = ""
    clarification: str | None = None


@runtime_checkable
class Acquirer(Protocol):
    def authorize(self, request: Authorization) -> Decision:
        """Decide a card payment."""
        ...

    def complete_challenge(self, reference: str, code: str) -> Decision:
        """Decide the 3-D Secure challenge ``reference`` answered with ``code``."""
        ...


class SimulatorAcquirer:
    """Deterministic outcomes by card number (protocol.md section 4).

    It keeps no state: a challenge's fate travels in its reference (``acs-<hex>`` or
    ``acs-decline-<hex>``), so any process can finish a challenge that another one started.
    """

    def __init__(self, delay_seconds: float = 0.5) -> None:
        self.delay_seconds = delay_seconds

    @staticmethod
    def _approved() -> Decision:
        return Decision(
            Verdict.SUCCESS,
            Code.SUCCESS,
            reference="sim-" + secrets.token_hex(8),
            auth_code=f"{secrets.randbelow(1_000_000):06d}",
        )

    def may_block(self, card: Card) -> bool:
        """Only the time-out card waits (for ``delay_seconds``)."""
        return self.delay_seconds > 0 and outcome_for(card.pan).kind == Kind.TIMEOUT

    def authorize(self, request: Authorization) -> Decision:
        outcome = outcome_for(request.card.pan)
        if outcome.kind in (Kind.SUCCESS, Kind.FRICTIONLESS):
            return self._approved()
        if outcome.kind == Kind.TIMEOUT:
            if self.delay_seconds > 0:
                time.sleep(self.delay_seconds)
            return Decision(Verdict.DECLINE, outcome.code)
        if outcome.kind == Kind.CHALLENGE:
            prefix = "acs-decline-" if outcome.challenge_declines else "acs-"
            return Decision(
                Verdict.CHALLENGE, Code.AWAITING_PROCESSING, prefix + secrets.token_hex(8)
            )
        if outcome.kind == Kind.CLARIFICATION:
            return Decision(
                Verdict.CLARIFICATION, outcome.code, clarification=outcome.clarification
            )
        return Decision(Verdict.DECLINE, outcome.code)

    def complete_challenge(self, reference: str, code: str) -> Decision:
        result = challenge_result(reference.startswith("acs-decline-"), code)
        if result == Code.SUCCESS:
            return self._approved()
        return Decision(Verdict.DECLINE, result, reference=reference)


def get_acquirer(ctx: AppContext) -> Acquirer:
    """The configured acquirer: ``ctx.extras["acquirer"]``, else the simulator."""
    acquirer = ctx.extras.get("acquirer")
    if acquirer is None:
        acquirer = SimulatorAcquirer(ctx.settings.simulator_delay_seconds)
        ctx.extras["acquirer"] = acquirer
    assert isinstance(acquirer, Acquirer)
    return acquirer
