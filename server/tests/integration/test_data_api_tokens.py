"""Every row of the API token state table through the HTTP Data API (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from payplane_server.context import AppContext
from payplane_server.services.accounts import (
    PermissionDenied,
    create_user,
    delete_user,
    set_manage_tokens,
)
from payplane_server.services.tokens import delete_token, new_token
from payplane_server.testing.data_api import build_world, signed_body
from payplane_server.web import create_data_api_app


@pytest.fixture
def client(ctx: AppContext) -> Iterator[TestClient]:
    with TestClient(create_data_api_app(ctx), base_url="https://api.test") as test_client:
        yield test_client


@pytest.fixture
def people(ctx: AppContext) -> dict[str, int]:
    world = build_world(ctx, seed=False)
    user = create_user(
        ctx,
        merchant_id=world.merchant_id,
        email="holder@example.test",
        name="Holder",
        role="Finance",
        can_manage_tokens=True,
        project_ids=[101],
    )
    return {"admin": world.user_ids["admin"], "user": user}


def status(client: TestClient, token: str, secret: str) -> int:
    return client.post("/v1/balance/get", content=signed_body({}, token, secret)).status_code


def test_row_valid_new_token_the_previous_token_gets_401(
    ctx: AppContext, client: TestClient, people: dict[str, int]
) -> None:
    first = new_token(ctx, people["user"])
    assert status(client, first.token, first.secret) == 200
    second = new_token(ctx, people["user"])
    assert status(client, first.token, first.secret) == 401
    assert status(client, second.token, second.secret) == 200
    # The old secret does not sign for the new token either.
    assert status(client, second.token, first.secret) == 401


def test_row_valid_delete_the_token_gets_401_for_good(
    ctx: AppContext, client: TestClient, people: dict[str, int]
) -> None:
    issued = new_token(ctx, people["user"])
    delete_token(ctx, people["user"])
    assert status(client, issued.token, issued.secret) == 401
    new_token(ctx, people["user"])
    assert status(client, issued.token, issued.secret) == 401


def test_row_account_deleted_the_token_gets_401(
    ctx: AppContext, client: TestClient, people: dict[str, int]
) -> None:
    issued = new_token(ctx, people["user"])
    assert status(client, issued.token, issued.secret) == 200
    delete_user(ctx, people["admin"], people["user"])
    response = client.post("/v1/balance/get", content=signed_body({}, issued.token, issued.secret))
    assert response.status_code == 401
    assert response.json()["name"] == "Authorization Required"


def test_row_permission_withdrawn_the_token_keeps_working_but_cannot_change(
    ctx: AppContext, client: TestClient, people: dict[str, int]
) -> None:
    issued = new_token(ctx, people["user"])
    set_manage_tokens(ctx, people["admin"], people["user"], False)
    assert status(client, issued.token, issued.secret) == 200
    with pytest.raises(PermissionDenied):
        new_token(ctx, people["user"])
    with pytest.raises(PermissionDenied):
        delete_token(ctx, people["user"])
    assert status(client, issued.token, issued.secret) == 200
