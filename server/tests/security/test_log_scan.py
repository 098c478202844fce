"""No secret in any log: runs last and scans every log line of the test session (in-process
records captured by the session handler in ``conftest.py`` and every ``*.log`` file under the
session's temporary directory, i.e. the output of every server process the tests started) for
full card numbers, CVVs, Data API tokens, project and token secret keys and the master key.

It cannot pass vacuously: it first drives a payment with a full test PAN and CVV, a Data API
request and Gate requests through a real ``payplane-server serve`` process logging at debug
level into that directory, proves the detector flags planted secrets, proves the capture path
works with a canary record, and requires a non-trivial amount of scanned text."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from payplane import sign

from payplane_server.testing import free_port
from payplane_server.testing.customer import Customer, signed_url

pytestmark = pytest.mark.last

TEST_PANS = [
    "4000000000000077",
    "4111111111111111",
    "4000000000000119",
    "4000000000000135",
    "4539121411168251",
    "4314220000000056",
    "5413330000000019",
    "5544330000000045",
    "4477000000000006",
    "5252000000000004",
    "4000000000000200",
    "4000000000000218",
]
CVV = "737"
SECRET = "logscan-project-secret-7f3a"
_DIGITS = re.compile(r"(?<!\d)\d{13,19}(?!\d)")
_CVV = re.compile(r"cvv[\"'\s=:]+\d{3,4}", re.IGNORECASE)
_TOKEN = re.compile(r"token[\"'\s=:]+[A-Za-z0-9]{30}(?![A-Za-z0-9])")
_SOURCE_SECRET = re.compile(
    r"(?:SECRET|PASSWORD|secret|password)\w*\s*[=:]\s*\"([^\"\s]{8,})\"", re.MULTILINE
)


def _luhn(number: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(number)):
        digit = int(char)
        if index % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def _known_secrets() -> set[str]:
    """String secrets the test suite uses (constants in the test sources), plus the master key."""
    found = {base64.b64encode(fill * 32).decode() for fill in (b"k", b"o")}
    for path in Path(__file__).parents[1].rglob("*.py"):
        found.update(_SOURCE_SECRET.findall(path.read_text(encoding="utf-8")))
    return {value for value in found if len(value) >= 8}


def violations(text: str, secrets: set[str]) -> list[str]:
    """Every secret-looking thing in ``text``: Luhn-valid card numbers, CVVs, tokens, secrets."""
    found = [f"PAN {m}" for m in _DIGITS.findall(text) if _luhn(m)]
    found += [f"CVV {m}" for m in _CVV.findall(text)]
    found += [f"token {m}" for m in _TOKEN.findall(text)]
    found += [f"secret {s[:4]}..." for s in secrets if s in text]
    return found


def test_the_detector_flags_planted_secrets() -> None:
    secrets = {"a-long-secret-value"}
    assert violations("card 4000000000000077 ok", secrets)
    assert violations('{"cvv": "123"}', secrets)
    assert violations("token=" + "A" * 30, secrets)
    assert violations("x a-long-secret-value y", secrets)
    assert not violations("card 400000******0077 order 1234567890123 at 2026", secrets)


def _serve_and_pay(directory: Path) -> Path:
    """One real ``serve`` process at debug log level: a paid payment, a Data API request with
    a bad token and Gate requests. Returns its log file."""
    log = directory / "logscan-serve.log"
    port, api_port = free_port(), free_port()
    env = dict(
        os.environ,
        PAYPLANE_DATA_DIR=str(directory / "data"),
        PAYPLANE_LOG_LEVEL="debug",
        PAYPLANE_DATA_API_PLAIN_HTTP="1",
    )
    base = [sys.executable, "-m", "payplane_server"]
    subprocess.run(
        [
            *base,
            "project",
            "create",
            "--id",
            "777",
            "--name",
            "Logscan",
            "--secret",
            SECRET,
            "--callback-url",
            "http://127.0.0.1:9/cb",
        ],
        env=env,
        check=False,
        capture_output=True,
    )
    with log.open("w") as out:
        process = subprocess.Popen(
            [*base, "serve", "--port", str(port), "--data-api-port", str(api_port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and process.poll() is None, log.read_text()
            time.sleep(0.1)
        with httpx.Client(base_url=url, timeout=30) as client:
            params = {
                "project_id": "777",
                "payment_id": "logscan-1",
                "payment_amount": "500",
                "payment_currency": "EUR",
                "customer_id": "c-1",
            }
            customer = Customer(client)
            for payment_id, pan in (("logscan-1", TEST_PANS[0]), ("logscan-2", TEST_PANS[10])):
                _, page_token = customer.open(
                    signed_url(dict(params, payment_id=payment_id), SECRET)
                )
                assert page_token is not None
                assert customer.pay(page_token, pan, cvv=CVV).status_code < 500
            body = {"general": {"project_id": 777, "payment_id": "logscan-1"}}
            body["general"]["signature"] = sign(body, SECRET)
            client.post("/v2/payment/status", json=body)
            client.post("/v2/payment/clarification", content=b"{not json")
        api = {"token": "T" * 30}
        api["signature"] = sign(api, SECRET)
        httpx.post(f"http://127.0.0.1:{api_port}/v1/balance/get", json=api, timeout=30)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
    return log


def test_no_log_of_the_session_contains_a_secret_pan_cvv_or_token(
    log_capture: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    served = _serve_and_pay(log_capture)
    canary = "logscan-canary 400000******0077"
    logging.getLogger("payplane.logscan").warning(canary)
    for handler in logging.getLogger().handlers:
        handler.flush()
    secrets = _known_secrets() | {SECRET}
    scanned: dict[Path, int] = {}
    problems: list[str] = []
    for path in sorted(tmp_path_factory.getbasetemp().rglob("*.log")):
        text = path.read_text(encoding="utf-8", errors="replace")
        scanned[path] = len(text)
        problems += [f"{path.name}: {found}" for found in violations(text, secrets)]
    inprocess = log_capture / "inprocess.log"
    assert canary in inprocess.read_text(encoding="utf-8"), "the session handler captured nothing"
    assert served in scanned and scanned[served] > 0
    assert sum(scanned.values()) > 500, scanned
    assert len(secrets) >= 5
    report = {"files": len(scanned), "bytes": sum(scanned.values()), "violations": len(problems)}
    (log_capture / "report.json").write_text(json.dumps(report))
    assert problems == [], problems[:20]
