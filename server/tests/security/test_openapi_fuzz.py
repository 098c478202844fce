"""schemathesis against a live server (real uvicorn on loopback, SQLite): every documented
operation of ``/openapi.json`` gets bounded, derandomised generated requests, positive and
negative, and every answer must be a documented status with a body of the documented shape,
never a 5xx."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.db import Database, migrate
from payplane_server.services.projects import create_project
from payplane_server.testing import LiveServer
from payplane_server.testing.clarification import waiting_payment
from payplane_server.web import create_app
from payplane_server.web.app import create_data_api_app

MAX_EXAMPLES = 10
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@dataclass
class Platform:
    page_url: str
    api_url: str
    document: dict[str, Any]


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    tmp: Path = tmp_path_factory.mktemp("openapi")
    url = f"sqlite:///{tmp / 'payplane.db'}"
    migrate(url)
    key = base64.b64encode(b"o" * 32).decode()
    ctx = AppContext.create(
        Settings(data_dir=tmp, database_url=url, master_key=key, data_api_plain_http=True),
        db=Database(url),
    )
    create_project(ctx, project_id=402, name="Shop", callback_url=None, secret="fuzz-secret")
    waiting_payment(ctx, project_id=402, payment_id="p-1")
    with LiveServer(create_app(ctx)) as page, LiveServer(create_data_api_app(ctx)) as api:
        document = httpx.get(page.url + "/openapi.json").json()
        assert httpx.get(api.url + "/openapi.json").json() == document
        yield Platform(page.url, api.url, document)
    ctx.close()


def _operations(document: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in ("get", "post")
    ]


def test_the_document_lists_gate_params_check_and_both_data_api_forms(
    platform: Platform,
) -> None:
    operations = set(_operations(platform.document))
    assert ("POST", "/v2/payment/clarification") in operations
    assert ("POST", "/v2/payment/status") in operations
    assert {("GET", "/params/check"), ("POST", "/params/check")} <= operations
    assert ("GET", "/v1/params/check") in operations
    for path in ("balance/get", "operations/get", "operations/get-by-payment"):
        assert ("POST", f"/v1/v1/{path}") in operations
        assert ("POST", f"/v1/{path}") in operations


OPERATIONS = [
    ("POST", "/v2/payment/clarification"),
    ("POST", "/v2/payment/status"),
    ("GET", "/params/check"),
    ("POST", "/params/check"),
    ("GET", "/v1/params/check"),
    ("POST", "/v1/v1/balance/get"),
    ("POST", "/v1/v1/operations/get"),
    ("POST", "/v1/operations/get"),
    ("POST", "/v1/v1/operations/get-by-payment"),
]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_generated_requests_get_documented_answers_and_never_a_5xx(
    platform: Platform, method: str, path: str, mode: GenerationMode
) -> None:
    schema = schemathesis.openapi.from_dict(platform.document)
    operation = schema[path][method]
    tags = platform.document["paths"][path][method.lower()]["tags"]
    base_url = platform.api_url if "data-api" in tags else platform.page_url
    seen: list[int] = []
    session = requests.Session()

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        response = case.call(base_url=base_url, session=session, timeout=30)
        seen.append(response.status_code)
        case.validate_response(response, checks=CHECKS)

    run()
    assert seen, "schemathesis generated no request"
    assert all(status < 500 for status in seen)
