"""The Dashboard clicked through in headless Chromium, against the real app on loopback and a
real Data API listener: every row of the specification's API token state table, My team,
payment search, Resend with a real callback receiver, and an axe-core accessibility check of
every page."""

from __future__ import annotations

import functools
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from argon2 import PasswordHasher
from payplane import sign, verify
from playwright.sync_api import Browser, Page, expect, sync_playwright
from sqlalchemy import func, insert, select

from payplane_server.context import AppContext
from payplane_server.db.tables import api_tokens, callbacks, payments, users
from payplane_server.domain.payments import Code, Status
from payplane_server.services import accounts
from payplane_server.services.processing import Change, start_operation, transition
from payplane_server.services.projects import create_project, get_project
from payplane_server.testing import CallbackReceiver, LiveServer
from payplane_server.web.app import create_app, create_data_api_app
from payplane_server.worker import delivery

pytestmark = pytest.mark.browser

PASSWORD = "correct horse battery"
AXE = Path(__file__).parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@functools.cache
def _hash() -> str:
    return PasswordHasher().hash(PASSWORD)


@dataclass
class World:
    dashboard: str
    data_api: str
    receiver: CallbackReceiver
    admin: int
    finance: int
    support: int
    payment: int


def _user(ctx: AppContext, merchant: int, email: str, role: str, manage: bool) -> int:
    user_id = accounts.create_user(
        ctx,
        merchant_id=merchant,
        email=email,
        name=email.split("@")[0].title(),
        role=role,
        can_manage_tokens=manage,
        project_ids=() if role == "Merchant admin" else (501,),
    )
    # One real argon2 hash made once per session: hashing costs half a second on this machine.
    with ctx.db.write() as conn:
        conn.execute(users.update().where(users.c.id == user_id).values(password_hash=_hash()))
    return user_id


def _seed_payments(ctx: AppContext, count: int) -> None:
    now = ctx.clock.now()
    rows = [
        {
            "project_id": 501,
            "payment_id": f"order-{n:04d}",
            "status": (Status.SUCCESS if n % 3 else Status.DECLINE).value,
            "amount": 1000 + n,
            "currency": "EUR",
            "customer_id": f"customer-{n % 7}",
            "params": "{}",
            "processing_deadline": now + timedelta(days=1),
            "page_token": secrets.token_hex(16),
            "created_at": now - timedelta(minutes=n + 1),
            "updated_at": now - timedelta(minutes=n + 1),
        }
        for n in range(count)
    ]
    with ctx.db.write() as conn:
        conn.execute(insert(payments), rows)


def _paid(ctx: AppContext, payment_id: str) -> int:
    """A payment that really went through processing: operation, balance, queued callback."""
    now = ctx.clock.now()
    with ctx.db.write() as conn:
        pk = int(
            conn.execute(
                insert(payments)
                .values(
                    project_id=501,
                    payment_id=payment_id,
                    status=Status.NEW.value,
                    amount=4250,
                    currency="USD",
                    customer_id="customer-42",
                    description="Blue mug",
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
def world(ctx: AppContext) -> Iterator[World]:
    with CallbackReceiver() as receiver:
        create_project(ctx, project_id=501, name="Shop", callback_url=receiver.url)
        with ctx.db.read() as conn:
            project = get_project(conn, 501)
        assert project is not None
        merchant = project.merchant_id
        admin = _user(ctx, merchant, "ann@shop.example", "Merchant admin", True)
        finance = _user(ctx, merchant, "bob@shop.example", "Finance", True)
        support = _user(ctx, merchant, "sue@shop.example", "Support", False)
        _seed_payments(ctx, 60)
        app = create_app(ctx, background=[delivery.loop])
        with LiveServer(app) as web, LiveServer(create_data_api_app(ctx)) as api:
            pk = _paid(ctx, "mug-42")
            receiver.wait_for(1)
            yield World(web.url, api.url, receiver, admin, finance, support, pk)


@pytest.fixture
def browser(chromium_path: str) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def _page(browser: Browser, world: World) -> Page:
    context = browser.new_context(base_url=world.dashboard)
    page = context.new_page()
    page.set_default_timeout(15_000)
    return page


def _sign_in(page: Page, email: str) -> None:
    page.goto("/dashboard/profile")
    expect(page).to_have_title("Sign in · Payplane Dashboard")
    page.get_by_label("Email address").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="My profile")).to_be_visible()
    _scripts_ran(page)


def _balance(world: World, token: str, secret: str) -> httpx.Response:
    body: dict[str, Any] = {"token": token}
    body["signature"] = sign(body, secret)
    return httpx.post(world.data_api + "/v1/balance/get", json=body, timeout=30)


def _works(world: World, token: str, secret: str) -> bool:
    response = _balance(world, token, secret)
    if response.status_code == 401:
        assert response.json()["status"] == "401"
        return False
    assert response.status_code == 200, response.text
    answer = response.json()
    assert verify(answer, answer["signature"], secret)
    return True


def _scripts_ran(page: Page) -> None:
    # The pages' deferred script attaches its dialogs before DOMContentLoaded; an element can
    # be visible (and clickable without the dialog) a moment earlier.
    page.wait_for_load_state("domcontentloaded")


def _new_token(page: Page) -> tuple[str, str]:
    page.get_by_role("button", name="New token").click()
    expect(page.get_by_role("heading", name="Your new token")).to_be_visible()
    _scripts_ran(page)
    token = page.get_by_test_id("new-token").inner_text()
    secret = page.get_by_test_id("new-secret").inner_text()
    assert len(token) == 30 and token.isalnum()
    return token, secret


def _token_rows(ctx: AppContext, user_id: int) -> int:
    with ctx.db.read() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(api_tokens).where(api_tokens.c.user_id == user_id)
            ).scalar_one()
        )


def test_generate_see_the_secret_once_regenerate_and_delete(
    ctx: AppContext, world: World, browser: Browser
) -> None:
    page = _page(browser, world)
    _sign_in(page, "ann@shop.example")
    expect(page.get_by_test_id("no-token")).to_be_visible()

    token, secret = _new_token(page)
    assert _works(world, token, secret)

    page.reload()  # the secret is gone, and the refresh generated nothing
    expect(page.get_by_role("heading", name="My profile")).to_be_visible()
    assert secret not in page.content() and token not in page.content()
    expect(page.get_by_test_id("current-token")).to_have_text("…" + token[-4:])
    assert _token_rows(ctx, world.admin) == 1
    assert _works(world, token, secret)

    newer, newer_secret = _new_token(page)  # only the newest token is valid
    assert newer != token
    assert not _works(world, token, secret)
    assert _works(world, newer, newer_secret)

    page.get_by_role("link", name="Delete").click()  # opens the confirmation dialog
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert _works(world, newer, newer_secret)
    page.get_by_role("link", name="Delete").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete token").click()
    expect(page.get_by_role("status")).to_contain_text("The token was deleted.")
    expect(page.get_by_test_id("no-token")).to_be_visible()
    assert not _works(world, newer, newer_secret)


def test_withdrawn_permission_hides_the_button_and_the_token_keeps_working_until_deletion(
    ctx: AppContext, world: World, browser: Browser
) -> None:
    bob = _page(browser, world)
    _sign_in(bob, "bob@shop.example")
    token, secret = _new_token(bob)
    assert _works(world, token, secret)

    ann = _page(browser, world)
    _sign_in(ann, "ann@shop.example")
    ann.get_by_role("link", name="My team").click()
    ann.get_by_role("link", name="Bob").click()
    box = ann.get_by_role("checkbox", name="Manage API tokens")
    expect(box).to_be_checked()
    _scripts_ran(ann)
    box.uncheck()
    ann.get_by_role("button", name="Save").click()
    dialog = ann.get_by_role("dialog")
    expect(dialog).to_contain_text("Save the permissions of Bob?")
    dialog.get_by_role("button", name="Confirm").click()
    expect(ann.get_by_role("status")).to_have_text("The permissions were saved.")
    expect(ann.get_by_role("checkbox", name="Manage API tokens")).not_to_be_checked()
    _scripts_ran(ann)

    bob.reload()
    expect(bob.get_by_text("You do not have the Manage API tokens permission")).to_be_visible()
    expect(bob.get_by_role("button", name="New token")).to_have_count(0)
    expect(bob.get_by_role("link", name="Delete")).to_have_count(0)
    expect(bob.get_by_test_id("current-token")).to_have_text("…" + token[-4:])
    assert _works(world, token, secret)

    ann.get_by_role("link", name="Delete user").click()
    ann.get_by_role("dialog").get_by_role("button", name="Delete user").click()
    expect(ann.get_by_role("status")).to_contain_text("The user was deleted.")
    expect(ann.get_by_role("link", name="Bob")).to_have_count(0)
    assert not _works(world, token, secret)

    bob.reload()  # a deleted account's session is gone too
    expect(bob.get_by_role("heading", name="Sign in")).to_be_visible()


# Engine-independent: once, on SQLite (overrides conftest's engine parameter).
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_non_admin_gets_403_on_my_team_and_can_sign_out(
    ctx: AppContext, world: World, browser: Browser
) -> None:
    page = _page(browser, world)
    _sign_in(page, "sue@shop.example")
    expect(page.get_by_role("link", name="My team")).to_have_count(0)
    expect(page.get_by_role("link", name="Balances")).to_have_count(0)
    response = page.goto("/dashboard/team")
    assert response is not None and response.status == 403
    expect(page.get_by_role("heading", name="Forbidden")).to_be_visible()
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_text("You have signed out.")).to_be_visible()
    page.goto("/dashboard/payments")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_payment_search_pages_and_resend_reaches_the_merchant(
    ctx: AppContext, world: World, browser: Browser
) -> None:
    page = _page(browser, world)
    _sign_in(page, "sue@shop.example")
    page.get_by_role("link", name="Payments").click()
    rows = page.locator("table.data tbody tr")
    expect(rows).to_have_count(50)
    expect(rows.first).to_contain_text("mug-42")
    page.get_by_role("link", name="Older →").click()
    expect(rows).to_have_count(11)
    expect(rows.last).to_contain_text("order-0059")
    page.get_by_role("link", name="← Newer").click()
    expect(rows).to_have_count(50)

    page.get_by_label("Status").select_option("decline")
    page.get_by_role("button", name="Search").click()
    expect(rows).to_have_count(20)
    expect(page.locator("table.data tbody .badge")).to_have_text(["decline"] * 20)

    page.get_by_role("link", name="Clear").click()
    page.get_by_label("Payment ID").fill("mug-42")
    page.get_by_role("button", name="Search").click()
    expect(rows).to_have_count(1)
    page.get_by_role("link", name="mug-42").click()

    expect(page.get_by_role("heading", name="Payment mug-42")).to_be_visible()
    expect(page.get_by_text("$42.50").first).to_be_visible()
    operations = page.get_by_role("region", name="Operations")
    expect(operations.locator("tbody tr")).to_contain_text(["sale"])
    first_callback = page.locator("article.callback").first
    expect(first_callback).to_contain_text("delivered")
    expect(first_callback.locator("tbody tr")).to_have_count(1)  # one attempt, HTTP 200
    expect(first_callback.locator("tbody tr")).to_contain_text("200")

    first_callback.get_by_role("button", name="Resend").click()
    expect(page.get_by_role("status")).to_contain_text("queued again")
    received = world.receiver.wait_for(2)
    assert received[1].body == received[0].body
    page.reload()
    expect(page.locator("article.callback")).to_have_count(2)
    expect(page.locator("article.callback").last).to_contain_text("delivered")
    with ctx.db.read() as conn:
        states = conn.execute(
            select(callbacks.c.state).where(callbacks.c.payment_pk == world.payment)
        ).scalars()
        assert list(states) == ["delivered", "delivered"]


def _axe(page: Page) -> list[dict[str, Any]]:
    # axe-core comes with every document through an init script (DevTools protocol, so the
    # page's CSP does not apply to it); the pages themselves load no third-party code.
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    return [v for v in result["violations"] if v["impact"] in ("serious", "critical")]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_every_page_passes_the_accessibility_check(
    ctx: AppContext, world: World, browser: Browser
) -> None:
    if not AXE.exists():  # like conftest.require: skip on a dev machine, fail under CI
        message = "axe-core is not installed (scripts/test runs npm ci in server/tests/e2e/axe)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    page = _page(browser, world)
    page.context.add_init_script(path=AXE)
    page.set_content('<html lang="en"><title>t</title><main><img src="/x.png"></main></html>')
    page.evaluate(AXE.read_text())  # set_content makes no new document for the init script
    assert [v["id"] for v in _axe(page)] == ["image-alt"]  # the checker does find problems
    problems: dict[str, list[str]] = {}

    def check(name: str) -> None:
        found = _axe(page)
        if found:
            problems[name] = [f"{v['id']}: {v['help']} ({len(v['nodes'])})" for v in found]

    page.goto("/dashboard/sign-in")
    check("sign-in")
    _sign_in(page, "ann@shop.example")
    check("profile")
    _new_token(page)
    check("profile with a new token")
    page.get_by_role("link", name="Delete").click()
    check("delete-token dialog")
    page.goto("/dashboard/profile/token/delete")
    check("delete-token confirmation page")
    for path in (
        "/dashboard/payments",
        "/dashboard/payments?status=bogus",
        f"/dashboard/payments/{world.payment}",
        "/dashboard/balances",
        "/dashboard/team",
        f"/dashboard/team/{world.support}",
        f"/dashboard/team/{world.support}/delete",
        "/dashboard/no-such-page",
    ):
        page.goto(path)
        check(path)
    page.goto(f"/dashboard/team/{world.support}")
    page.get_by_role("button", name="Save").click()
    check("save dialog")
    page.set_viewport_size({"width": 375, "height": 740})
    page.goto("/dashboard/payments")
    check("payments on a phone")
    assert problems == {}
