"""Every status of the Data API error table, and bad input of every kind: the documented
status in the exact envelope, never a 500 or a stack trace (SQLite, in process)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from payplane import sign
from starlette.testclient import TestClient

from payplane_server.config import Settings as ServerSettings
from payplane_server.context import AppContext
from payplane_server.db import migrate
from payplane_server.testing.data_api import DataApiWorld, build_world, signed_body
from payplane_server.web import create_data_api_app

MASTER_KEY = base64.b64encode(b"e" * 32).decode()
INTERVAL = {"from": "2026-11-20 00:00:00", "to": "2026-11-20 23:59:59"}
NAMES = {
    400: "Bad Request",
    401: "Authorization Required",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Error",
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, DataApiWorld]]:
    root: Path = tmp_path_factory.mktemp("errors")
    url = f"sqlite:///{root / 'payplane.db'}"
    migrate(url)
    settings = ServerSettings(
        data_dir=root,
        database_url=url,
        master_key=MASTER_KEY,
        rate_limit_per_minute=100_000,
        max_body_bytes=64 * 1024,
    )
    ctx = AppContext.create(settings)
    world = build_world(ctx)
    with TestClient(create_data_api_app(ctx), base_url="https://api.test") as client:
        yield client, world
    ctx.close()


@pytest.fixture
def client(setup: tuple[TestClient, DataApiWorld]) -> TestClient:
    return setup[0]


@pytest.fixture
def world(setup: tuple[TestClient, DataApiWorld]) -> DataApiWorld:
    return setup[1]


def assert_envelope(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"name", "message", "code", "status"}
    assert body["name"] == NAMES[status]
    assert body["code"] == "0" and body["status"] == str(status)
    assert isinstance(body["message"], str) and body["message"]
    for leak in ("Traceback", 'File "', "sqlalchemy", "Error:"):
        assert leak not in response.text
    return body


# 400: the body itself.


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"token=abc&signature=def", id="form-encoded"),
        pytest.param(b'{"token": ', id="truncated-json"),
        pytest.param(b"[1, 2, 3]", id="array"),
        pytest.param(b'"text"', id="string"),
        pytest.param(b"null", id="null"),
        pytest.param(b'{"a": NaN}', id="nan"),
        pytest.param(b'{"a": "\xff\xfe"}', id="not-utf8"),
        pytest.param('{"a": "é"}'.encode("latin-1"), id="latin-1"),
        pytest.param(b"[" * 30_000 + b"]" * 30_000, id="nested-30000"),
        pytest.param(b'{"a":' * 40 + b"1" + b"}" * 40, id="nested-40"),
        pytest.param(b'{"n": ' + b"9" * 5000 + b"}", id="huge-number"),
    ],
)
def test_a_body_that_is_not_a_json_object_gets_400(client: TestClient, raw: bytes) -> None:
    response = client.post(
        "/v1/balance/get",
        content=raw,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert_envelope(response, 400)


# 400: parameters of operations/get and get-by-payment, correctly signed.


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({}, id="no-interval"),
        pytest.param({"interval": "today"}, id="interval-string"),
        pytest.param({"interval": {"from": "2026-11-20 00:00:00"}}, id="no-to"),
        pytest.param({"interval": {"from": "20.11.2026", "to": "21.11.2026"}}, id="unparsable"),
        pytest.param(
            {"interval": {"from": "2026-13-40 00:00:00", "to": "2026-13-41 00:00:00"}},
            id="impossible-date",
        ),
        pytest.param({"interval": {"from": 1, "to": 2}}, id="numbers"),
        pytest.param(
            {"interval": {"from": "2026-11-21 00:00:00", "to": "2026-11-20 00:00:00"}},
            id="reversed",
        ),
        pytest.param(
            {"interval": {"from": "2020-01-01 00:00:00", "to": "2026-01-01 00:00:00"}},
            id="spanning-years",
        ),
        pytest.param(
            {
                "interval": {"from": "0001-01-01 00:00:00", "to": "0001-01-01 00:00:01"},
                "time_zone": "Asia/Tokyo",
            },
            id="before-year-one-in-utc",
        ),
        pytest.param(
            {"interval": {"from": "9999-12-31 23:59:59", "to": "9999-12-31 23:59:59"}},
            id="end-of-time",
        ),
        pytest.param(
            {"interval": {"from": "２０２６-11-20 00:00:00", "to": "2026-11-20 00:00:00"}},
            id="non-ascii-digits",
        ),
        pytest.param({"interval": INTERVAL, "time_zone": "Mars/Olympus"}, id="unknown-zone"),
        pytest.param({"interval": INTERVAL, "time_zone": "../../etc/passwd"}, id="zone-path"),
        pytest.param({"interval": INTERVAL, "time_zone": 3}, id="zone-number"),
        pytest.param({"interval": INTERVAL, "limit": 0}, id="limit-0"),
        pytest.param({"interval": INTERVAL, "limit": -1}, id="limit-negative"),
        pytest.param({"interval": INTERVAL, "limit": 1001}, id="limit-1001"),
        pytest.param({"interval": INTERVAL, "limit": 1.5}, id="limit-float"),
        pytest.param({"interval": INTERVAL, "limit": True}, id="limit-bool"),
        pytest.param({"interval": INTERVAL, "offset": -1}, id="offset-negative"),
        pytest.param({"interval": INTERVAL, "offset": 10**30}, id="offset-huge"),
        pytest.param({"interval": INTERVAL, "project_ids": "101"}, id="project-ids-string"),
        pytest.param({"interval": INTERVAL, "project_ids": []}, id="project-ids-empty"),
        pytest.param({"interval": INTERVAL, "project_ids": [{"id": 1}]}, id="project-ids-objects"),
        pytest.param({"interval": INTERVAL, "statuses": ["paid"]}, id="unknown-status"),
        pytest.param({"interval": INTERVAL, "operation_types": ["refund"]}, id="unknown-type"),
        pytest.param({"interval": INTERVAL, "fields": ["password_hash"]}, id="unknown-field"),
        pytest.param({"interval": INTERVAL, "fields": []}, id="no-fields"),
    ],
)
def test_bad_operations_parameters_get_400(
    client: TestClient, world: DataApiWorld, params: dict[str, Any]
) -> None:
    response = client.post("/v1/v1/operations/get", content=world.body("admin", params))
    assert_envelope(response, 400)


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"payment_id": "seed-1"}, id="no-project"),
        pytest.param({"project_id": 101}, id="no-payment"),
        pytest.param({"project_id": "abc", "payment_id": "seed-1"}, id="project-not-integer"),
        pytest.param({"project_id": 101, "payment_id": ""}, id="empty-payment"),
        pytest.param({"project_id": 101, "payment_id": ["seed-1"]}, id="payment-array"),
    ],
)
def test_bad_get_by_payment_parameters_get_400(
    client: TestClient, world: DataApiWorld, params: dict[str, Any]
) -> None:
    response = client.post("/v1/operations/get-by-payment", content=world.body("admin", params))
    assert_envelope(response, 400)


# 401: token and signature.


def test_missing_token_gets_401(client: TestClient) -> None:
    body = assert_envelope(client.post("/v1/balance/get", content=b"{}"), 401)
    assert "token" in body["message"]


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("A" * 29, id="29-chars"),
        pytest.param("A" * 31, id="31-chars"),
        pytest.param("A" * 29 + "_", id="underscore"),
        pytest.param("Ä" * 30, id="non-ascii"),
        pytest.param("A" * 30, id="well-formed-unknown"),
        pytest.param(12345, id="number"),
        pytest.param(["A" * 30], id="array"),
    ],
)
def test_a_wrong_token_gets_401(client: TestClient, world: DataApiWorld, token: Any) -> None:
    body: dict[str, Any] = {"token": token}
    body["signature"] = sign(body, world.tokens["admin"].secret)
    assert_envelope(client.post("/v1/balance/get", content=json.dumps(body)), 401)


@pytest.mark.parametrize(
    "signature",
    [
        pytest.param(None, id="missing"),
        pytest.param("", id="empty"),
        pytest.param("not base64!", id="garbage"),
        pytest.param(sign({"x": "y"}, "other"), id="of-other-params"),
        pytest.param(123, id="number"),
    ],
)
def test_a_missing_or_wrong_signature_gets_401(
    client: TestClient, world: DataApiWorld, signature: Any
) -> None:
    body: dict[str, Any] = {"token": world.tokens["admin"].token}
    if signature is not None:
        body["signature"] = signature
    assert_envelope(client.post("/v1/balance/get", content=json.dumps(body)), 401)


def test_a_signature_made_with_another_key_gets_401(
    client: TestClient, world: DataApiWorld
) -> None:
    wrong = signed_body({}, world.tokens["admin"].token, world.tokens["finance"].secret)
    assert_envelope(client.post("/v1/balance/get", content=wrong), 401)


def test_a_parameter_changed_after_signing_gets_401(
    client: TestClient, world: DataApiWorld
) -> None:
    body = json.loads(world.body("finance", {"interval": INTERVAL, "project_ids": [101]}))
    body["project_ids"] = [102]
    assert_envelope(client.post("/v1/operations/get", content=json.dumps(body)), 401)


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/balance/get", {"project_ids": [900]}),
        ("/v1/operations/get", {"interval": INTERVAL, "project_ids": [101, 900]}),
        ("/v1/operations/get-by-payment", {"project_id": 900, "payment_id": "seed-1"}),
        ("/v1/operations/get", {"interval": INTERVAL, "project_ids": [424242]}),
    ],
)
def test_projects_of_another_merchant_get_401_naming_the_project(
    client: TestClient, world: DataApiWorld, path: str, params: dict[str, Any]
) -> None:
    body = assert_envelope(client.post(path, content=world.body("admin", params)), 401)
    assert any(str(p) in body["message"] for p in (900, 424242))


def test_a_finance_user_gets_401_for_a_project_of_its_merchant_not_granted(
    client: TestClient, world: DataApiWorld
) -> None:
    params = {"interval": INTERVAL, "project_ids": [102]}
    body = assert_envelope(
        client.post("/v1/operations/get", content=world.body("finance", params)), 401
    )
    assert "102" in body["message"]


# 404, 405, 413.


@pytest.mark.parametrize("path", ["/v1/payments/get", "/v2/balance/get", "/", "/v1/balance/get/"])
def test_unknown_endpoints_get_404(client: TestClient, world: DataApiWorld, path: str) -> None:
    assert_envelope(client.post(path, content=world.body("admin")), 404)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_methods_other_than_post_get_405(client: TestClient, method: str) -> None:
    response = client.request(method, "/v1/v1/balance/get")
    assert_envelope(response, 405)
    assert response.headers["allow"] == "POST"


def test_an_announced_oversized_body_gets_413(client: TestClient, world: DataApiWorld) -> None:
    big = world.body("admin", {"padding": "x" * 70_000})
    assert_envelope(client.post("/v1/balance/get", content=big), 413)


def test_a_streamed_oversized_body_gets_413(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(100):
            yield b" " * 1024

    assert_envelope(client.post("/v1/balance/get", content=chunks()), 413)


# 500: a real failure (the balances table is gone) shows nothing of the platform's insides.


def test_an_internal_failure_gets_a_bare_500(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'broken.db'}"
    migrate(url)
    ctx = AppContext.create(
        ServerSettings(data_dir=tmp_path, database_url=url, master_key=MASTER_KEY)
    )
    try:
        world = build_world(ctx, seed=False)
        with ctx.db.write() as conn:
            conn.exec_driver_sql("DROP TABLE balances")
        app = create_data_api_app(ctx)
        with TestClient(app, raise_server_exceptions=False) as broken:
            response = broken.post("/v1/balance/get", content=world.body("admin"))
        body = assert_envelope(response, 500)
        assert "balances" not in body["message"]
    finally:
        ctx.close()


# Whatever JSON a client signs, the answer is 200 or a documented 4xx, never a 500.

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
    | st.sampled_from(["2026-11-20 10:00:00", "UTC", "Europe/Berlin", "success", "sale", "code"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(["from", "to", "x"]), children, max_size=3)
    ),
    max_leaves=12,
)
parameters = st.dictionaries(
    st.sampled_from(
        [
            "interval",
            "time_zone",
            "project_ids",
            "operation_types",
            "statuses",
            "fields",
            "limit",
            "offset",
            "project_id",
            "payment_id",
            "extra",
        ]
    ),
    json_values,
    max_size=6,
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    path=st.sampled_from(
        ["/v1/balance/get", "/v1/operations/get", "/v1/operations/get-by-payment"]
    ),
    params=parameters,
)
def test_any_signed_parameters_get_a_documented_answer(
    client: TestClient, world: DataApiWorld, path: str, params: dict[str, Any]
) -> None:
    response = client.post(path, content=world.body("admin", params))
    assert response.status_code in (200, 400, 401, 404), response.text
    if response.status_code != 200:
        assert_envelope(response, response.status_code)
