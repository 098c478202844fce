"""The library's one door to the network: urllib, with its errors translated once, here."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable

from ._exceptions import InvalidParameter, ServiceUnreachable, UnexpectedResponse

__all__ = ["HttpClient", "Response", "check_base_url", "load_json_object"]

_USER_AGENT = "payplane-python/0.1"


@dataclass(frozen=True)
class Response:
    """A complete HTTP answer: status, headers (names in lower case) and body."""

    url: str
    status: int
    headers: dict[str, str]
    body: bytes

    def text(self, limit: int = 200) -> str:
        """The start of the body as text, for error messages."""
        return self.body[:limit].decode("utf-8", "replace")


def check_base_url(url: object, what: str) -> str:
    """An ``http(s)://`` base address without a trailing slash, or ``InvalidParameter``."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InvalidParameter(f"{what} must be an http:// or https:// address, not {url!r}")
    return url.rstrip("/")


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """Certificate-checking TLS 1.2 or newer, trusting ``ca_file`` if given."""
    context = ssl.create_default_context(cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class HttpClient:
    """Sends one request and returns the whole answer, whatever its status."""

    def __init__(
        self, timeout: float, max_body_bytes: int, context: ssl.SSLContext | None = None
    ) -> None:
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        handlers: list[urllib.request.BaseHandler] = []
        if context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)

    def request(
        self,
        method: str,
        url: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """Send the request; ``ServiceUnreachable`` if no HTTP answer arrives in time."""
        all_headers = {"User-Agent": _USER_AGENT, "Accept": "application/json"}
        all_headers.update(headers or {})
        # Every URL starts with a base address that check_base_url limited to http(s).
        request = urllib.request.Request(url, body, all_headers, method=method)  # noqa: S310
        try:
            try:
                answer = self._opener.open(request, timeout=self.timeout)
            except urllib.error.HTTPError as error:
                answer = error
            with answer:
                status = answer.status if answer.status is not None else answer.getcode()
                raw = answer.read(self.max_body_bytes + 1)
                headers_out = {name.lower(): value for name, value in answer.headers.items()}
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise ServiceUnreachable(url, f"no answer within {self.timeout:g} s") from exc
            raise ServiceUnreachable(url, str(reason)) from exc
        except (socket.timeout, TimeoutError) as exc:
            raise ServiceUnreachable(url, f"no answer within {self.timeout:g} s") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise ServiceUnreachable(url, f"{type(exc).__name__}: {exc}") from exc
        if len(raw) > self.max_body_bytes:
            raise UnexpectedResponse(
                url, int(status or 0), f"body larger than {self.max_body_bytes} bytes"
            )
        return Response(url, int(status or 0), headers_out, raw)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# One scanner for every body (json.loads with keyword arguments would build a decoder per
# call); called directly, it skips the decoder's Python-level wrapping.
_SCAN: Callable[[str, int], tuple[Any, int]] = vars(
    json.JSONDecoder(parse_constant=_reject_constant)
)["scan_once"]
_WHITESPACE = " \t\n\r"


def _decode(text: str) -> Any:
    start = 0
    if text[:1] in _WHITESPACE:
        start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        data, end = _SCAN(text, start)
    except StopIteration as exc:
        raise ValueError(f"Expecting value: char {exc.value}") from None
    if end != len(text) and text[end:].strip(_WHITESPACE):
        raise ValueError(f"Extra data: char {end}")
    return data


def load_json_object(body: bytes | str) -> dict[str, Any]:
    """Parse a JSON object from UTF-8 bytes or text; ``ValueError`` naming the reason otherwise.

    Callers turn the ``ValueError`` into the error of their surface (callback or response).
    """
    try:
        text = body if isinstance(body, str) else bytes(body).decode("utf-8-sig")
        data = _decode(text)
    except RecursionError as exc:
        raise ValueError("the JSON nests too deep to be read") from exc
    except UnicodeDecodeError as exc:
        raise ValueError("the body is not UTF-8 text") from exc
    except ValueError as exc:
        raise ValueError(f"the body is not JSON: {exc}") from exc
    if data.__class__ is not dict:
        raise ValueError(f"the body is JSON but not an object (it is a {_json_kind(data)})")
    result: dict[str, Any] = data
    return result


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"
