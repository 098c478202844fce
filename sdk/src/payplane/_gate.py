"""The merchant's side of the Payment Page: signed URLs, test mode, and callbacks."""

from __future__ import annotations

import re
from typing import Any

from ._callback import Body, Callback, verified_data
from ._exceptions import InvalidParameter, ParamProblem, UnexpectedResponse, ValidationException
from ._http import HttpClient, Response, check_base_url, load_json_object
from ._payment import Payment
from ._signature import SigningKey

__all__ = ["DEFAULT_PAYMENT_PAGE_URL", "Gate"]

#: Where one Payplane process serves the Payment Page by default (protocol.md section 2).
DEFAULT_PAYMENT_PAGE_URL = "http://127.0.0.1:8080"

_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*").fullmatch
# What each byte of UTF-8 text becomes in a query: itself if unreserved, else %XX.
_BYTE_ESCAPES = [
    chr(byte) if _UNRESERVED(chr(byte)) else f"%{byte:02X}" for byte in range(256)
].__getitem__
_NAMES: dict[str, str] = {}


def _quote(text: str) -> str:
    """Percent-encode everything but RFC 3986's unreserved characters (space as %20)."""
    if _UNRESERVED(text):
        return text
    try:
        return "".join(map(_BYTE_ESCAPES, text.encode("utf-8")))
    except UnicodeEncodeError as exc:
        raise InvalidParameter("a parameter is not valid Unicode text") from exc


def _quote_name(name: str) -> str:
    quoted = _NAMES.get(name)
    if quoted is None:
        quoted = _quote(name)
        if len(_NAMES) < 256:
            _NAMES[name] = quoted
    return quoted


def _query(params: dict[str, Any]) -> str:
    parts = []
    for name, value in params.items():
        kind = value.__class__
        if kind is str:
            parts.append(_quote_name(name) + "=" + _quote(value))
        elif kind is bool:
            parts.append(_quote_name(name) + ("=1" if value else "=0"))
        else:
            parts.append(f"{_quote_name(name)}={value}")
    return "&".join(parts)


def _quote_signature(signature: str) -> str:
    return signature.replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")


class Gate:
    """Builds signed Payment Page URLs and verifies callbacks with the project's secret key.

    ``base_url`` is the Payment Page host (``{payment_page_url}``); ``test_host`` is the
    parameter check service used by test mode (``{sdk_test_host}``, by default the same host).
    ``timeout`` bounds each call to the parameter check service, in seconds.
    """

    def __init__(
        self,
        secret: str,
        base_url: str = DEFAULT_PAYMENT_PAGE_URL,
        test_host: str | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        if not isinstance(secret, str):
            raise InvalidParameter(f"the secret must be a string, not {type(secret).__name__}")
        self._key = SigningKey(secret)
        self.base_url = check_base_url(base_url, "base_url")
        self.test_host = check_base_url(test_host or base_url, "test_host")
        self._payment_url = self.base_url + "/payment?"
        self._http = HttpClient(timeout=timeout, max_body_bytes=1024 * 1024)

    def get_purchase_payment_page_url(self, payment: Payment) -> str:
        """The signed Payment Page URL of ``payment`` (signature percent-encoded)."""
        # One pass renders both the query and the signed items. Payment.set_param already
        # refused ';' in values and guarantees a flat dict of text, integers and booleans.
        params = payment._params
        query = []
        items = {}
        plain = True
        for name, value in params.items():
            if isinstance(value, str):
                query.append(f"{_quote_name(name)}={_quote(value)}")
            elif value.__class__ is bool:
                value = "1" if value else "0"
                query.append(f"{_quote_name(name)}={value}")
            else:
                query.append(f"{_quote_name(name)}={value}")
            items[name] = f"{name}:{value}"
            if ":" in name:
                plain = False
        if plain:
            items.pop("frame_mode", None)
            signature = self._key.sign_string(";".join(map(items.__getitem__, sorted(items))))
        else:
            signature = self._key.sign(params)  # ':' in a name: the general walk doubles it
        query.append("signature=" + _quote_signature(signature))
        return self._payment_url + "&".join(query)

    def get_payment_page_url(self, payment: Payment) -> str:
        """Test mode: have the parameter check service validate ``payment``, then build the URL.

        Raises ``ValidationException`` (message in protocol.md section 9's format, problems in
        ``.errors``) if the service rejects a parameter, ``ServiceUnreachable`` if it cannot be
        reached, and ``UnexpectedResponse`` if it answers something else.
        """
        url = self.test_host + "/params/check?" + _query(payment._params)
        response = self._http.request("GET", url)
        if response.status == 200:
            body = _json(response)
            if body.get("status") != "ok":
                raise UnexpectedResponse(url, 200, f"status is {body.get('status')!r}, not 'ok'")
        elif response.status == 400:
            raise ValidationException(_problems(response))
        else:
            raise UnexpectedResponse(url, response.status, response.text())
        return self.get_purchase_payment_page_url(payment)

    def handle_callback(self, body: Body) -> Callback:
        """Verify a callback body (str, bytes or the parsed dict) and return it as a Callback.

        Raises ``InvalidSignature`` if the signature is missing, malformed or wrong, and
        ``MalformedCallback`` if the body cannot be read or carries no payment details. Never
        returns an unverified object.
        """
        return Callback._verified(verified_data(body, self._key))

    def verify(self, params: dict[str, Any], signature: object) -> bool:
        """True if ``signature`` signs ``params`` with this gate's secret (any variant)."""
        return self._key.verify(params, signature)


def _json(response: Response) -> dict[str, Any]:
    try:
        return load_json_object(response.body)
    except ValueError as exc:
        raise UnexpectedResponse(response.url, response.status, str(exc)) from exc


def _problems(response: Response) -> list[ParamProblem]:
    errors = _json(response).get("errors")
    if not isinstance(errors, list) or not errors:
        raise UnexpectedResponse(response.url, response.status, "no errors listed")
    problems = []
    for error in errors:
        if not isinstance(error, dict):
            raise UnexpectedResponse(response.url, response.status, f"bad error item {error!r}")
        problems.append(ParamProblem(str(error.get("param", "")), str(error.get("reason", ""))))
    return problems
