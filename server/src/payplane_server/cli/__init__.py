"""``payplane-server``: the operator's command line."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from ..config import Settings, load_settings
from . import accounts, callbacks, projects
from ._common import DataDir

__all__ = ["app"]

app = typer.Typer(
    name="payplane-server",
    help="Payplane, a self-hostable payment platform.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(projects.app, name="project")
app.add_typer(callbacks.app, name="callbacks")
app.add_typer(accounts.user_app, name="user")
app.add_typer(accounts.token_app, name="token")


def settings_from(data_dir: Path | None = None, **overrides: object) -> Settings:
    return load_settings(None, data_dir=data_dir, **overrides)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address of the Payment Page host.")] = None,
    port: Annotated[int | None, typer.Option(help="Port of the Payment Page host.")] = None,
    data_dir: DataDir = None,
    workers: Annotated[int | None, typer.Option(help="Serving processes.")] = None,
    role: Annotated[str | None, typer.Option(help="all, web or worker.")] = None,
    data_api_port: Annotated[int | None, typer.Option(help="Port of the Data API.")] = None,
    data_api_plain_http: Annotated[
        bool | None,
        typer.Option(
            "--data-api-plain-http",
            help="Serve the Data API over plain HTTP (only behind a TLS-terminating proxy).",
        ),
    ] = None,
) -> None:
    """Run the platform: Payment Page, Gate API, Dashboard, Data API, callbacks and timers."""
    from ..runner import serve as run

    settings = settings_from(
        data_dir,
        host=host,
        port=port,
        workers=workers,
        role=role,
        data_api_port=data_api_port,
        data_api_plain_http=data_api_plain_http,
    )
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(levelname)s %(name)s %(message)s"
    )
    run(settings)


@app.command()
def migrate(data_dir: DataDir = None) -> None:
    """Bring the database to the newest schema."""
    from ..db import migrate as run

    settings = settings_from(data_dir)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    run(settings.resolved_database_url)
    typer.echo("database is up to date")


@app.command()
def demo(data_dir: DataDir = None) -> None:
    """Create a demo project (and a demo Dashboard user) and print a signed payment URL."""
    from .demo import run

    run(settings_from(data_dir))
