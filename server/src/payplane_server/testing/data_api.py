"""A small Data API world for tests and benchmarks: two merchants, their projects, Dashboard
accounts of each role with tokens, and some operations; plus signed request bodies."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from payplane import sign

from ..context import AppContext
from ..services.accounts import create_user
from ..services.projects import create_merchant, create_project
from ..services.tokens import IssuedToken, new_token
from .operations import seed_operations

__all__ = ["DataApiWorld", "build_world", "signed_body"]

START = datetime(2026, 11, 20, 10, 0, 0, tzinfo=UTC)


def signed_body(params: dict[str, Any], token: str, secret: str) -> bytes:
    """A request body: ``params`` plus ``token``, signed with ``secret``."""
    body = dict(params, token=token)
    body["signature"] = sign(body, secret)
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


@dataclass
class DataApiWorld:
    merchant_id: int
    other_merchant_id: int
    user_ids: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, IssuedToken] = field(default_factory=dict)

    def body(self, who: str, params: dict[str, Any] | None = None) -> bytes:
        issued = self.tokens[who]
        return signed_body(params or {}, issued.token, issued.secret)


def build_world(ctx: AppContext, *, seed: bool = True) -> DataApiWorld:
    """Merchant "Shop" owns projects 101 ("Shop") and 102 ("Outlet"); merchant "Other" owns
    900. Accounts with tokens: ``admin`` (Merchant admin), ``finance`` (Finance, project 101),
    ``support`` (Support, project 101), ``outsider`` (Merchant admin of Other). With ``seed``:
    project 101 has 30 successful EUR operations an hour apart from 2026-11-20 10:00 UTC,
    102 has 10 declined USD ones, 900 has 5."""
    shop = create_merchant(ctx, "Shop")
    other = create_merchant(ctx, "Other")
    create_project(ctx, project_id=101, name="Shop", callback_url=None, merchant_id=shop)
    create_project(ctx, project_id=102, name="Outlet", callback_url=None, merchant_id=shop)
    create_project(ctx, project_id=900, name="Other", callback_url=None, merchant_id=other)
    world = DataApiWorld(merchant_id=shop, other_merchant_id=other)
    accounts = {
        "admin": (shop, "Merchant admin", ()),
        "finance": (shop, "Finance", (101,)),
        "support": (shop, "Support", (101,)),
        "outsider": (other, "Merchant admin", ()),
    }
    for who, (merchant, role, project_ids) in accounts.items():
        user_id = create_user(
            ctx,
            merchant_id=merchant,
            email=f"{who}@example.test",
            name=who.title(),
            role=role,
            can_manage_tokens=True,
            project_ids=project_ids,
        )
        world.user_ids[who] = user_id
        world.tokens[who] = new_token(ctx, user_id)
    if seed:
        hour = timedelta(hours=1)
        seed_operations(ctx, project_id=101, count=30, start=START, spacing=hour)
        seed_operations(
            ctx,
            project_id=102,
            count=10,
            start=START + timedelta(minutes=30),
            spacing=hour,
            currency="USD",
            status="decline",
            payment_prefix="outlet-",
        )
        seed_operations(ctx, project_id=900, count=5, start=START, spacing=hour)
    return world
