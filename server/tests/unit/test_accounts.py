"""Role rules: who sees which projects, who manages the team and the token permission."""

from __future__ import annotations

import pytest

from payplane_server.domain.accounts import (
    ROLES,
    Permission,
    PermissionDenied,
    Role,
    check_manage_team,
    check_set_manage_tokens,
    parse_role,
    role_permits,
    sees_all_projects,
)


def test_the_three_roles_of_the_dashboard() -> None:
    assert ROLES == ("Merchant admin", "Finance", "Support")


def test_role_names_parse_case_insensitively_and_unknown_names_fail() -> None:
    assert parse_role("merchant ADMIN") is Role.MERCHANT_ADMIN
    with pytest.raises(ValueError, match="unknown role"):
        parse_role("Owner")


def test_only_a_merchant_admin_sees_every_project_without_grants() -> None:
    assert sees_all_projects("Merchant admin")
    assert not sees_all_projects("Finance")
    assert not sees_all_projects("Support")
    assert not sees_all_projects("nonsense")


def test_support_reads_operations_but_not_balances() -> None:
    assert role_permits("Support", Permission.VIEW_OPERATIONS)
    assert not role_permits("Support", Permission.VIEW_BALANCES)
    assert role_permits("Finance", Permission.VIEW_BALANCES)
    assert not role_permits("Finance", Permission.MANAGE_TEAM)


@pytest.mark.parametrize("role", ["Finance", "Support"])
def test_only_a_merchant_admin_may_grant_manage_tokens(role: str) -> None:
    with pytest.raises(PermissionDenied):
        check_set_manage_tokens(actor_role=role, actor_merchant_id=1, target_merchant_id=1)
    check_set_manage_tokens(actor_role="Merchant admin", actor_merchant_id=1, target_merchant_id=1)


def test_an_admin_of_another_merchant_may_not_touch_the_user() -> None:
    with pytest.raises(PermissionDenied):
        check_set_manage_tokens(
            actor_role="Merchant admin", actor_merchant_id=1, target_merchant_id=2
        )
    with pytest.raises(PermissionDenied):
        check_manage_team(actor_role="Merchant admin", actor_merchant_id=1, target_merchant_id=2)
