"""Payment: the parameters of a purchase and how they are rendered for signing and the URL."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from payplane import INTERFACE_TYPE_ID, InvalidParameter, Param, Payment, PayplaneError


def test_a_new_payment_carries_project_payment_and_interface_type() -> None:
    payment = Payment(402, "order-1")
    assert payment.get_params() == {
        "project_id": 402,
        "payment_id": "order-1",
        "interface_type": json.dumps({"id": INTERFACE_TYPE_ID}),
    }
    assert json.loads(payment.interface_type) == {"id": 50}


def test_properties_set_and_read_back_the_wire_parameters() -> None:
    payment = Payment(402, "order-1")
    payment.payment_amount = 1001
    payment.payment_currency = "USD"
    payment.customer_id = "customer-7"
    payment.payment_description = "Order #1"
    payment.language_code = "en"
    assert (payment.payment_amount, payment.payment_currency, payment.customer_id) == (
        1001,
        "USD",
        "customer-7",
    )
    assert payment.payment_description == "Order #1"
    assert payment.language_code == "en"
    assert payment.get_param(Param.PAYMENT_AMOUNT) == 1001
    assert list(payment.get_params())[3:] == [
        "payment_amount",
        "payment_currency",
        "customer_id",
        "payment_description",
        "language_code",
    ]


def test_best_before_renders_iso_8601_with_its_offset() -> None:
    payment = Payment(1, "p")
    moscow = timezone(timedelta(hours=3))
    payment.best_before = datetime(2030, 5, 6, 7, 8, 9, tzinfo=moscow)
    assert payment.get_param("best_before") == "2030-05-06T07:08:09+03:00"
    assert payment.best_before == datetime(2030, 5, 6, 7, 8, 9, tzinfo=moscow)


def test_a_naive_best_before_is_taken_as_utc() -> None:
    payment = Payment(1, "p")
    payment.best_before = datetime(2030, 1, 1, 12, 0)
    assert payment.get_param("best_before") == "2030-01-01T12:00:00+00:00"


def test_setting_none_removes_an_optional_parameter() -> None:
    payment = Payment(1, "p")
    payment.payment_description = "x"
    payment.payment_description = None
    assert "payment_description" not in payment.get_params()
    payment.set_param(Param.MODE, "purchase")
    payment.set_param(Param.MODE, None)
    assert "mode" not in payment.get_params()


def test_a_semicolon_in_any_value_is_refused_naming_the_parameter() -> None:
    payment = Payment(1, "p")
    with pytest.raises(InvalidParameter, match=r"'payment_description'.*';'"):
        payment.payment_description = "a;b"
    with pytest.raises(InvalidParameter, match="customer_email"):
        payment.set_param(Param.CUSTOMER_EMAIL, "a@b;c")
    with pytest.raises(InvalidParameter):
        Payment(1, "order;1")
    assert "payment_description" not in payment.get_params()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("payment_amount", 10.5),
        ("payment_amount", "100"),
        ("payment_amount", True),
        ("best_before", "2030-01-01"),
        ("x", [1, 2]),
        ("x", {"a": 1}),
        ("x", 1.0),
    ],
)
def test_values_of_unsupported_types_are_refused(name: str, value: object) -> None:
    payment = Payment(1, "p")
    with pytest.raises(InvalidParameter):
        if name in ("payment_amount", "best_before"):
            setattr(payment, name, value)
        else:
            payment.set_param(name, value)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [1, "", "signature", "a;b", None])
def test_bad_parameter_names_are_refused(name: object) -> None:
    with pytest.raises(InvalidParameter):
        Payment(1, "p").set_param(name, "v")  # type: ignore[arg-type]


def test_project_and_payment_ids_are_checked_and_cannot_be_removed() -> None:
    assert Payment("402", "p").project_id == 402  # type: ignore[arg-type]
    for bad in ("x", 1.5, True, None):
        with pytest.raises(InvalidParameter):
            Payment(bad, "p")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter):
        Payment(1, "")
    with pytest.raises(PayplaneError):
        Payment(1, "p").set_param(Param.PAYMENT_ID, None)


def test_there_is_a_constant_for_every_payment_page_parameter_of_protocol_section_3(
    shared: Path,
) -> None:
    protocol = (shared / "protocol.md").read_text("utf-8")
    section = protocol[protocol.index("## 3. Payment Page") : protocol.index("Outcomes of")]
    documented = set(re.findall(r"`([a-z_]+)`", section)) - {"payment", "en", "ru"}
    constants = {value for name, value in vars(Param).items() if name.isupper()}
    assert documented, "section 3 lists no parameters"
    assert documented <= constants, documented - constants
    assert {getattr(Param, name.upper()) for name in documented} == documented


def test_get_params_is_a_copy() -> None:
    payment = Payment(1, "p")
    payment.get_params()["payment_amount"] = 5
    assert payment.payment_amount is None
