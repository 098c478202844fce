"""The floor of ``GET /payment``: the least a handler must do for it, with nothing of Payplane's
server around it. ``run.py --floor`` serves it exactly as the hello-world is served and
measures it against it.

One Starlette route on the migrated Payplane schema, straight on ``sqlite3``: parse the query
string, look the project up, verify the signature (``payplane.verify``), insert the payment
row in a transaction shared by the requests of one turn of the event loop (a group commit,
durable as Payplane's: WAL, ``synchronous=NORMAL``), and answer once it is committed with a
small page that escapes the merchant's values. Left out on purpose, because Payplane must do
them and the floor is what remains without them: validation of every parameter, the secret's
decryption, idempotent reopening, templates and translations, the security headers, and any
way back from an error. A ratio this handler cannot reach, the Payment Page cannot either.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import secrets
import sqlite3
from datetime import UTC, datetime
from urllib.parse import parse_qsl

from payplane import verify
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

_INSERT = (
    "INSERT INTO payments (project_id, payment_id, status, amount, currency, customer_id, "
    "description, language_code, params, processing_deadline, page_token, created_at, "
    "updated_at) VALUES (?, ?, 'new', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_PAGE = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Payment</title>'
    '<link rel="stylesheet" href="/static/page.css"></head><body><main>'
    '<h1>Choose a payment method</h1><p class="description">{description}</p>'
    '<p class="amount">{amount}</p><p>Order {payment_id}</p>'
    '<a class="method" href="/pay/{token}/card">Card</a></main></body></html>'
)


class GroupCommit:
    """One write transaction for the inserts of a turn of the loop, committed after it."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        self.waiters: list[asyncio.Future[None]] = []
        self.open = False

    def insert(self, values: tuple[object, ...]) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        if not self.open:
            self.connection.execute("BEGIN IMMEDIATE")
            self.open = True
            loop.call_soon(self.commit)
        self.connection.execute(_INSERT, values)
        waiter = loop.create_future()
        self.waiters.append(waiter)
        return waiter

    def commit(self) -> None:
        self.connection.execute("COMMIT")
        self.open = False
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            waiter.set_result(None)


def floor_app() -> Starlette:
    """The app, for ``uvicorn --factory``: database file in ``FLOOR_DATABASE``, the project's
    secret key in ``FLOOR_SECRET``."""
    from payplane_server.runner import tune_gc

    connection = sqlite3.connect(
        os.environ["FLOOR_DATABASE"], isolation_level=None, check_same_thread=False
    )
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    secret = os.environ["FLOOR_SECRET"]
    group = GroupCommit(connection)

    async def payment(request: Request) -> Response:
        params = dict(parse_qsl(request.scope["query_string"].decode("latin-1")))
        signature = params.pop("signature", "").replace(" ", "+")
        project_id = int(params["project_id"])
        found = connection.execute(
            "SELECT secret_enc FROM projects WHERE id = ?", (project_id,)
        ).fetchone()
        if found is None or not verify(params, signature, secret):
            return PlainTextResponse("Invalid signature", status_code=403)
        now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        token = secrets.token_urlsafe(24)
        amount, currency = int(params["payment_amount"]), params["payment_currency"]
        description = params.get("payment_description", "")
        values = (
            project_id, params["payment_id"], amount, currency, params["customer_id"],
            description, params.get("language_code"), json.dumps(params), now, token, now, now,
        )  # fmt: skip
        await group.insert(values)
        page = _PAGE.format(
            description=html.escape(description),
            amount=f"{amount / 100:.2f} {currency}",
            payment_id=html.escape(params["payment_id"]),
            token=token,
        )
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    app = Starlette(routes=[Route("/payment", payment)])
    tune_gc()  # the garbage collector as ``serve`` and the hello-world set it up
    return app
