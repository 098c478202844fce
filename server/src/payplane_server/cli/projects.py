"""``payplane-server project ...``"""

from __future__ import annotations

from typing import Annotated

import typer

from ._common import DataDir, context_for

__all__ = ["app"]

app = typer.Typer(help="Projects and their secret keys.", no_args_is_help=True)


@app.command("create")
def create(
    project_id: Annotated[int, typer.Option("--id", help="Project ID (an integer).")],
    name: Annotated[str, typer.Option("--name")],
    callback_url: Annotated[str, typer.Option("--callback-url")],
    secret: Annotated[
        str | None, typer.Option("--secret", help="Use this secret key instead of a new one.")
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Create a project; its secret key is printed once and stored only encrypted."""
    from ..services.callbacks import validate_callback_url
    from ..services.projects import ProjectExists, create_project

    with context_for(data_dir) as ctx:
        problem = validate_callback_url(callback_url, ctx.settings)
        if problem is not None:
            typer.echo(f"error: --callback-url: {problem}", err=True)
            raise typer.Exit(2)
        try:
            key = create_project(
                ctx, project_id=project_id, name=name, callback_url=callback_url, secret=secret
            )
        except ProjectExists as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
    typer.echo(f"project {project_id} created")
    typer.echo(f"secret key (shown once): {key}")


@app.command("rotate-secret")
def rotate(
    project_id: Annotated[int, typer.Option("--id")],
    data_dir: DataDir = None,
) -> None:
    """Give a project a new secret key (printed once); the old one stops working at once."""
    from ..services.projects import rotate_secret

    with context_for(data_dir) as ctx:
        try:
            key = rotate_secret(ctx, project_id)
        except LookupError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
    typer.echo(f"new secret key for project {project_id} (shown once): {key}")
