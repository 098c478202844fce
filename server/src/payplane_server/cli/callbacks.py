"""``payplane-server callbacks ...`` (list, show, resend)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ._common import DataDir, context_for

__all__ = ["app"]

app = typer.Typer(help="Callbacks and their delivery attempts.", no_args_is_help=True)

CallbackId = Annotated[int, typer.Argument(help="The callback's ID (see `callbacks list`).")]


def _console() -> Console:
    # Wide enough that IDs and times are never cut, whatever the terminal says.
    return Console(width=200, soft_wrap=False, highlight=False)


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _short(text: str | None, limit: int = 60) -> str:
    if not text:
        return "-"
    return text if len(text) <= limit else text[: limit - 1] + "…"


@app.command("list")
def list_(
    payment_id: Annotated[
        str | None, typer.Option("--payment-id", help="Only callbacks of this payment ID.")
    ] = None,
    project: Annotated[
        int | None, typer.Option("--project", help="Only callbacks of this project ID.")
    ] = None,
    failed: Annotated[
        bool, typer.Option("--failed", help="Only callbacks given up after every attempt.")
    ] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 50,
    data_dir: DataDir = None,
) -> None:
    """List callbacks, newest first."""
    from ..services.callbacks import list_callbacks

    with context_for(data_dir) as ctx:
        rows = list_callbacks(
            ctx, payment_id=payment_id, project_id=project, failed=failed, limit=limit
        )
    if not rows:
        typer.echo("no callbacks")
        return
    table = Table(title="Callbacks")
    for name in ("ID", "Project", "Payment ID", "State", "Attempts", "Created (UTC)", "Next (UTC)"):
        table.add_column(name, no_wrap=True)
    table.add_column("Last error", overflow="fold")
    for row in rows:
        table.add_row(
            str(row.id),
            str(row.project_id),
            row.payment_id,
            row.state,
            str(row.attempts),
            _when(row.created_at),
            _when(row.next_attempt_at) if row.state == "pending" else "-",
            _short(row.last_error),
        )
    _console().print(table)


@app.command("show")
def show(
    callback_id: CallbackId,
    body: Annotated[bool, typer.Option("--body", help="Print the signed JSON body too.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Show one callback and every delivery attempt."""
    from ..services.callbacks import get_callback

    with context_for(data_dir) as ctx:
        detail = get_callback(ctx, callback_id)
    if detail is None:
        typer.echo(f"error: no callback {callback_id}", err=True)
        raise typer.Exit(1)
    s = detail.summary
    console = _console()
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold", no_wrap=True)
    facts.add_column(overflow="fold")
    waiting = s.state == "pending" and s.next_attempt_at is None
    next_attempt = "waiting for an earlier callback of the payment" if waiting else None
    for name, value in (
        ("Callback", str(s.id)),
        ("Project", str(s.project_id)),
        ("Payment ID", s.payment_id),
        ("URL", s.url),
        ("State", s.state),
        ("Attempts", str(s.attempts)),
        ("Created (UTC)", _when(s.created_at)),
        ("Delivered (UTC)", _when(s.delivered_at)),
        (
            "Next attempt",
            next_attempt or (_when(s.next_attempt_at) if s.state == "pending" else "-"),
        ),
        ("Last error", s.last_error or "-"),
    ):
        facts.add_row(name, value)
    console.print(facts)
    attempts = Table(title="Attempts")
    for name in ("#", "Started (UTC)", "HTTP status", "Latency ms"):
        attempts.add_column(
            name, no_wrap=True, justify="left" if name.startswith("Started") else "right"
        )
    attempts.add_column("Error", overflow="fold")
    for a in detail.attempts:
        attempts.add_row(
            str(a.number),
            _when(a.started_at),
            str(a.http_status) if a.http_status is not None else "-",
            str(a.latency_ms) if a.latency_ms is not None else "-",
            a.error or "-",
        )
    if detail.attempts:
        console.print(attempts)
    else:
        console.print("no attempts yet")
    if body:
        typer.echo(json.dumps(json.loads(detail.body), indent=2, ensure_ascii=False))


@app.command("resend")
def resend(callback_id: CallbackId, data_dir: DataDir = None) -> None:
    """Send a callback again.

    A delivered or failed callback is queued again as a new callback (same URL and body) after
    anything still pending for its payment; a pending one waiting for its next attempt is
    attempted now.
    """
    from ..services.callbacks import resend_callback

    with context_for(data_dir) as ctx:
        outcome = resend_callback(ctx, callback_id)
    if outcome is None:
        typer.echo(f"error: no callback {callback_id}", err=True)
        raise typer.Exit(1)
    if outcome.action == "queued":
        typer.echo(f"callback {callback_id} queued again as callback {outcome.new_id}")
    elif outcome.action == "due-now":
        typer.echo(f"callback {callback_id} will be attempted now")
    elif outcome.action == "in-flight":
        typer.echo(f"error: callback {callback_id} is being delivered right now", err=True)
        raise typer.Exit(1)
    else:
        typer.echo(
            f"error: callback {callback_id} waits for callback {outcome.blocked_by} of the same"
            " payment (callbacks of a payment go out in order); resend that one",
            err=True,
        )
        raise typer.Exit(1)
