"""DataApi against a real local HTTPS server (certificates made at test time with trustme)."""

from __future__ import annotations

import json
from typing import Any, Callable
from urllib.parse import urlsplit

import pytest

from payplane import (
    DataApi,
    DataApiError,
    InvalidParameter,
    InvalidSignature,
    ServiceUnreachable,
    UnexpectedResponse,
    sign,
    verify,
)

TOKEN = "T" * 30
SECRET = "token-secret"
OPERATIONS = [
    {
        "operation_id": i,
        "payment_id": f"p-{i}",
        "operation_type": "sale",
        "sum_initial": {"amount": i, "currency": "USD"},
    }
    for i in range(1, 6)
]


class FakeClock:
    """Monotonic time that moves only when the client sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def signed(body: dict[str, Any], secret: str = SECRET) -> dict[str, Any]:
    return {**body, "signature": sign(body, secret)}


def data_api_route(request: Any) -> tuple[int, Any]:
    """A Data API that checks token and signature, and signs what it answers."""
    body = request.json()
    if body.get("token") != TOKEN or not verify(body, body.get("signature"), SECRET):
        return 401, {
            "name": "Authorization Required",
            "message": "Wrong token or signature",
            "code": "0",
            "status": "401",
        }
    path = urlsplit(request.path).path
    if path == "/v1/v1/balance/get":
        return 200, signed({"balance": [{"name": "Shop_balance_USD", "USD": "100500"}]})
    if path == "/v1/v1/operations/get":
        if "interval" not in body:
            return 400, {
                "name": "Bad Request",
                "message": "interval is required",
                "code": "0",
                "status": "400",
            }
        offset, limit = body["offset"], body["limit"]
        page = OPERATIONS[offset : offset + limit]
        return 200, signed(
            {"operations": page, "total": len(OPERATIONS), "limit": limit, "offset": offset}
        )
    if path == "/v1/v1/operations/get-by-payment":
        found = [op for op in OPERATIONS if op["payment_id"] == body["payment_id"]]
        return 200, signed({"operations": found})
    return 404, {"name": "Not Found", "message": path, "code": "0", "status": "404"}


@pytest.fixture
def https_api(local_server: Callable[..., Any], tls_ca: tuple[Any, str]) -> tuple[Any, str]:
    ca, ca_file = tls_ca
    return local_server(data_api_route, tls=ca), ca_file


def client(
    url: str, ca_file: str | None = None, clock: FakeClock | None = None, **options: Any
) -> DataApi:
    clock = clock or FakeClock()
    return DataApi(TOKEN, SECRET, url + "/v1", ca_file, clock=clock, sleep=clock.sleep, **options)


def test_balance_posts_a_signed_request_over_tls_to_the_doubled_v1_path(
    https_api: tuple[Any, str],
) -> None:
    server, ca_file = https_api
    assert client(server.url, ca_file).balance() == [{"name": "Shop_balance_USD", "USD": "100500"}]
    request = server.requests[0]
    assert (request.method, request.path) == ("POST", "/v1/v1/balance/get")
    body = json.loads(request.body)
    assert body["token"] == TOKEN
    assert verify(body, body["signature"], SECRET)
    assert request.headers["host"].startswith("127.0.0.1")
    assert request.headers["content-type"].startswith("application/json")


def test_operations_iterates_every_page_by_limit_and_offset(https_api: tuple[Any, str]) -> None:
    server, ca_file = https_api
    api = client(server.url, ca_file)
    operations = list(
        api.operations("2026-01-01 00:00:00", "2026-12-31 23:59:59", time_zone="UTC", page_size=2)
    )
    assert operations == OPERATIONS
    sent = [json.loads(r.body) for r in server.requests]
    assert [(b["offset"], b["limit"]) for b in sent] == [(0, 2), (2, 2), (4, 2)]
    assert sent[0]["interval"] == {"from": "2026-01-01 00:00:00", "to": "2026-12-31 23:59:59"}
    assert sent[0]["time_zone"] == "UTC"


def test_operations_renders_datetimes_and_lists(https_api: tuple[Any, str]) -> None:
    from datetime import datetime

    server, ca_file = https_api
    api = client(server.url, ca_file)
    list(
        api.operations(
            datetime(2026, 1, 2, 3, 4, 5),
            datetime(2026, 2, 1),
            project_ids=(402,),
            statuses=["success"],
        )
    )
    body = json.loads(server.requests[0].body)
    assert body["interval"] == {"from": "2026-01-02 03:04:05", "to": "2026-02-01 00:00:00"}
    assert body["project_ids"] == [402]
    assert body["statuses"] == ["success"]
    assert "fields" not in body


def test_operations_by_payment_returns_that_payments_operations(https_api: tuple[Any, str]) -> None:
    server, ca_file = https_api
    assert client(server.url, ca_file).operations_by_payment(402, "p-3") == [OPERATIONS[2]]
    body = json.loads(server.requests[0].body)
    assert (body["project_id"], body["payment_id"]) == (402, "p-3")
    assert server.requests[0].path == "/v1/v1/operations/get-by-payment"


def test_the_error_envelope_becomes_data_api_error(https_api: tuple[Any, str]) -> None:
    server, ca_file = https_api
    api = DataApi(TOKEN, "wrong-secret", server.url + "/v1", ca_file)
    with pytest.raises(DataApiError) as caught:
        api.balance()
    assert (caught.value.status, caught.value.name, caught.value.message) == (
        401,
        "Authorization Required",
        "Wrong token or signature",
    )


def test_a_wrong_response_signature_raises_invalid_signature(
    local_server: Callable[..., Any], tls_ca: tuple[Any, str]
) -> None:
    ca, ca_file = tls_ca
    server = local_server(lambda r: (200, signed({"balance": []}, "someone-else")), tls=ca)
    with pytest.raises(InvalidSignature, match="not signed by this token"):
        client(server.url, ca_file).balance()


def test_an_unsigned_or_altered_response_raises_invalid_signature(
    local_server: Callable[..., Any],
) -> None:
    answers = iter(
        [(200, {"balance": []}), (200, {**signed({"balance": []}), "balance": [{"USD": "1"}]})]
    )
    server = local_server(lambda r: next(answers))
    api = client(server.url)
    with pytest.raises(InvalidSignature, match="no signature"):
        api.balance()
    with pytest.raises(InvalidSignature):
        api.balance()


def test_a_429_waits_for_retry_after_and_then_succeeds(local_server: Callable[..., Any]) -> None:
    answers = iter(
        [
            (
                429,
                {"name": "Too Many Requests", "message": "slow down", "code": "0", "status": "429"},
                {"Retry-After": "7"},
            ),
            (
                429,
                {"name": "Too Many Requests", "message": "slow down", "code": "0", "status": "429"},
                {"Retry-After": "1"},
            ),
            (200, signed({"balance": []})),
        ]
    )
    server = local_server(lambda r: next(answers))
    clock = FakeClock()
    assert client(server.url, clock=clock).balance() == []
    assert clock.sleeps == [7.0, 3.0]  # Retry-After, but never less than three seconds
    assert len(server.requests) == 3


def test_a_429_without_retry_after_waits_three_seconds(local_server: Callable[..., Any]) -> None:
    answers = iter([(429, ""), (200, signed({"balance": []}))])
    server = local_server(lambda r: next(answers))
    clock = FakeClock()
    client(server.url, clock=clock).balance()
    assert clock.sleeps == [3.0]


def test_retries_after_429_are_bounded(local_server: Callable[..., Any]) -> None:
    envelope = {"name": "Too Many Requests", "message": "slow down", "code": "0", "status": "429"}
    server = local_server(lambda r: (429, envelope, {"Retry-After": "4"}))
    clock = FakeClock()
    with pytest.raises(DataApiError) as caught:
        client(server.url, clock=clock, max_retries=2).balance()
    assert caught.value.status == 429
    assert len(server.requests) == 3
    assert clock.sleeps == [4.0, 4.0]


def test_a_429_asking_for_too_long_a_wait_is_raised_at_once(
    local_server: Callable[..., Any],
) -> None:
    server = local_server(lambda r: (429, "", {"Retry-After": "3600"}))
    clock = FakeClock()
    with pytest.raises(DataApiError):
        client(server.url, clock=clock, max_retry_wait=60).balance()
    assert clock.sleeps == []
    assert len(server.requests) == 1


def test_the_client_paces_itself_under_60_requests_a_minute(
    local_server: Callable[..., Any],
) -> None:
    clock = FakeClock()
    arrivals: list[float] = []

    def route(request: Any) -> tuple[int, Any]:
        arrivals.append(clock.now)  # when the request reached the server, in client time
        return data_api_route(request)

    server = local_server(route)
    api = client(server.url, clock=clock)
    for _ in range(125):
        api.balance()
    assert len(server.requests) == 125
    # In no window of 60 seconds did more than 60 requests arrive (there is a second of margin).
    for i, start in enumerate(arrivals):
        assert sum(1 for t in arrivals[i:] if t < start + 60) <= 60
    assert arrivals[60] - arrivals[0] >= 61
    assert clock.now - 1000.0 >= 122  # two pauses of about a minute each


def test_clients_of_one_token_share_one_pace(local_server: Callable[..., Any]) -> None:
    server = local_server(data_api_route)
    clock = FakeClock()
    first, second = client(server.url, clock=clock), client(server.url, clock=clock)
    for _ in range(30):
        first.balance()
        second.balance()
    assert clock.sleeps == []
    second.balance()
    assert clock.sleeps and clock.sleeps[0] > 50


def test_requests_may_run_five_minutes() -> None:
    assert DataApi(TOKEN, SECRET).timeout >= 300


def test_tls_needs_a_trusted_certificate(https_api: tuple[Any, str]) -> None:
    server, _ = https_api
    with pytest.raises(
        ServiceUnreachable, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"
    ):
        client(server.url).balance()


def test_an_unreachable_data_api_raises_service_unreachable(unused_url: str) -> None:
    with pytest.raises(ServiceUnreachable):
        client(unused_url).balance()


@pytest.mark.parametrize(
    "answer", [(200, "not json"), (200, [1]), (502, "<html>bad gateway</html>")]
)
def test_answers_that_are_not_json_objects_raise_library_errors(
    local_server: Callable[..., Any], answer: tuple[int, Any]
) -> None:
    server = local_server(lambda r: answer)
    with pytest.raises((UnexpectedResponse, DataApiError)) as caught:
        client(server.url).balance()
    if answer[0] == 502:
        assert isinstance(caught.value, DataApiError) and caught.value.status == 502


def test_bad_arguments_are_refused_before_any_request() -> None:
    with pytest.raises(InvalidParameter):
        DataApi("", SECRET)
    with pytest.raises(InvalidParameter):
        DataApi(TOKEN, SECRET, "ftp://x")
    with pytest.raises(InvalidParameter):
        list(DataApi(TOKEN, SECRET).operations("a", "b", page_size=0))


def test_the_token_is_not_shown_whole_in_repr() -> None:
    assert TOKEN not in repr(DataApi(TOKEN, SECRET))
