"""The server's exception tree. Each error carries its HTTP status and protocol code; the
surface it is raised on (page, Gate API, Data API, parameter check) renders it in its own shape.

    PayplaneServerError
    ├── PageError              HTML error page on the Payment Page
    │   ├── SignatureMismatch      403
    │   ├── InvalidParameters      400, with per-parameter problems
    │   ├── PaymentIdConflict      409, code 3041
    │   ├── PaymentNotFound        404
    │   └── FormExpired            400 (stale or missing CSRF token, best_before passed)
    ├── GateError              {"status": "error", "code", "message", "errors"}
    └── DataApiError           {"name", "message", "code": "0", "status"}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "DataApiError",
    "FormExpired",
    "GateError",
    "InvalidParameters",
    "PageError",
    "ParamProblem",
    "PaymentIdConflict",
    "PaymentNotFound",
    "PayplaneServerError",
    "SignatureMismatch",
]


@dataclass(frozen=True)
class ParamProblem:
    """One invalid parameter and why (rendered on pages and by the parameter check)."""

    param: str
    reason: str


class PayplaneServerError(Exception):
    status: int = 500
    code: str = "0"
    default_message: str = "Internal error"

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default_message
        super().__init__(self.message)


class PageError(PayplaneServerError):
    status = 400
    title = "Payment error"


class SignatureMismatch(PageError):
    status = 403
    code = "3003"
    title = "Invalid signature"
    default_message = "The payment link is not signed correctly."


class InvalidParameters(PageError):
    status = 400
    code = "2004"
    title = "Invalid payment parameters"
    default_message = "One or more parameters are not valid."

    def __init__(self, problems: list[ParamProblem]) -> None:
        self.problems = problems
        super().__init__()


class PaymentIdConflict(PageError):
    status = 409
    code = "3041"
    title = "Payment ID already exists"
    default_message = "A payment with this ID already exists in the project."


class PaymentNotFound(PageError):
    status = 404
    code = "3061"
    title = "Payment not found"
    default_message = "The payment was not found."


class FormExpired(PageError):
    status = 400
    code = "2005"
    title = "The form has expired"
    default_message = "The form has expired. Please open the payment link again."


class GateError(PayplaneServerError):
    """An error of the Gate API (clarification, status), rendered as the Gate error body."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        errors: list[dict[str, str]] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.errors = errors or []
        super().__init__(message)


class DataApiError(PayplaneServerError):
    """An error of the Data API, rendered in the envelope of protocol.md section 7."""

    REASONS: ClassVar[dict[int, str]] = {
        400: "Bad Request",
        401: "Authorization Required",
        404: "Not Found",
        405: "Method Not Allowed",
        413: "Payload Too Large",
        429: "Too Many Requests",
        500: "Internal Error",
    }

    def __init__(self, status: int, message: str, *, retry_after: int | None = None) -> None:
        self.status = status
        self.name = self.REASONS.get(status, "Error")
        self.retry_after = retry_after
        super().__init__(message)
