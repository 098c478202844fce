"""The API token state table of the specification, as a pure state machine.

=====  ==========================================  =================  ======================
State  Trigger                                     Condition          Next state
=====  ==========================================  =================  ======================
valid  user generates a new token for the account  may manage tokens  valid (new token);
                                                                      the previous token is
                                                                      superseded
valid  user presses Delete                         may manage tokens  deactivated (final)
valid  user account deleted                        -                  valid as a value; every
                                                                      request gets 401
valid  Manage API tokens withdrawn                 -                  valid; the user can no
                                                                      longer generate or delete
=====  ==========================================  =================  ======================

``superseded`` and ``deactivated`` are final: nothing leads out of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .accounts import PermissionDenied

__all__ = [
    "TOKEN_ALPHABET",
    "TOKEN_LENGTH",
    "Holder",
    "NoValidToken",
    "TokenState",
    "deactivate",
    "generate",
    "grants_access",
    "is_well_formed",
]

TOKEN_LENGTH = 30
TOKEN_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


class TokenState(StrEnum):
    VALID = "valid"
    SUPERSEDED = "superseded"
    DEACTIVATED = "deactivated"


class NoValidToken(Exception):
    """Delete was asked for, but the account has no valid token (deactivation is final)."""


@dataclass(frozen=True)
class Holder:
    """What the state machine needs to know about the token's account."""

    may_manage_tokens: bool
    account_deleted: bool = False


def generate(previous: TokenState | None, holder: Holder) -> tuple[TokenState | None, TokenState]:
    """New token: returns (next state of the previous token, state of the new token)."""
    if holder.account_deleted:
        raise PermissionDenied("The account has been deleted.")
    if not holder.may_manage_tokens:
        raise PermissionDenied("You do not have the Manage API tokens permission.")
    if previous is TokenState.VALID:
        return TokenState.SUPERSEDED, TokenState.VALID
    return previous, TokenState.VALID


def deactivate(current: TokenState | None, holder: Holder) -> TokenState:
    """Delete on the API Tokens panel: valid → deactivated, which cannot be undone."""
    if holder.account_deleted:
        raise PermissionDenied("The account has been deleted.")
    if not holder.may_manage_tokens:
        raise PermissionDenied("You do not have the Manage API tokens permission.")
    if current is not TokenState.VALID:
        raise NoValidToken("There is no valid token to delete.")
    return TokenState.DEACTIVATED


def grants_access(state: TokenState, holder: Holder) -> bool:
    """Whether a request with a token in ``state`` is authenticated (else 401).

    Withdrawing Manage API tokens does not matter here; a deleted account revokes access.
    """
    return state is TokenState.VALID and not holder.account_deleted


def is_well_formed(token: object) -> bool:
    """30 characters of [A-Za-z0-9]; anything else cannot be a token."""
    return (
        isinstance(token, str) and len(token) == TOKEN_LENGTH and TOKEN_ALPHABET.issuperset(token)
    )
