"""``payplane-server callbacks list|show|resend`` and callback URL checks of ``project create``,
against a real SQLite data directory and a real receiver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from payplane_server.cli import app
from payplane_server.config import load_settings
from payplane_server.context import AppContext
from payplane_server.domain.payments import Code, Status
from payplane_server.testing import CallbackReceiver
from payplane_server.testing.outbox import callback_rows, decide, queued_payment, seed_payment
from payplane_server.worker.delivery import deliver_due

runner = CliRunner()
PROJECT = 601


def run(data_dir: Path, *args: str) -> Result:
    return runner.invoke(app, [*args, "--data-dir", str(data_dir)])


def cells(line: str) -> list[str]:
    """The cells of one row of a rich table."""
    return [cell.strip() for cell in line.strip().strip("│┃").split("│") if cell.strip()]


def first_fails(n: int, request: Any) -> tuple[int, float, bytes]:
    return (500, 0.0, b"down") if n == 1 else (200, 0.0, b"ok")


@pytest.fixture
def receiver() -> Iterator[CallbackReceiver]:
    with CallbackReceiver(first_fails) as server:
        yield server


@pytest.fixture
def shop(
    tmp_path: Path, receiver: CallbackReceiver, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, AppContext]]:
    monkeypatch.delenv("PAYPLANE_DATABASE_URL", raising=False)
    data_dir = tmp_path / "data"
    made = run(
        data_dir,
        "project",
        "create",
        "--id",
        str(PROJECT),
        "--name",
        "Shop",
        "--callback-url",
        receiver.url,
    )
    assert made.exit_code == 0, made.output
    ctx = AppContext.create(load_settings({}, data_dir=data_dir))
    yield data_dir, ctx
    ctx.close()


def test_list_shows_every_callback_with_its_state_and_filters_by_payment(
    shop: tuple[Path, AppContext], receiver: CallbackReceiver
) -> None:
    data_dir, ctx = shop
    queued_payment(ctx, project_id=PROJECT, payment_id="order-1")
    queued_payment(ctx, project_id=PROJECT, payment_id="order-2")
    assert deliver_due(ctx) == 2  # the first request fails, the second is delivered

    listed = run(data_dir, "callbacks", "list")
    assert listed.exit_code == 0, listed.output
    assert "order-1" in listed.output and "order-2" in listed.output
    assert "pending" in listed.output and "delivered" in listed.output
    assert "HTTP 500" in listed.output

    one = run(data_dir, "callbacks", "list", "--payment-id", "order-2")
    assert one.exit_code == 0
    assert "order-2" in one.output and "order-1" not in one.output

    none = run(data_dir, "callbacks", "list", "--failed")
    assert none.exit_code == 0
    assert none.output.strip() == "no callbacks"


def test_failed_lists_only_callbacks_given_up(
    shop: tuple[Path, AppContext], receiver: CallbackReceiver
) -> None:
    data_dir, ctx = shop
    queued_payment(
        ctx, project_id=PROJECT, payment_id="order-ftp", merchant_callback_url="ftp://x/cb"
    )
    queued_payment(ctx, project_id=PROJECT, payment_id="order-ok")
    deliver_due(ctx)

    failed = run(data_dir, "callbacks", "list", "--failed")
    assert failed.exit_code == 0, failed.output
    assert "order-ftp" in failed.output and "order-ok" not in failed.output
    assert "refused" in failed.output


def test_show_prints_every_attempt_and_resend_attempts_a_pending_callback_now(
    shop: tuple[Path, AppContext], receiver: CallbackReceiver
) -> None:
    data_dir, ctx = shop
    pk = queued_payment(ctx, project_id=PROJECT, payment_id="order-3")
    deliver_due(ctx)
    [row] = callback_rows(ctx, pk)
    assert row.state == "pending"

    resent = run(data_dir, "callbacks", "resend", str(row.id))
    assert resent.exit_code == 0, resent.output
    assert "will be attempted now" in resent.output
    assert deliver_due(ctx) == 1
    [row] = callback_rows(ctx, pk)
    assert (row.state, row.attempts) == ("delivered", 2)

    shown = run(data_dir, "callbacks", "show", str(row.id), "--body")
    assert shown.exit_code == 0, shown.output
    assert receiver.url in shown.output
    assert "delivered" in shown.output
    rows = [cells(line) for line in shown.output.splitlines()]
    assert any(r[:1] == ["1"] and "500" in r and "HTTP 500" in " ".join(r) for r in rows)
    assert any(r[:1] == ["2"] and "200" in r for r in rows)
    assert '"signature"' in shown.output and '"order-3"' in shown.output


def test_resend_of_a_delivered_callback_queues_the_same_body_again(
    shop: tuple[Path, AppContext], receiver: CallbackReceiver
) -> None:
    data_dir, ctx = shop
    receiver.behaviour = lambda n, r: (200, 0.0, b"ok")
    pk = queued_payment(ctx, project_id=PROJECT, payment_id="order-4")
    deliver_due(ctx)
    [row] = callback_rows(ctx, pk)

    resent = run(data_dir, "callbacks", "resend", str(row.id))
    assert resent.exit_code == 0, resent.output
    old, new = callback_rows(ctx, pk)
    assert f"queued again as callback {new.id}" in resent.output
    assert (new.state, new.attempts, new.body) == ("pending", 0, old.body)
    assert deliver_due(ctx) == 1
    first, second = receiver.wait_for(2)
    assert first.body == second.body
    assert [r.state for r in callback_rows(ctx, pk)] == ["delivered", "delivered"]


def test_resend_refuses_a_callback_that_waits_for_an_earlier_one(
    shop: tuple[Path, AppContext],
) -> None:
    data_dir, ctx = shop
    with ctx.db.write() as conn:
        pk = seed_payment(ctx, conn, project_id=PROJECT, payment_id="order-5")
    decide(
        ctx,
        pk,
        Status.AWAITING_CLARIFICATION,
        Code.NEED_CLARIFICATION,
        clarification_fields={"customer": {"type": "object", "description": "d"}},
    )
    decide(ctx, pk, Status.SUCCESS, Code.SUCCESS)
    first, second = callback_rows(ctx, pk)

    refused = run(data_dir, "callbacks", "resend", str(second.id))
    assert refused.exit_code == 1
    assert f"waits for callback {first.id}" in refused.output


def test_show_and_resend_of_an_unknown_callback_fail_cleanly(
    shop: tuple[Path, AppContext],
) -> None:
    data_dir, _ = shop
    for command in ("show", "resend"):
        result = run(data_dir, "callbacks", command, "999")
        assert result.exit_code == 1
        assert "no callback 999" in result.output
        assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://merchant.example/cb", "http or https"),
        ("javascript:alert(1)", "http or https"),
        ("http://127.0.0.1:8080/payment", "this platform itself"),
        ("http://localhost:8443/v1", "this platform itself"),
        ("https:///nohost", "must name a host"),
        ("http://merchant.example/a b", "spaces"),
    ],
)
def test_project_create_refuses_unusable_callback_urls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, reason: str
) -> None:
    monkeypatch.delenv("PAYPLANE_DATABASE_URL", raising=False)
    result = run(
        tmp_path / "data",
        "project",
        "create",
        "--id",
        "7",
        "--name",
        "Bad",
        "--callback-url",
        url,
    )
    assert result.exit_code == 2
    assert reason in result.output
    assert "Traceback" not in result.output
