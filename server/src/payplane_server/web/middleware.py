"""Plain ASGI middleware: security headers and request body limits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CSP", "BodyLimit", "SecurityHeaders"]

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'self'"
)

_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"SAMEORIGIN"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


class SecurityHeaders:
    """Adds a strict Content-Security-Policy and the usual hardening headers to every response
    that does not set its own."""

    def __init__(self, app: ASGIApp, csp: str = CSP) -> None:
        self.app = app
        self.csp = csp.encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                if b"content-security-policy" not in present:
                    headers.append((b"content-security-policy", self.csp))
                headers.extend(item for item in _HEADERS if item[0] not in present)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


TooLarge = Callable[[Scope], Awaitable[Response] | Response]


def _plain_too_large(scope: Scope) -> Response:
    if scope.get("payplane_refusal") == 408:
        return PlainTextResponse("Request body timed out", status_code=408)
    return PlainTextResponse("Request body too large", status_code=413)


class BodyLimit:
    """Reads the request body before the app sees it: over ``limit`` bytes (announced or
    streamed) is refused with 413, a body that trickles in slower than ``timeout`` seconds with
    408. Responses are rendered by ``too_large`` so that each surface keeps its own shape."""

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        too_large: TooLarge = _plain_too_large,
        timeout: float = 30.0,
    ) -> None:
        self.app = app
        self.limit = limit
        self.too_large = too_large
        self.timeout = timeout

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, status: int) -> None:
        scope = dict(scope, payplane_refusal=status)
        response = self.too_large(scope)
        if not isinstance(response, Response):
            response = await response
        response.status_code = status
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    announced = int(value)
                except ValueError:
                    announced = self.limit + 1
                if announced > self.limit:
                    await self._refuse(scope, receive, send, 413)
                    return
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.limit:
                        await self._refuse(scope, receive, send, 413)
                        return
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await self._refuse(scope, receive, send, 408)
            return
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
