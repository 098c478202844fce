"""The card form's checks: Luhn, expiry against the payment date, CVV shape, holder, brand."""

from __future__ import annotations

from datetime import date

import pytest

from payplane_server.domain.cards import card_type, check_card, luhn_valid

TODAY = date(2026, 11, 22)


@pytest.mark.parametrize(
    ("number", "valid"),
    [
        ("4000000000000077", True),
        ("4111111111111111", True),
        ("5413330000000019", True),
        ("4000000000000078", False),
        ("1234567812345678", False),
        ("", False),
        ("40000000000000７７", False),
    ],
)
def test_luhn(number: str, valid: bool) -> None:
    assert luhn_valid(number) is valid


@pytest.mark.parametrize(
    ("pan", "brand"),
    [
        ("4000000000000077", "visa"),
        ("5413330000000019", "mastercard"),
        ("2221000000000009", "mastercard"),
        ("2200000000000004", "mir"),
        ("378282246310005", "amex"),
        ("6011111111111117", "card"),
    ],
)
def test_brand_by_bin(pan: str, brand: str) -> None:
    assert card_type(pan) == brand


def check(**changes: str) -> dict[str, str]:
    fields = {"pan": "4000 0000 0000 0077", "expiry": "12/30", "cvv": "123", "holder": "Ivan"}
    fields.update(changes)
    card, problems = check_card(today=TODAY, **fields)
    assert (card is None) == bool(problems)
    return {problem.field: problem.reason for problem in problems}


def test_a_good_card_is_normalised() -> None:
    card, problems = check_card(
        "4000-0000 0000-0077", " 1 / 2031 ", "1234", " Ivan  Petrov ", TODAY
    )
    assert problems == [] and card is not None
    assert (card.pan, card.expiry_month, card.expiry_year, card.holder) == (
        "4000000000000077",
        1,
        2031,
        "Ivan Petrov",
    )
    assert card.type == "visa"
    assert not hasattr(card, "cvv")


def test_a_non_luhn_number_is_refused() -> None:
    assert check(pan="4000000000000078") == {"pan": "The card number is not valid."}


@pytest.mark.parametrize("pan", ["", "abc", "4000", "4" * 20])
def test_a_number_of_the_wrong_shape_is_refused(pan: str) -> None:
    assert set(check(pan=pan)) == {"pan"}


def test_a_card_valid_through_this_month_passes_and_last_month_is_expired() -> None:
    assert check(expiry="11/26") == {}
    assert check(expiry="10/26") == {"expiry": "The card has expired."}


@pytest.mark.parametrize("expiry", ["13/30", "00/30", "1230", "12-30", "", "12/3"])
def test_a_malformed_expiry_is_refused(expiry: str) -> None:
    assert check(expiry=expiry) == {"expiry": "Enter the expiry date as MM/YY."}


@pytest.mark.parametrize("cvv", ["", "12", "12345", "abc", "１２３"])
def test_cvv_is_three_or_four_digits(cvv: str) -> None:
    assert check(cvv=cvv) == {"cvv": "The CVV is 3 or 4 digits."}


@pytest.mark.parametrize("holder", ["", "   ", "<script>", "x" * 101, "Ivan1"])
def test_a_bad_holder_is_refused(holder: str) -> None:
    assert set(check(holder=holder)) == {"holder"}


def test_a_holder_in_cyrillic_with_punctuation_passes() -> None:
    assert check(holder="Иван Петров-Д'Арк Jr.") == {}


def test_every_bad_field_is_reported_at_once() -> None:
    assert set(check(pan="1", expiry="x", cvv="", holder="")) == {"pan", "expiry", "cvv", "holder"}
