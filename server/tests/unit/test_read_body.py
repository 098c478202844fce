"""``read_body``: the whole body within the size limit and the deadline, and nothing else."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from starlette.types import Message, Scope

from payplane_server.web.middleware import BodyRefused, read_body


def _scope(length: int | None = None) -> Scope:
    headers = [(b"host", b"example.test")]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {"type": "http", "method": "POST", "headers": headers}


def _chunks(*parts: bytes, pause: float = 0.0) -> Callable[[], Awaitable[Message]]:
    """A receive() giving ``parts`` in turn, each after ``pause`` seconds."""
    remaining = list(parts)

    async def receive() -> Message:
        await asyncio.sleep(pause)
        chunk = remaining.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(remaining)}

    return receive


def test_the_chunks_are_joined() -> None:
    body = asyncio.run(read_body(_scope(9), _chunks(b"abc", b"def", b"ghi"), 100, 5.0))
    assert body == b"abcdefghi"


def test_an_announced_body_over_the_limit_is_refused_before_reading() -> None:
    async def receive() -> Message:
        raise AssertionError("nothing may be read")

    with pytest.raises(BodyRefused) as refused:
        asyncio.run(read_body(_scope(101), receive, 100, 5.0))
    assert refused.value.status == 413


def test_a_streamed_body_over_the_limit_is_refused() -> None:
    with pytest.raises(BodyRefused) as refused:
        asyncio.run(read_body(_scope(), _chunks(b"x" * 60, b"x" * 60), 100, 5.0))
    assert refused.value.status == 413


def test_a_client_that_goes_away_gives_none() -> None:
    async def receive() -> Message:
        return {"type": "http.disconnect"}

    assert asyncio.run(read_body(_scope(5), receive, 100, 5.0)) is None


def test_a_body_slower_than_the_deadline_is_refused_with_408() -> None:
    async def scenario() -> tuple[int, bool]:
        with pytest.raises(BodyRefused) as refused:
            await read_body(_scope(), _chunks(b"a", b"b", b"c", pause=0.2), 100, 0.3)
        task = asyncio.current_task()
        assert task is not None
        # The deadline's cancellation was taken back: the task goes on normally.
        await asyncio.sleep(0)
        return refused.value.status, task.cancelling() == 0

    assert asyncio.run(scenario()) == (408, True)


def test_the_deadline_is_taken_back_once_the_body_is_in() -> None:
    async def scenario() -> bytes | None:
        body = await read_body(_scope(), _chunks(b"a", b"b"), 100, 0.05)
        await asyncio.sleep(0.15)  # well past the deadline: nothing may cancel us now
        return body

    assert asyncio.run(scenario()) == b"ab"


def test_a_cancellation_from_elsewhere_is_not_taken_for_the_deadline() -> None:
    async def scenario() -> None:
        reading = asyncio.ensure_future(
            read_body(_scope(), _chunks(b"a", b"b", pause=10.0), 100, 30.0)
        )
        await asyncio.sleep(0.05)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading

    asyncio.run(scenario())
