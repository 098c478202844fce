"""A purchase to be paid on the Payment Page: its parameters, ready to sign (protocol.md 3)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Union

from ._exceptions import InvalidParameter

__all__ = ["INTERFACE_TYPE_ID", "Param", "ParamValue", "Payment"]

#: The ``interface_type`` id with which this library marks the URLs it builds. The official
#: libraries use their own ids (20 and up); Payplane's Python library is 50.
INTERFACE_TYPE_ID = 50

#: What a Payment Page parameter may hold. Booleans are sent as ``1`` / ``0``; a datetime is
#: sent as ISO 8601 with its offset (a naive one is taken as UTC).
ParamValue = Union[str, int, bool, datetime]


class Param:
    """Names of the Payment Page parameters (protocol.md section 3), for ``Payment.set_param``."""

    PROJECT_ID = "project_id"
    PAYMENT_ID = "payment_id"
    PAYMENT_AMOUNT = "payment_amount"
    PAYMENT_CURRENCY = "payment_currency"
    CUSTOMER_ID = "customer_id"
    PAYMENT_DESCRIPTION = "payment_description"
    BEST_BEFORE = "best_before"
    LANGUAGE_CODE = "language_code"
    INTERFACE_TYPE = "interface_type"
    MERCHANT_SUCCESS_URL = "merchant_success_url"
    MERCHANT_FAIL_URL = "merchant_fail_url"
    REDIRECT_SUCCESS_URL = "redirect_success_url"
    REDIRECT_FAIL_URL = "redirect_fail_url"
    FORCE_PAYMENT_METHOD = "force_payment_method"
    MODE = "mode"
    CUSTOMER_EMAIL = "customer_email"
    CUSTOMER_FIRST_NAME = "customer_first_name"
    CUSTOMER_LAST_NAME = "customer_last_name"
    CUSTOMER_PHONE = "customer_phone"
    CUSTOMER_COUNTRY = "customer_country"
    REGION_CODE = "region_code"
    PAYMENT_EXTRA_PARAM = "payment_extra_param"
    MERCHANT_CALLBACK_URL = "merchant_callback_url"
    #: Sent in the URL but never signed.
    FRAME_MODE = "frame_mode"

    #: Parameters every purchase needs.
    REQUIRED = (PROJECT_ID, PAYMENT_ID, PAYMENT_AMOUNT, PAYMENT_CURRENCY, CUSTOMER_ID)


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None or moment.utcoffset() is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.isoformat()


def _wire(name: str, value: object) -> str | int | bool:
    """Check one parameter and return what goes on the wire (and into the signature)."""
    kind = value.__class__
    if kind is str or isinstance(value, str):
        assert isinstance(value, str)
        text = str.__str__(value)
        if ";" in text:
            raise InvalidParameter(
                f"parameter {name!r} contains ';', which cannot be signed in a Payment Page URL"
            )
        return text
    if kind is bool:
        assert isinstance(value, bool)
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, datetime):
        return _iso(value)
    raise InvalidParameter(
        f"parameter {name!r} must be text, an integer, a boolean or a datetime, "
        f"not {type(value).__name__}"
    )


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidParameter(f"a parameter name must be non-empty text, not {name!r}")
    if name == "signature":
        raise InvalidParameter("'signature' is added when the URL is built; it is not a parameter")
    if ";" in name:
        raise InvalidParameter(f"parameter name {name!r} contains ';'")
    return str.__str__(name)


class Payment:
    """The parameters of one purchase on the Payment Page.

    ``project_id`` and ``payment_id`` are given here; the amount (minor units), currency and
    customer ID are required too before the URL is opened. Every other parameter of
    protocol.md section 3 goes through ``set_param`` with a name from ``Param``; unknown names
    are sent and signed as well. A ``;`` inside any value raises ``InvalidParameter`` at once.

    >>> payment = Payment(402, "order-1")
    >>> payment.payment_amount = 1001
    >>> payment.payment_currency = "USD"
    >>> payment.set_param(Param.MERCHANT_SUCCESS_URL, "https://shop.example/ok")
    """

    __slots__ = ("_params",)

    def __init__(self, project_id: int, payment_id: str) -> None:
        self._params: dict[str, str | int | bool] = {}
        self.set_param(Param.PROJECT_ID, project_id)
        self.set_param(Param.PAYMENT_ID, payment_id)
        self._params[Param.INTERFACE_TYPE] = json.dumps({"id": INTERFACE_TYPE_ID})

    def set_param(self, name: str, value: ParamValue | None) -> None:
        """Set a Payment Page parameter; ``None`` removes it."""
        name = _check_name(name)
        if value is None:
            if name in (Param.PROJECT_ID, Param.PAYMENT_ID):
                raise InvalidParameter(f"parameter {name!r} is required and cannot be removed")
            self._params.pop(name, None)
        elif name == Param.PROJECT_ID:
            if isinstance(value, str) and value.isascii() and value.isdigit():
                value = int(value)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidParameter(f"project_id must be an integer, not {value!r}")
            self._params[name] = int(value)
        elif name == Param.PAYMENT_ID and (not isinstance(value, str) or not value):
            raise InvalidParameter(f"payment_id must be non-empty text, not {value!r}")
        else:
            self._params[name] = _wire(name, value)

    def get_param(self, name: str) -> str | int | bool | None:
        """The value of a parameter as it goes on the wire, or None if it is not set."""
        return self._params.get(name)

    def get_params(self) -> dict[str, str | int | bool]:
        """A copy of all parameters as they are signed and sent, in the order they were set."""
        return dict(self._params)

    @property
    def project_id(self) -> int:
        """The merchant's project ID."""
        value = self._params[Param.PROJECT_ID]
        assert isinstance(value, int)
        return value

    @property
    def payment_id(self) -> str:
        """The payment ID, unique within the project."""
        return str(self._params[Param.PAYMENT_ID])

    @property
    def interface_type(self) -> str:
        """The ``interface_type`` JSON text that marks URLs built by this library."""
        return str(self._params[Param.INTERFACE_TYPE])

    @property
    def payment_amount(self) -> int | None:
        """The amount in minor currency units (cents for USD)."""
        value = self._params.get(Param.PAYMENT_AMOUNT)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @payment_amount.setter
    def payment_amount(self, value: int | None) -> None:
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise InvalidParameter(
                f"payment_amount must be an integer in minor units, not {type(value).__name__}"
            )
        self.set_param(Param.PAYMENT_AMOUNT, value)

    @property
    def payment_currency(self) -> str | None:
        """ISO 4217 alpha-3 currency code."""
        return self._text(Param.PAYMENT_CURRENCY)

    @payment_currency.setter
    def payment_currency(self, value: str | None) -> None:
        self.set_param(Param.PAYMENT_CURRENCY, value)

    @property
    def customer_id(self) -> str | None:
        """The customer's identifier in the merchant's service."""
        return self._text(Param.CUSTOMER_ID)

    @customer_id.setter
    def customer_id(self, value: str | None) -> None:
        self.set_param(Param.CUSTOMER_ID, value)

    @property
    def payment_description(self) -> str | None:
        """Short text shown on the payment method selection page."""
        return self._text(Param.PAYMENT_DESCRIPTION)

    @payment_description.setter
    def payment_description(self, value: str | None) -> None:
        self.set_param(Param.PAYMENT_DESCRIPTION, value)

    @property
    def best_before(self) -> datetime | None:
        """When the payment expires (countdown on the card page); naive datetimes are UTC."""
        text = self._text(Param.BEST_BEFORE)
        if text is None:
            return None
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            return None

    @best_before.setter
    def best_before(self, value: datetime | None) -> None:
        if value is not None and not isinstance(value, datetime):
            raise InvalidParameter(f"best_before must be a datetime, not {type(value).__name__}")
        self.set_param(Param.BEST_BEFORE, value)

    @property
    def language_code(self) -> str | None:
        """ISO 639-1 language of the payment form, for example ``en``."""
        return self._text(Param.LANGUAGE_CODE)

    @language_code.setter
    def language_code(self, value: str | None) -> None:
        self.set_param(Param.LANGUAGE_CODE, value)

    def _text(self, name: str) -> str | None:
        value = self._params.get(name)
        return value if isinstance(value, str) else None

    def __repr__(self) -> str:
        return f"Payment(project_id={self.project_id!r}, payment_id={self.payment_id!r})"
