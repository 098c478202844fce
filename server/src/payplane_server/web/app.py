"""``create_app(context)``: the Payment Page host (pages, Gate API, parameter check, Dashboard);
``create_data_api_app(context)``: the Data API, served on its own TLS listener."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from ..context import AppContext
from . import dashboard, data_api, gate, openapi, params_check, payment_page
from .middleware import BodyLimit, SecurityHeaders, _plain_too_large

__all__ = ["create_app", "create_data_api_app"]

STATIC_DIR = Path(__file__).parent / "static"

# Background loops (callback delivery, timers) register here; ``serve --role all|worker``
# runs them inside the web process's lifespan.
Lifespan = Callable[[AppContext], contextlib.AbstractAsyncContextManager[None]]


def _refusal(scope: Scope) -> Response:
    """BodyLimit's 413/408 in the error shape of the surface the request was for."""
    if str(scope.get("path", "")).startswith(gate.PREFIX):
        return gate.too_large(scope)
    return _plain_too_large(scope)


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def create_app(context: AppContext, *, background: list[Lifespan] | None = None) -> Starlette:
    """The Payment Page host. ``background`` loops run for the app's lifetime."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for loop in background or []:
                await stack.enter_async_context(loop(context))
            yield

    routes = [
        Route("/healthz", health),
        *payment_page.routes,
        *gate.routes,
        *params_check.routes,
        *openapi.routes,
        *dashboard.routes,
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(
                BodyLimit,
                limit=context.settings.max_body_bytes,
                too_large=_refusal,
                timeout=context.settings.body_timeout_seconds,
            ),
        ],
        lifespan=lifespan,
    )
    app.state.context = context
    return app


def create_data_api_app(context: AppContext) -> Starlette:
    """The Data API (its routes, envelope errors and limits live in ``data_api``; its
    endpoints read their bodies themselves, within the size limit and deadline)."""
    app = Starlette(
        # The router tries routes in order: the Data API's own first.
        routes=[*data_api.routes, *openapi.routes],
        exception_handlers=data_api.exception_handlers,
    )
    # A POST must not be redirected (307) to a slash variant: unknown paths get the 404 envelope.
    app.router.redirect_slashes = False
    app.state.context = context
    return app
