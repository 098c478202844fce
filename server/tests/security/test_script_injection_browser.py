"""Script strings in merchant-supplied text never run: a payment whose description and
customer ID are HTML with scripts is opened in headless Chromium on the Payment Page (method
and card pages) and in the Dashboard's payment page; the text is shown, ``window.__x`` stays
undefined and no dialog opens."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect, sync_playwright
from sqlalchemy import select

from payplane_server.acquirer import SimulatorAcquirer
from payplane_server.context import AppContext
from payplane_server.db.tables import payments
from payplane_server.services import accounts
from payplane_server.services.projects import create_merchant, create_project
from payplane_server.testing import LiveServer
from payplane_server.testing.customer import signed_url
from payplane_server.web import create_app

pytestmark = [
    pytest.mark.browser,
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]

SCRIPT = '<script>window.__x=1</script><img src=x onerror="window.__x=1">'
HANDLER = '"><svg onload="window.__x=1">'
SECRET = "xss-secret"
PASSWORD = "correct horse battery"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def page(ctx: AppContext, chromium_path: str) -> Iterator[tuple[Page, LiveServer, list[str]]]:
    ctx.extras["acquirer"] = SimulatorAcquirer(0)
    merchant = create_merchant(ctx, "Shop")
    create_project(
        ctx, project_id=402, name="Shop", callback_url=None, secret=SECRET, merchant_id=merchant
    )
    user = accounts.create_user(
        ctx,
        merchant_id=merchant,
        email="admin@example.test",
        name="Admin",
        role="Merchant admin",
        can_manage_tokens=True,
        project_ids=(),
    )
    accounts.set_password(ctx, user, PASSWORD)
    dialogs: list[str] = []
    with LiveServer(create_app(ctx)) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, args=ARGS)
        try:
            context = browser.new_context(base_url=server.url)
            tab = context.new_page()
            tab.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            yield tab, server, dialogs
        finally:
            browser.close()


def _assert_no_script_ran(tab: Page, dialogs: list[str]) -> None:
    assert tab.evaluate("typeof window.__x") == "undefined"
    assert dialogs == []


def test_scripts_in_payment_text_do_not_run_on_the_payment_page_or_the_dashboard(
    ctx: AppContext, page: tuple[Page, LiveServer, list[str]]
) -> None:
    tab, _server, dialogs = page
    params = {
        "project_id": "402",
        "payment_id": "xss-1",
        "payment_amount": "1999",
        "payment_currency": "USD",
        "customer_id": HANDLER,
        "payment_description": SCRIPT,
    }
    tab.goto(signed_url(params, SECRET))
    expect(tab.locator("#pp-description")).to_have_text(SCRIPT)
    tab.wait_for_timeout(300)  # give an injected onerror/onload handler time to fire
    _assert_no_script_ran(tab, dialogs)
    tab.goto(tab.url.rstrip("/") + "/card" if "/card" not in tab.url else tab.url)
    tab.wait_for_load_state("load")
    _assert_no_script_ran(tab, dialogs)

    with ctx.db.read() as conn:
        pk = conn.execute(select(payments.c.id).where(payments.c.payment_id == "xss-1")).scalar()
    tab.goto("/dashboard/sign-in")
    tab.get_by_label("Email address").fill("admin@example.test")
    tab.get_by_label("Password").fill(PASSWORD)
    tab.get_by_role("button", name="Sign in").click()
    tab.goto(f"/dashboard/payments/{pk}")
    expect(tab.get_by_text(SCRIPT, exact=True)).to_be_visible()
    expect(tab.get_by_text(HANDLER, exact=True).first).to_be_visible()
    tab.wait_for_timeout(300)
    _assert_no_script_ran(tab, dialogs)
    tab.goto("/dashboard/payments")
    tab.wait_for_load_state("load")
    _assert_no_script_ran(tab, dialogs)
