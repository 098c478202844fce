"""My profile (the API Tokens panel, password) and My team (Merchant admin only).

The new token and its secret key exist only in the response to the New token POST: nothing
keeps them for a later page. The New token form carries the ID of the token the page showed;
a resubmitted form (a browser refresh of that response re-sends the POST) no longer matches the
account's current token, so it generates nothing and redirects to the profile, where the
secret is gone.
"""

from __future__ import annotations

import secrets

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..domain.accounts import ROLES, sees_all_projects
from ..services import accounts, sessions, tokens
from ..services.dashboard_queries import project_names
from .dashboard_kit import (
    Forbidden,
    NotFound,
    Visitor,
    context_of,
    error_page,
    field,
    render,
    see_other,
    signed_in,
)

__all__ = ["routes"]

MIN_PASSWORD = 12
_MAX_USER_ID = 2**31 - 1

NOTICES = {
    "token-deleted": "The token was deleted. It no longer works with the Data API.",
    "token-stale": "The form was sent again (a page refresh), so no new token was generated. "
    "A secret key is shown only once; if it was lost, generate a new token.",
    "no-token": "There is no valid token to delete.",
    "password-changed": "Your password was changed. Other sign-ins were ended.",
    "saved": "The permissions were saved.",
    "user-deleted": "The user was deleted. Their token no longer works.",
}


def _notice(request: Request) -> str | None:
    return NOTICES.get(request.query_params.get("notice", ""))


def _project_names(request: Request, project_ids: list[int]) -> dict[int, str]:
    with context_of(request).db.read() as conn:
        return project_names(conn, project_ids)


# ---------------------------------------------------------------------------- My profile


def _profile(
    request: Request,
    visitor: Visitor,
    *,
    status: int = 200,
    issued: tokens.IssuedToken | None = None,
    error: str | None = None,
) -> Response:
    with context_of(request).db.read() as conn:
        current = tokens.current_token(conn, visitor.user.id)
    return render(
        request,
        "profile.html",
        visitor,
        status=status,
        token=current,
        issued=issued,
        projects=_project_names(request, visitor.project_ids),
        notice=_notice(request),
        error=error,
        min_password=MIN_PASSWORD,
    )


def profile(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    return _profile(request, visitor)


def new_token(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    ctx = context_of(request)
    with ctx.db.read() as conn:
        current = tokens.current_token(conn, visitor.user.id)
    # First, so that refreshing the page that showed a secret always lands on the profile.
    shown = field(form, "current_token", 20)
    if shown != str(current.id if current else 0):
        return see_other("/dashboard/profile?notice=token-stale")
    if not visitor.user.can_manage_tokens:
        raise Forbidden("You do not have the Manage API tokens permission.")
    issued = tokens.new_token(ctx, visitor.user.id)
    return _profile(request, visitor, issued=issued)


def confirm_delete_token(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    if not visitor.user.can_manage_tokens:
        raise Forbidden("You do not have the Manage API tokens permission.")
    with context_of(request).db.read() as conn:
        current = tokens.current_token(conn, visitor.user.id)
    if current is None:
        return see_other("/dashboard/profile?notice=no-token")
    return render(request, "confirm_delete_token.html", visitor, token=current)


def delete_token(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    try:
        tokens.delete_token(context_of(request), visitor.user.id)
    except tokens.NoValidToken:
        return see_other("/dashboard/profile?notice=no-token")
    return see_other("/dashboard/profile?notice=token-deleted")


def change_password(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    ctx = context_of(request)
    try:
        current = field(form, "current_password", 1024)
        new = field(form, "new_password", 1024)
        repeated = field(form, "repeat_password", 1024)
    except ValueError as exc:
        return _profile(request, visitor, status=400, error=str(exc))
    if len(new) < MIN_PASSWORD:
        message = f"The new password must have at least {MIN_PASSWORD} characters."
        return _profile(request, visitor, status=400, error=message)
    if new != repeated:
        return _profile(request, visitor, status=400, error="The new passwords differ.")
    subject = sessions.email_subject(visitor.user.email)
    wait = sessions.wait_before_attempt(ctx, [subject])
    if wait:
        message = f"Too many wrong passwords. Try again in {wait} seconds."
        return _profile(request, visitor, status=429, error=message)
    if accounts.authenticate(ctx, visitor.user.email, current) is None:
        sessions.record_failure(ctx, [subject])
        return _profile(request, visitor, status=400, error="The current password is wrong.")
    accounts.set_password(ctx, visitor.user.id, new)
    sessions.end_other_sessions(ctx, visitor.user.id, visitor.session_id)
    return see_other("/dashboard/profile?notice=password-changed")


# ------------------------------------------------------------------------------- My team


def _require_admin(visitor: Visitor) -> None:
    if not visitor.is_admin:
        raise Forbidden("My team is only for the Merchant admin role.")


def _member(request: Request, visitor: Visitor) -> accounts.User:
    raw = request.path_params["user_id"]
    if raw > _MAX_USER_ID:
        raise NotFound("There is no such user in your team.")
    with context_of(request).db.read() as conn:
        member = accounts.get_user(conn, raw)
    if member is None or member.merchant_id != visitor.user.merchant_id:
        raise NotFound("There is no such user in your team.")
    return member


def _team(
    request: Request,
    visitor: Visitor,
    *,
    selected: accounts.User | None = None,
    status: int = 200,
    **values: object,
) -> Response:
    with context_of(request).db.read() as conn:
        members = accounts.list_users(conn, visitor.user.merchant_id)
        granted = accounts.user_projects(conn, selected.id) if selected else []
    return render(
        request,
        "team.html",
        visitor,
        status=status,
        members=members,
        selected=selected,
        granted=set(granted),
        all_projects=selected is not None and sees_all_projects(selected.role),
        projects=_project_names(request, visitor.project_ids),
        roles=ROLES,
        notice=_notice(request),
        **values,
    )


def team(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    _require_admin(visitor)
    return _team(request, visitor)


def member(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    _require_admin(visitor)
    return _team(request, visitor, selected=_member(request, visitor))


def _chosen_projects(visitor: Visitor, form: FormData | None) -> set[int]:
    """Project IDs ticked in the form; every one must be a project of the merchant."""
    chosen: set[int] = set()
    for raw in form.getlist("project") if form is not None else []:
        if not isinstance(raw, str) or not (raw.isascii() and raw.isdigit()) or len(raw) > 19:
            raise Forbidden("A project in the form does not belong to your merchant.")
        if int(raw) not in visitor.project_ids:
            raise Forbidden("A project in the form does not belong to your merchant.")
        chosen.add(int(raw))
    return chosen


def save_member(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    _require_admin(visitor)
    ctx = context_of(request)
    target = _member(request, visitor)
    allowed = field(form, "can_manage_tokens", 10) == "on"
    chosen = _chosen_projects(visitor, form)
    with ctx.db.read() as conn:
        granted = set(accounts.user_projects(conn, target.id))
    admin_target = sees_all_projects(target.role)
    if field(form, "confirmed", 10) != "1":
        return render(
            request,
            "confirm_member.html",
            visitor,
            member=target,
            allowed=allowed,
            chosen=sorted(chosen),
            adding=sorted(chosen - granted) if not admin_target else [],
            removing=sorted(granted - chosen) if not admin_target else [],
            projects=_project_names(request, visitor.project_ids),
        )
    if allowed != target.can_manage_tokens:
        accounts.set_manage_tokens(ctx, visitor.user.id, target.id, allowed)
    if not admin_target:
        for project_id in sorted(chosen - granted):
            accounts.grant_project(ctx, target.id, project_id, actor_id=visitor.user.id)
        for project_id in sorted(granted - chosen):
            accounts.revoke_project(ctx, target.id, project_id, actor_id=visitor.user.id)
    return see_other(f"/dashboard/team/{target.id}?notice=saved")


def add_member(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    _require_admin(visitor)
    ctx = context_of(request)
    values = {"email": "", "name": "", "role": "Support"}
    try:
        values = {
            "email": field(form, "email", 320),
            "name": field(form, "name", 200),
            "role": field(form, "role", 40),
        }
        if values["role"] not in ROLES:
            raise ValueError("Choose one of the roles.")
        password = secrets.token_urlsafe(12)
        user_id = accounts.create_user(
            ctx,
            merchant_id=visitor.user.merchant_id,
            email=values["email"],
            name=values["name"],
            role=values["role"],
            password=password,
            can_manage_tokens=field(form, "can_manage_tokens", 10) == "on",
            project_ids=sorted(_chosen_projects(visitor, form)),
            actor_id=visitor.user.id,
        )
    except accounts.EmailTaken:
        message = "Another account already uses this email address."
        return _team(request, visitor, status=409, add_error=message, add_values=values)
    except ValueError as exc:
        message = str(exc)[:300]
        return _team(request, visitor, status=400, add_error=message, add_values=values)
    with ctx.db.read() as conn:
        created = accounts.get_user(conn, user_id)
    return _team(request, visitor, created=created, initial_password=password)


def confirm_delete_member(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    _require_admin(visitor)
    target = _member(request, visitor)
    if target.id == visitor.user.id:
        raise Forbidden("You cannot delete your own account.")
    return render(request, "confirm_delete_member.html", visitor, member=target)


def delete_member(request: Request, visitor: Visitor, form: FormData | None) -> Response:
    _require_admin(visitor)
    target = _member(request, visitor)
    if target.id == visitor.user.id:
        raise Forbidden("You cannot delete your own account.")
    try:
        accounts.delete_user(context_of(request), visitor.user.id, target.id)
    except LookupError:
        return error_page(request, visitor, 404, "There is no such user in your team.")
    return see_other("/dashboard/team?notice=user-deleted")


routes: list[BaseRoute] = [
    Route("/dashboard/profile", signed_in(profile), methods=["GET"]),
    Route("/dashboard/profile/token", signed_in(new_token), methods=["POST"]),
    Route("/dashboard/profile/token/delete", signed_in(confirm_delete_token), methods=["GET"]),
    Route("/dashboard/profile/token/delete", signed_in(delete_token), methods=["POST"]),
    Route("/dashboard/profile/password", signed_in(change_password), methods=["POST"]),
    Route("/dashboard/team", signed_in(team), methods=["GET"]),
    Route("/dashboard/team", signed_in(add_member), methods=["POST"]),
    Route("/dashboard/team/{user_id:int}", signed_in(member), methods=["GET"]),
    Route("/dashboard/team/{user_id:int}", signed_in(save_member), methods=["POST"]),
    Route(
        "/dashboard/team/{user_id:int}/delete",
        signed_in(confirm_delete_member),
        methods=["GET"],
    ),
    Route("/dashboard/team/{user_id:int}/delete", signed_in(delete_member), methods=["POST"]),
]
