"""``payplane-server user ...`` and ``payplane-server token ...``."""

from __future__ import annotations

import typer

__all__ = ["token_app", "user_app"]

user_app = typer.Typer(help="Dashboard user accounts.", no_args_is_help=True)
token_app = typer.Typer(help="Data API tokens.", no_args_is_help=True)
