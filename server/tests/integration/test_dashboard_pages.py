"""Dashboard pages through the real app (Starlette's TestClient), on SQLite and PostgreSQL:
sign-in, sessions, CSRF, permissions and scoping, and bad input of every kind."""

from __future__ import annotations

import functools
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import httpx
import pytest
from argon2 import PasswordHasher
from sqlalchemy import func, insert, select
from starlette.testclient import TestClient

from payplane_server.clock import FakeClock
from payplane_server.context import AppContext
from payplane_server.db.tables import (
    api_tokens,
    callbacks,
    dashboard_sessions,
    payments,
    user_projects,
    users,
)
from payplane_server.domain.payments import Code, Status
from payplane_server.services import accounts, sessions, tokens
from payplane_server.services.processing import Change, start_operation, transition
from payplane_server.services.projects import create_project, get_project
from payplane_server.web.app import create_app
from payplane_server.web.dashboard_kit import safe_next

PASSWORD = "correct horse battery"
# HTTP behaviour and argon2-bound sign-in checks that do not depend on the engine run once, on
# SQLite (this overrides conftest's engine parameter); the sessions and slowdown services they
# rest on are tested on both engines in test_dashboard_services.py.
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class Team:
    admin: int
    finance: int
    support: int
    other_admin: int
    other_payment: int
    payment: int


@functools.cache
def _hash() -> str:
    return PasswordHasher().hash(PASSWORD)


def _merchant(ctx: AppContext, project_id: int) -> int:
    with ctx.db.read() as conn:
        project = get_project(conn, project_id)
    assert project is not None
    return project.merchant_id


def _payment(ctx: AppContext, project_id: int, payment_id: str) -> int:
    now = ctx.clock.now()
    with ctx.db.write() as conn:
        pk = int(
            conn.execute(
                insert(payments)
                .values(
                    project_id=project_id,
                    payment_id=payment_id,
                    status=Status.NEW.value,
                    amount=1999,
                    currency="USD",
                    customer_id="customer-1",
                    params=json.dumps({"payment_id": payment_id}),
                    processing_deadline=now + timedelta(days=1),
                    page_token=secrets.token_hex(16),
                    created_at=now,
                    updated_at=now,
                )
                .returning(payments.c.id)
            ).scalar_one()
        )
        row = conn.execute(select(payments).where(payments.c.id == pk)).one()
        start_operation(ctx, conn, row)
        assert transition(ctx, conn, pk, Change(status=Status.SUCCESS, code=Code.SUCCESS))
    return pk


@pytest.fixture
def team(ctx: AppContext) -> Team:
    create_project(ctx, project_id=501, name="Shop", callback_url="http://127.0.0.1:9/cb")
    mine = _merchant(ctx, 501)
    create_project(ctx, project_id=502, name="Outlet", callback_url=None, merchant_id=mine)
    create_project(ctx, project_id=777, name="Rival", callback_url="http://127.0.0.1:9/cb")
    theirs = _merchant(ctx, 777)

    def user(merchant: int, email: str, role: str, manage: bool, grants: tuple[int, ...]) -> int:
        user_id = accounts.create_user(
            ctx,
            merchant_id=merchant,
            email=email,
            name=email.split("@")[0].title(),
            role=role,
            can_manage_tokens=manage,
            project_ids=grants,
        )
        # One real argon2 hash of PASSWORD, made once: hashing costs half a second here.
        with ctx.db.write() as conn:
            conn.execute(users.update().where(users.c.id == user_id).values(password_hash=_hash()))
        return user_id

    return Team(
        admin=user(mine, "ann@shop.example", "Merchant admin", True, ()),
        finance=user(mine, "bob@shop.example", "Finance", True, (501,)),
        support=user(mine, "sue@shop.example", "Support", False, (501,)),
        other_admin=user(theirs, "zed@rival.example", "Merchant admin", True, ()),
        payment=_payment(ctx, 501, "order-1"),
        other_payment=_payment(ctx, 777, "rival-1"),
    )


class Visit:
    """One browser: a cookie jar, and the CSRF token of the page seen last."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.csrf = ""

    def get(self, path: str, **kwargs: object) -> httpx.Response:
        response = self.client.get(path, **kwargs)  # type: ignore[arg-type]
        found = CSRF.search(response.text)
        if found:
            self.csrf = found.group(1)
        return response

    def post(
        self, path: str, data: dict[str, object] | None = None, **kw: object
    ) -> httpx.Response:
        fields: dict[str, object] = {"csrf_token": self.csrf, **(data or {})}
        response = self.client.post(path, data=fields, **kw)  # type: ignore[arg-type]
        found = CSRF.search(response.text)
        if found:
            self.csrf = found.group(1)
        return response

    def sign_in(self, email: str, password: str = PASSWORD) -> httpx.Response:
        self.get("/dashboard/sign-in")
        return self.post("/dashboard/sign-in", {"email": email, "password": password})


@pytest.fixture
def app_client(ctx: AppContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx), follow_redirects=False) as client:
        yield client


def _visit(ctx: AppContext, email: str | None = None) -> Visit:
    """A browser, signed in as ``email`` when given. The session is opened directly (argon2
    costs half a second a check on this machine); the sign-in form has its own tests."""
    visit = Visit(TestClient(create_app(ctx), follow_redirects=False))
    if email:
        with ctx.db.read() as conn:
            user = accounts.user_by_email(conn, email)
        assert user is not None
        visit.client.cookies.set(
            "payplane_dashboard", sessions.start_session(ctx, user.id), path="/dashboard"
        )
    return visit


def _count(ctx: AppContext, table: object, *where: object) -> int:
    with ctx.db.read() as conn:
        query = select(func.count()).select_from(table)  # type: ignore[arg-type]
        for condition in where:
            query = query.where(condition)  # type: ignore[arg-type]
        return int(conn.execute(query).scalar_one())


# ------------------------------------------------------------------------- sign-in, cookies


def test_pages_need_a_sign_in_and_come_back_after_it(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx)
    response = visit.get("/dashboard/payments?status=success")
    assert response.status_code == 303
    assert response.headers["location"] == (
        "/dashboard/sign-in?next=%2Fdashboard%2Fpayments%3Fstatus%3Dsuccess"
    )
    visit.get(response.headers["location"])
    signed = visit.post(
        "/dashboard/sign-in",
        {
            "email": "ann@shop.example",
            "password": PASSWORD,
            "next": "/dashboard/payments?status=success",
        },
    )
    assert signed.status_code == 303
    assert signed.headers["location"] == "/dashboard/payments?status=success"
    assert visit.get("/dashboard/payments").status_code == 200


@SQLITE_ONLY
def test_the_session_cookie_is_http_only_same_site_and_scoped(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx)
    response = visit.sign_in("ann@shop.example")
    cookie = next(
        value
        for name, value in response.headers.multi_items()
        if name == "set-cookie" and value.startswith("payplane_dashboard=")
    )
    lowered = cookie.lower()
    assert "httponly" in lowered
    assert "samesite=lax" in lowered
    assert "path=/dashboard" in lowered
    assert "secure" not in lowered  # plain HTTP here; see the HTTPS test


@SQLITE_ONLY
def test_the_session_cookie_is_secure_over_https(ctx: AppContext, team: Team) -> None:
    visit = Visit(
        TestClient(create_app(ctx), base_url="https://dash.example", follow_redirects=False)
    )
    response = visit.sign_in("ann@shop.example")
    assert response.status_code == 303
    cookies = [v.lower() for n, v in response.headers.multi_items() if n == "set-cookie"]
    session = next(c for c in cookies if c.startswith("payplane_dashboard="))
    assert "secure" in session and "httponly" in session


@SQLITE_ONLY
def test_a_wrong_password_is_refused_without_saying_which_part(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx)
    wrong = visit.sign_in("ann@shop.example", "not the password")
    unknown = visit.sign_in("nobody@shop.example", "not the password")
    for response in (wrong, unknown):
        assert response.status_code == 400
        assert "The email address or password is wrong." in response.text
        assert "payplane_dashboard=" not in response.headers.get("set-cookie", "")


@SQLITE_ONLY
def test_repeated_failures_slow_sign_in_down_even_for_the_right_password(
    ctx: AppContext, clock: FakeClock, team: Team
) -> None:
    visit = _visit(ctx)
    for _ in range(5):
        assert visit.sign_in("ann@shop.example", "guess").status_code == 400
    refused = visit.sign_in("ann@shop.example")
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert "Too many failed sign-in attempts" in refused.text
    clock.advance(1)
    assert visit.sign_in("ann@shop.example").status_code == 303


@SQLITE_ONLY
def test_the_slowdown_is_shared_by_every_process(ctx: AppContext, team: Team) -> None:
    # Two app instances (two processes' worth of state) over one database.
    first, second = _visit(ctx), _visit(ctx)
    for _ in range(3):
        first.sign_in("bob@shop.example", "guess")
        second.sign_in("bob@shop.example", "guess")
    assert first.sign_in("bob@shop.example").status_code == 429
    assert second.sign_in("bob@shop.example").status_code == 429


def test_sign_in_without_or_with_a_forged_form_token_is_refused(
    ctx: AppContext, team: Team, app_client: TestClient
) -> None:
    app_client.get("/dashboard/sign-in")
    for token in ("", "forged"):
        response = app_client.post(
            "/dashboard/sign-in",
            data={"email": "ann@shop.example", "password": PASSWORD, "csrf_token": token},
        )
        assert response.status_code == 403
        assert "payplane_dashboard=" not in response.headers.get("set-cookie", "")
    fresh = TestClient(create_app(ctx), follow_redirects=False)
    page = fresh.get("/dashboard/sign-in")
    token = CSRF.search(page.text)
    assert token is not None
    fresh.cookies.clear()  # a page of another browser: the token without its cookie
    response = fresh.post(
        "/dashboard/sign-in",
        data={"email": "ann@shop.example", "password": PASSWORD, "csrf_token": token.group(1)},
    )
    assert response.status_code == 403


@SQLITE_ONLY
def test_two_open_sign_in_forms_both_work(ctx: AppContext, team: Team) -> None:
    client = TestClient(create_app(ctx), follow_redirects=False)
    first = CSRF.search(client.get("/dashboard/sign-in").text)
    second = CSRF.search(client.get("/dashboard/sign-in").text)
    assert first is not None and second is not None
    response = client.post(
        "/dashboard/sign-in",
        data={"email": "ann@shop.example", "password": PASSWORD, "csrf_token": first.group(1)},
    )
    assert response.status_code == 303


@SQLITE_ONLY
def test_sign_in_never_redirects_off_the_dashboard(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx)
    visit.get("/dashboard/sign-in")
    response = visit.post(
        "/dashboard/sign-in",
        {"email": "ann@shop.example", "password": PASSWORD, "next": "//evil.example/x"},
    )
    assert response.headers["location"] == "/dashboard/payments"


@pytest.mark.parametrize(
    "target",
    [None, "", "//evil.example/x", "https://evil.example/", "/payment", "/dashboard\\@x", "x"],
)
def test_only_dashboard_paths_are_redirect_targets(target: str | None) -> None:
    assert safe_next(target) == "/dashboard/payments"
    assert safe_next("/dashboard/team/3?a=b") == "/dashboard/team/3?a=b"


def test_sign_out_ends_the_session_and_the_old_cookie_changes_nothing(
    ctx: AppContext, team: Team
) -> None:
    visit = _visit(ctx, "ann@shop.example")
    visit.get("/dashboard/profile")
    token_form = visit.csrf
    stolen = dict(visit.client.cookies)
    out = visit.post("/dashboard/sign-out")
    assert out.status_code == 303
    assert out.headers["location"] == "/dashboard/sign-in?signed-out=1"
    replay = TestClient(create_app(ctx), follow_redirects=False, cookies=stolen)
    assert replay.get("/dashboard/profile").status_code == 303
    response = replay.post(
        "/dashboard/profile/token", data={"csrf_token": token_form, "current_token": "0"}
    )
    assert response.status_code == 303
    assert response.headers["location"].startswith("/dashboard/sign-in")
    assert _count(ctx, api_tokens) == 0


def test_a_deleted_account_is_signed_out_at_once(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx, "bob@shop.example")
    assert visit.get("/dashboard/payments").status_code == 200
    accounts.delete_user(ctx, team.admin, team.finance)
    assert visit.get("/dashboard/payments").status_code == 303
    assert visit.post("/dashboard/profile/token", {"current_token": "0"}).status_code == 303
    assert _count(ctx, api_tokens) == 0


def test_every_page_is_private_and_under_the_strict_policy(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx, "ann@shop.example")
    for path in (
        "/dashboard/sign-in",
        "/dashboard/payments",
        f"/dashboard/payments/{team.payment}",
        "/dashboard/balances",
        "/dashboard/profile",
        "/dashboard/team",
        f"/dashboard/team/{team.finance}",
    ):
        response = visit.get(path)
        assert response.status_code == 200, path
        assert response.headers["cache-control"] == "no-store"
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert "<script>" not in response.text and " style=" not in response.text


FORM = re.compile(r'<form[^>]*method="post"[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S)


def test_every_form_on_every_page_carries_the_sessions_csrf_token(
    ctx: AppContext, team: Team
) -> None:
    tokens.new_token(ctx, team.admin)
    visit = _visit(ctx, "ann@shop.example")
    with ctx.db.read() as conn:
        expected = conn.execute(select(dashboard_sessions.c.csrf_token)).scalar_one()
    seen: set[str] = set()
    for path in (
        "/dashboard/payments",
        f"/dashboard/payments/{team.payment}",
        "/dashboard/balances",
        "/dashboard/profile",
        "/dashboard/profile/token/delete",
        "/dashboard/team",
        f"/dashboard/team/{team.finance}",
        f"/dashboard/team/{team.finance}/delete",
    ):
        forms = FORM.findall(visit.get(path).text)
        assert forms, path
        for action, body in forms:
            assert f'name="csrf_token" value="{expected}"' in body, (path, action)
            seen.add(action.split("/callbacks/")[0] if "/callbacks/" in action else action)
    confirm = visit.post(f"/dashboard/team/{team.finance}", {"can_manage_tokens": "on"})
    for action, body in FORM.findall(confirm.text):
        assert f'name="csrf_token" value="{expected}"' in body, action
    assert {
        "/dashboard/sign-out",
        "/dashboard/profile/token",
        "/dashboard/profile/token/delete",
        "/dashboard/profile/password",
        "/dashboard/team",
        f"/dashboard/team/{team.finance}",
        f"/dashboard/team/{team.finance}/delete",
        f"/dashboard/payments/{team.payment}",
    } <= seen


# ----------------------------------------------------------------------------- API tokens


def test_the_secret_is_shown_once_and_a_resent_form_makes_no_new_token(
    ctx: AppContext, team: Team
) -> None:
    visit = _visit(ctx, "ann@shop.example")
    page = visit.get("/dashboard/profile")
    assert "New token" in page.text
    form = {"current_token": "0"}
    issued = visit.post("/dashboard/profile/token", form)
    assert issued.status_code == 200
    assert issued.headers["cache-control"] == "no-store"
    token = re.search(r'data-testid="new-token">([A-Za-z0-9]{30})<', issued.text)
    secret = re.search(r'data-testid="new-secret">([^<]+)<', issued.text)
    assert token and secret
    with ctx.db.read() as conn:
        found = tokens.authenticate_token(ctx, conn, token.group(1))
    assert found is not None and found[1] == secret.group(1)
    again = visit.get("/dashboard/profile")
    assert secret.group(1) not in again.text and token.group(1) not in again.text
    assert "…" + token.group(1)[-4:] in again.text
    resent = visit.post("/dashboard/profile/token", form)  # what a refresh of the POST does
    assert resent.status_code == 303
    assert resent.headers["location"] == "/dashboard/profile?notice=token-stale"
    assert _count(ctx, api_tokens) == 1


def test_no_new_token_button_and_no_token_without_the_permission(
    ctx: AppContext, team: Team
) -> None:
    visit = _visit(ctx, "sue@shop.example")
    page = visit.get("/dashboard/profile")
    assert "New token" not in page.text
    assert "Manage API tokens permission" in page.text
    assert visit.post("/dashboard/profile/token", {"current_token": "0"}).status_code == 403
    assert visit.get("/dashboard/profile/token/delete").status_code == 403
    assert visit.post("/dashboard/profile/token/delete").status_code == 403
    assert _count(ctx, api_tokens) == 0


def test_delete_asks_first_and_then_deactivates(ctx: AppContext, team: Team) -> None:
    tokens.new_token(ctx, team.admin)
    visit = _visit(ctx, "ann@shop.example")
    confirm = visit.get("/dashboard/profile/token/delete")
    assert confirm.status_code == 200 and "Delete the token" in confirm.text
    done = visit.post("/dashboard/profile/token/delete")
    assert done.headers["location"] == "/dashboard/profile?notice=token-deleted"
    with ctx.db.read() as conn:
        assert tokens.current_token(conn, team.admin) is None
    assert visit.post("/dashboard/profile/token/delete").headers["location"] == (
        "/dashboard/profile?notice=no-token"
    )


def test_forged_or_missing_csrf_tokens_change_nothing(ctx: AppContext, team: Team) -> None:
    tokens.new_token(ctx, team.admin)
    visit = _visit(ctx, "ann@shop.example")
    visit.get("/dashboard/profile")
    other = _visit(ctx, "bob@shop.example")
    other.get("/dashboard/profile")
    attempts = [
        ("/dashboard/profile/token", {"current_token": "1"}),
        ("/dashboard/profile/token/delete", {}),
        (
            "/dashboard/profile/password",
            {"current_password": PASSWORD, "new_password": "n" * 12, "repeat_password": "n" * 12},
        ),
        (f"/dashboard/team/{team.finance}", {"confirmed": "1"}),
        (f"/dashboard/team/{team.finance}/delete", {}),
        ("/dashboard/team", {"email": "eve@shop.example", "name": "Eve", "role": "Finance"}),
        ("/dashboard/sign-out", {}),
    ]
    for token in (None, "", "forged", other.csrf):
        for path, data in attempts:
            fields = dict(data)
            if token is not None:
                fields["csrf_token"] = token
            response = visit.client.post(path, data=fields)
            assert response.status_code == 403, (path, token)
            assert "Nothing was changed" in response.text
    with ctx.db.read() as conn:
        assert tokens.current_token(conn, team.admin) is not None
        bob = accounts.get_user(conn, team.finance)
    assert bob is not None and bob.can_manage_tokens
    assert _count(ctx, api_tokens) == 1
    assert _count(ctx, users) == 4
    assert accounts.authenticate(ctx, "ann@shop.example", PASSWORD) is not None
    assert visit.get("/dashboard/profile").status_code == 200


# --------------------------------------------------------------------------------- My team


def test_my_team_is_only_for_the_merchant_admin(ctx: AppContext, team: Team) -> None:
    for email in ("bob@shop.example", "sue@shop.example"):
        visit = _visit(ctx, email)
        assert "My team" not in visit.get("/dashboard/payments").text
        assert visit.get("/dashboard/team").status_code == 403
        assert visit.get(f"/dashboard/team/{team.support}").status_code == 403
        assert (
            visit.post(
                f"/dashboard/team/{team.support}", {"can_manage_tokens": "on", "confirmed": "1"}
            ).status_code
            == 403
        )
        assert visit.post(f"/dashboard/team/{team.admin}/delete").status_code == 403
        added = visit.post(
            "/dashboard/team", {"email": "x@shop.example", "name": "X", "role": "Merchant admin"}
        )
        assert added.status_code == 403
    with ctx.db.read() as conn:
        sue = accounts.get_user(conn, team.support)
    assert sue is not None and not sue.can_manage_tokens
    assert _count(ctx, users) == 4


def test_saving_permissions_asks_for_confirmation_then_applies(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx, "ann@shop.example")
    tab = visit.get(f"/dashboard/team/{team.support}")
    assert 'name="can_manage_tokens"' in tab.text
    ask = visit.post(
        f"/dashboard/team/{team.support}", {"can_manage_tokens": "on", "project": ["501", "502"]}
    )
    assert ask.status_code == 200
    assert "granted" in ask.text and "Confirm" in ask.text
    with ctx.db.read() as conn:
        sue = accounts.get_user(conn, team.support)
        assert sue is not None and not sue.can_manage_tokens
    done = visit.post(
        f"/dashboard/team/{team.support}",
        {"can_manage_tokens": "on", "project": ["501", "502"], "confirmed": "1"},
    )
    assert done.headers["location"] == f"/dashboard/team/{team.support}?notice=saved"
    with ctx.db.read() as conn:
        sue = accounts.get_user(conn, team.support)
        assert sue is not None and sue.can_manage_tokens
        assert accounts.user_projects(conn, team.support) == [501, 502]
    withdrawn = visit.post(
        f"/dashboard/team/{team.support}", {"project": ["502"], "confirmed": "1"}
    )
    assert withdrawn.status_code == 303
    with ctx.db.read() as conn:
        sue = accounts.get_user(conn, team.support)
        assert sue is not None and not sue.can_manage_tokens
        assert accounts.user_projects(conn, team.support) == [502]


def test_other_merchants_users_and_projects_are_out_of_reach(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx, "ann@shop.example")
    visit.get("/dashboard/team")
    zed = team.other_admin
    assert visit.get(f"/dashboard/team/{zed}").status_code == 404
    assert visit.post(f"/dashboard/team/{zed}", {"confirmed": "1"}).status_code == 404
    assert visit.get(f"/dashboard/team/{zed}/delete").status_code == 404
    assert visit.post(f"/dashboard/team/{zed}/delete").status_code == 404
    assert visit.get("/dashboard/team/99999999999999999999").status_code == 404
    grab = visit.post(
        f"/dashboard/team/{team.support}", {"project": ["501", "777"], "confirmed": "1"}
    )
    assert grab.status_code == 403
    for junk_id in ("1e3", "²", "٥٠١"):
        junk = visit.post(
            f"/dashboard/team/{team.support}", {"project": [junk_id], "confirmed": "1"}
        )
        assert junk.status_code == 403
    added = visit.post(
        "/dashboard/team",
        {"email": "eve@shop.example", "name": "Eve", "role": "Finance", "project": "777"},
    )
    assert added.status_code == 403
    with ctx.db.read() as conn:
        zed_user = accounts.get_user(conn, zed)
        assert zed_user is not None and zed_user.can_manage_tokens
        assert accounts.user_projects(conn, team.support) == [501]
        assert accounts.user_by_email(conn, "eve@shop.example") is None
    assert _count(ctx, user_projects, user_projects.c.project_id == 777) == 0


@SQLITE_ONLY
def test_adding_a_user_shows_the_initial_password_once(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx, "ann@shop.example")
    visit.get("/dashboard/team")
    added = visit.post(
        "/dashboard/team",
        {
            "email": "Eve@Shop.example",
            "name": "Eve",
            "role": "Support",
            "project": "501",
            "can_manage_tokens": "on",
        },
    )
    assert added.status_code == 200
    password = re.search(r'data-testid="initial-password">([^<]+)<', added.text)
    assert password is not None
    eve = accounts.authenticate(ctx, "eve@shop.example", password.group(1))
    assert eve is not None and eve.role == "Support" and eve.can_manage_tokens
    with ctx.db.read() as conn:
        assert accounts.user_projects(conn, eve.id) == [501]
    assert password.group(1) not in visit.get("/dashboard/team").text
    twice = visit.post(
        "/dashboard/team", {"email": "eve@shop.example", "name": "Eve", "role": "Support"}
    )
    assert twice.status_code == 409
    bad_role = visit.post(
        "/dashboard/team", {"email": "z@shop.example", "name": "Z", "role": "Root"}
    )
    assert bad_role.status_code == 400


def test_deleting_a_user_asks_and_then_their_token_stops(ctx: AppContext, team: Team) -> None:
    issued = tokens.new_token(ctx, team.finance)
    visit = _visit(ctx, "ann@shop.example")
    ask = visit.get(f"/dashboard/team/{team.finance}/delete")
    assert ask.status_code == 200 and "Delete Bob?" in ask.text
    done = visit.post(f"/dashboard/team/{team.finance}/delete")
    assert done.headers["location"] == "/dashboard/team?notice=user-deleted"
    with ctx.db.read() as conn:
        assert accounts.get_user(conn, team.finance) is None
        assert tokens.authenticate_token(ctx, conn, issued.token) is None
    assert visit.get(f"/dashboard/team/{team.finance}").status_code == 404
    assert visit.post(f"/dashboard/team/{team.admin}/delete").status_code == 403


# ------------------------------------------------------------------------------ bad input


@SQLITE_ONLY
def test_script_bearing_values_are_escaped(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx, "ann@shop.example")
    visit.get("/dashboard/team")
    name = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    added = visit.post(
        "/dashboard/team", {"email": "mal@shop.example", "name": name, "role": "Support"}
    )
    assert added.status_code == 200
    listing = visit.get("/dashboard/team").text
    assert "<script>alert" not in listing and "<img src=x" not in listing
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in listing
    search = visit.get("/dashboard/payments", params={"payment_id": '"><script>alert(1)</script>'})
    assert search.status_code == 200
    assert "<script>alert(1)" not in search.text
    assert "&#34;&gt;&lt;script&gt;" in search.text


@SQLITE_ONLY
def test_oversized_values_are_refused_and_nothing_is_stored(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx, "ann@shop.example")
    visit.get("/dashboard/team")
    long_name = visit.post(
        "/dashboard/team", {"email": "big@shop.example", "name": "n" * 5000, "role": "Support"}
    )
    assert long_name.status_code == 400
    huge = visit.post(
        "/dashboard/team", {"email": "big@shop.example", "name": "n" * 2_000_000, "role": "Support"}
    )
    assert huge.status_code == 413
    long_search = visit.get("/dashboard/payments", params={"payment_id": "p" * 5000})
    assert long_search.status_code == 400
    assert visit.sign_in("a" * 5000 + "@x.example", PASSWORD).status_code == 400
    with ctx.db.read() as conn:
        assert accounts.user_by_email(conn, "big@shop.example") is None


def test_payment_search_input_is_checked(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx, "ann@shop.example")
    cases: list[tuple[dict[str, str], int]] = [
        ({"status": "bogus"}, 400),
        ({"from": "2026-13-45"}, 400),
        ({"from": "2026-11-02", "to": "2026-11-01"}, 400),
        ({"older": "not-a-cursor"}, 400),
        ({"newer": "1.2.3"}, 400),
        ({"project": "777"}, 403),
        ({"project": "abc"}, 403),
        ({"payment_id": "p" * 256}, 400),
        ({"status": "success", "from": "2026-11-01", "to": "2026-12-31"}, 200),
        ({"project": "501", "payment_id": "order-1"}, 200),
        ({"payment_id": "order\x00-1"}, 400),
        ({"project": "²"}, 403),
        ({"older": "²1.²"}, 400),
        ({"from": "0001-01-01", "to": "9999-12-31"}, 200),
    ]
    for query, status in cases:
        response = visit.get("/dashboard/payments", params=query)
        assert response.status_code == status, query
        shown = {200: "order-1", 400: 'role="alert"', 403: "Forbidden"}[status]
        assert shown in response.text, query


def test_nul_characters_are_refused_cleanly_on_every_engine(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx, "ann@shop.example")
    visit.get("/dashboard/team")
    for fields in (
        {"email": "nul\x00@shop.example", "name": "Nul", "role": "Support"},
        {"email": "nul@shop.example", "name": "N\x00ul", "role": "Support"},
    ):
        response = visit.post("/dashboard/team", fields)
        assert response.status_code == 400
        assert "NUL character" in response.text
    fresh = _visit(ctx)
    assert fresh.sign_in("ann\x00@shop.example", PASSWORD).status_code == 400
    assert _count(ctx, users) == 4


def test_payments_are_scoped_to_the_users_projects(ctx: AppContext, team: Team) -> None:
    other = _payment(ctx, 502, "outlet-1")
    sue = _visit(ctx, "sue@shop.example")  # Support, granted 501 only
    listing = sue.get("/dashboard/payments").text
    assert "order-1" in listing and "outlet-1" not in listing and "rival-1" not in listing
    assert sue.get(f"/dashboard/payments/{team.payment}").status_code == 200
    assert sue.get(f"/dashboard/payments/{other}").status_code == 404
    assert sue.get(f"/dashboard/payments/{team.other_payment}").status_code == 404
    assert sue.get("/dashboard/payments/99999999999999999999999").status_code == 404
    assert sue.get("/dashboard/payments/abc").status_code == 404
    ann = _visit(ctx, "ann@shop.example")
    assert "outlet-1" in ann.get("/dashboard/payments").text
    assert ann.get(f"/dashboard/payments/{team.other_payment}").status_code == 404


def test_resend_of_a_callback_outside_the_users_projects_is_not_found(
    ctx: AppContext, team: Team
) -> None:
    with ctx.db.read() as conn:
        theirs = conn.execute(
            select(callbacks.c.id).where(callbacks.c.payment_pk == team.other_payment)
        ).scalar_one()
        mine = conn.execute(
            select(callbacks.c.id).where(callbacks.c.payment_pk == team.payment)
        ).scalar_one()
        before = conn.execute(select(callbacks.c.state, callbacks.c.attempts)).all()
    visit = _visit(ctx, "ann@shop.example")
    visit.get(f"/dashboard/payments/{team.payment}")
    for payment, callback in (
        (team.other_payment, theirs),
        (team.payment, theirs),
        (team.other_payment, mine),
    ):
        response = visit.post(f"/dashboard/payments/{payment}/callbacks/{callback}/resend")
        assert response.status_code == 404
    with ctx.db.read() as conn:
        assert conn.execute(select(callbacks.c.state, callbacks.c.attempts)).all() == before


def test_resend_queues_the_callback_again(ctx: AppContext, team: Team) -> None:
    with ctx.db.write() as conn:
        first = conn.execute(
            select(callbacks.c.id).where(callbacks.c.payment_pk == team.payment)
        ).scalar_one()
        conn.execute(
            callbacks.update()
            .where(callbacks.c.id == first)
            .values(state="delivered", next_attempt_at=None, attempts=1)
        )
    visit = _visit(ctx, "sue@shop.example")  # Support may resend
    page = visit.get(f"/dashboard/payments/{team.payment}")
    assert "Resend" in page.text
    response = visit.post(f"/dashboard/payments/{team.payment}/callbacks/{first}/resend")
    assert response.status_code == 303
    assert response.headers["location"].startswith(
        f"/dashboard/payments/{team.payment}?notice=queued#callback-"
    )
    with ctx.db.read() as conn:
        rows = conn.execute(
            select(callbacks.c.id, callbacks.c.state, callbacks.c.body)
            .where(callbacks.c.payment_pk == team.payment)
            .order_by(callbacks.c.id)
        ).all()
    assert [row.state for row in rows] == ["delivered", "pending"]
    assert rows[0].body == rows[1].body
    shown = visit.get(response.headers["location"])
    assert "queued again" in shown.text and f"Callback {rows[1].id}" in shown.text


def test_balances_follow_the_role(ctx: AppContext, team: Team) -> None:
    assert _visit(ctx, "sue@shop.example").get("/dashboard/balances").status_code == 403
    finance = _visit(ctx, "bob@shop.example").get("/dashboard/balances")
    assert finance.status_code == 200
    assert "$19.99" in finance.text and "Rival" not in finance.text


@SQLITE_ONLY
def test_password_change_needs_the_current_password(ctx: AppContext, team: Team) -> None:
    visit = _visit(ctx, "ann@shop.example")
    other = _visit(ctx, "ann@shop.example")
    visit.get("/dashboard/profile")
    new = "a brand new passphrase"
    wrong = visit.post(
        "/dashboard/profile/password",
        {"current_password": "nope", "new_password": new, "repeat_password": new},
    )
    assert wrong.status_code == 400
    short = visit.post(
        "/dashboard/profile/password",
        {"current_password": PASSWORD, "new_password": "short", "repeat_password": "short"},
    )
    assert short.status_code == 400
    done = visit.post(
        "/dashboard/profile/password",
        {"current_password": PASSWORD, "new_password": new, "repeat_password": new},
    )
    assert done.headers["location"] == "/dashboard/profile?notice=password-changed"
    assert accounts.authenticate(ctx, "ann@shop.example", new) is not None
    assert visit.get("/dashboard/profile").status_code == 200
    assert other.get("/dashboard/profile").status_code == 303


def test_unknown_dashboard_paths_get_the_dashboard_404(app_client: TestClient) -> None:
    response = app_client.get("/dashboard/nothing/here")
    assert response.status_code == 404
    assert "There is no such Dashboard page." in response.text
    assert app_client.get("/dashboard").headers["location"] == "/dashboard/payments"
