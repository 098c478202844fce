"""What the CLI commands share: the data-dir option and a migrated AppContext."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from ..config import load_settings
from ..context import AppContext
from ..db import migrate

__all__ = ["DataDir", "context_for"]

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data directory (SQLite database, master key, TLS files)."),
]


@contextlib.contextmanager
def context_for(data_dir: Path | None) -> Iterator[AppContext]:
    settings = load_settings(data_dir=data_dir)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate(settings.resolved_database_url)
    ctx = AppContext.create(settings)
    try:
        yield ctx
    finally:
        ctx.close()
