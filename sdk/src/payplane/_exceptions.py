"""The exception tree of the ``payplane`` client library.

Everything the library raises on purpose derives from one base, so a merchant can catch
``PayplaneError`` once::

    PayplaneError
    ├── InvalidParameter        a value that cannot be signed or sent: ``;`` in a Payment Page
    │                           value, a non-string key, an unsupported type, nesting deeper
    │                           than 32 (also a ValueError and a TypeError)
    ├── InvalidSignature        a callback or API response whose signature is missing, is not
    │                           Base64 of an HMAC-SHA512 digest, or does not match
    ├── MalformedCallback       a callback body that cannot be read: too large, not JSON, not an
    │                           object, nested too deep, or without payment details
    │                           (also a ValueError)
    ├── ValidationException     test mode: the parameter check service rejected the parameters
    ├── ServiceUnreachable      a service could not be reached or did not answer in time
    ├── UnexpectedResponse      a service answered something the library cannot read
    └── ApiError                a service answered with its documented error body
        ├── DataApiError        the Data API envelope: status, name, message
        └── GateApiError        the Gate API error body: status, code, message, errors

Errors of the standard library (``urllib``, ``ssl``, ``json``) are translated once, where they
happen, with ``raise ... from exc``, so the original stays available as ``__cause__``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "ApiError",
    "DataApiError",
    "GateApiError",
    "InvalidParameter",
    "InvalidSignature",
    "MalformedCallback",
    "ParamProblem",
    "PayplaneError",
    "ServiceUnreachable",
    "UnexpectedResponse",
    "ValidationException",
]


class PayplaneError(Exception):
    """Base of every error the library raises on purpose."""


class InvalidParameter(PayplaneError, ValueError, TypeError):
    """A parameter that cannot be signed or put into a Payment Page URL.

    Raised for a ``;`` inside a Payment Page value (``;`` is the item delimiter of the signed
    string), a key that is not a string, a value of an unsupported type, text that is not valid
    Unicode, and nesting deeper than 32 levels.
    """


class InvalidSignature(PayplaneError):
    """A signature that is missing, is not Base64 of a 64-byte digest, or does not match."""


class MalformedCallback(PayplaneError, ValueError):
    """A callback body that cannot be read or carries no payment details."""


@dataclass(frozen=True)
class ParamProblem:
    """One parameter the parameter check service rejected, and why."""

    param: str
    reason: str


class ValidationException(PayplaneError):
    """Test mode: the parameter check service found invalid Payment Page parameters.

    ``errors`` lists every problem; the message has the format of protocol.md section 9::

        One or more parameters are not valid:
        payment_amount
            This value is required, null given.
    """

    def __init__(self, errors: list[ParamProblem]) -> None:
        self.errors = list(errors)
        lines = ["One or more parameters are not valid:"]
        for problem in self.errors:
            lines.append(problem.param)
            lines.append("    " + problem.reason)
        super().__init__("\n".join(lines))


class ServiceUnreachable(PayplaneError):
    """A service (parameter check, Gate API, Data API) could not be reached or timed out."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"cannot reach {url}: {reason}")


class UnexpectedResponse(PayplaneError):
    """A service answered with a status or body the library cannot interpret."""

    def __init__(self, url: str, status: int, detail: str) -> None:
        self.url = url
        self.status = status
        self.detail = detail
        super().__init__(f"unexpected answer from {url} (HTTP {status}): {detail}")


class ApiError(PayplaneError):
    """A service answered with its documented error body; ``status`` is the HTTP status."""

    status: int


class DataApiError(ApiError):
    """The Data API error envelope ``{"name", "message", "code": "0", "status"}``."""

    def __init__(self, status: int, name: str, message: str) -> None:
        self.status = status
        self.name = name
        self.message = message
        super().__init__(f"Data API error {status} {name}: {message}")


class GateApiError(ApiError):
    """The Gate API error body ``{"status": "error", "code", "message", "errors"}``."""

    def __init__(
        self, status: int, code: str, message: str, errors: list[dict[str, Any]] | None = None
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.errors: list[dict[str, Any]] = list(errors or [])
        super().__init__(f"Gate API error {status} (code {code}): {message}")
