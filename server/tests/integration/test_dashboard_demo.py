"""``payplane-server demo`` creates a Merchant admin for the demo project and prints its
credentials once."""

from __future__ import annotations

import re

import pytest

from payplane_server.cli.demo import DEMO_ADMIN_EMAIL, DEMO_PROJECT_ID, run
from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.services.accounts import authenticate, list_users, user_projects
from payplane_server.services.projects import get_project


def test_demo_prints_a_working_admin_password_once(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    run(settings)
    first = capsys.readouterr().out
    found = re.search(r"email admin@demo\.example, password (\S+) \(shown only now\)", first)
    assert found is not None, first
    assert "/dashboard" in first

    run(settings)
    second = capsys.readouterr().out
    assert found.group(1) not in second
    assert "its password was printed when it was created" in second

    ctx = AppContext.create(settings)
    try:
        admin = authenticate(ctx, DEMO_ADMIN_EMAIL, found.group(1))
        assert admin is not None
        assert admin.role == "Merchant admin" and admin.can_manage_tokens
        with ctx.db.read() as conn:
            project = get_project(conn, DEMO_PROJECT_ID)
            assert project is not None and admin.merchant_id == project.merchant_id
            assert user_projects(conn, admin.id) == [DEMO_PROJECT_ID]
            assert [u.email for u in list_users(conn, project.merchant_id)] == [DEMO_ADMIN_EMAIL]
    finally:
        ctx.close()
