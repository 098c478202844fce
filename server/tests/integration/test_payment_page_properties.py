"""Property-based tests of ``GET /payment`` with hostile queries: every broken query gets the
documented 400 page (never a 500) and stores nothing; arbitrary values are judged the same way
by the Payment Page and by the parameter check service."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, urlencode

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from payplane import sign
from sqlalchemy import func, select
from starlette.testclient import TestClient

from payplane_server.acquirer import SimulatorAcquirer
from payplane_server.context import AppContext
from payplane_server.db.tables import payments
from payplane_server.domain.validation import KNOWN_PARAMS
from payplane_server.services.projects import create_project
from payplane_server.web import create_app

SECRET = "shop-secret-key"
REQUIRED = ["project_id", "payment_id", "payment_amount", "payment_currency", "customer_id"]
_ids = itertools.count()
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def client(ctx: AppContext) -> Iterator[TestClient]:
    ctx.extras["acquirer"] = SimulatorAcquirer(0)
    create_project(ctx, project_id=402, name="Shop", callback_url=None, secret=SECRET)
    with TestClient(create_app(ctx), raise_server_exceptions=False) as test_client:
        yield test_client


def base() -> dict[str, str]:
    return {
        "project_id": "402",
        "payment_id": f"p-{next(_ids)}",
        "payment_amount": "1999",
        "payment_currency": "USD",
        "customer_id": "c-1",
    }


def query(params: dict[str, str]) -> str:
    return urlencode(params) + "&signature=" + quote(sign(params, SECRET), safe="")


def raw_get(client: TestClient, path: str, query_string: str) -> tuple[int, str]:
    """GET through the ASGI interface directly: httpx refuses URLs over 64 KiB, while a
    server may well pass one on (uvicorn with httptools does)."""
    messages: list[dict[str, Any]] = []
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query_string.encode("latin-1"),
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
        "state": {},
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    anyio.run(client.app, scope, receive, send)  # type: ignore[arg-type]
    status = next(m["status"] for m in messages if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return status, body.decode("utf-8")


def payment_count(ctx: AppContext) -> int:
    with ctx.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(payments)).scalar_one())


# Each breaks a signed query in one of the ways the issue lists; all must be refused with 400.
Breaker = Callable[[dict[str, str]], str]
required = st.sampled_from(REQUIRED)
bad_amounts = st.one_of(
    st.just("0"),
    st.integers(max_value=-1).map(str),
    st.integers(min_value=2**63, max_value=2**80).map(str),
    st.from_regex(r"\A[0-9]*[.,eE+ x][0-9]*\Z"),
)
bad_dates = st.one_of(
    st.sampled_from(["2020-01-01T00:00:00", "2026-11-22T09:59:59+00:00", "1970-01-01"]),
    st.text(alphabet="0123456789-:TZ+ abc", max_size=30).filter(lambda t: len(t) < 10),
)


def signed(change: Callable[[dict[str, str]], None]) -> Breaker:
    def build(params: dict[str, str]) -> str:
        change(params)
        return query(params)

    return build


def breakers() -> st.SearchStrategy[Breaker]:
    def drop(name: str) -> Breaker:
        return signed(lambda p: p.pop(name))

    def set_(name: str, value: str) -> Breaker:
        return signed(lambda p: p.__setitem__(name, value))

    def raw_suffix(suffix: str) -> Breaker:
        return lambda params: query(params) + suffix

    return st.one_of(
        required.map(drop),
        required.map(lambda name: set_(name, "")),
        st.sampled_from(["project_id", "payment_amount"]).flatmap(
            lambda name: st.text(alphabet="abc-_ .", min_size=1).map(lambda v: set_(name, v))
        ),
        st.sampled_from([*REQUIRED, "payment_description"]).map(
            lambda name: set_(name, "x" * (64 * 1024 + 1))
        ),
        st.sampled_from([*REQUIRED, "payment_description", "unknown"]).flatmap(
            lambda name: st.text(min_size=0, max_size=5).map(lambda v: set_(name, v + ";" + v))
        ),
        bad_amounts.map(lambda v: set_("payment_amount", v)),
        st.sampled_from(["XXX", "XTS", "XAU", "ZZZ", "usd", "US", "USDD", " USD"]).map(
            lambda code: set_("payment_currency", code)
        ),
        bad_dates.map(lambda v: set_("best_before", v)),
        st.sampled_from(["%zz", "%f", "%", "%G0"]).flatmap(
            lambda bad: required.map(lambda name: raw_suffix(f"&{name}x=1{bad}"))
        ),
        st.sampled_from(["%ff", "%c3%28", "%ed%a0%80", "%80"]).map(
            lambda bad: raw_suffix(f"&payment_description={bad}")
        ),
        required.map(lambda name: raw_suffix(f"&{name}=again")),
        st.just(raw_suffix("&flag")),
    )


@FUZZ
@given(breaker=breakers())
def test_a_broken_query_gets_400_and_stores_nothing(
    client: TestClient, ctx: AppContext, breaker: Breaker
) -> None:
    text = breaker(base())
    status, page = raw_get(client, "/payment", text)
    assert status == 400, (text[:200], page[:500])
    assert "Invalid payment parameters" in page
    assert "Traceback" not in page
    status, answer = raw_get(client, "/params/check", re.sub(r"&signature=[^&]*", "", text))
    assert status == 400 and json.loads(answer)["errors"]
    assert payment_count(ctx) == 0


values = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["True", "None", "null", "USD", "ru", "https://a.example/", "2030-01-01"]),
)


@FUZZ
@given(name=st.sampled_from(sorted(KNOWN_PARAMS - {"frame_mode"})), value=values)
def test_any_value_gets_a_documented_answer_that_matches_the_check_service(
    client: TestClient, ctx: AppContext, name: str, value: str
) -> None:
    params = base()
    params[name] = value
    before = payment_count(ctx)
    response = client.get("/payment?" + query(params))
    check = client.get("/params/check?" + urlencode(params))
    assert response.status_code in (200, 400, 403, 409), response.text[:500]
    assert check.status_code in (200, 400)
    if response.status_code == 403:
        # Only an unusable project_id can leave the signature unverifiable.
        assert name == "project_id"
        return
    if check.status_code == 200:
        assert response.status_code in (200, 409)
    else:
        assert response.status_code == 400
        assert payment_count(ctx) == before
