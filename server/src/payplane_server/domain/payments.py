"""Payment and operation statuses, result codes, and the state machine (protocol.md section 4).

Pure: no I/O, no clock reads.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

__all__ = [
    "FINAL",
    "Code",
    "IllegalTransition",
    "Status",
    "can_transition",
    "check_transition",
    "sources_of",
]


class Status(StrEnum):
    # Registered from a signed URL; the customer has not submitted the form yet.
    NEW = "new"
    PROCESSING = "processing"
    AWAITING_3DS = "awaiting 3ds result"
    AWAITING_CLARIFICATION = "awaiting clarification"
    SUCCESS = "success"
    DECLINE = "decline"
    ERROR = "error"


FINAL = frozenset({Status.SUCCESS, Status.DECLINE, Status.ERROR})


class Code:
    """Result codes with their messages."""

    SUCCESS = "0"
    AWAITING_PROCESSING = "9999"
    NEED_CLARIFICATION = "3191"
    AUTO_DECLINE = "603"
    GENERAL_DECLINE = "10000"
    INCORRECT_DATA = "10102"
    THREE_DS_FAILED = "10104"
    INSUFFICIENT_FUNDS = "10105"
    TIMEOUT = "10602"
    EXPIRED = "10101"

    MESSAGES: ClassVar[dict[str, str]] = {
        "0": "Success",
        "9999": "Awaiting processing",
        "3191": "Need clarification",
        "603": "Auto decline",
        "10000": "General decline",
        "10101": "Payment time expired",
        "10102": "Incorrect data entered",
        "10104": "3-D Secure authentication failed",
        "10105": "Insufficient funds on card",
        "10602": "Time-out",
    }

    @classmethod
    def message(cls, code: str) -> str:
        return cls.MESSAGES.get(code, "Decline")


_ALLOWED: dict[Status, frozenset[Status]] = {
    Status.NEW: frozenset({Status.PROCESSING, Status.DECLINE}),
    Status.PROCESSING: frozenset(
        {
            Status.AWAITING_3DS,
            Status.AWAITING_CLARIFICATION,
            Status.SUCCESS,
            Status.DECLINE,
            Status.ERROR,
        }
    ),
    Status.AWAITING_3DS: frozenset({Status.PROCESSING, Status.SUCCESS, Status.DECLINE}),
    Status.AWAITING_CLARIFICATION: frozenset(
        {
            Status.AWAITING_CLARIFICATION,
            Status.PROCESSING,
            Status.SUCCESS,
            Status.DECLINE,
        }
    ),
    Status.SUCCESS: frozenset(),
    Status.DECLINE: frozenset(),
    Status.ERROR: frozenset(),
}


class IllegalTransition(Exception):
    def __init__(self, old: Status, new: Status) -> None:
        super().__init__(f"a payment cannot move from {old.value!r} to {new.value!r}")
        self.old = old
        self.new = new


def can_transition(old: Status, new: Status) -> bool:
    return new in _ALLOWED[old]


def check_transition(old: Status, new: Status) -> None:
    if not can_transition(old, new):
        raise IllegalTransition(old, new)


def sources_of(new: Status) -> frozenset[Status]:
    """Every status from which ``new`` may be reached (for conditional UPDATEs)."""
    return frozenset(old for old, targets in _ALLOWED.items() if new in targets)
