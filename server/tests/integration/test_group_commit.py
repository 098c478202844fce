"""SQLite work run on the event loop shares one write transaction over a few turns of the loop
(a group commit): savepoints keep each piece of work's failures to itself, every piece answers only
once the group is durable, and a failed commit runs the work again in a worker thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from payplane_server.db import Database, engine, migrate
from payplane_server.web.offload import run_database_work


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    url = f"sqlite:///{tmp_path / 'payplane.db'}"
    migrate(url)
    database = Database(url)
    yield database
    database.dispose()


def _insert(conn: Connection, name: str) -> None:
    conn.execute(
        text("INSERT INTO merchants (name, created_at) VALUES (:name, '2026-01-01')"),
        {"name": name},
    )


def _names_elsewhere(db: Database) -> list[str]:
    """The merchants another connection sees: what is committed."""
    path = db.engine.url.database
    assert path is not None
    other = sqlite3.connect(path)
    try:
        return [row[0] for row in other.execute("SELECT name FROM merchants ORDER BY id")]
    finally:
        other.close()


def _writer(db: Database, name: str, seen: list[Connection]) -> Callable[[], str]:
    def work() -> str:
        with db.write() as conn:
            seen.append(conn)
            _insert(conn, name)
        return name

    return work


def test_work_of_one_turn_commits_together_and_answers_only_once_durable(db: Database) -> None:
    connections: list[Connection] = []
    committed_when_answered: list[list[str]] = []

    async def piece(name: str) -> None:
        assert await run_database_work(db, _writer(db, name, connections)) == name
        committed_when_answered.append(_names_elsewhere(db))

    async def scenario() -> None:
        await asyncio.gather(piece("a"), piece("b"), piece("c"))

    asyncio.run(scenario())
    # One transaction for the three: the same connection, and each answer came after all three
    # were committed.
    assert len({id(conn) for conn in connections}) == 1
    assert committed_when_answered == [["a", "b", "c"]] * 3


def _group_of(db: Database, name: str, groups: list[object]) -> Callable[[], str]:
    def work() -> str:
        with db.write() as conn:
            _insert(conn, name)
        groups.append(getattr(db._loop, "group", None))  # None: run in a worker thread
        return name

    return work


async def _later(
    db: Database, name: str, turns: int, groups: list[object], *, linger: bool = True
) -> None:
    """Run a write ``turns`` turns of the loop from now (each turn polls for I/O)."""
    for _ in range(turns):
        await asyncio.sleep(0)
    await run_database_work(db, _group_of(db, name, groups), linger=linger)


def test_lingering_work_arriving_within_two_more_polls_joins_a_small_group(
    db: Database,
) -> None:
    groups: list[object] = []

    async def scenario() -> None:
        await asyncio.gather(
            _later(db, "a", 0, groups), _later(db, "b", 1, groups), _later(db, "c", 2, groups)
        )
        await _later(db, "d", 0, groups)  # after the commit: a new group

    asyncio.run(scenario())
    assert groups[0] is not None
    assert groups[0] is groups[1] is groups[2]
    assert groups[3] is not groups[0]
    assert _names_elsewhere(db) == ["a", "b", "c", "d"]


def test_one_piece_that_may_not_linger_makes_the_group_commit_at_the_next_turn(
    db: Database,
) -> None:
    groups: list[object] = []

    async def scenario() -> None:
        await asyncio.gather(
            _later(db, "a", 0, groups),
            _later(db, "b", 0, groups, linger=False),
            _later(db, "c", 2, groups),
        )

    asyncio.run(scenario())
    assert groups[0] is not None and groups[0] is groups[1]
    assert groups[2] is not groups[0]
    assert _names_elsewhere(db) == ["a", "b", "c"]


def test_a_group_with_enough_work_commits_at_the_next_turn(db: Database) -> None:
    groups: list[object] = []
    enough = engine.GROUP_COMMIT_ENOUGH

    async def scenario() -> None:
        await asyncio.gather(
            *(_later(db, f"m{index}", 0, groups) for index in range(enough)),
            _later(db, "x", 2, groups),
        )

    asyncio.run(scenario())
    assert groups[0] is not None
    assert len({id(group) for group in groups[:enough]}) == 1
    assert groups[enough] is not groups[0]


def test_a_thread_waiting_for_the_writer_lock_makes_the_group_commit_at_once(
    db: Database,
) -> None:
    groups: list[object] = []
    writer = db._sqlite_writer
    assert writer is not None

    def thread_write() -> None:
        with db.write() as conn:
            _insert(conn, "thread")

    thread = threading.Thread(target=thread_write)

    def opens_the_group() -> str:
        work = _group_of(db, "a", groups)()
        thread.start()  # blocks on the writer lock this group holds
        deadline = time.monotonic() + 10
        while not writer.waited_for() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert writer.waited_for()
        return work

    async def scenario() -> None:
        await asyncio.gather(
            run_database_work(db, opens_the_group, linger=True), _later(db, "b", 2, groups)
        )

    asyncio.run(scenario())
    thread.join(timeout=10)
    assert groups[1] is not groups[0]
    assert sorted(_names_elsewhere(db)) == ["a", "b", "thread"]


def test_a_failing_piece_undoes_only_its_own_writes(db: Database) -> None:
    def fails() -> None:
        with db.write() as conn:
            _insert(conn, "undone")
            raise ValueError("refused")

    async def scenario() -> list[object]:
        return await asyncio.gather(
            run_database_work(db, _writer(db, "kept", [])),
            run_database_work(db, fails),
            run_database_work(db, _writer(db, "also kept", [])),
            return_exceptions=True,
        )

    first, second, third = asyncio.run(scenario())
    assert (first, third) == ("kept", "also kept")
    assert isinstance(second, ValueError)
    assert _names_elsewhere(db) == ["kept", "also kept"]


def test_a_read_sees_the_group_and_waits_for_its_commit(db: Database) -> None:
    def reads() -> list[str]:
        with db.read() as conn:
            return [row[0] for row in conn.execute(text("SELECT name FROM merchants"))]

    async def scenario() -> list[str]:
        write = asyncio.ensure_future(run_database_work(db, _writer(db, "written", [])))
        await asyncio.sleep(0)  # the write's turn: the group is open, not yet committed
        seen = await run_database_work(db, reads)
        # It saw the uncommitted write, so it answered only after the commit.
        assert _names_elsewhere(db) == ["written"]
        await write
        return seen

    assert asyncio.run(scenario()) == ["written"]


def test_a_failed_commit_runs_the_work_again_in_a_thread(db: Database) -> None:
    threads: dict[str, list[int]] = {"good": [], "bad": []}

    def good() -> str:
        threads["good"].append(threading.get_ident())
        with db.write() as conn:
            _insert(conn, "good")
        return "good"

    def bad() -> None:
        threads["bad"].append(threading.get_ident())
        with db.write() as conn:
            # Checked at COMMIT only: the whole group's commit fails.
            conn.execute(text("PRAGMA defer_foreign_keys = ON"))
            conn.execute(text("INSERT INTO user_projects (user_id, project_id) VALUES (7, 7)"))

    async def scenario() -> tuple[int, list[object]]:
        results = await asyncio.gather(
            run_database_work(db, good), run_database_work(db, bad), return_exceptions=True
        )
        return threading.get_ident(), results

    loop_thread, (good_result, bad_result) = asyncio.run(scenario())
    assert good_result == "good"
    assert isinstance(bad_result, IntegrityError)
    # Each ran on the loop, then again in a worker thread; the first attempt left nothing.
    for attempts in threads.values():
        assert len(attempts) == 2
        assert attempts[0] == loop_thread and attempts[1] != loop_thread
    assert _names_elsewhere(db) == ["good"]


def test_listeners_hear_of_a_group_only_after_it_committed(db: Database) -> None:
    heard: list[list[str]] = []
    db.listen("merchants", lambda channel: heard.append(_names_elsewhere(db)))

    def notifies() -> None:
        with db.write() as conn:
            _insert(conn, "announced")
            db.notify(conn, "merchants")

    async def scenario() -> None:
        await run_database_work(db, notifies)

    asyncio.run(scenario())
    assert heard == [["announced"]]


def test_a_write_on_the_loop_outside_database_work_fails_instead_of_hanging(
    db: Database,
) -> None:
    async def scenario() -> None:
        pending = asyncio.ensure_future(run_database_work(db, _writer(db, "grouped", [])))
        await asyncio.sleep(0)  # the group is open on this thread
        with pytest.raises(RuntimeError, match="run_database_work"):
            _writer(db, "direct", [])()
        await pending

    asyncio.run(scenario())
    assert _names_elsewhere(db) == ["grouped"]
