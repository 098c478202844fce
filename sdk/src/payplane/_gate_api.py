"""The Gate API client (protocol.md section 6): submit clarification data, ask payment status."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ._callback import Callback, find_signature, verified_data
from ._exceptions import GateApiError, InvalidParameter, UnexpectedResponse
from ._gate import DEFAULT_PAYMENT_PAGE_URL
from ._http import HttpClient, Response, check_base_url, load_json_object, tls_context
from ._signature import SigningKey

__all__ = ["ClarificationResult", "GateApi"]

_MAX_RESPONSE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ClarificationResult:
    """The answer to a clarification request.

    ``status`` is ``"success"`` when everything requested arrived (processing continues and a
    final callback follows) or ``"awaiting clarification"`` when ``clarification_fields`` still
    lists missing data. ``data`` is the whole answer.
    """

    SUCCESS = "success"
    AWAITING_CLARIFICATION = "awaiting clarification"

    status: str
    clarification_fields: dict[str, Any] | None
    data: dict[str, Any] = field(repr=False)

    @property
    def is_complete(self) -> bool:
        """True if the platform has everything it asked for."""
        return self.status == self.SUCCESS


class GateApi:
    """A client of the Gate API for one project, signing with the project's secret key.

    ``base_url`` is the Gate host (by default the Payment Page host); requests go to
    ``{base_url}/v2/payment/clarification`` and ``{base_url}/v2/payment/status``.
    """

    def __init__(
        self,
        project_id: int,
        secret: str,
        base_url: str = DEFAULT_PAYMENT_PAGE_URL,
        *,
        timeout: float = 60.0,
        ca_file: str | None = None,
    ) -> None:
        if not isinstance(project_id, int) or isinstance(project_id, bool):
            raise InvalidParameter(f"project_id must be an integer, not {project_id!r}")
        if not isinstance(secret, str):
            raise InvalidParameter(f"the secret must be a string, not {type(secret).__name__}")
        self.project_id = project_id
        self.base_url = check_base_url(base_url, "base_url")
        self._key = SigningKey(secret)
        context = tls_context(ca_file) if self.base_url.startswith("https://") else None
        self._http = HttpClient(
            timeout=timeout, max_body_bytes=_MAX_RESPONSE_BYTES, context=context
        )

    def _post(self, path: str, payment_id: str, extra: dict[str, Any]) -> Response:
        if not isinstance(payment_id, str) or not payment_id:
            raise InvalidParameter(f"payment_id must be non-empty text, not {payment_id!r}")
        general: dict[str, Any] = {"project_id": self.project_id, "payment_id": payment_id}
        body: dict[str, Any] = {"general": general, **extra}
        general["signature"] = self._key.sign(body)
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        response = self._http.request(
            "POST", self.base_url + path, payload, {"Content-Type": "application/json"}
        )
        if response.status != 200:
            raise _error(response)
        return response

    def clarify(self, payment_id: str, additional_data: dict[str, Any]) -> ClarificationResult:
        """Submit additional payment information (``POST /v2/payment/clarification``).

        ``additional_data`` mirrors ``clarification_fields``, for example
        ``{"customer": {"psu_consent": "1"}}``; it may be empty but must be given. The answer is
        returned as a ``ClarificationResult``; if it carries a signature, the signature must be
        right (``InvalidSignature`` otherwise). Error answers raise ``GateApiError``.
        """
        if not isinstance(additional_data, dict):
            raise InvalidParameter("additional_data must be a dict (it may be empty)")
        response = self._post(
            "/v2/payment/clarification", payment_id, {"additional_data": additional_data}
        )
        data = _json(response)
        if find_signature(data) is not None:
            data = verified_data(
                response.body,
                self._key,
                what="clarification answer",
                require_payment=False,
                malformed=lambda reason: UnexpectedResponse(response.url, 200, reason),
            )
        status = data.get("status")
        if not isinstance(status, str):
            raise UnexpectedResponse(response.url, 200, "the answer has no status")
        fields = data.get("clarification_fields")
        return ClarificationResult(status, fields if isinstance(fields, dict) else None, data)

    def status(self, payment_id: str) -> Callback:
        """The payment's state (``POST /v2/payment/status``) as a verified ``Callback``.

        The answer has the callback format and must be signed (``InvalidSignature``
        otherwise); while the platform waits for data it carries ``clarification_fields``.
        """
        response = self._post("/v2/payment/status", payment_id, {})
        data = verified_data(
            response.body,
            self._key,
            what="status answer",
            malformed=lambda reason: UnexpectedResponse(response.url, 200, reason),
        )
        return Callback._verified(data)


def _json(response: Response) -> dict[str, Any]:
    try:
        return load_json_object(response.body)
    except ValueError as exc:
        raise UnexpectedResponse(response.url, response.status, str(exc)) from exc


def _error(response: Response) -> GateApiError | UnexpectedResponse:
    """The Gate error body as ``GateApiError``; an unreadable answer as ``UnexpectedResponse``."""
    try:
        data = load_json_object(response.body)
    except ValueError:
        data = {}
    code = data.get("code")
    message = data.get("message")
    if data.get("status") == "error" or isinstance(message, str):
        errors = data.get("errors")
        return GateApiError(
            response.status,
            "" if code is None else str(code),
            message if isinstance(message, str) else "",
            [error for error in errors if isinstance(error, dict)]
            if isinstance(errors, list)
            else [],
        )
    if response.status >= 400:
        return GateApiError(response.status, "", response.text(), [])
    return UnexpectedResponse(response.url, response.status, response.text())
