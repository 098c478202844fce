"""The callback outbox as a work queue: claim due rows, record attempt results, release leases.

Every function is one short transaction. A claim is a lease: the row's ``claimed_until`` and
``next_attempt_at`` move to the lease's end, so a worker that dies mid-delivery leaves a row that
becomes due again by itself (at-least-once). The lease value doubles as the claim's token: a
result is recorded only while the row still carries the lease it was claimed with, so a worker
whose lease ran out can never overwrite the outcome of the worker that took over.

Ordering: at most one callback per payment is *active* (pending with ``next_attempt_at`` set).
When it ends (delivered or finally failed) the oldest waiting callback of the payment becomes due.
On PostgreSQL the payment rows are locked first (in id order), the same lock a status change
takes before it queues a callback, so a callback queued concurrently is either seen as waiting
here or sees this one as ended there; it is never stranded.
"""

# ruff: noqa: S608  (SQL text here interpolates placeholders only; every value is bound)

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, bindparam, exists, func, select, update

from ..db import Database
from ..db.tables import callback_attempts, callbacks
from ..domain.retry import SCHEDULE, RetrySchedule, next_attempt_at

__all__ = [
    "AttemptResult",
    "Claimed",
    "Recorded",
    "claim_due",
    "extend_lease",
    "has_due",
    "origin_of",
    "record_results",
    "release_claims",
    "release_next",
]


def origin_of(url: str) -> str:
    """``scheme://netloc`` exactly as written in ``url`` (the per-host concurrency key)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    for stop in "/?#":
        rest = rest.split(stop, 1)[0]
    return f"{scheme}://{rest}"


@dataclass(frozen=True)
class Claimed:
    """A callback this worker holds a lease on."""

    id: int
    payment_pk: int
    url: str
    body: str
    attempts: int
    lease: datetime
    origin: str = ""

    def __post_init__(self) -> None:
        if not self.origin:
            object.__setattr__(self, "origin", origin_of(self.url))


@dataclass(frozen=True)
class AttemptResult:
    """The outcome of one delivery attempt of a claimed callback."""

    claimed: Claimed
    started_at: datetime
    ended_at: datetime
    http_status: int | None
    latency_ms: int
    error: str | None
    # True for a URL refused before sending (never retried).
    permanent: bool = False

    @property
    def delivered(self) -> bool:
        return self.http_status == 200 and self.error is None


@dataclass(frozen=True)
class Recorded:
    """What ``record_results`` did, for logs and tests."""

    delivered: int
    retrying: int
    failed: int
    lost: int
    released: int


# The hot statements (a claim, a batch of results) are plain SQL through the driver: built
# with SQLAlchemy Core they cost several times the database's own work per callback.
_SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"  # how UTCDateTime values are stored on SQLite


def _sql(db: Database, statement: str) -> str:
    return statement.replace("?", "%s") if db.is_postgres else statement


def _time(db: Database, value: datetime) -> Any:
    naive = value.astimezone(UTC).replace(tzinfo=None)
    return naive if db.is_postgres else naive.strftime(_SQLITE_TIME)


def _read_time(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value.replace(tzinfo=UTC)


def _ids(db: Database, ids: Sequence[int]) -> tuple[str, list[Any]]:
    """``IN (...)`` (SQLite) or ``= ANY(...)`` (PostgreSQL) with its parameters."""
    if db.is_postgres:
        return "= ANY(%s)", [list(ids)]
    return f"IN ({', '.join('?' * len(ids))})", list(ids)


def _exclusions(origins: Sequence[str]) -> tuple[str, list[Any]]:
    sql, params = [], []
    for origin in origins:
        sql.append(" AND NOT (url = ? OR substr(url, 1, ?) IN (?, ?, ?))")
        params += [origin, len(origin) + 1, origin + "/", origin + "?", origin + "#"]
    return "".join(sql), params


def claim_due(
    db: Database,
    now: datetime,
    limit: int,
    lease_seconds: float,
    exclude_origins: Iterable[str] = (),
) -> list[Claimed]:
    """Lease up to ``limit`` due callbacks (oldest due first), skipping ``exclude_origins``."""
    if limit <= 0:
        return []
    lease = now + timedelta(seconds=lease_seconds)
    excluded, excluded_params = _exclusions(list(exclude_origins))
    due = (
        "SELECT id FROM callbacks WHERE state = 'pending' AND next_attempt_at IS NOT NULL"
        f" AND next_attempt_at <= ?{excluded} ORDER BY next_attempt_at, id LIMIT ?"
    )
    due_params = [_time(db, now), *excluded_params, limit]
    returning = " RETURNING id, payment_pk, url, body, attempts"
    stamp = _time(db, lease)
    with db.write() as conn:
        if db.is_postgres:
            ids = [
                row[0]
                for row in conn.exec_driver_sql(
                    _sql(db, due + " FOR UPDATE SKIP LOCKED"), tuple(due_params)
                )
            ]
            if not ids:
                return []
            rows = conn.exec_driver_sql(
                "UPDATE callbacks SET claimed_until = %s, next_attempt_at = %s"
                " WHERE id = ANY(%s)" + returning,
                (stamp, stamp, ids),
            ).all()
        else:
            rows = conn.exec_driver_sql(
                "UPDATE callbacks SET claimed_until = ?, next_attempt_at = ?"
                f" WHERE id IN ({due})" + returning,
                (stamp, stamp, *due_params),
            ).all()
    claimed = [Claimed(int(r[0]), int(r[1]), r[2], r[3], int(r[4]), lease) for r in rows]
    claimed.sort(key=lambda c: c.id)
    return claimed


def has_due(db: Database, now: datetime) -> bool:
    """Whether any callback is due (a cheap read, so that idle polls take no write lock)."""
    with db.read() as conn:
        return (
            conn.execute(
                select(callbacks.c.id)
                .where(
                    callbacks.c.state == "pending",
                    callbacks.c.next_attempt_at.is_not(None),
                    callbacks.c.next_attempt_at <= now,
                )
                .limit(1)
            ).first()
            is not None
        )


def extend_lease(db: Database, claimed: Claimed, now: datetime, lease_seconds: float) -> Claimed:
    """Renew a lease that is still ours; raise LookupError when it was lost."""
    lease = now + timedelta(seconds=lease_seconds)
    with db.write() as conn:
        moved = conn.execute(
            update(callbacks)
            .where(
                callbacks.c.id == claimed.id,
                callbacks.c.state == "pending",
                callbacks.c.claimed_until == claimed.lease,
            )
            .values(claimed_until=lease, next_attempt_at=lease)
        )
        if moved.rowcount != 1:
            raise LookupError(f"the lease on callback {claimed.id} was lost")
    return Claimed(
        claimed.id, claimed.payment_pk, claimed.url, claimed.body, claimed.attempts, lease
    )


def release_claims(db: Database, claims: Sequence[Claimed], now: datetime) -> None:
    """Give leases back unused (shutdown): the rows are due again at once, no attempt counted."""
    if not claims:
        return
    with db.write() as conn:
        conn.execute(
            update(callbacks)
            .where(
                callbacks.c.id == bindparam("cid"),
                callbacks.c.state == "pending",
                callbacks.c.claimed_until == bindparam("lease"),
            )
            .values(claimed_until=None, next_attempt_at=now),
            [{"cid": c.id, "lease": c.lease} for c in claims],
        )
        db.notify(conn, "callbacks")


def _lock_payments(db: Database, conn: Connection, payment_pks: Iterable[int]) -> None:
    pks = sorted(set(payment_pks))
    if db.is_postgres and pks:
        conn.exec_driver_sql(
            "SELECT id FROM payments WHERE id = ANY(%s) ORDER BY id FOR UPDATE", (pks,)
        ).all()


def release_next(db: Database, conn: Connection, payment_pks: Iterable[int], now: datetime) -> int:
    """Make the oldest waiting callback of each payment due now, unless one is already active.

    The caller holds the payments' locks (PostgreSQL) inside its write transaction.
    """
    pks = sorted(set(payment_pks))
    if not pks:
        return 0
    among, params = _ids(db, pks)
    waiting = [
        int(row[0])
        for row in conn.exec_driver_sql(
            "SELECT DISTINCT payment_pk FROM callbacks WHERE state = 'pending'"
            f" AND next_attempt_at IS NULL AND payment_pk {among}",
            tuple(params),
        )
    ]
    released = 0
    other = callbacks.alias("other")
    for pk in waiting:
        active = exists().where(
            other.c.payment_pk == pk,
            other.c.state == "pending",
            other.c.next_attempt_at.is_not(None),
        )
        oldest = (
            select(func.min(other.c.id))
            .where(
                other.c.payment_pk == pk,
                other.c.state == "pending",
                other.c.next_attempt_at.is_(None),
            )
            .scalar_subquery()
        )
        moved = conn.execute(
            update(callbacks)
            .where(callbacks.c.id == oldest, callbacks.c.next_attempt_at.is_(None), ~active)
            .values(next_attempt_at=now)
        )
        released += moved.rowcount
    return released


def _error_text(text: str | None) -> str | None:
    return None if text is None else text[:500]


def record_results(
    db: Database,
    results: Sequence[AttemptResult],
    now: datetime,
    schedule: RetrySchedule = SCHEDULE,
) -> Recorded:
    """Record a batch of attempts in one transaction and move each callback on:
    delivered, due again by the schedule, or failed; then release the next callback of every
    payment whose callback ended. Results whose lease was lost are dropped (counted in ``lost``).
    """
    if not results:
        return Recorded(0, 0, 0, 0, 0)
    by_id = {r.claimed.id: r for r in results}
    with db.write() as conn:
        # Attempt 1's start is the window's origin; attempt rows never change, so no lock.
        retry_ids = [r.claimed.id for r in results if not r.delivered and r.claimed.attempts >= 1]
        firsts: dict[int, datetime] = {}
        if retry_ids:
            firsts = {
                int(row.callback_id): row.started_at
                for row in conn.execute(
                    select(callback_attempts.c.callback_id, callback_attempts.c.started_at).where(
                        callback_attempts.c.callback_id.in_(retry_ids),
                        callback_attempts.c.number == 1,
                    )
                )
            }
        due_of: dict[int, datetime | None] = {}
        for r in results:
            if r.delivered or r.permanent:
                due_of[r.claimed.id] = None
            else:
                first = firsts.get(r.claimed.id, r.started_at)
                due_of[r.claimed.id] = next_attempt_at(
                    r.claimed.attempts + 1, first, r.ended_at, schedule
                )
        # Lock order everywhere: payments (by id), then callbacks (by id).
        _lock_payments(
            db, conn, (r.claimed.payment_pk for r in results if due_of[r.claimed.id] is None)
        )
        among, params = _ids(db, sorted(by_id))
        lock = " ORDER BY id FOR UPDATE" if db.is_postgres else ""
        current = {
            int(row[0]): _read_time(row[1])
            for row in conn.exec_driver_sql(
                f"SELECT id, claimed_until FROM callbacks WHERE state = 'pending' AND id {among}"
                + lock,
                tuple(params),
            )
        }
        kept = [r for r in results if current.get(r.claimed.id) == r.claimed.lease]
        lost = len(results) - len(kept)
        attempt_rows: list[tuple[Any, ...]] = []
        delivered: list[dict[str, Any]] = []
        retrying: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        ended: list[int] = []
        for r in kept:
            number = r.claimed.attempts + 1
            attempt_rows.append(
                (
                    r.claimed.id,
                    number,
                    _time(db, r.started_at),
                    r.http_status,
                    r.latency_ms,
                    _error_text(r.error),
                )
            )
            key = {"cid": r.claimed.id, "lease": r.claimed.lease, "n": number}
            due = due_of[r.claimed.id]
            if r.delivered:
                delivered.append(key)
                ended.append(r.claimed.payment_pk)
            elif due is None:
                failed.append({**key, "err": _error_text(r.error)})
                ended.append(r.claimed.payment_pk)
            else:
                retrying.append({**key, "due": due, "err": _error_text(r.error)})
        if attempt_rows and db.is_postgres:
            # One statement for the batch: six arrays, unnested into rows.
            columns = [list(column) for column in zip(*attempt_rows, strict=True)]
            conn.exec_driver_sql(
                "INSERT INTO callback_attempts"
                " (callback_id, number, started_at, http_status, latency_ms, error)"
                " SELECT * FROM unnest(%s::bigint[], %s::int[], %s::timestamp[], %s::int[],"
                " %s::int[], %s::text[])",
                tuple(columns),
            )
        elif attempt_rows:
            conn.exec_driver_sql(
                "INSERT INTO callback_attempts"
                " (callback_id, number, started_at, http_status, latency_ms, error)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                attempt_rows,
            )
        mine = and_(
            callbacks.c.id == bindparam("cid"),
            callbacks.c.claimed_until == bindparam("lease"),
        )
        if delivered:
            # The rows are locked (or the database is) and their leases were checked above,
            # so one statement covers the whole batch: the common case stays cheap.
            among, params = _ids(db, [d["cid"] for d in delivered])
            conn.exec_driver_sql(
                _sql(
                    db,
                    "UPDATE callbacks SET state = 'delivered', attempts = attempts + 1,"
                    " delivered_at = ?, next_attempt_at = NULL, claimed_until = NULL,"
                    " last_error = NULL WHERE id ",
                )
                + among,
                (_time(db, now), *params),
            )
        if retrying:
            conn.execute(
                update(callbacks)
                .where(mine)
                .values(
                    attempts=bindparam("n"),
                    next_attempt_at=bindparam("due"),
                    claimed_until=None,
                    last_error=bindparam("err"),
                ),
                retrying,
            )
        if failed:
            conn.execute(
                update(callbacks)
                .where(mine)
                .values(
                    state="failed",
                    attempts=bindparam("n"),
                    next_attempt_at=None,
                    claimed_until=None,
                    last_error=bindparam("err"),
                ),
                failed,
            )
        released = release_next(db, conn, ended, now)
        if released:
            db.notify(conn, "callbacks")
    return Recorded(len(delivered), len(retrying), len(failed), lost, released)
