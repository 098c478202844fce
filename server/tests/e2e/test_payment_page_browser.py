"""The Payment Page in real headless Chromium: paying, declines, 3-D Secure, Russian, the live
checks of the card form and the waiting page's poller, with no console errors and no
Content-Security-Policy violations on any page."""

from __future__ import annotations

import base64
import itertools
import os
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from payplane_server.clock import SystemClock
from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.db import migrate
from payplane_server.services.projects import create_project
from payplane_server.testing import LiveServer
from payplane_server.testing.clarification import gate_body
from payplane_server.testing.customer import signed_url
from payplane_server.web import create_app

pytestmark = pytest.mark.browser

SECRET = "browser-secret"
PROJECT = 402
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
_ids = itertools.count()
# Collects CSP violations across navigations (an init script runs before page scripts).
CSP_PROBE = """
document.addEventListener("securitypolicyviolation", (event) => {
  window.payplaneReport(event.violatedDirective + " " + event.blockedURI);
});
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("browser")
    settings = Settings(
        data_dir=Path(data),
        master_key=base64.b64encode(b"b" * 32).decode(),
        simulator_delay_seconds=0,
    )
    migrate(settings.resolved_database_url)
    ctx = AppContext.create(settings, clock=SystemClock())
    create_project(ctx, project_id=PROJECT, name="Shop", callback_url=None, secret=SECRET)
    with LiveServer(create_app(ctx)) as live:
        yield live
    ctx.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # One browser for the module (a launch costs seconds); the conftest's function-scoped
    # ``chromium_path`` cannot feed a module fixture, so its rule is repeated here.
    chromium_path = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium_path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("Chromium is required under CI=true but is not installed")
        pytest.skip("Chromium (Debian package chromium) is not installed")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path, args=ARGS)
        yield launched
        launched.close()


class Watched:
    """A page whose console errors, uncaught errors and CSP violations are recorded."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.problems: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"pageerror {error}"))
        page.expose_function("payplaneReport", lambda text: self.problems.append(f"csp {text}"))
        page.add_init_script(CSP_PROBE)

    def _console(self, message: Any) -> None:
        if message.type in ("error", "warning"):
            self.problems.append(f"console {message.type}: {message.text}")


@pytest.fixture
def watched(browser: Browser, chromium_path: str) -> Iterator[Watched]:
    context = browser.new_context(locale="en-US")
    page = Watched(context.new_page())
    yield page
    context.close()
    assert page.problems == [], "console errors or CSP violations"


def url(server: LiveServer, **changes: Any) -> str:
    params: dict[str, Any] = {
        "project_id": PROJECT,
        "payment_id": f"browser-{next(_ids)}",
        "payment_amount": 1999,
        "payment_currency": "USD",
        "customer_id": "customer-7",
        "payment_description": "Concert tickets <b>x2</b>",
        "best_before": (SystemClock().now() + timedelta(minutes=15)).isoformat(),
    }
    params.update(changes)
    return signed_url(params, SECRET, base=server.url)


def fill_card(page: Page, pan: str) -> None:
    page.get_by_label("Card number").fill(pan)
    page.get_by_label("Expiry date").fill("12/30")
    page.get_by_label("CVV").fill("123")
    page.get_by_label("Cardholder name").fill("Ivan Petrov")
    page.get_by_role("button", name="Pay").click()


def test_a_customer_pays_with_the_success_card(server: LiveServer, watched: Watched) -> None:
    page = watched.page
    page.goto(url(server))
    expect(page.locator("#pp-description")).to_have_text("Concert tickets <b>x2</b>")
    expect(page.locator("#pp-amount")).to_have_text("$19.99")
    page.get_by_role("link", name="Bank card").click()
    timer = page.locator("#pp-countdown time")
    expect(page.locator("#pp-countdown")).to_contain_text("Time left")
    first = timer.inner_text()
    assert first.startswith(("14:", "15:"))
    expect(timer).not_to_have_text(first, timeout=5000)  # the script counts down
    fill_card(page, "4000 0000 0000 0077")
    expect(page.get_by_role("heading", name="Payment successful")).to_be_visible()
    expect(page.locator("#pp-result")).to_contain_text("400000******0077")


def test_a_decline_card_shows_the_decline(server: LiveServer, watched: Watched) -> None:
    page = watched.page
    page.goto(url(server))
    page.get_by_role("link", name="Bank card").click()
    fill_card(page, "4000000000000135")
    expect(page.get_by_role("heading", name="Payment declined")).to_be_visible()
    expect(page.locator("#pp-reason")).to_have_text("There are not enough funds on the card.")


def test_the_3ds_challenge_passes_with_1234(server: LiveServer, watched: Watched) -> None:
    page = watched.page
    page.goto(url(server))
    page.get_by_role("link", name="Bank card").click()
    fill_card(page, "5413330000000019")
    expect(page.get_by_role("heading", name="3-D Secure verification")).to_be_visible()
    page.get_by_label("One-time code").fill("1234")
    page.get_by_role("button", name="Confirm").click()
    expect(page.get_by_role("heading", name="Payment successful")).to_be_visible()


def test_russian_text_and_a_russian_amount(server: LiveServer, watched: Watched) -> None:
    page = watched.page
    page.goto(url(server, language_code="ru", payment_amount=123456, payment_currency="RUB"))
    expect(page.locator("html")).to_have_attribute("lang", "ru")
    expect(page.get_by_role("heading", name="Выберите способ оплаты")).to_be_visible()
    expect(page.locator("#pp-amount")).to_have_text("1\xa0234,56\xa0₽")
    page.get_by_role("link", name="Банковская карта").click()
    expect(page.get_by_label("Номер карты")).to_be_visible()
    expect(page.get_by_role("button", name="Оплатить")).to_be_visible()
    expect(page.locator("#pp-countdown")).to_contain_text("Осталось времени")


def test_the_card_number_is_checked_while_typing(server: LiveServer, watched: Watched) -> None:
    page = watched.page
    page.goto(url(server))
    page.get_by_role("link", name="Bank card").click()
    number = page.get_by_label("Card number")
    number.fill("4000000000000078")
    expect(number).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#pan-hint")).to_have_text("The card number is not valid.")
    number.fill("4000000000000077")
    expect(number).not_to_have_attribute("aria-invalid", "true")


def test_a_number_typed_before_the_script_ran_is_checked(
    server: LiveServer, watched: Watched
) -> None:
    page = watched.page
    # The page's script arrives empty at first, as if it had not loaded yet.
    page.route(
        "**/static/card.js",
        lambda route: route.fulfill(status=200, content_type="text/javascript", body=""),
    )
    page.goto(url(server))
    page.get_by_role("link", name="Bank card").click()
    page.wait_for_load_state("load")
    number = page.get_by_label("Card number")
    number.fill("4000000000000078")
    expect(number).not_to_have_attribute("aria-invalid", "true")  # no script yet
    page.unroute("**/static/card.js")
    page.add_script_tag(url="/static/card.js?late")
    expect(number).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#pan-hint")).to_have_text("The card number is not valid.")


def test_the_waiting_page_moves_on_when_the_merchant_answers(
    server: LiveServer, watched: Watched
) -> None:
    page = watched.page
    payment_url = url(server)
    payment_id = httpx.QueryParams(payment_url.split("?", 1)[1])["payment_id"]
    page.goto(payment_url)
    page.get_by_role("link", name="Bank card").click()
    fill_card(page, "4000000000000200")
    expect(page.get_by_role("heading", name="Waiting for additional information")).to_be_visible()
    answer = {"customer": {"psu_consent": "1", "psu_consent_text": "I agree"}}
    body = gate_body(SECRET, PROJECT, payment_id, answer)
    assert httpx.post(server.url + "/v2/payment/clarification", json=body).status_code == 200
    expect(page.get_by_role("heading", name="Payment successful")).to_be_visible(timeout=15000)
