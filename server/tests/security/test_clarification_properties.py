"""Property-based tests of ``POST /v2/payment/clarification`` with hostile bodies: any JSON
(signed properly or not) gets a Gate answer of the documented shape, never a 500, and a refused
request changes nothing (status, wait deadline, callbacks)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from payplane import sign
from sqlalchemy import select
from starlette.testclient import TestClient

from payplane_server.context import AppContext
from payplane_server.db.tables import payments
from payplane_server.services.projects import create_project
from payplane_server.testing.clarification import callback_bodies, waiting_payment
from payplane_server.web import create_app

PROJECT = 402
SECRET = "clarify-secret"
URL = "/v2/payment/clarification"
_ids = itertools.count()
FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
names = st.sampled_from(
    ["customer", "avs_data", "psu_consent", "psu_consent_text", "avs_post_code"]
) | st.text(max_size=12)
values = (
    st.sampled_from(["1", "0", "", "yes", "' OR 1=1 --", "<script>x</script>", "\x00", "9" * 300])
    | st.text(max_size=40)
    | json_values
)
additional = st.dictionaries(
    names, st.dictionaries(names, values, max_size=3) | json_values, max_size=3
)


@pytest.fixture
def client(ctx: AppContext) -> Iterator[TestClient]:
    create_project(ctx, project_id=PROJECT, name="Shop", callback_url=None, secret=SECRET)
    with TestClient(create_app(ctx), raise_server_exceptions=False) as test_client:
        yield test_client


def _snapshot(ctx: AppContext, pk: int) -> tuple[Any, ...]:
    with ctx.db.read() as conn:
        row = conn.execute(select(payments).where(payments.c.id == pk)).one()
    return (tuple(row), len(callback_bodies(ctx, pk)))


def _assert_gate_shape(response: Any) -> dict[str, Any]:
    assert response.status_code < 500, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    if response.status_code == 200:
        assert body["status"] in ("success", "awaiting clarification")
        assert body["project_id"] == PROJECT
    else:
        assert set(body) == {"status", "code", "message", "errors"}
        assert body["status"] == "error" and isinstance(body["code"], str)
    return dict(body)


@FUZZ
@given(data=additional)
@example(data={})
@example(data={"customer": {"psu_consent": "1"}})
@example(data={"customer": {"psu_consent": 1}})
def test_signed_arbitrary_additional_data_is_answered_and_refusals_change_nothing(
    ctx: AppContext, client: TestClient, data: dict[str, Any]
) -> None:
    payment_id = f"p-{next(_ids)}"
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id=payment_id)
    before = _snapshot(ctx, pk)
    body: dict[str, Any] = {
        "general": {"project_id": PROJECT, "payment_id": payment_id},
        "additional_data": data,
    }
    try:
        body["general"]["signature"] = sign(body, SECRET)
    except (TypeError, ValueError):
        body["general"]["signature"] = "unsignable"
    response = client.post(URL, content=json.dumps(body))
    answer = _assert_gate_shape(response)
    if response.status_code != 200:
        assert _snapshot(ctx, pk) == before
    elif answer["status"] == "awaiting clarification":
        assert answer["clarification_fields"]


@FUZZ
@given(body=json_values)
def test_any_json_body_is_refused_with_the_gate_error_and_changes_nothing(
    ctx: AppContext, client: TestClient, body: Any
) -> None:
    pk = waiting_payment(ctx, project_id=PROJECT, payment_id=f"p-{next(_ids)}")
    before = _snapshot(ctx, pk)
    response = client.post(URL, content=json.dumps(body))
    _assert_gate_shape(response)
    assert response.status_code in (400, 401)
    assert _snapshot(ctx, pk) == before


@FUZZ
@given(raw=st.binary(max_size=200))
def test_arbitrary_bytes_get_a_400_never_a_500(client: TestClient, raw: bytes) -> None:
    response = client.post(URL, content=raw)
    _assert_gate_shape(response)
    assert response.status_code == 400
