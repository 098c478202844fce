"""The Data API rate limit: 60 requests a minute per Dashboard account, kept in the database,
so it holds jointly across servers; 429 with Retry-After of at least 3 s."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from starlette.testclient import TestClient

from payplane_server.clock import FakeClock
from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.db import Database
from payplane_server.services import ratelimit
from payplane_server.testing import LiveServer
from payplane_server.testing.data_api import DataApiWorld, build_world
from payplane_server.web import create_data_api_app

# The pure rules.


def test_a_fresh_window_admits_exactly_the_limit() -> None:
    assert ratelimit.admit(0, 60, 0.0, 60)
    assert not ratelimit.admit(0, 61, 0.0, 60)


def test_the_previous_window_weighs_by_its_share_of_the_last_minute() -> None:
    # 60 requests late in the previous minute, 15 s into this one: 45 still count.
    assert ratelimit.admit(60, 15, 15.0, 60)
    assert not ratelimit.admit(60, 16, 15.0, 60)


@pytest.mark.parametrize(
    ("previous", "current", "elapsed", "expected"),
    [
        (0, 60, 0.0, 61),  # wait out this minute, then 1 s for the weight to drop
        (0, 60, 59.0, 2 + 1),  # never below 3 s
        (60, 59, 30.0, 30),  # only when the old minute has gone
        (60, 40, 30.0, 11),  # the old minute's weight drops below the room left
        (60, 0, 0.0, 3),
    ],
)
def test_retry_after_is_when_a_request_fits_again_and_never_below_three_seconds(
    previous: int, current: int, elapsed: float, expected: int
) -> None:
    wait = ratelimit.retry_after(previous, current, elapsed, 60, 3)
    assert wait == expected
    # Whatever it says is true: after waiting, one request is admitted.
    if wait >= 60 - elapsed:
        later = wait - (60 - elapsed)
        assert ratelimit.admit(current, 1, later, 60)
    else:
        assert ratelimit.admit(previous, current + 1, elapsed + wait, 60)


# The service on SQLite and PostgreSQL.


def _hit(ctx: AppContext, subject: str, limit: int) -> ratelimit.Decision:
    """Count one request in a write transaction of its own."""
    with ctx.db.write() as conn:
        return ratelimit.count(conn, ctx.clock.now(), subject, limit)


def test_the_61st_hit_in_a_minute_is_refused_and_admitted_after_the_wait(
    ctx: AppContext, clock: FakeClock
) -> None:
    decisions = [_hit(ctx, "user:1", 60) for _ in range(61)]
    assert all(d.allowed for d in decisions[:60])
    refused = decisions[60]
    assert not refused.allowed and refused.retry_after >= 3
    assert not _hit(ctx, "user:1", 60).allowed
    assert _hit(ctx, "user:2", 60).allowed
    clock.advance(refused.retry_after - 1)
    assert not _hit(ctx, "user:1", 60).allowed
    clock.advance(1)
    assert _hit(ctx, "user:1", 60).allowed


def test_a_subject_keeps_one_row_however_many_windows_pass(
    ctx: AppContext, clock: FakeClock
) -> None:
    for _ in range(5):
        _hit(ctx, "user:1", 60)
        clock.advance(60)
    _hit(ctx, "user:2", 60)
    with ctx.db.read() as conn:
        count = conn.exec_driver_sql("SELECT count(*) FROM rate_limits").scalar()
    assert count == 2


def _to_next_window(clock: FakeClock, seconds_into_it: float = 0.0) -> None:
    elapsed = clock.now().timestamp() % ratelimit.WINDOW_SECONDS
    clock.advance(ratelimit.WINDOW_SECONDS - elapsed + seconds_into_it)


def test_the_previous_window_still_weighs_after_the_row_moves_on(
    ctx: AppContext, clock: FakeClock
) -> None:
    _to_next_window(clock)
    assert all(_hit(ctx, "user:1", 60).allowed for _ in range(60))
    # Half-way into the next window, the 60 of the previous one weigh 30.
    _to_next_window(clock, 30.0)
    decisions = [_hit(ctx, "user:1", 60) for _ in range(31)]
    assert [d.allowed for d in decisions] == [True] * 30 + [False]


def test_a_window_with_no_requests_in_between_forgets_the_old_count(
    ctx: AppContext, clock: FakeClock
) -> None:
    _to_next_window(clock)
    assert all(_hit(ctx, "user:1", 60).allowed for _ in range(60))
    _to_next_window(clock)
    _to_next_window(clock, 1.0)
    assert all(_hit(ctx, "user:1", 60).allowed for _ in range(60))


def test_a_lagging_clock_counts_into_the_newest_window(ctx: AppContext, clock: FakeClock) -> None:
    _to_next_window(clock, 59.0)
    lagging = clock.now()
    clock.advance(2.0)  # another machine, two seconds ahead, opens the next window
    assert all(_hit(ctx, "user:1", 60).allowed for _ in range(60))
    with ctx.db.write() as conn:
        decision = ratelimit.count(conn, lagging, "user:1", 60)
    assert not decision.allowed
    with ctx.db.read() as conn:
        row = conn.exec_driver_sql("SELECT count, previous FROM rate_limits").one()
    assert tuple(row) == (60, 0)


# Through the HTTP API.


@pytest.fixture
def world(ctx: AppContext) -> DataApiWorld:
    return build_world(ctx, seed=False)


def test_the_61st_request_gets_429_with_retry_after_and_one_after_the_wait_succeeds(
    ctx: AppContext, clock: FakeClock, world: DataApiWorld
) -> None:
    with TestClient(create_data_api_app(ctx)) as client:
        for _ in range(60):
            assert client.post("/v1/balance/get", content=world.body("admin")).status_code == 200
        response = client.post("/v1/balance/get", content=world.body("admin"))
        assert response.status_code == 429
        assert response.json() == {
            "name": "Too Many Requests",
            "message": response.json()["message"],
            "code": "0",
            "status": "429",
        }
        wait = int(response.headers["Retry-After"])
        assert wait >= 3
        # Another account of the same merchant has its own budget.
        assert client.post("/v1/balance/get", content=world.body("finance")).status_code == 200
        clock.advance(wait)
        assert client.post("/v1/balance/get", content=world.body("admin")).status_code == 200


def test_refused_answers_count_against_the_limit_too(ctx: AppContext, world: DataApiWorld) -> None:
    bad = world.body("admin", {"project_ids": [900]})
    with TestClient(create_data_api_app(ctx)) as client:
        codes = [client.post("/v1/balance/get", content=bad).status_code for _ in range(61)]
    assert codes == [401] * 60 + [429]


def test_the_limit_is_configurable(settings: Settings, clock: FakeClock) -> None:
    ctx = AppContext.create(
        settings.replace(rate_limit_per_minute=5, rate_limit_retry_after=7), clock=clock
    )
    try:
        world = build_world(ctx, seed=False)
        with TestClient(create_data_api_app(ctx)) as client:
            codes = [client.post("/v1/balance/get", content=world.body("admin")) for _ in range(6)]
        assert [r.status_code for r in codes] == [200] * 5 + [429]
        assert int(codes[-1].headers["Retry-After"]) >= 7
    finally:
        ctx.close()


@pytest.fixture
def two_servers(
    settings: Settings, clock: FakeClock, world: DataApiWorld
) -> Iterator[list[LiveServer]]:
    """Two servers, each with its own context and connection pool, on one database."""
    contexts = [
        AppContext.create(settings, clock=clock, db=Database(settings.resolved_database_url))
        for _ in range(2)
    ]
    servers = [LiveServer(create_data_api_app(c), lifespan="off").start() for c in contexts]
    yield servers
    for server in servers:
        server.stop()
    for context in contexts:
        context.close()


def test_two_servers_on_one_database_share_the_limit(
    two_servers: list[LiveServer], world: DataApiWorld
) -> None:
    results: Counter[int] = Counter()
    lock = threading.Lock()

    def client_thread(index: int) -> None:
        server = two_servers[index % 2]
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for _ in range(10):
                code = http.post("/v1/balance/get", content=world.body("admin")).status_code
                with lock:
                    results[code] += 1

    threads = [threading.Thread(target=client_thread, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {200: 60, 429: 20}
