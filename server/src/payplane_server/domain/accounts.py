"""Dashboard roles and what each may do: pure rules, no I/O.

Three roles exist. Choices where the specification is silent:

* ``Merchant admin`` sees every project of its merchant (present and future) without grants,
  manages the team (adds and deletes users, grants project access) and alone grants or
  withdraws the permission *Manage API tokens*.
* ``Finance`` sees the projects granted to it: balances and operations.
* ``Support`` sees the projects granted to it: operations and payments, but not balances.

*Manage API tokens* is a separate per-user flag (any role may hold it); it lets the user
generate and deactivate the tokens of their own account, nobody else's.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ROLES",
    "Permission",
    "PermissionDenied",
    "Role",
    "check_manage_team",
    "check_set_manage_tokens",
    "parse_role",
    "role_permits",
    "sees_all_projects",
]


class PermissionDenied(Exception):
    """The acting user may not do this (rendered as 403 on the Dashboard, 401 on the Data API)."""


class Role(StrEnum):
    MERCHANT_ADMIN = "Merchant admin"
    FINANCE = "Finance"
    SUPPORT = "Support"


ROLES: tuple[str, ...] = tuple(role.value for role in Role)


class Permission(StrEnum):
    VIEW_BALANCES = "view balances"
    VIEW_OPERATIONS = "view operations"
    MANAGE_TEAM = "manage team"


_PERMISSIONS: dict[Role, frozenset[Permission]] = {
    Role.MERCHANT_ADMIN: frozenset(Permission),
    Role.FINANCE: frozenset({Permission.VIEW_BALANCES, Permission.VIEW_OPERATIONS}),
    Role.SUPPORT: frozenset({Permission.VIEW_OPERATIONS}),
}


_BY_NAME: dict[str, Role] = {role.value.casefold(): role for role in Role}


def parse_role(value: str) -> Role:
    """The role named ``value`` (exact names, case-insensitive); ValueError otherwise."""
    role = _BY_NAME.get(value.strip().casefold())
    if role is None:
        raise ValueError(f"unknown role {value!r}; expected one of: {', '.join(ROLES)}")
    return role


def role_permits(role: str, permission: Permission) -> bool:
    try:
        parsed = parse_role(role)
    except ValueError:
        return False
    return permission in _PERMISSIONS[parsed]


def sees_all_projects(role: str) -> bool:
    """A Merchant admin sees every project of its merchant; others only granted projects."""
    return role_permits(role, Permission.MANAGE_TEAM)


def check_manage_team(*, actor_role: str, actor_merchant_id: int, target_merchant_id: int) -> None:
    """Adding, deleting users and granting projects: a Merchant admin of the same merchant."""
    if not role_permits(actor_role, Permission.MANAGE_TEAM):
        raise PermissionDenied("Only a Merchant admin can manage the team.")
    if actor_merchant_id != target_merchant_id:
        raise PermissionDenied("The user belongs to another merchant.")


def check_set_manage_tokens(
    *, actor_role: str, actor_merchant_id: int, target_merchant_id: int
) -> None:
    """Only a Merchant admin of the same merchant grants or withdraws Manage API tokens."""
    if parse_role_or_none(actor_role) is not Role.MERCHANT_ADMIN:
        raise PermissionDenied("Only a Merchant admin can change the Manage API tokens permission.")
    if actor_merchant_id != target_merchant_id:
        raise PermissionDenied("The user belongs to another merchant.")


def parse_role_or_none(value: str) -> Role | None:
    try:
        return parse_role(value)
    except ValueError:
        return None
