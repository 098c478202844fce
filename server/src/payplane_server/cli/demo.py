"""``payplane-server demo``: a demo project and a signed URL to open, for a first look."""

from __future__ import annotations

import secrets
from urllib.parse import quote, urlencode

import typer
from payplane import sign

from ..config import Settings
from ..context import AppContext
from ..db import migrate
from ..services.accounts import create_user, user_by_email
from ..services.projects import create_project, get_project, project_secret

__all__ = ["DEMO_ADMIN_EMAIL", "DEMO_PROJECT_ID", "run"]

DEMO_PROJECT_ID = 1000
DEMO_ADMIN_EMAIL = "admin@demo.example"


def run(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate(settings.resolved_database_url)
    ctx = AppContext.create(settings)
    try:
        with ctx.db.read() as conn:
            exists = get_project(conn, DEMO_PROJECT_ID) is not None
        if not exists:
            create_project(ctx, project_id=DEMO_PROJECT_ID, name="Demo shop", callback_url=None)
            typer.echo(f"created the demo project {DEMO_PROJECT_ID}")
        with ctx.db.read() as conn:
            secret = project_secret(ctx, conn, DEMO_PROJECT_ID)
            project = get_project(conn, DEMO_PROJECT_ID)
            admin = user_by_email(conn, DEMO_ADMIN_EMAIL)
        assert secret is not None and project is not None
        password = None
        if admin is None:
            # A random password, printed this once: the demo has no well-known credentials.
            password = secrets.token_urlsafe(12)
            create_user(
                ctx,
                merchant_id=project.merchant_id,
                email=DEMO_ADMIN_EMAIL,
                name="Demo admin",
                role="Merchant admin",
                password=password,
                can_manage_tokens=True,
            )
    finally:
        ctx.close()
    params = {
        "project_id": DEMO_PROJECT_ID,
        "payment_id": "demo-" + secrets.token_hex(4),
        "payment_amount": 1999,
        "payment_currency": "USD",
        "customer_id": "demo-customer",
        "payment_description": "Demo order",
        "language_code": "en",
    }
    url = (
        f"{settings.payment_page_url}/payment?{urlencode(params)}"
        f"&signature={quote(sign(params, secret), safe='')}"
    )
    typer.echo("")
    typer.echo("Open this signed payment link once the server is up (test card 4000000000000077):")
    typer.echo(f"  {url}")
    typer.echo("")
    typer.echo(f"Dashboard: {settings.payment_page_url}/dashboard")
    if password is not None:
        typer.echo(f"  email {DEMO_ADMIN_EMAIL}, password {password} (shown only now)")
    else:
        typer.echo(f"  email {DEMO_ADMIN_EMAIL} (its password was printed when it was created)")
    typer.echo("")
