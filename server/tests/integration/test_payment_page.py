"""The Payment Page over HTTP on SQLite and PostgreSQL: opening signed URLs (ours and the
official Python library's), every outcome of protocol.md section 3, and the card flow."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlencode

import payplane
import pytest
from payment_page_sdk.gate import Gate as OfficialGate
from payment_page_sdk.payment import Payment as OfficialPayment
from sqlalchemy import func, select
from starlette.testclient import TestClient

from payplane_server.acquirer import SimulatorAcquirer
from payplane_server.clock import FakeClock
from payplane_server.context import AppContext
from payplane_server.db.tables import callbacks, operations, payments
from payplane_server.services.payments import Registered, open_payment
from payplane_server.services.projects import create_project
from payplane_server.testing.customer import Customer, csrf_of, signed_url
from payplane_server.web import create_app

PROJECT = 402
SECRET = "shop-secret-key"


@pytest.fixture
def client(ctx: AppContext) -> Iterator[TestClient]:
    ctx.extras["acquirer"] = SimulatorAcquirer(0)
    create_project(
        ctx, project_id=PROJECT, name="Shop", callback_url="http://127.0.0.1:9/cb", secret=SECRET
    )
    with TestClient(create_app(ctx), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def customer(client: TestClient) -> Customer:
    return Customer(client)


def params(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "project_id": PROJECT,
        "payment_id": "order-1",
        "payment_amount": 1999,
        "payment_currency": "USD",
        "customer_id": "customer-7",
        "payment_description": "Two tickets",
    }
    base.update(changes)
    return {name: value for name, value in base.items() if value is not None}


def stored(ctx: AppContext) -> list[Any]:
    with ctx.db.read() as conn:
        return list(conn.execute(select(payments).order_by(payments.c.id)).all())


def count(ctx: AppContext, table: Any) -> int:
    with ctx.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def open_new(customer: Customer, **changes: Any) -> str:
    response, token = customer.open(signed_url(params(**changes), SECRET))
    assert response.status_code == 200, response.text
    assert token is not None
    return token


# --- opening the URL ---------------------------------------------------------------------


def test_a_url_from_our_library_opens_the_method_page(client: TestClient, ctx: AppContext) -> None:
    gate = payplane.Gate(SECRET, base_url="http://testserver")
    payment = payplane.Payment(PROJECT, "order-1")
    payment.payment_amount = 1999
    payment.payment_currency = "USD"
    payment.customer_id = "customer-7"
    payment.payment_description = "Two tickets & a <cat>"
    response = client.get(gate.get_purchase_payment_page_url(payment))
    assert response.status_code == 200
    assert "Two tickets &amp; a &lt;cat&gt;" in response.text
    assert "$19.99" in response.text
    assert "Choose a payment method" in response.text
    [row] = stored(ctx)
    assert (row.status, row.amount, row.currency, row.customer_id) == (
        "new",
        1999,
        "USD",
        "customer-7",
    )
    kept = json.loads(row.params)
    assert kept["payment_description"] == "Two tickets & a <cat>"
    assert row.interface_type == kept["interface_type"]


def test_a_url_from_the_official_python_library_opens_the_form(
    client: TestClient, ctx: AppContext, clock: FakeClock
) -> None:
    gate = OfficialGate(SECRET, "http://testserver/payment")
    payment = OfficialPayment(str(PROJECT), "official-1")
    payment.payment_amount = 1000
    payment.payment_currency = "EUR"
    payment.customer_id = "customer 1"
    payment.payment_description = "Order #1: a+b/c=d"
    payment.language_code = "EN"
    payment.best_before = (clock.now() + timedelta(hours=1)).replace(tzinfo=None)
    payment.merchant_success_url = "https://shop.example/ok"
    url = gate.get_purchase_payment_page_url(payment)
    response = client.get(url)
    assert response.status_code == 200, response.text
    assert "Order #1: a+b/c=d" in response.text
    [row] = stored(ctx)
    assert row.payment_id == "official-1" and row.currency == "EUR"
    assert row.interface_type == '{"id": 24}'
    assert row.best_before == clock.now() + timedelta(hours=1)
    card = client.get(f"/pay/{row.page_token}/card")
    assert "Time left" in card.text and "1:00:00" in card.text


TAMPERINGS = {
    "amount": lambda url: url.replace("payment_amount=1999", "payment_amount=1"),
    "customer": lambda url: url.replace("customer-7", "customer-8"),
    "missing": lambda url: url.split("&signature=")[0],
    "empty": lambda url: url.split("&signature=")[0] + "&signature=",
    "garbage": lambda url: url.split("&signature=")[0] + "&signature=bm90IGEgc2lnbmF0dXJl",
    "added-param": lambda url: url + "&extra=1",
}


def test_a_tampered_url_gets_403_and_nothing_is_stored(client: TestClient, ctx: AppContext) -> None:
    for name, tamper in TAMPERINGS.items():
        response = client.get(tamper(signed_url(params(), SECRET)))
        assert response.status_code == 403, name
        assert "Invalid payment link" in response.text
    assert stored(ctx) == []


def test_a_url_signed_with_another_key_gets_403(client: TestClient, ctx: AppContext) -> None:
    response = client.get(signed_url(params(), "someone-else"))
    assert response.status_code == 403
    assert stored(ctx) == []


def test_an_unknown_project_gets_403_like_a_bad_signature(
    client: TestClient, ctx: AppContext
) -> None:
    response = client.get(signed_url(params(project_id=999), SECRET))
    assert response.status_code == 403
    assert stored(ctx) == []


def test_frame_mode_is_not_signed_and_is_kept(client: TestClient, ctx: AppContext) -> None:
    url = signed_url(params(), SECRET) + "&frame_mode=popup"
    assert client.get(url).status_code == 200
    assert json.loads(stored(ctx)[0].params)["frame_mode"] == "popup"


def test_boolean_text_from_other_libraries_verifies(client: TestClient, ctx: AppContext) -> None:
    signed = params(close_on_missclick=True)
    query = urlencode(params(close_on_missclick="True"))
    url = f"/payment?{query}&signature={quote(payplane.sign(signed, SECRET), safe='')}"
    assert client.get(url).status_code == 200


def test_an_unencoded_plus_in_the_signature_still_verifies(client: TestClient) -> None:
    for number in range(40):
        values = params(payment_id=f"plus-{number}")
        signature = payplane.sign(values, SECRET)
        if "+" in signature:
            break
    else:
        pytest.skip("no signature with '+' among the first 40")
    url = f"/payment?{urlencode(values)}&signature={signature}"
    assert client.get(url).status_code == 200


def test_invalid_parameters_get_400_naming_each_and_nothing_is_stored(
    client: TestClient, ctx: AppContext
) -> None:
    url = signed_url(params(payment_amount=0, payment_currency="XYZ"), SECRET)
    response = client.get(url)
    assert response.status_code == 400
    assert "payment_amount" in response.text and "greater than 0" in response.text
    assert "payment_currency" in response.text and "ISO 4217" in response.text
    assert stored(ctx) == []


def test_a_missing_project_id_gets_400(client: TestClient, ctx: AppContext) -> None:
    response = client.get(signed_url(params(project_id=None), SECRET))
    assert response.status_code == 400
    assert "project_id" in response.text and "required" in response.text
    assert stored(ctx) == []


MALFORMED = {
    "repeated": "&payment_id=again",
    "bad-percent": "&x=%zz",
    "not-utf8": "&x=%ff",
    "no-equals": "&broken",
    "semicolon": "&customer_id=a%3Bb",
}


def test_a_malformed_query_gets_400_not_500(client: TestClient, ctx: AppContext) -> None:
    for name, suffix in MALFORMED.items():
        response = client.get(signed_url(params(), SECRET) + suffix)
        assert response.status_code == 400, name
        assert "Invalid payment parameters" in response.text
    assert stored(ctx) == []


def test_reopening_before_the_end_shows_the_same_payment(
    customer: Customer, ctx: AppContext
) -> None:
    first = open_new(customer)
    second = open_new(customer)
    assert first == second
    assert len(stored(ctx)) == 1


def test_a_registered_payment_is_what_reading_its_row_back_gives(
    client: TestClient, ctx: AppContext, clock: FakeClock
) -> None:
    # open_payment answers a new payment from the values it inserted, without reading the
    # row back: those must be the row's, field by field (times in UTC, with microseconds).
    clock.advance(seconds=0.123456)
    query = params(best_before="2099-01-02T03:04:05+03:00", language_code="ru")
    signature = payplane.sign(query, SECRET)
    query = {name: str(value) for name, value in query.items()}
    registered = open_payment(ctx, query, signature)
    assert isinstance(registered, Registered)
    (row,) = stored(ctx)
    names = [field.name for field in dataclasses.fields(Registered)]
    assert {name: getattr(registered, name) for name in names} == {
        name: getattr(row, name) for name in names
    }
    assert registered.created_at.microsecond == 123456
    # Reopening reads the row itself.
    assert open_payment(ctx, query, signature) == row


def test_reopening_after_the_end_shows_the_result(customer: Customer, ctx: AppContext) -> None:
    token = open_new(customer)
    assert customer.pay(token, "4000000000000077").status_code == 303
    response, _ = customer.open(signed_url(params(), SECRET))
    assert response.status_code == 303
    assert response.headers["location"] == f"/pay/{token}/result"
    assert "Payment successful" in customer.client.get(response.headers["location"]).text
    assert len(stored(ctx)) == 1


def test_the_same_payment_id_with_another_amount_or_currency_is_409(
    customer: Customer, ctx: AppContext
) -> None:
    open_new(customer)
    for change in ({"payment_amount": 2000}, {"payment_currency": "EUR"}):
        response, _ = customer.open(signed_url(params(**change), SECRET))
        assert response.status_code == 409
        assert "3041" in response.text
    assert len(stored(ctx)) == 1


def test_best_before_in_the_past_is_refused_for_a_new_payment(
    client: TestClient, ctx: AppContext, clock: FakeClock
) -> None:
    past = (clock.now() - timedelta(seconds=1)).isoformat()
    response = client.get(signed_url(params(best_before=past), SECRET))
    assert response.status_code == 400 and "best_before" in response.text
    assert stored(ctx) == []


def test_a_merchant_callback_url_at_the_platform_itself_is_refused_at_registration(
    client: TestClient, ctx: AppContext
) -> None:
    itself = f"http://{ctx.settings.host}:{ctx.settings.port}/v2/payment/status"
    response = client.get(signed_url(params(merchant_callback_url=itself), SECRET))
    assert response.status_code == 400
    assert "merchant_callback_url" in response.text and "this platform itself" in response.text
    assert stored(ctx) == []
    elsewhere = f"http://{ctx.settings.host}:{ctx.settings.port + 1}/orders/callback"
    assert client.get(signed_url(params(merchant_callback_url=elsewhere), SECRET)).is_success
    assert len(stored(ctx)) == 1


def test_russian_pages_are_translated_and_amounts_written_the_russian_way(
    customer: Customer,
) -> None:
    response, token = customer.open(
        signed_url(
            params(language_code="RU", payment_amount=123456, payment_currency="RUB"), SECRET
        )
    )
    assert 'lang="ru"' in response.text
    assert "Выберите способ оплаты" in response.text
    assert "1\xa0234,56\xa0₽" in response.text
    card = customer.client.get(f"/pay/{token}/card").text
    for label in ("Номер карты", "Срок действия", "CVV", "Имя владельца карты", "Оплатить"):
        assert label in card


def test_an_unknown_language_falls_back_to_english(customer: Customer) -> None:
    response, _ = customer.open(signed_url(params(language_code="xx"), SECRET))
    assert 'lang="en"' in response.text and "Choose a payment method" in response.text


def test_amounts_use_the_currency_exponent(customer: Customer) -> None:
    jpy, _ = customer.open(signed_url(params(payment_id="j", payment_currency="JPY"), SECRET))
    kwd, _ = customer.open(signed_url(params(payment_id="k", payment_currency="KWD"), SECRET))
    assert "¥1,999" in jpy.text
    assert "KWD1.999" in kwd.text


# --- the card form -------------------------------------------------------------------------


def test_the_card_form_has_its_labels_and_works_without_javascript(customer: Customer) -> None:
    token = open_new(customer)
    html = customer.client.get(f"/pay/{token}/card").text
    for field, label in [
        ("pan", "Card number"),
        ("expiry", "Expiry date"),
        ("cvv", "CVV"),
        ("holder", "Cardholder name"),
    ]:
        assert f'<label for="{field}">{label}</label>' in html
        assert f'id="{field}" name="{field}"' in html
    assert 'placeholder="MM/YY"' in html
    assert re.search(r'<button class="pp-button" type="submit" id="pp-pay">Pay</button>', html)
    assert f'<form class="pp-form" method="post" action="/pay/{token}/card"' in html
    assert "<script>" not in html and " style=" not in html and "onclick" not in html


def test_a_successful_payment_is_recorded_with_a_masked_card(
    customer: Customer, ctx: AppContext
) -> None:
    token = open_new(customer)
    response = customer.pay(token, "4000 0000 0000 0077", cvv="987", holder="Ivan Petrov")
    assert response.status_code == 303
    assert response.headers["location"] == f"/pay/{token}/result"
    [row] = stored(ctx)
    assert row.status == "success"
    assert row.account_number == "400000******0077"
    assert row.card_fingerprint == ctx.box.fingerprint("4000000000000077")
    assert (row.card_holder, row.card_type, row.expiry_month, row.expiry_year) == (
        "Ivan Petrov",
        "visa",
        "12",
        "2030",
    )
    with ctx.db.read() as conn:
        op = conn.execute(select(operations)).one()
        body = conn.execute(select(callbacks.c.body)).scalar_one()
    assert (op.status, op.code, op.type) == ("success", "0", "sale")
    callback = json.loads(body)
    assert callback["payment"]["status"] == "success"
    assert callback["account"]["number"] == "400000******0077"
    assert payplane.verify(callback, callback["signature"], SECRET)


def test_the_cvv_and_the_full_pan_are_stored_nowhere(customer: Customer, ctx: AppContext) -> None:
    token = open_new(customer)
    customer.pay(token, "4000000000000077", cvv="9731")
    with ctx.db.read() as conn:
        dump = [
            str(value)
            for table in (payments, operations, callbacks)
            for row in conn.execute(select(table)).all()
            for value in row
        ]
    assert not any("9731" in value for value in dump)
    assert not any("4000000000000077" in value for value in dump)


def test_a_form_post_without_or_with_a_wrong_csrf_token_is_refused(
    customer: Customer, ctx: AppContext
) -> None:
    token = open_new(customer)
    for csrf in ("", "123.abc", "garbage"):
        response = customer.pay(token, "4000000000000077", csrf=csrf)
        assert response.status_code == 400
        assert "The form has expired" in response.text
    other = open_new(customer, payment_id="order-2")
    stolen = csrf_of(customer.client.get(f"/pay/{other}/card").text)
    assert customer.pay(token, "4000000000000077", csrf=stolen).status_code == 400
    assert {row.status for row in stored(ctx)} == {"new"}
    assert count(ctx, operations) == 0


def test_a_stale_csrf_token_is_refused(
    customer: Customer, ctx: AppContext, clock: FakeClock
) -> None:
    token = open_new(customer)
    csrf = csrf_of(customer.client.get(f"/pay/{token}/card").text)
    clock.advance(hours=2, seconds=1)
    response = customer.pay(token, "4000000000000077", csrf=csrf)
    assert response.status_code == 400 and "2005" in response.text
    assert stored(ctx)[0].status == "new"


REFUSALS = [
    ({"pan": "4000000000000078"}, "The card number is not valid."),
    ({"expiry": "10/26"}, "The card has expired."),
    ({"cvv": "12"}, "The CVV is 3 or 4 digits."),
    ({"holder": ""}, "Enter the cardholder name."),
]


def test_refused_card_data_changes_nothing(customer: Customer, ctx: AppContext) -> None:
    token = open_new(customer)
    for fields, message in REFUSALS:
        values = {"pan": "4000000000000077", **fields}
        pan = values.pop("pan")
        response = customer.pay(token, pan, **values)
        assert response.status_code == 400
        assert message in response.text
        assert "4000000000000078" not in response.text
    assert stored(ctx)[0].status == "new"
    assert count(ctx, operations) == 0 and count(ctx, callbacks) == 0


def test_a_second_submit_does_not_make_a_second_operation(
    customer: Customer, ctx: AppContext
) -> None:
    token = open_new(customer)
    csrf = csrf_of(customer.client.get(f"/pay/{token}/card").text)
    first = customer.pay(token, "4000000000000077", csrf=csrf)
    second = customer.pay(token, "4111111111111111", csrf=csrf)
    assert first.headers["location"] == second.headers["location"] == f"/pay/{token}/result"
    assert stored(ctx)[0].status == "success"
    assert count(ctx, operations) == 1 and count(ctx, callbacks) == 1


def test_best_before_passing_declines_when_the_customer_comes_back(
    customer: Customer, ctx: AppContext, clock: FakeClock
) -> None:
    deadline = (clock.now() + timedelta(minutes=15)).isoformat()
    token = open_new(customer, best_before=deadline)
    csrf = csrf_of(customer.client.get(f"/pay/{token}/card").text)
    clock.advance(minutes=15)
    response = customer.pay(token, "4000000000000077", csrf=csrf)
    assert response.headers["location"] == f"/pay/{token}/result"
    result = customer.client.get(response.headers["location"]).text
    assert "Payment declined" in result and "run out" in result
    with ctx.db.read() as conn:
        op = conn.execute(select(operations)).one()
    assert (stored(ctx)[0].status, op.code) == ("decline", "10101")
    assert stored(ctx)[0].account_number is None
    assert count(ctx, callbacks) == 1


def test_the_card_page_of_an_expired_payment_goes_to_its_result(
    customer: Customer, clock: FakeClock
) -> None:
    token = open_new(customer, best_before=(clock.now() + timedelta(minutes=1)).isoformat())
    clock.advance(minutes=2)
    response = customer.client.get(f"/pay/{token}/card", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == f"/pay/{token}/result"


# --- pages and their order -----------------------------------------------------------------


def test_an_unknown_page_token_is_404(client: TestClient) -> None:
    for path in ("/pay/AAAAAAAAAAAAAAAAAAAAAAAA/card", "/pay/short/card", "/pay/a%00b/result"):
        assert client.get(path).status_code == 404
    assert client.get("/pay/AAAAAAAAAAAAAAAAAAAAAAAA/status").status_code == 404


def test_pages_out_of_turn_redirect_to_where_the_payment_is(customer: Customer) -> None:
    token = open_new(customer)
    for page in ("result", "3ds", "waiting"):
        response = customer.client.get(f"/pay/{token}/{page}", follow_redirects=False)
        assert response.status_code == 303
        assert response.headers["location"] == f"/pay/{token}/card"
    assert customer.client.get(f"/pay/{token}/status").json() == {
        "status": "new",
        "final": False,
        "next": f"/pay/{token}/card",
    }


def test_the_result_page_leads_back_to_the_merchant(customer: Customer) -> None:
    token = open_new(
        customer,
        merchant_success_url="https://shop.example/ok?o=1",
        merchant_fail_url="https://shop.example/fail",
    )
    location = customer.pay(token, "4000000000000077").headers["location"]
    html = customer.client.get(location).text
    assert 'href="https://shop.example/ok?o=1"' in html
    assert '<meta http-equiv="refresh" content="3;url=https://shop.example/ok?o=1">' in html
    declined = open_new(
        customer, payment_id="order-2", merchant_fail_url="https://shop.example/fail"
    )
    location = customer.pay(declined, "4111111111111111").headers["location"]
    html = customer.client.get(location).text
    assert "Payment declined" in html and 'href="https://shop.example/fail"' in html


def test_pages_carry_the_strict_security_headers(customer: Customer) -> None:
    response, _ = customer.open(signed_url(params(), SECRET))
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "form-action 'self'" in policy
    assert "unsafe-inline" not in policy
    assert response.headers["cache-control"] == "no-store"


def test_force_payment_method_card_opens_the_card_form_directly(customer: Customer) -> None:
    response, token = customer.open(signed_url(params(force_payment_method="card"), SECRET))
    assert response.status_code == 200
    assert f'action="/pay/{token}/card"' in response.text and "Card number" in response.text
    form = customer.pay(token, "4000000000000077", csrf=csrf_of(response.text))
    assert form.headers["location"] == f"/pay/{token}/result"
