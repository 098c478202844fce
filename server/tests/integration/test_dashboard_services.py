"""Dashboard services on SQLite and PostgreSQL: sessions, sign-in slowdown, payment queries."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, insert, select

from payplane_server.clock import FakeClock
from payplane_server.context import AppContext
from payplane_server.db.tables import callback_attempts, dashboard_sessions, payments
from payplane_server.domain.money import CURRENCY_EXPONENTS, format_amount
from payplane_server.domain.payments import Code, Status
from payplane_server.services import dashboard_queries as queries
from payplane_server.services import sessions
from payplane_server.services.accounts import create_user, delete_user
from payplane_server.services.processing import Change, start_operation, transition
from payplane_server.services.projects import create_project, get_project
from payplane_server.web.dashboard_kit import money


def _merchant_of(ctx: AppContext, project_id: int) -> int:
    with ctx.db.read() as conn:
        project = get_project(conn, project_id)
    assert project is not None
    return project.merchant_id


def _user(ctx: AppContext, merchant_id: int, email: str = "ann@example.com") -> int:
    return create_user(ctx, merchant_id=merchant_id, email=email, name="Ann", role="Finance")


def _payment(
    ctx: AppContext,
    project_id: int,
    payment_id: str,
    *,
    created_at: datetime,
    finish: Status | None = Status.SUCCESS,
    amount: int = 1999,
) -> int:
    with ctx.db.write() as conn:
        pk = int(
            conn.execute(
                insert(payments)
                .values(
                    project_id=project_id,
                    payment_id=payment_id,
                    status=Status.NEW.value,
                    amount=amount,
                    currency="USD",
                    customer_id="c-1",
                    params=json.dumps({"payment_id": payment_id}),
                    processing_deadline=created_at + timedelta(days=1),
                    page_token=secrets.token_hex(16),
                    created_at=created_at,
                    updated_at=created_at,
                )
                .returning(payments.c.id)
            ).scalar_one()
        )
        if finish is not None:
            row = conn.execute(select(payments).where(payments.c.id == pk)).one()
            start_operation(ctx, conn, row)
            code = Code.SUCCESS if finish is Status.SUCCESS else Code.GENERAL_DECLINE
            assert transition(ctx, conn, pk, Change(status=finish, code=code))
    return pk


@pytest.fixture
def shop(ctx: AppContext) -> int:
    create_project(ctx, project_id=501, name="Shop", callback_url="http://127.0.0.1:9/callbacks")
    return 501


# ------------------------------------------------------------------------------ sessions


def test_a_session_id_is_stored_only_as_its_hash(ctx: AppContext, shop: int) -> None:
    user_id = _user(ctx, _merchant_of(ctx, shop))
    session_id = sessions.start_session(ctx, user_id)
    with ctx.db.read() as conn:
        stored = conn.execute(select(dashboard_sessions.c.id_hash)).scalars().all()
    assert len(stored) == 1
    assert session_id not in stored[0]
    loaded = sessions.load_session(ctx, session_id)
    assert loaded is not None and loaded.user_id == user_id


def test_each_session_has_its_own_csrf_token_compared_exactly(ctx: AppContext, shop: int) -> None:
    user_id = _user(ctx, _merchant_of(ctx, shop))
    first = sessions.load_session(ctx, sessions.start_session(ctx, user_id))
    second = sessions.load_session(ctx, sessions.start_session(ctx, user_id))
    assert first is not None and second is not None
    assert first.csrf_token != second.csrf_token
    assert sessions.check_csrf(first, first.csrf_token)
    assert not sessions.check_csrf(first, second.csrf_token)
    assert not sessions.check_csrf(first, "")
    assert not sessions.check_csrf(first, None)
    assert not sessions.check_csrf(first, first.csrf_token + "x")


def test_a_session_expires_after_two_idle_hours(
    ctx: AppContext, clock: FakeClock, shop: int
) -> None:
    session_id = sessions.start_session(ctx, _user(ctx, _merchant_of(ctx, shop)))
    clock.advance(hours=1, minutes=59)
    assert sessions.load_session(ctx, session_id) is not None
    clock.advance(hours=1, minutes=59)  # the visit above slid the expiry forward
    assert sessions.load_session(ctx, session_id) is not None
    clock.advance(hours=2, seconds=1)
    assert sessions.load_session(ctx, session_id) is None


def test_a_busy_session_still_ends_after_twelve_hours(
    ctx: AppContext, clock: FakeClock, shop: int
) -> None:
    session_id = sessions.start_session(ctx, _user(ctx, _merchant_of(ctx, shop)))
    for _ in range(11):
        clock.advance(hours=1)
        assert sessions.load_session(ctx, session_id) is not None
    clock.advance(hours=1, seconds=1)
    assert sessions.load_session(ctx, session_id) is None


def test_sign_out_ends_the_session_everywhere(ctx: AppContext, shop: int) -> None:
    session_id = sessions.start_session(ctx, _user(ctx, _merchant_of(ctx, shop)))
    sessions.end_session(ctx, session_id)
    assert sessions.load_session(ctx, session_id) is None


def test_a_session_of_a_deleted_account_is_no_session(ctx: AppContext, shop: int) -> None:
    merchant = _merchant_of(ctx, shop)
    user_id = _user(ctx, merchant)
    session_id = sessions.start_session(ctx, user_id)
    delete_user(ctx, None, user_id)
    assert sessions.load_session(ctx, session_id) is None


def test_signing_in_again_ends_the_session_the_browser_held(ctx: AppContext, shop: int) -> None:
    user_id = _user(ctx, _merchant_of(ctx, shop))
    planted = sessions.start_session(ctx, user_id)
    fresh = sessions.start_session(ctx, user_id, replaces=planted)
    assert sessions.load_session(ctx, planted) is None
    assert sessions.load_session(ctx, fresh) is not None


def test_unknown_and_absurd_session_ids_are_no_session(ctx: AppContext) -> None:
    assert sessions.load_session(ctx, None) is None
    assert sessions.load_session(ctx, "") is None
    assert sessions.load_session(ctx, "nope") is None
    assert sessions.load_session(ctx, "x" * 10_000) is None


def test_a_password_change_ends_the_other_sessions(ctx: AppContext, shop: int) -> None:
    user_id = _user(ctx, _merchant_of(ctx, shop))
    mine, other = sessions.start_session(ctx, user_id), sessions.start_session(ctx, user_id)
    sessions.end_other_sessions(ctx, user_id, mine)
    assert sessions.load_session(ctx, mine) is not None
    assert sessions.load_session(ctx, other) is None


def test_stale_sessions_and_failure_counts_are_purged(
    ctx: AppContext, clock: FakeClock, shop: int
) -> None:
    user_id = _user(ctx, _merchant_of(ctx, shop))
    old = sessions.start_session(ctx, user_id)
    sessions.record_failure(ctx, [sessions.email_subject("old@example.com")])
    clock.advance(hours=3)
    fresh = sessions.start_session(ctx, user_id)
    sessions.record_failure(ctx, [sessions.email_subject("new@example.com")])
    assert sessions.purge_stale(ctx) == 2
    with ctx.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(dashboard_sessions)).scalar() == 1
    assert sessions.load_session(ctx, fresh) is not None
    assert sessions.load_session(ctx, old) is None
    assert sessions.purge_stale(ctx) == 0


# ---------------------------------------------------------------------------- throttling


def test_five_failures_are_free_then_the_wait_doubles(ctx: AppContext, clock: FakeClock) -> None:
    subject = [sessions.email_subject("Ann@Example.com")]
    for _ in range(4):
        sessions.record_failure(ctx, subject)
    assert sessions.wait_before_attempt(ctx, subject) == 0
    sessions.record_failure(ctx, subject)
    assert sessions.wait_before_attempt(ctx, subject) == 1
    sessions.record_failure(ctx, subject)
    assert sessions.wait_before_attempt(ctx, subject) == 2
    sessions.record_failure(ctx, subject)
    assert sessions.wait_before_attempt(ctx, subject) == 4
    clock.advance(3)
    assert sessions.wait_before_attempt(ctx, subject) == 1
    clock.advance(1)
    assert sessions.wait_before_attempt(ctx, subject) == 0


def test_the_email_subject_ignores_case_and_spaces() -> None:
    assert sessions.email_subject(" Ann@Example.COM ") == sessions.email_subject("ann@example.com")
    assert "ann" not in sessions.email_subject("ann@example.com")


def test_the_wait_is_capped_at_fifteen_minutes(ctx: AppContext) -> None:
    subject = [sessions.email_subject("ann@example.com")]
    for _ in range(40):
        sessions.record_failure(ctx, subject)
    assert sessions.wait_before_attempt(ctx, subject) == 15 * 60


def test_failures_are_forgotten_an_hour_after_the_last(ctx: AppContext, clock: FakeClock) -> None:
    subject = [sessions.email_subject("ann@example.com")]
    for _ in range(8):
        sessions.record_failure(ctx, subject)
    clock.advance(hours=1)
    assert sessions.wait_before_attempt(ctx, subject) == 0
    sessions.record_failure(ctx, subject)  # counts from one again
    assert sessions.wait_before_attempt(ctx, subject) == 0


def test_a_client_address_gets_twenty_free_failures(ctx: AppContext) -> None:
    client = [sessions.client_subject("203.0.113.9")]
    for _ in range(19):
        sessions.record_failure(ctx, client)
    assert sessions.wait_before_attempt(ctx, client) == 0
    sessions.record_failure(ctx, client)
    assert sessions.wait_before_attempt(ctx, client) == 1


def test_the_longest_wait_of_the_subjects_applies(ctx: AppContext) -> None:
    email = sessions.email_subject("ann@example.com")
    client = sessions.client_subject("203.0.113.9")
    for _ in range(7):
        sessions.record_failure(ctx, [email])
    assert sessions.wait_before_attempt(ctx, [email, client]) == 4
    sessions.clear_failures(ctx, [email])
    assert sessions.wait_before_attempt(ctx, [email, client]) == 0


# ------------------------------------------------------------------------------- queries


def _at(minute: int) -> datetime:
    return datetime(2026, 11, 1, 12, 0, tzinfo=UTC) + timedelta(minutes=minute)


def test_payments_page_newest_first_and_back(ctx: AppContext, shop: int) -> None:
    for n in range(7):
        _payment(ctx, shop, f"p-{n}", created_at=_at(n), finish=None)
    everything = queries.PaymentFilter()
    with ctx.db.read() as conn:
        first = queries.search_payments(conn, [shop], everything, limit=3)
        assert [p.payment_id for p in first.rows] == ["p-6", "p-5", "p-4"]
        assert first.newer is None and first.older is not None
        second = queries.search_payments(conn, [shop], everything, older_than=first.older, limit=3)
        assert [p.payment_id for p in second.rows] == ["p-3", "p-2", "p-1"]
        assert second.newer is not None and second.older is not None
        third = queries.search_payments(conn, [shop], everything, older_than=second.older, limit=3)
        assert [p.payment_id for p in third.rows] == ["p-0"]
        assert third.older is None and third.newer is not None
        back = queries.search_payments(conn, [shop], everything, newer_than=third.newer, limit=3)
        assert [p.payment_id for p in back.rows] == ["p-3", "p-2", "p-1"]
        assert back.newer is not None
        top = queries.search_payments(conn, [shop], everything, newer_than=back.newer, limit=3)
        assert [p.payment_id for p in top.rows] == ["p-6", "p-5", "p-4"]
        assert top.newer is None and top.older is not None


def test_payments_with_the_same_time_page_without_loss(ctx: AppContext, shop: int) -> None:
    for n in range(5):
        _payment(ctx, shop, f"same-{n}", created_at=_at(0), finish=None)
    seen: list[str] = []
    cursor = None
    with ctx.db.read() as conn:
        while True:
            page = queries.search_payments(
                conn, [shop], queries.PaymentFilter(), older_than=cursor, limit=2
            )
            seen += [p.payment_id for p in page.rows]
            if page.older is None:
                break
            cursor = page.older
    assert sorted(seen) == [f"same-{n}" for n in range(5)]
    assert len(seen) == 5


def test_paging_across_several_projects_visits_every_payment_once_in_order(
    ctx: AppContext, shop: int
) -> None:
    merchant = _merchant_of(ctx, shop)
    create_project(ctx, project_id=502, name="Two", callback_url=None, merchant_id=merchant)
    create_project(ctx, project_id=503, name="Three", callback_url=None, merchant_id=merchant)
    expected = []
    for n in range(17):
        project = (shop, 502, 503)[n % 3]
        minute = n // 2  # pairs of payments share a time: ties broken by id
        pk = _payment(ctx, project, f"m-{n}", created_at=_at(minute), finish=None)
        expected.append((_at(minute), pk))
    expected.sort(reverse=True)
    visible = [503, shop, 502]
    forward: list[queries.PaymentPage] = []
    cursor = None
    with ctx.db.read() as conn:
        while True:
            page = queries.search_payments(
                conn, visible, queries.PaymentFilter(), older_than=cursor, limit=4
            )
            forward.append(page)
            if page.older is None:
                break
            cursor = page.older
        assert [p.pk for page in forward for p in page.rows] == [pk for _, pk in expected]
        assert [len(page.rows) for page in forward] == [4, 4, 4, 4, 1]
        back = forward[-1]
        for earlier in reversed(forward[:-1]):
            assert back.newer is not None
            back = queries.search_payments(
                conn, visible, queries.PaymentFilter(), newer_than=back.newer, limit=4
            )
            assert [p.pk for p in back.rows] == [p.pk for p in earlier.rows]
        assert back.newer is None
        only = queries.search_payments(conn, visible, queries.PaymentFilter(project_id=502))
        assert {p.project_id for p in only.rows} == {502} and len(only.rows) == 6


def test_search_by_payment_id_status_and_dates(ctx: AppContext, shop: int) -> None:
    _payment(ctx, shop, "a", created_at=_at(0), finish=Status.SUCCESS)
    _payment(ctx, shop, "b", created_at=_at(60 * 24), finish=Status.DECLINE)
    _payment(ctx, shop, "c", created_at=_at(60 * 48), finish=None)

    def ids(where: queries.PaymentFilter) -> list[str]:
        with ctx.db.read() as conn:
            return [p.payment_id for p in queries.search_payments(conn, [shop], where).rows]

    assert ids(queries.PaymentFilter(payment_id="b")) == ["b"]
    assert ids(queries.PaymentFilter(status="decline")) == ["b"]
    assert ids(queries.PaymentFilter(status="new")) == ["c"]
    day_two = datetime(2026, 11, 2, tzinfo=UTC)
    assert ids(queries.PaymentFilter(created_from=day_two)) == ["c", "b"]
    assert ids(queries.PaymentFilter(created_to=day_two)) == ["a"]
    assert ids(queries.PaymentFilter(status="success", created_from=day_two)) == []


def test_search_never_leaves_the_visible_projects(ctx: AppContext, shop: int) -> None:
    create_project(ctx, project_id=777, name="Other merchant", callback_url=None)
    _payment(ctx, shop, "mine", created_at=_at(0))
    _payment(ctx, 777, "theirs", created_at=_at(1))
    with ctx.db.read() as conn:
        rows = queries.search_payments(conn, [shop], queries.PaymentFilter()).rows
        assert [p.payment_id for p in rows] == ["mine"]
        found = queries.search_payments(conn, [shop], queries.PaymentFilter(payment_id="theirs"))
        assert found.rows == []
        asked = queries.search_payments(conn, [shop], queries.PaymentFilter(project_id=777))
        assert asked.rows == []
        assert queries.search_payments(conn, [], queries.PaymentFilter()).rows == []


def test_a_payment_page_has_operations_callbacks_and_every_attempt(
    ctx: AppContext, shop: int
) -> None:
    pk = _payment(ctx, shop, "detail", created_at=_at(0))
    with ctx.db.read() as conn:
        detail = queries.payment_detail(conn, [shop], pk)
    assert detail is not None
    assert [(op.type, op.status, op.code) for op in detail.operations] == [("sale", "success", "0")]
    assert len(detail.callbacks) == 1
    callback_id = detail.callbacks[0].id
    with ctx.db.write() as conn:
        for number, status in ((1, 500), (2, None), (3, 200)):
            conn.execute(
                insert(callback_attempts).values(
                    callback_id=callback_id,
                    number=number,
                    started_at=_at(number),
                    http_status=status,
                    latency_ms=12 * number,
                    error=None if status else "connection refused",
                )
            )
    with ctx.db.read() as conn:
        detail = queries.payment_detail(conn, [shop], pk)
        assert queries.callback_payment(conn, [shop], callback_id) == pk
        assert queries.callback_payment(conn, [999], callback_id) is None
    assert detail is not None
    attempts = detail.callbacks[0].history
    assert [(a.number, a.http_status, a.error) for a in attempts] == [
        (1, 500, None),
        (2, None, "connection refused"),
        (3, 200, None),
    ]
    assert json.loads(detail.callbacks[0].body)["payment"]["id"] == "detail"


def test_a_payment_of_another_project_is_not_found(ctx: AppContext, shop: int) -> None:
    create_project(ctx, project_id=777, name="Other", callback_url=None)
    pk = _payment(ctx, 777, "theirs", created_at=_at(0))
    with ctx.db.read() as conn:
        assert queries.payment_detail(conn, [shop], pk) is None
        assert queries.payment_detail(conn, [], pk) is None
        assert queries.payment_detail(conn, [777], pk) is not None


def test_balances_per_project_and_currency(ctx: AppContext, shop: int) -> None:
    create_project(ctx, project_id=777, name="Other", callback_url=None)
    _payment(ctx, shop, "one", created_at=_at(0), amount=1000)
    _payment(ctx, shop, "two", created_at=_at(1), amount=250)
    _payment(ctx, shop, "declined", created_at=_at(2), amount=5000, finish=Status.DECLINE)
    _payment(ctx, 777, "theirs", created_at=_at(3), amount=99)
    with ctx.db.read() as conn:
        lines = queries.list_balances(conn, [shop])
        assert queries.list_balances(conn, []) == []
        names = queries.project_names(conn, [777, shop])
        total = conn.execute(select(func.count()).select_from(payments)).scalar_one()
    assert [(b.project_id, b.project_name, b.currency, b.amount) for b in lines] == [
        (shop, "Shop", "USD", 1250)
    ]
    assert names == {shop: "Shop", 777: "Other"}
    assert total == 4


def test_the_dashboards_money_matches_the_payment_pages_formatting() -> None:
    for currency in CURRENCY_EXPONENTS:
        for amount in (0, 5, 1999, 123_456_789, -250):
            assert money(amount, currency) == format_amount(amount, currency, "en")
    assert money(1999, "USD") == "$19.99"
    assert money(1999, "JPY") == "¥1,999"
    assert money(1999, "KWD") == "KWD1.999"
    assert money(5, "XAU") == "5 XAU (minor units)"


def test_cursor_text_round_trips_and_rejects_junk() -> None:
    for micro in range(0, 1_000_000, 997):
        cursor = queries.Cursor(datetime(2026, 11, 1, 12, 0, 0, micro, tzinfo=UTC), 42)
        assert queries.Cursor.decode(cursor.encode()) == cursor
    latest = queries.Cursor(datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), 1)
    assert queries.Cursor.decode(latest.encode()) == latest
    for junk in ("", "1", "a.b", "1.x", "-1.2", "9" * 40 + ".1", "1.2.3", "1e5.2", "²1.²", "١.٢"):
        assert queries.Cursor.decode(junk) is None
