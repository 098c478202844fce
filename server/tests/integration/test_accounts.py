"""Account and token services on SQLite and PostgreSQL: sign-in, access, the token table."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from payplane_server.context import AppContext
from payplane_server.db.tables import api_tokens, users
from payplane_server.services.accounts import (
    EmailTaken,
    PermissionDenied,
    authenticate,
    create_user,
    delete_user,
    get_user,
    grant_project,
    list_users,
    revoke_project,
    set_manage_tokens,
    user_projects,
)
from payplane_server.services.projects import create_merchant, create_project
from payplane_server.services.tokens import (
    NoValidToken,
    authenticate_token,
    current_token,
    delete_token,
    new_token,
)


@pytest.fixture
def shop(ctx: AppContext) -> dict[str, int]:
    merchant = create_merchant(ctx, "Shop")
    other = create_merchant(ctx, "Other")
    create_project(ctx, project_id=101, name="A", callback_url=None, merchant_id=merchant)
    create_project(ctx, project_id=102, name="B", callback_url=None, merchant_id=merchant)
    create_project(ctx, project_id=900, name="X", callback_url=None, merchant_id=other)
    admin = create_user(
        ctx, merchant_id=merchant, email="Admin@Shop.test", name="Ada", role="Merchant admin"
    )
    finance = create_user(
        ctx,
        merchant_id=merchant,
        email="fin@shop.test",
        name="Fin",
        role="Finance",
        can_manage_tokens=True,
        project_ids=[101],
    )
    outsider = create_user(
        ctx, merchant_id=other, email="boss@other.test", name="Bo", role="Merchant admin"
    )
    return {"merchant": merchant, "admin": admin, "finance": finance, "outsider": outsider}


def test_password_sign_in_and_unknown_or_wrong_credentials(ctx: AppContext) -> None:
    merchant = create_merchant(ctx, "M")
    uid = create_user(
        ctx, merchant_id=merchant, email="a@b.test", name="A", role="Support", password="pw-1"
    )
    user = authenticate(ctx, " A@B.test ", "pw-1")
    assert user is not None and user.id == uid and user.role == "Support"
    assert authenticate(ctx, "a@b.test", "wrong") is None
    assert authenticate(ctx, "nobody@b.test", "pw-1") is None
    with ctx.db.read() as conn:
        stored = conn.execute(select(users.c.password_hash)).scalar()
    assert stored is not None and stored.startswith("$argon2id$") and "pw-1" not in stored


def test_account_without_password_cannot_sign_in(ctx: AppContext) -> None:
    merchant = create_merchant(ctx, "M")
    create_user(ctx, merchant_id=merchant, email="api@b.test", name="API", role="Finance")
    assert authenticate(ctx, "api@b.test", "") is None


def test_duplicate_email_and_unknown_role_are_refused(
    ctx: AppContext, shop: dict[str, int]
) -> None:
    with pytest.raises(EmailTaken):
        create_user(
            ctx, merchant_id=shop["merchant"], email="ADMIN@shop.test", name="x", role="Support"
        )
    with pytest.raises(ValueError, match="unknown role"):
        create_user(ctx, merchant_id=shop["merchant"], email="n@s.test", name="x", role="Boss")


def test_admin_sees_all_projects_of_its_merchant_others_only_grants(
    ctx: AppContext, shop: dict[str, int]
) -> None:
    with ctx.db.read() as conn:
        assert user_projects(conn, shop["admin"]) == [101, 102]
        assert user_projects(conn, shop["finance"]) == [101]
    grant_project(ctx, shop["finance"], 102)
    revoke_project(ctx, shop["finance"], 101)
    with ctx.db.read() as conn:
        assert user_projects(conn, shop["finance"]) == [102]


def test_a_project_of_another_merchant_cannot_be_granted(
    ctx: AppContext, shop: dict[str, int]
) -> None:
    with pytest.raises(PermissionDenied):
        grant_project(ctx, shop["finance"], 900)
    with ctx.db.read() as conn:
        assert user_projects(conn, shop["finance"]) == [101]


def test_only_an_admin_of_the_same_merchant_sets_manage_tokens(
    ctx: AppContext, shop: dict[str, int]
) -> None:
    with pytest.raises(PermissionDenied):
        set_manage_tokens(ctx, shop["finance"], shop["finance"], False)
    with pytest.raises(PermissionDenied):
        set_manage_tokens(ctx, shop["outsider"], shop["finance"], False)
    set_manage_tokens(ctx, shop["admin"], shop["finance"], False)
    with ctx.db.read() as conn:
        user = get_user(conn, shop["finance"])
    assert user is not None and not user.can_manage_tokens


def test_deleted_account_disappears_and_its_email_can_be_reused(
    ctx: AppContext, shop: dict[str, int]
) -> None:
    with pytest.raises(PermissionDenied):
        delete_user(ctx, shop["finance"], shop["admin"])
    delete_user(ctx, shop["admin"], shop["finance"])
    with ctx.db.read() as conn:
        assert get_user(conn, shop["finance"]) is None
        assert [u.id for u in list_users(conn, shop["merchant"])] == [shop["admin"]]
        assert user_projects(conn, shop["finance"]) == []
    create_user(ctx, merchant_id=shop["merchant"], email="fin@shop.test", name="F", role="Finance")


def test_an_admin_cannot_delete_itself(ctx: AppContext, shop: dict[str, int]) -> None:
    with pytest.raises(PermissionDenied):
        delete_user(ctx, shop["admin"], shop["admin"])


# The API token state table, row by row, through the services and the database.


def test_row_valid_new_token_supersedes_the_previous(ctx: AppContext, shop: dict[str, int]) -> None:
    first = new_token(ctx, shop["finance"])
    second = new_token(ctx, shop["finance"])
    assert len(second.token) == 30 and second.token.isalnum() and second.token.isascii()
    with ctx.db.read() as conn:
        assert authenticate_token(ctx, conn, first.token) is None
        found = authenticate_token(ctx, conn, second.token)
        assert found is not None and found[0].id == shop["finance"] and found[1] == second.secret
        info = current_token(conn, shop["finance"])
        states = sorted(conn.execute(select(api_tokens.c.state)).scalars())
    assert info is not None and info.masked == "…" + second.token[-4:]
    assert states == ["superseded", "valid"]


def test_tokens_are_stored_only_as_hashes_and_secrets_encrypted(
    ctx: AppContext, shop: dict[str, int]
) -> None:
    issued = new_token(ctx, shop["finance"])
    with ctx.db.read() as conn:
        row = conn.execute(select(api_tokens)).one()
    assert issued.token not in str(tuple(row))
    assert issued.secret not in str(tuple(row))
    assert issued.secret not in repr(issued) and issued.token not in repr(issued)


def test_row_valid_delete_deactivates_for_good(ctx: AppContext, shop: dict[str, int]) -> None:
    issued = new_token(ctx, shop["finance"])
    delete_token(ctx, shop["finance"])
    with ctx.db.read() as conn:
        assert authenticate_token(ctx, conn, issued.token) is None
        assert current_token(conn, shop["finance"]) is None
    with pytest.raises(NoValidToken):
        delete_token(ctx, shop["finance"])
    newer = new_token(ctx, shop["finance"])
    with ctx.db.read() as conn:
        assert authenticate_token(ctx, conn, issued.token) is None
        assert authenticate_token(ctx, conn, newer.token) is not None


def test_row_valid_new_token_or_delete_refused_without_permission(
    ctx: AppContext, shop: dict[str, int]
) -> None:
    with pytest.raises(PermissionDenied):
        new_token(ctx, shop["admin"])
    with pytest.raises(PermissionDenied):
        delete_token(ctx, shop["admin"])


def test_row_account_deleted_token_gets_no_access(ctx: AppContext, shop: dict[str, int]) -> None:
    issued = new_token(ctx, shop["finance"])
    delete_user(ctx, shop["admin"], shop["finance"])
    with ctx.db.read() as conn:
        assert authenticate_token(ctx, conn, issued.token) is None
    with pytest.raises(PermissionDenied):
        new_token(ctx, shop["finance"])


def test_row_permission_withdrawn_token_keeps_working_but_cannot_be_changed(
    ctx: AppContext, shop: dict[str, int]
) -> None:
    issued = new_token(ctx, shop["finance"])
    set_manage_tokens(ctx, shop["admin"], shop["finance"], False)
    with ctx.db.read() as conn:
        assert authenticate_token(ctx, conn, issued.token) is not None
    with pytest.raises(PermissionDenied):
        new_token(ctx, shop["finance"])
    with pytest.raises(PermissionDenied):
        delete_token(ctx, shop["finance"])
    with ctx.db.read() as conn:
        assert authenticate_token(ctx, conn, issued.token) is not None


@pytest.mark.parametrize("token", ["", "x" * 30, "short", "é" * 30, "a" * 29 + "-"])
def test_malformed_or_unknown_tokens_do_not_authenticate(
    ctx: AppContext, shop: dict[str, int], token: str
) -> None:
    new_token(ctx, shop["finance"])
    with ctx.db.read() as conn:
        assert authenticate_token(ctx, conn, token) is None
