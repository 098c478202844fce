"""Plain ASGI middleware: security headers and request body limits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CSP", "BodyLimit", "BodyRefused", "SecurityHeaders", "read_body"]

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


class BodyRefused(Exception):
    """The request body is over the limit (413) or did not arrive in time (408)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


async def read_body(scope: Scope, receive: Receive, limit: int, timeout: float) -> bytes | None:
    """The whole request body, or None if the client went away first.

    Raises ``BodyRefused`` for more than ``limit`` bytes (announced or streamed) and for a body
    still incomplete after ``timeout`` seconds. The deadline is a timer that cancels this task,
    taken back as soon as the body is in; a cancellation from elsewhere passes through."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                announced = int(value)
            except ValueError:
                announced = limit + 1
            if announced > limit:
                raise BodyRefused(413)
    task = asyncio.current_task()
    assert task is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(timeout, expire)
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyRefused(413)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    except asyncio.CancelledError:
        if expired and task.uncancel() == 0:
            raise BodyRefused(408) from None
        raise
    finally:
        timer.cancel()


class BodyLimit:
    """Reads the request body before the app sees it (``read_body``): over ``limit`` bytes
    (announced or streamed) is refused with 413, a body that trickles in slower than
    ``timeout`` seconds with 408. Responses are rendered by ``too_large`` so that each surface
    keeps its own shape."""

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
        try:
            body = await read_body(scope, receive, self.limit, self.timeout)
        except BodyRefused as refused:
            await self._refuse(scope, receive, send, refused.status)
            return
        if body is None:
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
