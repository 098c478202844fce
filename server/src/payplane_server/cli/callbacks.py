"""``payplane-server callbacks ...`` (list, show, resend)."""

from __future__ import annotations

import typer

__all__ = ["app"]

app = typer.Typer(help="Callbacks and their delivery attempts.", no_args_is_help=True)
