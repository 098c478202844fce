"""Card data as the customer types it: the Luhn check, the brand by BIN, the expiry.

Pure. The CVV is checked for shape only and is never part of any returned value, so nothing
downstream can store or log it by accident.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import date

__all__ = ["Card", "CardProblem", "card_type", "check_card", "luhn_valid"]

_SEPARATORS = re.compile(r"[\s-]+")
_EXPIRY = re.compile(r"^\s*([0-9]{1,2})\s*/\s*([0-9]{2}|[0-9]{4})\s*$")
_CVV = re.compile(r"^[0-9]{3,4}$")
_HOLDER_PUNCTUATION = frozenset(" .'-")


def luhn_valid(number: str) -> bool:
    """The Luhn (mod 10) check of a string of digits."""
    if not number.isdigit() or not number.isascii():
        return False
    total = 0
    for index, char in enumerate(reversed(number)):
        digit = ord(char) - 48
        if index % 2:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


def card_type(pan: str) -> str:
    """The brand by its BIN range: visa, mastercard, mir, amex, or ``card`` when unknown."""
    if pan.startswith("4"):
        return "visa"
    two, four = int(pan[:2]), int(pan[:4])
    if 51 <= two <= 55 or 2221 <= four <= 2720:
        return "mastercard"
    if 2200 <= four <= 2204:
        return "mir"
    if two in (34, 37):
        return "amex"
    return "card"


@dataclass(frozen=True)
class Card:
    """Card data that passed every check (the CVV is deliberately absent)."""

    pan: str
    expiry_month: int
    expiry_year: int
    holder: str

    @property
    def type(self) -> str:
        return card_type(self.pan)


@dataclass(frozen=True)
class CardProblem:
    """A form field (``pan``, ``expiry``, ``cvv``, ``holder``) and an English reason."""

    field: str
    reason: str


def _holder_ok(holder: str) -> bool:
    return all(
        char in _HOLDER_PUNCTUATION or unicodedata.category(char).startswith("L") for char in holder
    )


def check_card(
    pan: str, expiry: str, cvv: str, holder: str, today: date
) -> tuple[Card | None, list[CardProblem]]:
    """Validate the card form. ``today`` is the payment date: a card that expired before its
    month is refused. Returns the card, or None with one problem per bad field."""
    problems: list[CardProblem] = []
    digits = _SEPARATORS.sub("", pan or "")
    if not digits:
        problems.append(CardProblem("pan", "Enter the card number."))
    elif not digits.isascii() or not digits.isdigit() or not 12 <= len(digits) <= 19:
        problems.append(CardProblem("pan", "The card number must have 12 to 19 digits."))
    elif not luhn_valid(digits):
        problems.append(CardProblem("pan", "The card number is not valid."))

    month = year = 0
    match = _EXPIRY.match(expiry or "")
    if not match:
        problems.append(CardProblem("expiry", "Enter the expiry date as MM/YY."))
    else:
        month = int(match.group(1))
        year = int(match.group(2))
        year = year + 2000 if year < 100 else year
        if not 1 <= month <= 12:
            problems.append(CardProblem("expiry", "Enter the expiry date as MM/YY."))
        elif (year, month) < (today.year, today.month):
            problems.append(CardProblem("expiry", "The card has expired."))
        elif year > today.year + 30:
            problems.append(CardProblem("expiry", "The expiry date is too far away."))

    if not _CVV.match(cvv or ""):
        problems.append(CardProblem("cvv", "The CVV is 3 or 4 digits."))

    name = " ".join((holder or "").split())
    if not name:
        problems.append(CardProblem("holder", "Enter the cardholder name."))
    elif len(name) > 100 or not _holder_ok(name):
        problems.append(
            CardProblem("holder", "Use only letters, spaces, dots, hyphens and apostrophes.")
        )

    if problems:
        return None, problems
    return Card(pan=digits, expiry_month=month, expiry_year=year, holder=name), []
