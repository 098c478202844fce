"""rate limits: one row per subject

The counter of a subject's latest window and the count of the window before it share one row,
so that counting a request is a single upsert. Counters live for a minute at most: the old
table is dropped rather than converted (an upgrade forgets the current minute's counts).

Revision ID: c7d2e5a90f13
Revises: a40e8fb391b0
Create Date: 2026-11-23 16:45:00.000000
"""

from alembic import op
import sqlalchemy as sa


revision = "c7d2e5a90f13"
down_revision = "a40e8fb391b0"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_table("rate_limits")
    op.create_table(
        "rate_limits",
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("previous", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("subject", name=op.f("pk_rate_limits")),
    )


def downgrade() -> None:
    op.drop_table("rate_limits")
    op.create_table(
        "rate_limits",
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("subject", "window_start", name=op.f("pk_rate_limits")),
    )
