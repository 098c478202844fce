"""Merchants and projects: creation, secret rotation, and reading a project's secret key."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, insert, select, update

from ..context import AppContext
from ..crypto import generate_secret
from ..db.tables import merchants, projects

__all__ = [
    "Project",
    "ProjectExists",
    "create_merchant",
    "create_project",
    "decrypt_secret",
    "get_project",
    "project_secret",
    "rotate_secret",
]


@dataclass(frozen=True)
class Project:
    id: int
    merchant_id: int
    name: str
    callback_url: str | None


class ProjectExists(Exception):
    pass


def _context_for(project_id: int) -> str:
    return f"project:{project_id}"


def create_merchant(ctx: AppContext, name: str) -> int:
    with ctx.db.write() as conn:
        result = conn.execute(
            insert(merchants)
            .values(name=name, created_at=ctx.clock.now())
            .returning(merchants.c.id)
        )
        return int(result.scalar_one())


def create_project(
    ctx: AppContext,
    *,
    project_id: int,
    name: str,
    callback_url: str | None,
    merchant_id: int | None = None,
    secret: str | None = None,
) -> str:
    """Create a project and return its secret key (shown once; stored only encrypted)."""
    secret = secret or generate_secret()
    with ctx.db.write() as conn:
        if conn.execute(select(projects.c.id).where(projects.c.id == project_id)).first():
            raise ProjectExists(f"project {project_id} already exists")
        if merchant_id is None:
            merchant_id = int(
                conn.execute(
                    insert(merchants)
                    .values(name=name, created_at=ctx.clock.now())
                    .returning(merchants.c.id)
                ).scalar_one()
            )
        conn.execute(
            insert(projects).values(
                id=project_id,
                merchant_id=merchant_id,
                name=name,
                secret_enc=ctx.box.encrypt(secret, _context_for(project_id)),
                callback_url=callback_url,
                created_at=ctx.clock.now(),
            )
        )
    return secret


def rotate_secret(ctx: AppContext, project_id: int, secret: str | None = None) -> str:
    secret = secret or generate_secret()
    with ctx.db.write() as conn:
        result = conn.execute(
            update(projects)
            .where(projects.c.id == project_id)
            .values(
                secret_enc=ctx.box.encrypt(secret, _context_for(project_id)),
                secret_rotated_at=ctx.clock.now(),
            )
        )
        if result.rowcount != 1:
            raise LookupError(f"project {project_id} does not exist")
    return secret


def get_project(conn: Connection, project_id: int) -> Project | None:
    row = conn.execute(
        select(
            projects.c.id, projects.c.merchant_id, projects.c.name, projects.c.callback_url
        ).where(projects.c.id == project_id)
    ).first()
    if row is None:
        return None
    return Project(int(row.id), int(row.merchant_id), row.name, row.callback_url)


def project_secret(ctx: AppContext, conn: Connection, project_id: int) -> str | None:
    """The decrypted secret key of a project, or None when the project does not exist."""
    enc = conn.execute(select(projects.c.secret_enc).where(projects.c.id == project_id)).scalar()
    if enc is None:
        return None
    return ctx.box.decrypt(enc, _context_for(project_id))


def decrypt_secret(ctx: AppContext, project_id: int, secret_enc: str) -> str:
    """Decrypt a ``projects.secret_enc`` value that the caller selected in its own query."""
    return ctx.box.decrypt(secret_enc, _context_for(project_id))
