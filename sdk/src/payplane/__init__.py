"""Payplane client library: signed Payment Page URLs, verified callbacks, Gate and Data API.

The whole public interface is importable from ``payplane``; the modules behind it are private.

>>> from payplane import Gate, Payment
>>> gate = Gate("secret", base_url="https://pay.example")
>>> payment = Payment(402, "order-1")
>>> payment.payment_amount = 1001
>>> payment.payment_currency = "USD"
>>> payment.customer_id = "customer-7"
>>> gate.get_purchase_payment_page_url(payment).startswith("https://pay.example/payment?")
True
"""

from ._callback import MAX_BODY_BYTES, Callback
from ._data_api import DEFAULT_DATA_API_URL, DataApi
from ._exceptions import (
    ApiError,
    DataApiError,
    GateApiError,
    InvalidParameter,
    InvalidSignature,
    MalformedCallback,
    ParamProblem,
    PayplaneError,
    ServiceUnreachable,
    UnexpectedResponse,
    ValidationException,
)
from ._gate import DEFAULT_PAYMENT_PAGE_URL, Gate
from ._gate_api import ClarificationResult, GateApi
from ._payment import INTERFACE_TYPE_ID, Param, ParamValue, Payment
from ._signature import MAX_DEPTH, is_base64_signature, sign, signing_string, verify

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_DATA_API_URL",
    "DEFAULT_PAYMENT_PAGE_URL",
    "INTERFACE_TYPE_ID",
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "ApiError",
    "Callback",
    "ClarificationResult",
    "DataApi",
    "DataApiError",
    "Gate",
    "GateApi",
    "GateApiError",
    "InvalidParameter",
    "InvalidSignature",
    "MalformedCallback",
    "Param",
    "ParamProblem",
    "ParamValue",
    "Payment",
    "PayplaneError",
    "ServiceUnreachable",
    "UnexpectedResponse",
    "ValidationException",
    "is_base64_signature",
    "sign",
    "signing_string",
    "verify",
]
