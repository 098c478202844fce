"""Currencies (ISO 4217) and amounts: minor units in, major units out, formatted per language.

Pure. Amounts are integers in minor units everywhere; a ``Decimal`` exists only for display.
The exponent of each currency comes from the ISO 4217 list (``iso4217`` package), not from
CLDR, whose digits differ for a few currencies (IQD, IRR, ...). Only currencies with a minor
unit are "known": funds without one (XAU, XDR, XTS, ...) cannot be paid in.
"""

from __future__ import annotations

import copy
from decimal import Decimal
from functools import lru_cache

from babel import Locale
from babel.numbers import NumberPattern
from iso4217 import Currency

__all__ = ["CURRENCY_EXPONENTS", "format_amount", "is_known_currency", "to_major"]

CURRENCY_EXPONENTS: dict[str, int] = {
    currency.code: currency.exponent for currency in Currency if currency.exponent is not None
}


def is_known_currency(code: str) -> bool:
    """True for an ISO 4217 alpha-3 code (upper case) that has a minor unit."""
    return code in CURRENCY_EXPONENTS


def to_major(amount: int, currency: str) -> Decimal:
    """``1999`` USD is ``Decimal('19.99')``; ``1999`` JPY is ``Decimal('1999')``."""
    exponent = CURRENCY_EXPONENTS[currency]
    return Decimal(amount).scaleb(-exponent)


@lru_cache(maxsize=256)
def _pattern(locale: str, exponent: int) -> tuple[Locale, NumberPattern]:
    parsed = Locale.parse(locale)
    pattern = copy.copy(parsed.currency_formats["standard"])
    pattern.frac_prec = (exponent, exponent)
    return parsed, pattern


def format_amount(amount: int, currency: str, locale: str) -> str:
    """An amount in minor units as the language writes it, with exactly the currency's
    ISO 4217 number of decimals (``$19.99`` in ``en``, ``19,99 $`` in ``ru``)."""
    exponent = CURRENCY_EXPONENTS[currency]
    parsed, pattern = _pattern(locale, exponent)
    text: str = pattern.apply(
        to_major(amount, currency), parsed, currency=currency, currency_digits=False
    )
    return text
