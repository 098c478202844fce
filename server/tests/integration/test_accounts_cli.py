"""``payplane-server user ...`` and ``token ...`` against a real SQLite data directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from payplane_server.cli import app
from payplane_server.config import load_settings
from payplane_server.context import AppContext
from payplane_server.services.accounts import authenticate, user_by_email
from payplane_server.services.tokens import authenticate_token

runner = CliRunner()


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("PAYPLANE_DATABASE_URL", raising=False)
    directory = tmp_path / "data"
    made = run(
        directory,
        "project",
        "create",
        "--id",
        "501",
        "--name",
        "Shop",
        "--callback-url",
        "http://127.0.0.1:9/cb",
    )
    assert made.exit_code == 0, made.output
    return directory


def run(data_dir: Path, *args: str, input: str | None = None) -> Result:
    return runner.invoke(app, [*args, "--data-dir", str(data_dir)], input=input)


def context(data_dir: Path) -> AppContext:
    return AppContext.create(load_settings({}, data_dir=data_dir))


def test_user_create_with_a_prompted_password_signs_in(data_dir: Path) -> None:
    result = run(
        data_dir,
        "user",
        "create",
        "ada@shop.test",
        "--name",
        "Ada",
        "--role",
        "Merchant admin",
        input="correct horse\ncorrect horse\n",
    )
    assert result.exit_code == 0, result.output
    assert "correct horse" not in result.stdout.replace("Password", "")
    ctx = context(data_dir)
    try:
        user = authenticate(ctx, "ada@shop.test", "correct horse")
        assert user is not None and user.role == "Merchant admin"
    finally:
        ctx.close()


def test_token_new_prints_token_and_secret_once_and_they_authenticate(data_dir: Path) -> None:
    assert (
        run(
            data_dir,
            "user",
            "create",
            "fin@shop.test",
            "--name",
            "Fin",
            "--role",
            "Finance",
            "--project",
            "501",
            "--manage-tokens",
            "--no-password",
        ).exit_code
        == 0
    )
    result = run(data_dir, "token", "new", "fin@shop.test")
    assert result.exit_code == 0, result.output
    lines = dict(line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    token, secret = lines["token"].strip(), lines["secret key"].strip()
    assert len(token) == 30 and token.isalnum()
    ctx = context(data_dir)
    try:
        with ctx.db.read() as conn:
            found = authenticate_token(ctx, conn, token)
        assert found is not None and found[1] == secret
    finally:
        ctx.close()
    assert run(data_dir, "token", "delete", "fin@shop.test").exit_code == 0
    again = run(data_dir, "token", "delete", "fin@shop.test")
    assert again.exit_code == 1 and "no valid token" in again.stderr


def test_token_new_needs_manage_tokens_and_grant_gives_it(data_dir: Path) -> None:
    assert (
        run(
            data_dir,
            "user",
            "create",
            "sup@shop.test",
            "--name",
            "Sup",
            "--role",
            "Support",
            "--project",
            "501",
            "--no-password",
        ).exit_code
        == 0
    )
    refused = run(data_dir, "token", "new", "sup@shop.test")
    assert refused.exit_code == 1 and "--manage-tokens" in refused.stderr
    assert run(data_dir, "user", "grant", "sup@shop.test", "--manage-tokens").exit_code == 0
    assert run(data_dir, "token", "new", "sup@shop.test").exit_code == 0


def test_grant_revoke_list_and_delete(data_dir: Path) -> None:
    assert (
        run(
            data_dir,
            "project",
            "create",
            "--id",
            "502",
            "--name",
            "Elsewhere",
            "--callback-url",
            "http://127.0.0.1:9/cb",
        ).exit_code
        == 0
    )
    assert (
        run(
            data_dir,
            "user",
            "create",
            "fin@shop.test",
            "--name",
            "Fin",
            "--role",
            "Finance",
            "--project",
            "501",
            "--no-password",
        ).exit_code
        == 0
    )
    # Project 502 belongs to another merchant (each CLI project gets its own).
    refused = run(data_dir, "user", "grant", "fin@shop.test", "--project", "502")
    assert refused.exit_code == 1 and "another merchant" in refused.stderr
    assert run(data_dir, "user", "revoke", "fin@shop.test", "--project", "501").exit_code == 0
    listing = run(data_dir, "user", "list", "--merchant", "1")
    assert "fin@shop.test\tFinance\t-\tprojects -" in listing.stdout
    assert run(data_dir, "user", "delete", "fin@shop.test").exit_code == 0
    ctx = context(data_dir)
    try:
        with ctx.db.read() as conn:
            assert user_by_email(conn, "fin@shop.test") is None
    finally:
        ctx.close()


def test_unknown_role_and_unknown_user_fail_cleanly(data_dir: Path) -> None:
    bad = run(
        data_dir, "user", "create", "x@shop.test", "--name", "X", "--role", "Boss", "--no-password"
    )
    assert bad.exit_code == 1 and "unknown role" in bad.stderr
    missing = run(data_dir, "user", "delete", "nobody@shop.test")
    assert missing.exit_code == 1 and "no account" in missing.stderr
