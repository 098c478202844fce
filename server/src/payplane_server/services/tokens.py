"""Data API tokens: generate, deactivate, show, authenticate (``domain.tokens`` decides).

A token is 30 characters of [A-Za-z0-9] from ``secrets``; only its SHA-256 is stored (plus its
last four characters for the masked display). Its secret key is stored encrypted with the
master key. The token and its secret are returned once, by ``new_token``, and never again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, insert, select, update

from ..context import AppContext
from ..crypto import generate_secret, generate_token, hash_token
from ..db import driver_rows
from ..db.tables import UTCDateTime, api_tokens, users
from ..domain.accounts import PermissionDenied
from ..domain.tokens import (
    TOKEN_LENGTH,
    Holder,
    NoValidToken,
    TokenState,
    deactivate,
    generate,
    grants_access,
    is_well_formed,
)
from .accounts import User, get_user

__all__ = [
    "IssuedToken",
    "NoValidToken",
    "PermissionDenied",
    "TokenInfo",
    "authenticate_token",
    "current_token",
    "delete_token",
    "new_token",
]


@dataclass(frozen=True)
class IssuedToken:
    """A freshly generated token and its secret key: show both once, then forget them."""

    token: str
    secret: str

    def __repr__(self) -> str:
        return f"IssuedToken(token='…{self.token[-4:]}', secret=<hidden>)"


@dataclass(frozen=True)
class TokenInfo:
    """What may be shown of the current token: never its value or its secret."""

    id: int
    masked: str
    created_at: datetime


# Every Data API request runs this; as driver-level SQL it costs a fraction of a Core statement.
_BY_HASH = (
    "SELECT t.state, t.secret_enc, u.deleted_at, u.id, u.merchant_id, u.email, u.name, u.role,"
    " u.can_manage_tokens, u.created_at"
    " FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = ?"
)
_AS_UTC = UTCDateTime()


def _secret_context(token_hash: str) -> str:
    return f"api-token:{token_hash}"


def _holder(user: User | None) -> Holder:
    if user is None:
        return Holder(may_manage_tokens=False, account_deleted=True)
    return Holder(may_manage_tokens=user.can_manage_tokens)


def new_token(ctx: AppContext, actor_id: int) -> IssuedToken:
    """Generate a token for the actor's own account; the previous valid token is superseded.

    Raises PermissionDenied without Manage API tokens (or for a deleted account).
    """
    token = generate_token(TOKEN_LENGTH)
    secret = generate_secret()
    token_hash = hash_token(token)
    now = ctx.clock.now()
    with ctx.db.write() as conn:
        user = _lock(conn, actor_id)
        previous = _valid_token_id(conn, actor_id)
        previous_next, new_state = generate(
            TokenState.VALID if previous is not None else None, _holder(user)
        )
        if previous is not None and previous_next is not None:
            conn.execute(
                update(api_tokens)
                .where(api_tokens.c.id == previous)
                .values(state=previous_next.value, ended_at=now)
            )
        conn.execute(
            insert(api_tokens).values(
                user_id=actor_id,
                token_hash=token_hash,
                token_last4=token[-4:],
                secret_enc=ctx.box.encrypt(secret, _secret_context(token_hash)),
                state=new_state.value,
                created_at=now,
            )
        )
    return IssuedToken(token=token, secret=secret)


def delete_token(ctx: AppContext, actor_id: int) -> None:
    """Deactivate the actor's valid token (final). PermissionDenied without the permission;
    NoValidToken when there is nothing to deactivate."""
    with ctx.db.write() as conn:
        user = _lock(conn, actor_id)
        current = _valid_token_id(conn, actor_id)
        next_state = deactivate(TokenState.VALID if current is not None else None, _holder(user))
        conn.execute(
            update(api_tokens)
            .where(api_tokens.c.id == current)
            .values(state=next_state.value, ended_at=ctx.clock.now())
        )


def current_token(conn: Connection, user_id: int) -> TokenInfo | None:
    """The account's valid token, masked (``…last4``), or None."""
    row = conn.execute(
        select(api_tokens.c.id, api_tokens.c.token_last4, api_tokens.c.created_at).where(
            api_tokens.c.user_id == user_id, api_tokens.c.state == TokenState.VALID.value
        )
    ).first()
    if row is None:
        return None
    return TokenInfo(id=int(row.id), masked="…" + row.token_last4, created_at=row.created_at)


def authenticate_token(ctx: AppContext, conn: Connection, token: str) -> tuple[User, str] | None:
    """The account and the secret key of a valid token, or None (unknown, superseded,
    deactivated, malformed, or its account deleted)."""
    if not is_well_formed(token):
        return None
    token_hash = hash_token(token)
    rows = driver_rows(conn, _BY_HASH, (token_hash,))
    if not rows:
        return None
    row = rows[0]  # token_hash is unique
    state, secret_enc, deleted_at, user_id, merchant_id, email, name, role, manage, created = row
    created_at = _AS_UTC.process_result_value(created, conn.dialect)
    assert created_at is not None
    user = User(
        id=int(user_id),
        merchant_id=int(merchant_id),
        email=email,
        name=name,
        role=role,
        can_manage_tokens=bool(manage),
        created_at=created_at,
    )
    holder = Holder(
        may_manage_tokens=user.can_manage_tokens, account_deleted=deleted_at is not None
    )
    if not grants_access(TokenState(state), holder):
        return None
    return user, ctx.box.decrypt(secret_enc, _secret_context(token_hash))


def _lock(conn: Connection, user_id: int) -> User | None:
    """The account, locked against concurrent token changes (PostgreSQL; SQLite writes are
    already serialised by BEGIN IMMEDIATE)."""
    conn.execute(select(users.c.id).where(users.c.id == user_id).with_for_update()).first()
    return get_user(conn, user_id)


def _valid_token_id(conn: Connection, user_id: int) -> int | None:
    value = conn.execute(
        select(api_tokens.c.id).where(
            api_tokens.c.user_id == user_id, api_tokens.c.state == TokenState.VALID.value
        )
    ).scalar()
    return int(value) if value is not None else None
