"""The one validator of Payment Page parameters (protocol.md section 3), shared by
``GET /payment`` and the parameter check service (section 9).

Pure: the current time is an argument. Values arrive as URL text (every value a ``str``) or
as JSON (``int``, ``str``, ``bool``, ``None``, ...); both are judged by the same rules.
Reasons are English sentences in the style of the official test-mode service
("This value is required, null given.").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote_plus, urlsplit

from ..errors import ParamProblem
from .money import is_known_currency

__all__ = [
    "KNOWN_PARAMS",
    "MAX_VALUE_BYTES",
    "PaymentRequest",
    "expired_problem",
    "parse_best_before",
    "parse_query",
    "validate",
]

MAX_VALUE_BYTES = 64 * 1024
MAX_PARAMS = 200
MAX_BIGINT = 2**63 - 1

REQUIRED = ("project_id", "payment_id", "payment_amount", "payment_currency", "customer_id")
URL_PARAMS = (
    "merchant_success_url",
    "merchant_fail_url",
    "redirect_success_url",
    "redirect_fail_url",
    "merchant_callback_url",
)
# Optional free text, with its longest accepted length in characters.
TEXT_PARAMS = {
    "payment_description": 4096,
    "interface_type": 1024,
    "force_payment_method": 255,
    "mode": 255,
    "customer_first_name": 255,
    "customer_last_name": 255,
    "payment_extra_param": 4096,
    "frame_mode": 64,
}
KNOWN_PARAMS = frozenset(
    (
        *REQUIRED,
        *URL_PARAMS,
        *TEXT_PARAMS,
        "best_before",
        "language_code",
        "customer_email",
        "customer_phone",
        "customer_country",
        "region_code",
    )
)

REQUIRED_NULL = "This value is required, null given."
BLANK = "This value should not be blank."
NOT_STRING = "This value should be of type string."
NOT_INTEGER = "This value should be of type integer."
NOT_POSITIVE = "This value should be greater than 0."
TOO_BIG = f"This value should be less than or equal to {MAX_BIGINT}."
TOO_LONG_BYTES = f"This value is too long. It should have {MAX_VALUE_BYTES} bytes or less."
SEMICOLON = 'This value must not contain ";".'
CONTROL = "This value must not contain control characters."
BAD_TEXT = "This value is not valid UTF-8 text."
UNKNOWN_CURRENCY = "This value is not a valid ISO 4217 currency code."
BAD_DATETIME = "This value is not a valid ISO 8601 date-time."
PAST = "The payment time has expired: this date-time is in the past."
BAD_URL = "This value is not a valid http or https URL."
BAD_LANGUAGE = "This value is not a valid ISO 639-1 language code."
BAD_EMAIL = "This value is not a valid email address."
BAD_PHONE = "This value should have 4 to 24 digits."
BAD_COUNTRY = "This value is not a valid ISO 3166-1 alpha-2 country code."

_DIGITS = re.compile(r"^[0-9]+$")
_NEGATIVE = re.compile(r"^-[0-9]+$")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_LANGUAGE = re.compile(r"^[A-Za-z]{2}(?:[-_][A-Za-z0-9]{2,3})?$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_PHONE = re.compile(r"^\+?[0-9 ()\-]+$")
_COUNTRY = re.compile(r"^[A-Za-z]{2}$")


def _too_long(limit: int) -> str:
    return f"This value is too long. It should have {limit} characters or less."


@dataclass(frozen=True)
class PaymentRequest:
    """A valid set of Payment Page parameters."""

    project_id: int
    payment_id: str
    amount: int
    currency: str
    customer_id: str
    description: str | None
    best_before: datetime | None
    language_code: str | None
    interface_type: str | None
    # Every accepted (known) parameter as it arrived, for ``payments.params``.
    params: dict[str, Any]

    def url(self, name: str) -> str | None:
        value = self.params.get(name)
        return value if isinstance(value, str) and value else None


_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
QUERY = "query"
MALFORMED = "The query string is malformed: every parameter must be name=value."
BAD_ENCODING = "This value is not correctly percent-encoded."
NOT_UTF8 = "This value is not valid UTF-8 once percent-decoded."
REPEATED = "This parameter is given more than once."
TOO_MANY = f"The query has more than {MAX_PARAMS} parameters."


def parse_query(raw: bytes) -> tuple[dict[str, str], list[ParamProblem]]:
    """Parse a raw URL query string strictly: every field ``name=value``, percent-encoding
    well formed, UTF-8 after decoding, no parameter twice. Empty fields (``a=1&&b=2``) are
    skipped. Returns the parameters, or the problems (never raises)."""
    problems: list[ParamProblem] = []
    params: dict[str, str] = {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return {}, [ParamProblem(QUERY, "The query string is not valid UTF-8.")]
    fields = [field for field in text.split("&") if field]
    if len(fields) > MAX_PARAMS:
        return {}, [ParamProblem(QUERY, TOO_MANY)]
    for field in fields:
        raw_name, equals, raw_value = field.partition("=")
        if equals and raw_name and "%" not in field and "+" not in field:
            # Nothing to decode (most fields): taken as they are.
            if raw_name in params:
                problems.append(ParamProblem(raw_name, REPEATED))
            else:
                params[raw_name] = raw_value
            continue
        try:
            name = unquote_plus(raw_name, errors="strict")
        except UnicodeDecodeError:
            name = ""
        if _BAD_PERCENT.search(raw_name) or not name:
            problems.append(ParamProblem(QUERY, MALFORMED))
            continue
        if not equals:
            problems.append(ParamProblem(name, MALFORMED))
            continue
        if _BAD_PERCENT.search(raw_value):
            problems.append(ParamProblem(name, BAD_ENCODING))
            continue
        try:
            value = unquote_plus(raw_value, errors="strict")
        except UnicodeDecodeError:
            problems.append(ParamProblem(name, NOT_UTF8))
            continue
        if name in params:
            problems.append(ParamProblem(name, REPEATED))
            continue
        params[name] = value
    unique: list[ParamProblem] = []
    for problem in problems:
        if problem not in unique:
            unique.append(problem)
    return params, unique


def _generic(value: object) -> str | None:
    """Rules for every parameter, known or not (protocol.md sections 1 and 3)."""
    if isinstance(value, str):
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            return BAD_TEXT
        if size > MAX_VALUE_BYTES:
            return TOO_LONG_BYTES
        if ";" in value:
            return SEMICOLON
        if "\x00" in value:
            return CONTROL
    return None


def _integer(value: object) -> tuple[int | None, str | None]:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None, NOT_INTEGER
    if isinstance(value, str):
        if _NEGATIVE.match(value):
            return None, NOT_POSITIVE
        if not _DIGITS.match(value):
            return None, NOT_INTEGER
        if len(value) > 40:
            return None, TOO_BIG
        value = int(value)
    if value <= 0:
        return None, NOT_POSITIVE
    if value > MAX_BIGINT:
        return None, TOO_BIG
    return value, None


def _string(value: object, limit: int) -> tuple[str | None, str | None]:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None, NOT_STRING
    text = str(value)
    if not text.strip():
        return None, BLANK
    if len(text) > limit:
        return None, _too_long(limit)
    if _CONTROL.search(text):
        return None, CONTROL
    return text, None


def parse_best_before(value: str) -> datetime | None:
    """An ISO 8601 date-time (a value without an offset is UTC), as aware UTC; None if bad."""
    text = value.strip()
    if len(text) < 10 or len(text) > 40:
        return None
    try:
        parsed = datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            return parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def expired_problem(best_before: datetime | None, now: datetime) -> ParamProblem | None:
    """The problem of a ``best_before`` that has already passed at ``now``."""
    if best_before is not None and best_before <= now:
        return ParamProblem("best_before", PAST)
    return None


def _url(value: str) -> bool:
    if len(value) > 2048 or any(char.isspace() for char in value) or _CONTROL.search(value):
        return False
    try:
        parts = urlsplit(value)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        return False


_Check = Callable[[str], bool]
_FORMATS: dict[str, tuple[int, _Check, str]] = {
    "language_code": (8, lambda v: bool(_LANGUAGE.match(v)), BAD_LANGUAGE),
    "customer_email": (254, lambda v: bool(_EMAIL.match(v)), BAD_EMAIL),
    "customer_phone": (
        40,
        lambda v: bool(_PHONE.match(v)) and 4 <= sum(c.isdigit() for c in v) <= 24,
        BAD_PHONE,
    ),
    "customer_country": (2, lambda v: bool(_COUNTRY.match(v)), BAD_COUNTRY),
    "region_code": (2, lambda v: bool(_COUNTRY.match(v)), BAD_COUNTRY),
    **{name: (2048, _url, BAD_URL) for name in URL_PARAMS},
}


def validate(
    params: Mapping[str, Any], now: datetime | None = None
) -> tuple[PaymentRequest | None, list[ParamProblem]]:
    """Check every parameter; return the request, or None with one problem per bad parameter.

    ``signature`` is ignored. With ``now``, a ``best_before`` that has passed is a problem
    (the Payment Page checks it itself, after finding out whether the payment exists).
    """
    problems: list[ParamProblem] = []
    accepted: dict[str, Any] = {}
    values: dict[str, Any] = {}

    def bad(name: str, reason: str) -> None:
        problems.append(ParamProblem(name, reason))

    for name, value in params.items():
        if name == "signature":
            continue
        reason = _generic(value)
        if reason:
            bad(name, reason)
            continue
        if name not in KNOWN_PARAMS:
            continue
        if value is None:
            if name in REQUIRED:
                bad(name, REQUIRED_NULL)
            continue
        if name in ("project_id", "payment_amount"):
            number, reason = _integer(value)
            if reason:
                bad(name, reason)
                continue
            values[name] = number
        elif name in ("payment_id", "customer_id"):
            text, reason = _string(value, 255)
            if reason:
                bad(name, reason)
                continue
            values[name] = text
        elif name == "payment_currency":
            if not isinstance(value, str):
                bad(name, NOT_STRING)
                continue
            if not value:
                bad(name, BLANK)
                continue
            if not is_known_currency(value):
                bad(name, UNKNOWN_CURRENCY)
                continue
            values[name] = value
        elif name == "best_before":
            if not isinstance(value, str):
                bad(name, NOT_STRING)
                continue
            moment = parse_best_before(value)
            if moment is None:
                bad(name, BAD_DATETIME)
                continue
            values[name] = moment
        elif name in _FORMATS:
            limit, check, message = _FORMATS[name]
            if not isinstance(value, str):
                bad(name, NOT_STRING)
                continue
            if value == "":
                accepted[name] = value
                continue
            if len(value) > limit or not check(value):
                bad(name, message)
                continue
            values[name] = value
        else:
            limit = TEXT_PARAMS[name]
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                bad(name, NOT_STRING)
                continue
            text = str(value)
            if len(text) > limit:
                bad(name, _too_long(limit))
                continue
            if _CONTROL.search(text):
                bad(name, CONTROL)
                continue
            values[name] = text
        accepted[name] = value

    for name in REQUIRED:
        if name not in params:
            bad(name, REQUIRED_NULL)
    if now is not None:
        late = expired_problem(values.get("best_before"), now)
        if late:
            problems.append(late)
    if problems:
        order = {name: index for index, name in enumerate(params)}
        problems.sort(key=lambda problem: order.get(problem.param, len(order)))
        return None, problems
    language = values.get("language_code")
    return (
        PaymentRequest(
            project_id=values["project_id"],
            payment_id=values["payment_id"],
            amount=values["payment_amount"],
            currency=values["payment_currency"],
            customer_id=values["customer_id"],
            description=values.get("payment_description"),
            best_before=values.get("best_before"),
            language_code=language.lower() if language else None,
            interface_type=values.get("interface_type"),
            params=accepted,
        ),
        [],
    )
