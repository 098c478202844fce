"""Dashboard user accounts: creation, sign-in, deletion, project access, Manage API tokens.

Passwords are argon2id hashes (argon2-cffi); an account created without a password cannot sign
in (useful for API-only accounts). A Merchant admin sees every project of its merchant without
grants; Finance and Support see the projects granted to them (``domain.accounts``).

Deleting an account is a soft delete: the row stays for the audit trail, ``get_user`` returns
None, its Dashboard sessions are removed, its token stops authenticating, and its email address
is freed (the stored address gets a ``#deleted-<id>`` suffix) so the person can be added again.

``actor_id`` arguments name the Dashboard user doing the change; ``None`` means the operator on
the command line, who may do anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from ..context import AppContext
from ..db import driver_rows
from ..db.tables import dashboard_sessions, merchants, projects, users
from ..db.tables import user_projects as user_projects_table
from ..domain.accounts import (
    ROLES,
    PermissionDenied,
    Role,
    check_manage_team,
    check_set_manage_tokens,
    parse_role,
    sees_all_projects,
)

__all__ = [
    "ROLES",
    "USER_COLUMNS",
    "EmailTaken",
    "PermissionDenied",
    "Role",
    "User",
    "authenticate",
    "create_user",
    "delete_user",
    "get_user",
    "grant_project",
    "list_users",
    "normalize_email",
    "projects_of",
    "revoke_project",
    "set_manage_tokens",
    "set_password",
    "user_by_email",
    "user_from_row",
    "user_projects",
]

_hasher = PasswordHasher()
_dummy_hash: str | None = None


class EmailTaken(ValueError):
    """Another active account already uses this email address."""


@dataclass(frozen=True)
class User:
    id: int
    merchant_id: int
    email: str
    name: str
    role: str
    can_manage_tokens: bool
    created_at: datetime

    @property
    def is_merchant_admin(self) -> bool:
        return self.role == Role.MERCHANT_ADMIN.value


def normalize_email(email: str) -> str:
    return email.strip().casefold()


def user_from_row(row: Any) -> User:
    """A ``User`` from a result row that has the ``USERUSER_COLUMNS``."""
    return User(
        id=int(row.id),
        merchant_id=int(row.merchant_id),
        email=row.email,
        name=row.name,
        role=row.role,
        can_manage_tokens=bool(row.can_manage_tokens),
        created_at=row.created_at,
    )


USER_COLUMNS = (
    users.c.id,
    users.c.merchant_id,
    users.c.email,
    users.c.name,
    users.c.role,
    users.c.can_manage_tokens,
    users.c.created_at,
)


def create_user(
    ctx: AppContext,
    *,
    merchant_id: int,
    email: str,
    name: str,
    role: str,
    password: str | None = None,
    can_manage_tokens: bool = False,
    project_ids: Iterable[int] = (),
    actor_id: int | None = None,
) -> int:
    """Create an account and return its ID.

    ``role`` is one of ``ROLES``; ``password=None`` makes an account that cannot sign in.
    ``project_ids`` must belong to ``merchant_id``. Raises ValueError (unknown role, merchant
    or project), EmailTaken, or PermissionDenied when ``actor_id`` is not a Merchant admin of
    that merchant.
    """
    parsed = parse_role(role)
    address = normalize_email(email)
    if "@" not in address or len(address) > 320:
        raise ValueError("a valid email address is required")
    if not name.strip():
        raise ValueError("a name is required")
    password_hash = _hasher.hash(password) if password is not None else None
    with ctx.db.write() as conn:
        if (
            conn.execute(select(merchants.c.id).where(merchants.c.id == merchant_id)).first()
            is None
        ):
            raise ValueError(f"merchant {merchant_id} does not exist")
        _check_actor(conn, actor_id, merchant_id)
        if conn.execute(select(users.c.id).where(users.c.email == address)).first():
            raise EmailTaken(f"an account with the email {address} already exists")
        try:
            user_id = int(
                conn.execute(
                    insert(users)
                    .values(
                        merchant_id=merchant_id,
                        email=address,
                        name=name.strip(),
                        password_hash=password_hash,
                        role=parsed.value,
                        can_manage_tokens=can_manage_tokens,
                        created_at=ctx.clock.now(),
                    )
                    .returning(users.c.id)
                ).scalar_one()
            )
        except IntegrityError as exc:
            raise EmailTaken(f"an account with the email {address} already exists") from exc
        for project_id in dict.fromkeys(project_ids):
            _grant(conn, user_id, merchant_id, project_id)
    return user_id


def authenticate(ctx: AppContext, email: str, password: str) -> User | None:
    """The active account with these credentials, else None.

    An unknown address still costs one argon2 verification, so timing does not reveal which
    addresses exist. A hash made with older parameters is upgraded on success.
    """
    global _dummy_hash
    with ctx.db.read() as conn:
        row = conn.execute(
            select(*USER_COLUMNS, users.c.password_hash).where(
                users.c.email == normalize_email(email), users.c.deleted_at.is_(None)
            )
        ).first()
    if row is None or row.password_hash is None:
        if _dummy_hash is None:
            _dummy_hash = _hasher.hash("payplane dummy password")
        with contextlib.suppress(VerificationError):
            _hasher.verify(_dummy_hash, password)
        return None
    try:
        _hasher.verify(row.password_hash, password)
    except (VerificationError, InvalidHashError):
        return None
    if _hasher.check_needs_rehash(row.password_hash):
        with ctx.db.write() as conn:
            conn.execute(
                update(users)
                .where(users.c.id == row.id)
                .values(password_hash=_hasher.hash(password))
            )
    return user_from_row(row)


def set_password(ctx: AppContext, user_id: int, password: str | None) -> None:
    """Set (or, with None, remove) an account's password."""
    value = _hasher.hash(password) if password is not None else None
    with ctx.db.write() as conn:
        result = conn.execute(
            update(users)
            .where(users.c.id == user_id, users.c.deleted_at.is_(None))
            .values(password_hash=value)
        )
        if result.rowcount != 1:
            raise LookupError(f"user {user_id} does not exist")


def get_user(conn: Connection, user_id: int) -> User | None:
    """The account, or None when it does not exist or was deleted."""
    row = conn.execute(
        select(*USER_COLUMNS).where(users.c.id == user_id, users.c.deleted_at.is_(None))
    ).first()
    return user_from_row(row) if row is not None else None


def user_by_email(conn: Connection, email: str) -> User | None:
    row = conn.execute(
        select(*USER_COLUMNS).where(
            users.c.email == normalize_email(email), users.c.deleted_at.is_(None)
        )
    ).first()
    return user_from_row(row) if row is not None else None


def list_users(conn: Connection, merchant_id: int) -> list[User]:
    """The active accounts of a merchant, oldest first."""
    rows = conn.execute(
        select(*USER_COLUMNS)
        .where(users.c.merchant_id == merchant_id, users.c.deleted_at.is_(None))
        .order_by(users.c.id)
    )
    return [user_from_row(row) for row in rows]


def delete_user(ctx: AppContext, actor_id: int | None, user_id: int) -> None:
    """Delete an account (see the module docstring). Admins cannot delete themselves."""
    with ctx.db.write() as conn:
        target = _lock_user(conn, user_id)
        _check_actor(conn, actor_id, target.merchant_id)
        if actor_id == user_id:
            raise PermissionDenied("You cannot delete your own account.")
        conn.execute(
            update(users)
            .where(users.c.id == user_id)
            .values(deleted_at=ctx.clock.now(), email=f"{target.email[:280]}#deleted-{user_id}")
        )
        conn.execute(delete(dashboard_sessions).where(dashboard_sessions.c.user_id == user_id))


def set_manage_tokens(ctx: AppContext, actor_id: int | None, user_id: int, allowed: bool) -> None:
    """Grant or withdraw Manage API tokens. Only a Merchant admin of the same merchant.

    Withdrawing does not touch the user's token: it stays valid (the state table).
    """
    with ctx.db.write() as conn:
        target = _lock_user(conn, user_id)
        if actor_id is not None:
            actor = get_user(conn, actor_id)
            if actor is None:
                raise PermissionDenied("The acting account does not exist.")
            check_set_manage_tokens(
                actor_role=actor.role,
                actor_merchant_id=actor.merchant_id,
                target_merchant_id=target.merchant_id,
            )
        conn.execute(update(users).where(users.c.id == user_id).values(can_manage_tokens=allowed))


def grant_project(
    ctx: AppContext, user_id: int, project_id: int, *, actor_id: int | None = None
) -> None:
    """Give a user access to a project of its own merchant (idempotent)."""
    with ctx.db.write() as conn:
        target = _lock_user(conn, user_id)
        _check_actor(conn, actor_id, target.merchant_id)
        _grant(conn, user_id, target.merchant_id, project_id)


def revoke_project(
    ctx: AppContext, user_id: int, project_id: int, *, actor_id: int | None = None
) -> None:
    """Take a project away from a user (idempotent). Effective at the user's next request."""
    with ctx.db.write() as conn:
        target = _lock_user(conn, user_id)
        _check_actor(conn, actor_id, target.merchant_id)
        conn.execute(
            delete(user_projects_table).where(
                user_projects_table.c.user_id == user_id,
                user_projects_table.c.project_id == project_id,
            )
        )


def user_projects(conn: Connection, user_id: int) -> list[int]:
    """IDs of the projects the account can see now (all of its merchant's for an admin)."""
    user = get_user(conn, user_id)
    return projects_of(conn, user) if user is not None else []


def projects_of(conn: Connection, user: User) -> list[int]:
    """``user_projects`` for an account already read in this transaction."""
    params: tuple[int, ...]
    if sees_all_projects(user.role):
        sql, params = _MERCHANT_PROJECTS, (user.merchant_id,)
    else:
        sql, params = _GRANTED_PROJECTS, (user.id, user.merchant_id)
    return sorted(int(project_id) for (project_id,) in driver_rows(conn, sql, params))


# The Data API reads project access on every request: hand-written SQL, the same text on both
# engines, run on the driver (``driver_rows``).
_MERCHANT_PROJECTS = "SELECT id FROM projects WHERE merchant_id = ?"
_GRANTED_PROJECTS = (
    "SELECT p.id FROM projects p JOIN user_projects g ON g.project_id = p.id"
    " WHERE g.user_id = ? AND p.merchant_id = ?"
)


def _lock_user(conn: Connection, user_id: int) -> User:
    row = conn.execute(
        select(*USER_COLUMNS)
        .where(users.c.id == user_id, users.c.deleted_at.is_(None))
        .with_for_update()
    ).first()
    if row is None:
        raise LookupError(f"user {user_id} does not exist")
    return user_from_row(row)


def _check_actor(conn: Connection, actor_id: int | None, merchant_id: int) -> None:
    if actor_id is None:
        return
    actor = get_user(conn, actor_id)
    if actor is None:
        raise PermissionDenied("The acting account does not exist.")
    check_manage_team(
        actor_role=actor.role, actor_merchant_id=actor.merchant_id, target_merchant_id=merchant_id
    )


def _grant(conn: Connection, user_id: int, merchant_id: int, project_id: int) -> None:
    owner = conn.execute(select(projects.c.merchant_id).where(projects.c.id == project_id)).scalar()
    if owner is None:
        raise ValueError(f"project {project_id} does not exist")
    if int(owner) != merchant_id:
        raise PermissionDenied(f"Project {project_id} belongs to another merchant.")
    exists = conn.execute(
        select(user_projects_table.c.user_id).where(
            user_projects_table.c.user_id == user_id,
            user_projects_table.c.project_id == project_id,
        )
    ).first()
    if exists is None:
        conn.execute(insert(user_projects_table).values(user_id=user_id, project_id=project_id))
