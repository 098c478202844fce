"""``payplane-server user ...`` and ``payplane-server token ...``: Dashboard accounts and Data
API tokens from the command line (the operator acts; a user's own token still needs that
user's Manage API tokens permission, as in the specification's state table)."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy import select

from ..context import AppContext
from ..db.tables import merchants, projects
from ._common import DataDir, context_for

__all__ = ["token_app", "user_app"]

user_app = typer.Typer(help="Dashboard user accounts.", no_args_is_help=True)
token_app = typer.Typer(help="Data API tokens.", no_args_is_help=True)

Who = Annotated[str, typer.Argument(help="The account's email address or numeric ID.")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _user_id(ctx: AppContext, who: str) -> int:
    from ..services.accounts import get_user, user_by_email

    with ctx.db.read() as conn:
        user = get_user(conn, int(who)) if who.isdigit() else user_by_email(conn, who)
    if user is None:
        raise _fail(f"no account {who!r}")
    return user.id


def _merchant_for(ctx: AppContext, merchant_id: int | None, project_id: int | None) -> int:
    with ctx.db.read() as conn:
        if project_id is not None:
            owner = conn.execute(
                select(projects.c.merchant_id).where(projects.c.id == project_id)
            ).scalar()
            if owner is None:
                raise _fail(f"project {project_id} does not exist")
            if merchant_id is not None and merchant_id != owner:
                raise _fail(f"project {project_id} belongs to merchant {owner}")
            return int(owner)
        if merchant_id is not None:
            return merchant_id
        ids: list[int] = list(conn.execute(select(merchants.c.id).limit(2)).scalars())
    if len(ids) != 1:
        raise _fail("say which merchant with --merchant ID or --project ID")
    return int(ids[0])


@user_app.command("create")
def create(
    email: Annotated[str, typer.Argument(help="Email address (the sign-in name).")],
    name: Annotated[str, typer.Option("--name", help="Display name.")],
    role: Annotated[str, typer.Option("--role", help="Merchant admin, Finance or Support.")],
    merchant_id: Annotated[int | None, typer.Option("--merchant", help="Merchant ID.")] = None,
    project_ids: Annotated[
        list[int] | None,
        typer.Option("--project", help="A project to grant (repeatable); sets the merchant."),
    ] = None,
    manage_tokens: Annotated[
        bool, typer.Option("--manage-tokens", help="Give the Manage API tokens permission.")
    ] = False,
    no_password: Annotated[
        bool, typer.Option("--no-password", help="An account that cannot sign in.")
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Create a Dashboard account; the password is asked for (hidden) unless --no-password."""
    from ..services.accounts import EmailTaken, PermissionDenied, create_user

    password = None
    if not no_password:
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
        if len(password) < 8:
            raise _fail("the password must have at least 8 characters")
    granted = list(project_ids or [])
    with context_for(data_dir) as ctx:
        merchant = _merchant_for(ctx, merchant_id, granted[0] if granted else None)
        try:
            user_id = create_user(
                ctx,
                merchant_id=merchant,
                email=email,
                name=name,
                role=role,
                password=password,
                can_manage_tokens=manage_tokens,
                project_ids=granted,
            )
        except (EmailTaken, PermissionDenied, ValueError) as exc:
            raise _fail(str(exc)) from exc
    typer.echo(f"user {user_id} created: {email} ({role}) of merchant {merchant}")


@user_app.command("list")
def list_(
    merchant_id: Annotated[int | None, typer.Option("--merchant", help="Merchant ID.")] = None,
    data_dir: DataDir = None,
) -> None:
    """The active accounts of a merchant with their permissions and projects."""
    from ..services.accounts import list_users, user_projects

    with context_for(data_dir) as ctx:
        merchant = _merchant_for(ctx, merchant_id, None)
        with ctx.db.read() as conn:
            for user in list_users(conn, merchant):
                tokens = "manage-tokens" if user.can_manage_tokens else "-"
                shown = ",".join(str(p) for p in user_projects(conn, user.id)) or "-"
                typer.echo(f"{user.id}\t{user.email}\t{user.role}\t{tokens}\tprojects {shown}")


@user_app.command("delete")
def delete(who: Who, data_dir: DataDir = None) -> None:
    """Delete an account: it can no longer sign in and its token gets 401."""
    from ..services.accounts import delete_user

    with context_for(data_dir) as ctx:
        delete_user(ctx, None, _user_id(ctx, who))
    typer.echo(f"user {who} deleted")


def _change(
    who: str, project_id: int | None, manage_tokens: bool, allow: bool, data_dir: DataDir
) -> None:
    from ..services.accounts import (
        PermissionDenied,
        grant_project,
        revoke_project,
        set_manage_tokens,
    )

    if project_id is None and not manage_tokens:
        raise _fail("say what: --project ID and/or --manage-tokens")
    with context_for(data_dir) as ctx:
        user_id = _user_id(ctx, who)
        try:
            if project_id is not None:
                (grant_project if allow else revoke_project)(ctx, user_id, project_id)
            if manage_tokens:
                set_manage_tokens(ctx, None, user_id, allow)
        except (PermissionDenied, ValueError) as exc:
            raise _fail(str(exc)) from exc
    what = [f"project {project_id}"] if project_id is not None else []
    what += ["Manage API tokens"] if manage_tokens else []
    typer.echo(f"{'granted' if allow else 'revoked'} {' and '.join(what)} for user {who}")


ProjectOption = Annotated[int | None, typer.Option("--project", help="A project ID.")]
TokensOption = Annotated[
    bool, typer.Option("--manage-tokens", help="The Manage API tokens permission.")
]


@user_app.command("grant")
def grant(
    who: Who,
    project_id: ProjectOption = None,
    manage_tokens: TokensOption = False,
    data_dir: DataDir = None,
) -> None:
    """Grant access to a project of the account's merchant, or Manage API tokens."""
    _change(who, project_id, manage_tokens, True, data_dir)


@user_app.command("revoke")
def revoke(
    who: Who,
    project_id: ProjectOption = None,
    manage_tokens: TokensOption = False,
    data_dir: DataDir = None,
) -> None:
    """Withdraw a project or Manage API tokens (an existing token keeps working)."""
    _change(who, project_id, manage_tokens, False, data_dir)


@token_app.command("new")
def token_new(who: Who, data_dir: DataDir = None) -> None:
    """Generate the account's Data API token and secret key, printed once; the previous token
    stops working."""
    from ..services.tokens import PermissionDenied, new_token

    with context_for(data_dir) as ctx:
        try:
            issued = new_token(ctx, _user_id(ctx, who))
        except PermissionDenied as exc:
            raise _fail(
                f"{exc} Grant it with: payplane-server user grant {who} --manage-tokens"
            ) from exc
    typer.echo(f"token:      {issued.token}")
    typer.echo(f"secret key: {issued.secret}")
    typer.echo("Shown once: store both now. A lost secret key needs a new token.", err=True)


@token_app.command("delete")
def token_delete(who: Who, data_dir: DataDir = None) -> None:
    """Deactivate the account's token for good."""
    from ..services.tokens import NoValidToken, PermissionDenied, delete_token

    with context_for(data_dir) as ctx:
        try:
            delete_token(ctx, _user_id(ctx, who))
        except (PermissionDenied, NoValidToken) as exc:
            raise _fail(str(exc)) from exc
    typer.echo(f"token of user {who} deactivated")
