"""Micro-benchmarks of the `payplane` client library against its baselines (issue 2).

    uv run python bench/sdk/run.py [--repeats 9] [--seconds 0.2]

Each figure is measured against baselines in the same run on the same machine: raw
``hmac.digest`` over the pre-built signing string (the ceiling for signing) and the official
Python library of the original platform (``ecommpay-sdk``, ``payment_page_sdk``) doing the
same work. Calls of ours and of the baseline are interleaved, repeat by repeat, so that load
from other processes hits both alike; each figure is the median over the repeats. Time is the
CPU time of this process (``time.process_time``): on a shared machine, wall-clock time mostly
measures the other tenants.

Targets: signing a 9-parameter Payment Page payload at most 2x raw HMAC and at least 2x faster
than the official library; a signed URL at least 3x faster; parsing and verifying a 40-field
callback at least 3x faster.
"""

from __future__ import annotations

import argparse
import hmac
import json
import platform
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import payplane
from payment_page_sdk.gate import Gate as TheirGate
from payment_page_sdk.payment import Payment as TheirPayment
from payment_page_sdk.signature_handler import SignatureHandler

SECRET = "bench-secret-key-0123456789"


def payment_params() -> dict[str, Any]:
    """A 9-parameter Payment Page payload."""
    return {
        "project_id": 402,
        "payment_id": "order-123456",
        "payment_amount": 1001,
        "payment_currency": "USD",
        "customer_id": "customer-77",
        "payment_description": "Order 123456",
        "language_code": "en",
        "interface_type": '{"id": 50}',
        "best_before": "2030-01-01T00:00:00+00:00",
    }


def callback_body() -> str:
    """A signed callback of 40 fields (leaf values), as it arrives on the wire."""
    body: dict[str, Any] = {
        "project_id": 402,
        "payment": {
            "id": "order-123456",
            "type": "purchase",
            "status": "success",
            "date": "2026-11-22T10:00:00+0000",
            "method": "card",
            "sum": {"amount": 1001, "currency": "USD"},
            "description": "Success",
            "is_new_attempts_available": False,
            "attempts_timeout": 0,
        },
        "account": {
            "number": "400000******0077",
            "type": "visa",
            "card_holder": "JOHN DOE",
            "expiry_month": "12",
            "expiry_year": "2030",
        },
        "customer": {"id": "customer-77", "ip_address": "127.0.0.1", "country": "US"},
        "operation": {
            "id": 17,
            "type": "sale",
            "status": "success",
            "date": "2026-11-22T10:00:00+0000",
            "created_date": "2026-11-22T09:59:58+0000",
            "request_id": "a1b2c3d4e5",
            "sum_initial": {"amount": 1001, "currency": "USD"},
            "sum_converted": {"amount": 1001, "currency": "USD"},
            "code": "0",
            "message": "Success",
            "eci": "05",
            "provider": {
                "id": 1,
                "payment_id": "prov-991",
                "auth_code": "A1B2C3",
                "endpoint_id": 1,
                "date": "2026-11-22T10:00:00+0000",
            },
        },
        "recurring": {"id": 0, "status": "", "type": ""},
    }
    fields = len(payplane.signing_string(body).split(";"))
    assert fields == 40, fields
    body["signature"] = payplane.sign(body, SECRET)
    return json.dumps(body)


BEST_BEFORE = datetime(2030, 1, 1, tzinfo=UTC)


def their_payment(params: dict[str, Any]) -> TheirPayment:
    payment = TheirPayment(str(params["project_id"]), params["payment_id"])
    for name, value in params.items():
        if name not in ("project_id", "payment_id", "interface_type"):
            setattr(payment, name, BEST_BEFORE if name == "best_before" else value)
    return payment


def our_payment(params: dict[str, Any]) -> payplane.Payment:
    payment = payplane.Payment(params["project_id"], params["payment_id"])
    for name, value in params.items():
        if name not in ("project_id", "payment_id", "interface_type"):
            payment.set_param(name, BEST_BEFORE if name == "best_before" else value)
    return payment


def per_call(function: Callable[[], object], seconds: float) -> Callable[[], float]:
    """A measurement: nanoseconds per call over a batch lasting about ``seconds``."""
    timer = timeit.Timer(function, timer=time.process_time)
    number, _ = timer.autorange()
    number = max(1, int(number * seconds / 0.2))

    def measure() -> float:
        return timer.timeit(number) / number * 1e9

    return measure


def interleaved(
    functions: dict[str, Callable[[], object]], repeats: int, seconds: float
) -> dict[str, float]:
    measures = {name: per_call(function, seconds) for name, function in functions.items()}
    samples: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, measure in measures.items():
            samples[name].append(measure())
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one batch")
    args = parser.parse_args()

    params = payment_params()
    prebuilt = payplane.signing_string(params).encode()
    key = SECRET.encode()
    handler = SignatureHandler(SECRET)
    assert payplane.sign(params, SECRET) == handler.sign(params)

    gate = payplane.Gate(SECRET, base_url="https://pay.example")
    theirs = TheirGate(SECRET, "https://pay.example/payment")
    ours_p, their_p = our_payment(params), their_payment(params)
    body = callback_body()
    assert (
        gate.handle_callback(body).get_payment_id() == theirs.handle_callback(body).get_payment_id()
    )

    print(f"payplane bench/sdk — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(
        f"python {platform.python_version()} on {platform.machine()}, {platform.processor() or '?'}"
    )
    print(f"median of {args.repeats} interleaved repeats, ns per call\n")

    failures = []

    def report(title: str, ours: float, base: float, base_name: str, target: str, ok: bool) -> None:
        ratio = ours / base
        print(
            f"  ours {ours:9.0f} ns | {base_name} {base:9.0f} ns | ratio ours/base {ratio:5.2f}"
            f"  (x{base / ours:4.2f} faster)  target {target}: {'met' if ok else 'NOT MET'}"
        )
        if not ok:
            failures.append(title)

    print("1. sign a 9-parameter Payment Page payload")
    r = interleaved(
        {
            "ours": lambda: payplane.sign(params, SECRET),
            "hmac": lambda: hmac.digest(key, prebuilt, "sha512"),
            "official": lambda: handler.sign(params),
        },
        args.repeats,
        args.seconds,
    )
    report(
        "sign/hmac", r["ours"], r["hmac"], "raw hmac.digest", "<= 2x", r["ours"] <= 2 * r["hmac"]
    )
    report(
        "sign/official",
        r["ours"],
        r["official"],
        "official",
        ">= 2x faster",
        2 * r["ours"] <= r["official"],
    )

    print("2. build a signed Payment Page URL")
    r = interleaved(
        {
            "ours": lambda: gate.get_purchase_payment_page_url(ours_p),
            "official": lambda: theirs.get_purchase_payment_page_url(their_p),
        },
        args.repeats,
        args.seconds,
    )
    report(
        "url", r["ours"], r["official"], "official", ">= 3x faster", 3 * r["ours"] <= r["official"]
    )

    print("3. parse and verify a 40-field callback")
    r = interleaved(
        {
            "ours": lambda: gate.handle_callback(body),
            "official": lambda: theirs.handle_callback(body),
        },
        args.repeats,
        args.seconds,
    )
    report(
        "callback",
        r["ours"],
        r["official"],
        "official",
        ">= 3x faster",
        3 * r["ours"] <= r["official"],
    )

    print("\nall targets met" if not failures else f"\ntargets NOT met: {', '.join(failures)}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
