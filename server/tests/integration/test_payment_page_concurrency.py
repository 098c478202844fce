"""Twenty customers opening one signed URL at the same moment make exactly one payment (the
database's unique key decides), on SQLite and PostgreSQL, through a real server."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from sqlalchemy import func, select

from payplane_server.acquirer import Authorization, Decision, SimulatorAcquirer
from payplane_server.context import AppContext
from payplane_server.db.tables import balances, operations, payments
from payplane_server.domain.cards import Card
from payplane_server.services.projects import create_project
from payplane_server.testing import LiveServer
from payplane_server.testing.customer import Customer, csrf_of, signed_url
from payplane_server.testing.writer import writer_held_elsewhere
from payplane_server.web import create_app

SECRET = "shop-secret-key"
OPENERS = 20


def _params(payment_id: str, amount: int, currency: str) -> dict[str, Any]:
    return {
        "project_id": 402,
        "payment_id": payment_id,
        "payment_amount": amount,
        "payment_currency": currency,
        "customer_id": "c-1",
    }


def test_twenty_concurrent_openings_of_one_url_make_one_payment(ctx: AppContext) -> None:
    create_project(ctx, project_id=402, name="Shop", callback_url=None, secret=SECRET)
    params = _params("race-1", 1999, "USD")
    url = signed_url(params, SECRET)
    start = threading.Barrier(OPENERS)

    def open_once(server_url: str) -> tuple[int, str | None]:
        with httpx.Client(base_url=server_url, timeout=60) as client:
            start.wait()
            response, token = Customer(client).open(url)
            return response.status_code, token

    with LiveServer(create_app(ctx)) as server, ThreadPoolExecutor(OPENERS) as pool:
        results = list(pool.map(lambda _: open_once(server.url), range(OPENERS)))

    assert [status for status, _ in results] == [200] * OPENERS
    assert len({token for _, token in results}) == 1
    with ctx.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(payments)).scalar_one() == 1
        assert conn.execute(select(func.count()).select_from(operations)).scalar_one() == 0


def test_concurrent_submits_of_one_payment_make_one_operation(ctx: AppContext) -> None:
    create_project(ctx, project_id=402, name="Shop", callback_url=None, secret=SECRET)
    params = _params("race-2", 500, "EUR")
    with LiveServer(create_app(ctx)) as server:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            _, token = Customer(client).open(signed_url(params, SECRET))
        assert token is not None
        start = threading.Barrier(8)

        def submit(pan: str) -> str:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                form = client.get(f"/pay/{token}/card").text
                csrf = csrf_of(form)
                start.wait()
                return Customer(client).pay(token, pan, csrf=csrf).headers["location"]

        cards = ["4000000000000077", "4111111111111111"] * 4
        with ThreadPoolExecutor(8) as pool:
            locations = set(pool.map(submit, cards))
    assert locations == {f"/pay/{token}/result"}
    with ctx.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(operations)).scalar_one() == 1
        status = conn.execute(select(payments.c.status)).scalar_one()
    assert status in ("success", "decline")


def test_first_payments_of_a_currency_paid_at_once_all_succeed_and_add_up(
    ctx: AppContext,
) -> None:
    create_project(ctx, project_id=402, name="Shop", callback_url=None, secret=SECRET)
    count = 8
    start = threading.Barrier(count)

    def pay(number: int, server_url: str) -> str:
        params = {
            "project_id": 402,
            "payment_id": f"first-{number}",
            "payment_amount": 100 + number,
            "payment_currency": "CHF",
            "customer_id": "c-1",
            "force_payment_method": "card",
        }
        with httpx.Client(base_url=server_url, timeout=60) as client:
            customer = Customer(client)
            response, token = customer.open(signed_url(params, SECRET))
            assert token is not None
            csrf = csrf_of(response.text)
            start.wait()
            return customer.pay(token, "4000000000000077", csrf=csrf).headers["location"]

    with LiveServer(create_app(ctx)) as server, ThreadPoolExecutor(count) as pool:
        locations = list(pool.map(lambda n: pay(n, server.url), range(count)))
    assert all(location.endswith("/result") for location in locations)
    with ctx.db.read() as conn:
        statuses = conn.execute(select(payments.c.status)).scalars().all()
        balance = conn.execute(select(balances.c.amount).where(balances.c.currency == "CHF"))
        assert statuses == ["success"] * count
        assert balance.scalar_one() == sum(100 + n for n in range(count))


class WatchedSimulator(SimulatorAcquirer):
    """The simulator, telling the test when a card has reached it."""

    def __init__(self, delay: float) -> None:
        super().__init__(delay)
        self.entered = threading.Semaphore(0)

    def authorize(self, request: Authorization) -> Decision:
        self.entered.release()
        return super().authorize(request)


def test_time_out_cards_wait_without_blocking_other_customers(ctx: AppContext) -> None:
    acquirer = WatchedSimulator(3.0)
    ctx.extras["acquirer"] = acquirer
    create_project(ctx, project_id=402, name="Shop", callback_url=None, secret=SECRET)
    slow_count = 6  # more than the threads kept for page work

    def params(payment_id: str) -> dict[str, Any]:
        return {
            "project_id": 402,
            "payment_id": payment_id,
            "payment_amount": 500,
            "payment_currency": "EUR",
            "customer_id": "c-1",
            "force_payment_method": "card",
        }

    with LiveServer(create_app(ctx)) as server:
        forms = []
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for number in range(slow_count):
                response, token = Customer(client).open(
                    signed_url(params(f"slow-{number}"), SECRET)
                )
                assert token is not None
                forms.append((token, csrf_of(response.text)))
        finished = threading.Semaphore(0)

        def submit(form: tuple[str, str]) -> None:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                Customer(client).pay(form[0], "4539121411168251", csrf=form[1])
            finished.release()

        slow = [threading.Thread(target=submit, args=(form,)) for form in forms]
        for thread in slow:
            thread.start()
        for _ in range(slow_count):  # every slow card is with the acquirer now
            assert acquirer.entered.acquire(timeout=30)
        with httpx.Client(base_url=server.url, timeout=60) as client:
            # While the acquirer waits, the same server keeps serving other customers.
            opened, _ = Customer(client).open(signed_url(params("fast-1"), SECRET))
            assert opened.status_code == 200
            assert client.get(f"/pay/{forms[0][0]}/status").json()["status"] == "new"
            assert not finished.acquire(blocking=False), "a time-out answer came first"
        for thread in slow:
            thread.join()
    with ctx.db.read() as conn:
        codes = conn.execute(select(operations.c.code)).scalars().all()
    assert codes == ["10602"] * slow_count


class AsksWhereItRuns:
    """An acquirer that does not say whether it blocks (no ``may_block``), noting whether each
    question reached it on the server's event loop."""

    def __init__(self) -> None:
        self.inner = SimulatorAcquirer(0)
        self.on_loop: list[bool] = []

    def _note(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.on_loop.append(False)
        else:
            self.on_loop.append(True)

    def authorize(self, request: Authorization) -> Decision:
        self._note()
        return self.inner.authorize(request)

    def complete_challenge(self, reference: str, code: str) -> Decision:
        self._note()
        return self.inner.complete_challenge(reference, code)


class SaysItNeverBlocks(AsksWhereItRuns):
    def may_block(self, card: Card) -> bool:
        return False


def _pay_and_challenge(ctx: AppContext) -> list[str]:
    create_project(ctx, project_id=402, name="Shop", callback_url=None, secret=SECRET)
    statuses = []
    with LiveServer(create_app(ctx)) as server, httpx.Client(base_url=server.url) as client:
        customer = Customer(client)
        for payment_id, pan in (("direct", "4000000000000077"), ("3ds", "5413330000000019")):
            params = _params(payment_id, 700, "EUR")
            _, token = customer.open(signed_url(params, SECRET))
            assert token is not None
            assert customer.pay(token, pan).status_code == 303
            if payment_id == "3ds":
                assert customer.answer_challenge(token, "1234").status_code == 303
            statuses.append(client.get(f"/pay/{token}/status").json()["status"])
    return statuses


def test_an_acquirer_that_may_block_is_asked_off_the_event_loop(ctx: AppContext) -> None:
    acquirer = AsksWhereItRuns()
    ctx.extras["acquirer"] = acquirer
    assert _pay_and_challenge(ctx) == ["success", "success"]
    assert acquirer.on_loop == [False, False, False]


def test_an_acquirer_that_never_blocks_authorizes_within_the_page_work(ctx: AppContext) -> None:
    acquirer = SaysItNeverBlocks()
    ctx.extras["acquirer"] = acquirer
    assert _pay_and_challenge(ctx) == ["success", "success"]
    # Authorised inside the submission's database work: on the event loop on SQLite, in its
    # worker thread on PostgreSQL. A challenge's answer is always asked from a thread: it must
    # be asked exactly once.
    on_loop = ctx.db.is_sqlite
    assert acquirer.on_loop == [on_loop, on_loop, False]


def test_a_held_writer_lock_delays_registration_but_not_the_event_loop(
    ctx: AppContext,
) -> None:
    """On SQLite ``GET /payment`` starts on the event loop, finds the writer lock held by
    another thread, and starts again on a worker thread: the loop goes on serving meanwhile,
    and the payment is registered once the lock is free."""
    create_project(ctx, project_id=402, name="Shop", callback_url=None, secret=SECRET)
    params = _params("behind-a-writer", 900, "EUR")

    with LiveServer(create_app(ctx)) as server, ThreadPoolExecutor(1) as pool:
        with writer_held_elsewhere(ctx.db) as holder:

            def open_payment() -> tuple[int, str | None, bool]:
                with httpx.Client(base_url=server.url, timeout=30) as client:
                    response, token = Customer(client).open(signed_url(params, SECRET))
                    return response.status_code, token, holder.released.is_set()

            opening = pool.submit(open_payment)
            threading.Event().wait(0.3)  # let the request reach the lock
            # The writer is still held, and the same server answers another request.
            assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
            assert not holder.released.is_set()
        status, token, answered_after_release = opening.result(timeout=30)
    assert status == 200 and token is not None
    if ctx.db.is_sqlite:
        assert answered_after_release
    with ctx.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(payments)).scalar_one() == 1
