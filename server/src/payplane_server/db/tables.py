"""The database schema (SQLAlchemy Core). Alembic migrations are generated from this file.

Times are stored as naive UTC (``UTCDateTime`` converts at the edge); money is integer minor
units in BIGINT columns, never floats.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

__all__ = [
    "api_tokens",
    "balances",
    "callback_attempts",
    "callbacks",
    "dashboard_sessions",
    "login_failures",
    "merchants",
    "metadata",
    "operations",
    "payments",
    "projects",
    "rate_limits",
    "user_projects",
    "users",
]


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC in Python, naive UTC in the database (identical on SQLite and PostgreSQL)."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC)


naming = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=naming)

merchants = Table(
    "merchants",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

projects = Table(
    "projects",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("merchant_id", Integer, ForeignKey("merchants.id"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("secret_enc", Text, nullable=False),
    Column("callback_url", Text, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("secret_rotated_at", UTCDateTime, nullable=True),
)

payments = Table(
    "payments",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("project_id", BigInteger, ForeignKey("projects.id"), nullable=False),
    Column("payment_id", String(255), nullable=False),
    Column("status", String(40), nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("customer_id", String(255), nullable=False),
    Column("description", Text, nullable=True),
    Column("best_before", UTCDateTime, nullable=True),
    Column("language_code", String(8), nullable=True),
    Column("interface_type", Text, nullable=True),
    # Every accepted Payment Page parameter, as the JSON object it arrived as.
    Column("params", Text, nullable=False),
    Column("method", String(40), nullable=True),
    Column("account_number", String(32), nullable=True),
    Column("card_fingerprint", String(64), nullable=True),
    Column("card_holder", String(255), nullable=True),
    Column("card_type", String(20), nullable=True),
    Column("expiry_month", String(2), nullable=True),
    Column("expiry_year", String(4), nullable=True),
    Column("clarification_fields", Text, nullable=True),
    Column("clarification_deadline", UTCDateTime, nullable=True),
    # JSON: the parameters requested by clarification and the values accepted so far.
    Column("clarification_state", Text, nullable=True),
    Column("processing_deadline", UTCDateTime, nullable=False),
    # The random handle of this payment's form pages (no sequential IDs in customer URLs).
    Column("page_token", String(64), nullable=False, unique=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    UniqueConstraint("project_id", "payment_id"),
    Index(
        "ix_payments_clarification_due",
        "clarification_deadline",
        postgresql_where=text("clarification_deadline IS NOT NULL"),
        sqlite_where=text("clarification_deadline IS NOT NULL"),
    ),
    Index("ix_payments_project_created", "project_id", "created_at"),
    Index("ix_payments_status_created", "status", "created_at"),
)

operations = Table(
    "operations",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("payment_pk", BigInteger, ForeignKey("payments.id"), nullable=False),
    Column("project_id", BigInteger, nullable=False),
    Column("type", String(20), nullable=False),
    Column("status", String(40), nullable=False),
    Column("code", String(10), nullable=False),
    Column("message", String(255), nullable=False),
    Column("sum_initial_amount", BigInteger, nullable=False),
    Column("sum_initial_currency", String(3), nullable=False),
    Column("sum_converted_amount", BigInteger, nullable=False),
    Column("sum_converted_currency", String(3), nullable=False),
    Column("provider_id", Integer, nullable=False),
    Column("provider_payment_id", String(64), nullable=False, server_default=""),
    Column("provider_auth_code", String(16), nullable=False, server_default=""),
    Column("request_id", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("completed_at", UTCDateTime, nullable=True),
    Index("ix_operations_payment", "payment_pk"),
    Index("ix_operations_project_created", "project_id", "created_at"),
    Index("ix_operations_created", "created_at"),
)

balances = Table(
    "balances",
    metadata,
    Column("project_id", BigInteger, ForeignKey("projects.id"), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("amount", BigInteger, nullable=False),
    PrimaryKeyConstraint("project_id", "currency"),
)

callbacks = Table(
    "callbacks",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("payment_pk", BigInteger, ForeignKey("payments.id"), nullable=False),
    Column("project_id", BigInteger, nullable=False),
    Column("operation_id", BigInteger, nullable=True),
    Column("url", Text, nullable=False),
    # The exact bytes that are POSTed (signed JSON), fixed when the callback is queued.
    Column("body", Text, nullable=False),
    # pending (waiting for its turn or its time), delivered, failed
    Column("state", String(20), nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    # Due time of the next attempt; NULL while an earlier callback of the payment is undelivered.
    Column("next_attempt_at", UTCDateTime, nullable=True),
    # A claim by a worker; an expired claim means the worker died and the row is due again.
    Column("claimed_until", UTCDateTime, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("delivered_at", UTCDateTime, nullable=True),
    Column("last_error", Text, nullable=True),
    Index(
        "ix_callbacks_due",
        "next_attempt_at",
        postgresql_where=text("state = 'pending' AND next_attempt_at IS NOT NULL"),
        sqlite_where=text("state = 'pending' AND next_attempt_at IS NOT NULL"),
    ),
    Index("ix_callbacks_payment", "payment_pk", "id"),
)

callback_attempts = Table(
    "callback_attempts",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("callback_id", BigInteger, ForeignKey("callbacks.id"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("http_status", Integer, nullable=True),
    Column("latency_ms", Integer, nullable=True),
    Column("error", Text, nullable=True),
    Index("ix_callback_attempts_callback", "callback_id", "number"),
)

users = Table(
    "users",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("merchant_id", Integer, ForeignKey("merchants.id"), nullable=False),
    Column("email", String(320), nullable=False, unique=True),
    Column("name", String(200), nullable=False),
    Column("password_hash", Text, nullable=True),
    Column("role", String(40), nullable=False),
    Column("can_manage_tokens", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", UTCDateTime, nullable=False),
    Column("deleted_at", UTCDateTime, nullable=True),
)

user_projects = Table(
    "user_projects",
    metadata,
    Column("user_id", Integer, ForeignKey("users.id"), nullable=False),
    Column("project_id", BigInteger, ForeignKey("projects.id"), nullable=False),
    PrimaryKeyConstraint("user_id", "project_id"),
)

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("user_id", Integer, ForeignKey("users.id"), nullable=False),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("token_last4", String(4), nullable=False),
    Column("secret_enc", Text, nullable=False),
    # valid, superseded, deactivated
    Column("state", String(20), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime, nullable=True),
    Index("ix_api_tokens_user", "user_id"),
)

# One row per subject: the counts of its latest one-minute window and of the window before.
rate_limits = Table(
    "rate_limits",
    metadata,
    Column("subject", String(64), nullable=False),
    Column("window_start", BigInteger, nullable=False),
    Column("count", Integer, nullable=False),
    Column("previous", Integer, nullable=False),
    PrimaryKeyConstraint("subject"),
)

dashboard_sessions = Table(
    "dashboard_sessions",
    metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("user_id", Integer, ForeignKey("users.id"), nullable=False),
    Column("csrf_token", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
)

login_failures = Table(
    "login_failures",
    metadata,
    Column("subject", String(320), primary_key=True),
    Column("failures", Integer, nullable=False),
    Column("last_failure_at", UTCDateTime, nullable=False),
)
