"""Every row of the specification's API token state table, by name, in the pure domain."""

from __future__ import annotations

import pytest

from payplane_server.domain.accounts import PermissionDenied
from payplane_server.domain.tokens import (
    Holder,
    NoValidToken,
    TokenState,
    deactivate,
    generate,
    grants_access,
    is_well_formed,
)

MANAGER = Holder(may_manage_tokens=True)
WITHDRAWN = Holder(may_manage_tokens=False)
DELETED = Holder(may_manage_tokens=True, account_deleted=True)


def test_row_valid_new_token_makes_the_new_one_valid_and_supersedes_the_previous() -> None:
    previous_next, new = generate(TokenState.VALID, MANAGER)
    assert new is TokenState.VALID
    assert previous_next is TokenState.SUPERSEDED
    assert not grants_access(previous_next, MANAGER)
    assert grants_access(new, MANAGER)


def test_first_token_of_an_account_is_valid() -> None:
    assert generate(None, MANAGER) == (None, TokenState.VALID)


def test_row_valid_new_token_needs_the_manage_tokens_permission() -> None:
    with pytest.raises(PermissionDenied):
        generate(TokenState.VALID, WITHDRAWN)


def test_row_valid_delete_deactivates() -> None:
    assert deactivate(TokenState.VALID, MANAGER) is TokenState.DEACTIVATED
    assert not grants_access(TokenState.DEACTIVATED, MANAGER)


def test_row_valid_delete_needs_the_manage_tokens_permission() -> None:
    with pytest.raises(PermissionDenied):
        deactivate(TokenState.VALID, WITHDRAWN)


@pytest.mark.parametrize("final", [TokenState.DEACTIVATED, TokenState.SUPERSEDED, None])
def test_deactivation_is_final_and_cannot_be_repeated_or_undone(final: TokenState | None) -> None:
    with pytest.raises(NoValidToken):
        deactivate(final, MANAGER)


def test_a_new_token_after_deactivation_does_not_reactivate_the_old_one() -> None:
    previous_next, new = generate(TokenState.DEACTIVATED, MANAGER)
    assert previous_next is TokenState.DEACTIVATED and new is TokenState.VALID


def test_row_account_deleted_token_stays_valid_as_a_value_but_grants_no_access() -> None:
    state = TokenState.VALID
    assert not grants_access(state, DELETED)
    with pytest.raises(PermissionDenied):
        generate(state, DELETED)
    with pytest.raises(PermissionDenied):
        deactivate(state, DELETED)


def test_row_permission_withdrawn_token_stays_valid_and_usable() -> None:
    assert grants_access(TokenState.VALID, WITHDRAWN)
    with pytest.raises(PermissionDenied):
        generate(TokenState.VALID, WITHDRAWN)
    with pytest.raises(PermissionDenied):
        deactivate(TokenState.VALID, WITHDRAWN)


@pytest.mark.parametrize(
    "token",
    [
        "a" * 30,
        "Ab3" * 10,
    ],
)
def test_thirty_alphanumerics_are_well_formed(token: str) -> None:
    assert is_well_formed(token)


@pytest.mark.parametrize(
    "token",
    ["a" * 29, "a" * 31, "", "a" * 29 + "-", "a" * 29 + "é", "a" * 29 + " ", 12345, None, ["a"]],
)
def test_wrong_length_or_alphabet_is_not_a_token(token: object) -> None:
    assert not is_well_formed(token)
