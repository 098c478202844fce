"""The schema migrates on both engines and the unit of work commits or rolls back whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from alembic.autogenerate import compare_metadata
from alembic.command import downgrade
from alembic.migration import MigrationContext
from sqlalchemy import bindparam, create_engine, func, insert, select

from payplane_server.context import AppContext
from payplane_server.db import DriverStatement, driver_rows, migrate
from payplane_server.db.migrate import alembic_config
from payplane_server.db.tables import merchants, metadata
from payplane_server.services.projects import (
    ProjectExists,
    create_project,
    get_project,
    project_secret,
    rotate_secret,
)


def test_migrating_twice_is_harmless(database_url: str) -> None:
    migrate(database_url)
    migrate(database_url)


def test_the_migrations_build_the_schema_the_tables_describe(database_url: str) -> None:
    migrate(database_url)
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, metadata) == []
    finally:
        engine.dispose()


def test_migrating_down_and_up_again_is_harmless(database_url: str) -> None:
    migrate(database_url)
    downgrade(alembic_config(database_url), "a40e8fb391b0")
    migrate(database_url)


def test_a_failed_transaction_leaves_nothing(ctx: AppContext) -> None:
    with pytest.raises(RuntimeError), ctx.db.write() as conn:
        conn.execute(merchants.insert().values(name="m", created_at=ctx.clock.now()))
        raise RuntimeError("boom")
    with ctx.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(merchants)).scalar() == 0


def test_driver_rows_run_in_the_transaction_with_one_placeholder_style(ctx: AppContext) -> None:
    insert = "INSERT INTO merchants (name, created_at) VALUES (?, ?) RETURNING id"
    with pytest.raises(RuntimeError), ctx.db.write() as conn:
        assert driver_rows(conn, insert, ("undone", "2026-01-01")) == [(1,)]
        raise RuntimeError("rolled back with the transaction")
    with ctx.db.write() as conn:
        ((kept,),) = driver_rows(conn, insert, ("kept", "2026-01-01"))
        # A statement without a result gives no rows; the rows are plain tuples.
        assert driver_rows(conn, "UPDATE merchants SET name = ? WHERE id = ?", ("k", kept)) == []
    with ctx.db.read() as conn:
        assert driver_rows(conn, "SELECT id, name FROM merchants WHERE name = ?", ("k",)) == [
            (kept, "k")
        ]
        assert conn.execute(select(func.count()).select_from(merchants)).scalar() == 1


def test_a_driver_statement_stores_values_exactly_as_sqlalchemy_does(ctx: AppContext) -> None:
    # An aware time in another zone, with microseconds, and one without: the column type's
    # conversion (to naive UTC, then to the engine's storage) must run for the driver too.
    times = [
        datetime(2026, 3, 1, 15, 4, 5, 123456, tzinfo=timezone(timedelta(hours=3))),
        datetime(2026, 3, 1, 12, 0, tzinfo=UTC),
    ]
    statement = DriverStatement(
        insert(merchants)
        .values(name=bindparam("name"), created_at=bindparam("created_at"))
        .returning(merchants.c.id)
    )
    with ctx.db.write() as conn:
        for number, when in enumerate(times):
            ours = statement.rows(conn, {"name": f"driver-{number}", "created_at": when})
            theirs = conn.execute(
                insert(merchants).returning(merchants.c.id),
                {"name": f"core-{number}", "created_at": when},
            ).scalar_one()
            ((mine,),) = ours
            # Stored alike to the byte: the same text on SQLite, the same timestamp elsewhere.
            stored = driver_rows(
                conn,
                "SELECT a.created_at, b.created_at FROM merchants a, merchants b "
                "WHERE a.id = ? AND b.id = ?",
                (mine, theirs),
            )
            assert stored[0][0] == stored[0][1]
            read = conn.execute(select(merchants.c.created_at).where(merchants.c.id == mine))
            assert read.scalar_one() == when
    with pytest.raises(RuntimeError), ctx.db.write() as conn:
        statement.rows(conn, {"name": "undone", "created_at": times[0]})
        raise RuntimeError("rolled back with the transaction")
    with ctx.db.read() as conn:
        names = conn.execute(select(merchants.c.name).order_by(merchants.c.id)).scalars().all()
    assert names == ["driver-0", "core-0", "driver-1", "core-1"]


def test_project_secret_is_encrypted_at_rest_and_reads_back(ctx: AppContext) -> None:
    secret = create_project(ctx, project_id=402, name="Shop", callback_url="http://x/cb")
    with ctx.db.read() as conn:
        stored = conn.exec_driver_sql("SELECT secret_enc FROM projects").scalar()
        assert secret not in stored
        assert project_secret(ctx, conn, 402) == secret
        project = get_project(conn, 402)
        assert project is not None and project.name == "Shop"
    new = rotate_secret(ctx, 402)
    assert new != secret
    with ctx.db.read() as conn:
        assert project_secret(ctx, conn, 402) == new


def test_project_ids_are_unique(ctx: AppContext) -> None:
    create_project(ctx, project_id=1, name="a", callback_url=None)
    with pytest.raises(ProjectExists):
        create_project(ctx, project_id=1, name="b", callback_url=None)
