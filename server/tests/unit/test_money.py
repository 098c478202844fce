"""Amounts in minor units become major units with the ISO 4217 exponent, written per language."""

from __future__ import annotations

from decimal import Decimal

import pytest

from payplane_server.domain.money import (
    CURRENCY_EXPONENTS,
    format_amount,
    is_known_currency,
    to_major,
)

NBSP = "\xa0"


@pytest.mark.parametrize(
    ("currency", "exponent"),
    [
        ("USD", 2),
        ("EUR", 2),
        ("RUB", 2),
        ("JPY", 0),
        ("KRW", 0),
        ("KWD", 3),
        ("BHD", 3),
        ("CLF", 4),
        ("IQD", 3),
    ],
)
def test_exponents_follow_iso_4217(currency: str, exponent: int) -> None:
    assert CURRENCY_EXPONENTS[currency] == exponent


def test_currencies_without_a_minor_unit_are_not_payable() -> None:
    for code in ("XAU", "XDR", "XTS", "XXX"):
        assert not is_known_currency(code)
    assert not is_known_currency("usd")
    assert not is_known_currency("ABC")
    assert is_known_currency("USD")


@pytest.mark.parametrize(
    ("amount", "currency", "major"),
    [(1999, "USD", "19.99"), (1999, "JPY", "1999"), (1999, "KWD", "1.999"), (5, "USD", "0.05")],
)
def test_to_major_uses_the_exponent(amount: int, currency: str, major: str) -> None:
    assert to_major(amount, currency) == Decimal(major)


@pytest.mark.parametrize(
    ("amount", "currency", "language", "text"),
    [
        (1999, "USD", "en", "$19.99"),
        (123456, "USD", "en", "$1,234.56"),
        (1999, "JPY", "en", "¥1,999"),
        (1999, "KWD", "en", "KWD1.999"),
        (100, "USD", "en", "$1.00"),
        (123456, "RUB", "ru", f"1{NBSP}234,56{NBSP}₽"),
        (1999, "USD", "ru", f"19,99{NBSP}$"),
        (1999, "JPY", "ru", f"1{NBSP}999{NBSP}¥"),
        (1999, "KWD", "ru", f"1,999{NBSP}KWD"),
    ],
)
def test_amounts_are_written_as_the_language_writes_them(
    amount: int, currency: str, language: str, text: str
) -> None:
    assert format_amount(amount, currency, language) == text


def test_iso_exponent_wins_over_cldr_digits() -> None:
    # CLDR shows IQD without decimals; ISO 4217 (and the amount's meaning) has three.
    assert format_amount(1500, "IQD", "en").endswith("1.500")


def test_the_largest_amount_keeps_every_digit() -> None:
    assert format_amount(2**63 - 1, "USD", "en") == "$92,233,720,368,547,758.07"
