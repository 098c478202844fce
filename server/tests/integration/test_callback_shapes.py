"""Every callback shape the platform emits verifies under the canonical algorithm and under the
official libraries' orderings (protocol.md 1.1):

- the installed Python library (``payment_page_sdk``: ``Callback`` / ``SignatureHandler``);
- the npm library ``ecommpay`` (run by node, many bodies per process);
- the PHP library's natural key order and the Go library's whole-item byte order without ``:``
  doubling, rebuilt here from protocol.md 1.1.

Two tests. One builds every shape through ``processing.transition`` (and the clarification
services) with the project's real secret. The other runs last in the session: it first sends
every shape through the delivery worker to a ``CallbackReceiver`` itself (so it can never check
nothing), then verifies *every* body any receiver got during the whole test session (the
receivers append them to ``$PAYPLANE_CALLBACK_LOG``). Those were signed with secrets this test
does not know, so each is re-signed canonically with a fixed key and every library ordering must
produce that same signature: that is the property that makes the real signature verify.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from payment_page_sdk.callback import Callback
from payment_page_sdk.signature_handler import SignatureHandler
from payplane import sign, signing_string, verify

from payplane_server.clock import FakeClock
from payplane_server.context import AppContext
from payplane_server.domain.clarification import KINDS
from payplane_server.domain.payments import Code, Status
from payplane_server.services.clarification import (
    fire_due,
    request_clarification,
    submit_clarification,
)
from payplane_server.services.processing import Change, transition
from payplane_server.testing import CallbackReceiver
from payplane_server.testing.outbox import callback_rows, make_project, seed_payment
from payplane_server.worker.delivery import deliver_due

# Set for the whole session by conftest.callback_log; written by testing.CallbackReceiver.
CALLBACK_LOG_ENV = "PAYPLANE_CALLBACK_LOG"
IN_CI = os.environ.get("CI", "").lower() == "true"


def require(available: bool, what: str) -> None:
    """Skip when ``what`` is missing on a developer machine; fail under CI (as conftest)."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required under CI=true but is not installed")
    pytest.skip(f"{what} is not installed")


PROJECT = 4242
PEERS = Path(__file__).resolve().parents[3] / "sdk" / "tests" / "peers"
PROBE_KEY = "probe-key-for-orderings"
FULL_PARAMS = {kind: frozenset(spec.params) for kind, spec in KINDS.items()}

# -- the orderings of the official libraries, rebuilt from protocol.md 1.1 ------------------


def _flatten(value: Any, prefix: str, double: bool, out: list[tuple[str, str]]) -> None:
    if isinstance(value, Mapping):
        for key, child in value.items():
            if key in ("signature", "frame_mode"):
                continue
            segment = key.replace(":", "::") if double else key
            _flatten(child, f"{prefix}:{segment}" if prefix else segment, double, out)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            _flatten(child, f"{prefix}:{index}" if prefix else str(index), double, out)
    elif value is True or value is False:
        out.append((prefix, "1" if value else "0"))
    elif value is None:
        out.append((prefix, ""))
    else:
        out.append((prefix, str(value)))


def _natural_key(text: str) -> list[Any]:
    # PHP's natural order: digit runs compare as numbers, the rest as text.
    return [
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in re.split(r"(\d+)", text)
        if part
    ]


def php_string(body: Mapping[str, Any]) -> str:
    items: list[tuple[str, str]] = []
    _flatten(body, "", True, items)
    items.sort(key=lambda item: _natural_key(item[0]))
    return ";".join(f"{k}:{v}" for k, v in items)


def go_string(body: Mapping[str, Any]) -> str:
    items: list[tuple[str, str]] = []
    _flatten(body, "", False, items)
    whole = sorted(f"{k}:{v}" for k, v in items)
    return ";".join(whole)


def node_verdicts(cases: list[tuple[str, str]]) -> list[Any]:
    """``new Callback(secret, body)`` of the npm library for each (secret, body text)."""
    node = shutil.which("node")
    require(node is not None, "node")
    require((PEERS / "node_modules" / "ecommpay").is_dir(), "npm ecommpay (npm ci in peers)")
    script = (
        "const {Callback} = require('ecommpay');"
        "let input = '';"
        "process.stdin.on('data', d => input += d);"
        "process.stdin.on('end', () => {"
        "  const out = JSON.parse(input).map(([secret, body]) => {"
        "    try { new Callback(secret, body); return true; }"
        "    catch (e) { return String(e.message); }"
        "  });"
        "  process.stdout.write(JSON.stringify(out));"
        "});"
    )
    assert node is not None
    done = subprocess.run(
        [node, "-e", script],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        cwd=PEERS,
        timeout=120,
        check=True,
    )
    verdicts: list[Any] = json.loads(done.stdout)
    return verdicts


def structural_problems(value: Any, path: str = "") -> list[str]:
    """Protocol.md 1.1: no array over ten elements, no sibling key that is another's prefix
    followed by a character below ':', no ':' inside keys, no nulls."""
    problems: list[str] = []
    if isinstance(value, Mapping):
        keys = list(value)
        for key in keys:
            if ":" in key:
                problems.append(f"{path}{key}: ':' inside a key")
            for other in keys:
                if other != key and other.startswith(key) and other[len(key)] < ":":
                    problems.append(f"{path}{key} / {other}: prefix siblings")
            problems += structural_problems(value[key], f"{path}{key}.")
    elif isinstance(value, list):
        if len(value) > 10:
            problems.append(f"{path}: array of {len(value)} elements")
        for index, child in enumerate(value):
            problems += structural_problems(child, f"{path}{index}.")
    elif value is None:
        problems.append(f"{path}: null")
    return problems


def check_orderings(bodies: list[bytes], secret: str | None = None) -> list[str]:
    """Every problem found with ``bodies`` under every ordering; empty when all verify.

    With ``secret`` the bodies' own signatures are checked; without, each body is re-signed
    canonically with a fixed key and every library must produce that same signature.
    """
    problems: list[str] = []
    cases: list[tuple[str, str]] = []
    for raw in bodies:
        body = json.loads(raw)
        unsigned = {k: v for k, v in body.items() if k != "signature"}
        key = secret or PROBE_KEY
        text = (
            raw.decode() if secret else json.dumps({**unsigned, "signature": sign(unsigned, key)})
        )
        label = f"{body['payment']['id']} ({body['payment']['status']})"
        problems += [f"{label}: {p}" for p in structural_problems(unsigned)]
        canonical = signing_string(unsigned)
        if php_string(unsigned) != canonical:
            problems.append(f"{label}: PHP natural order differs")
        if go_string(unsigned) != canonical:
            problems.append(f"{label}: Go whole-item order differs")
        signature = json.loads(text)["signature"]
        if not verify(unsigned, signature, key):
            problems.append(f"{label}: canonical verification failed")
        if SignatureHandler(key).sign(unsigned) != signature:
            problems.append(f"{label}: the Python library signs differently")
        try:
            Callback(text, SignatureHandler(key))
        except Exception as exc:
            problems.append(f"{label}: the Python library refuses it: {exc}")
        cases.append((key, text))
    for (_, text), verdict in zip(cases, node_verdicts(cases), strict=True):
        if verdict is not True:
            problems.append(f"{json.loads(text)['payment']['id']}: npm ecommpay: {verdict}")
    return problems


def shape_of(body: Mapping[str, Any]) -> str:
    payment, operation = body["payment"], body["operation"]
    fields = body.get("clarification_fields")
    if fields:
        partial = any(
            set(entry.get("properties", {})) < FULL_PARAMS.get(kind, frozenset())
            for kind, entry in fields.items()
        )
        kinds = "+".join(sorted(fields))
        return f"{'partial ' if partial else ''}clarification {kinds}"
    card = "card" if "account" in body else "no card"
    return f"{payment['status']} {operation['code']} ({card})"


# -- every shape, built through the real services ----------------------------------------------


def produce_every_shape(ctx: AppContext, clock: FakeClock, url: str) -> str:
    """Queue one callback of every shape the platform emits; returns the project's secret."""
    secret = make_project(ctx, PROJECT, url)

    def payment(name: str, card: bool = True) -> int:
        with ctx.db.write() as conn:
            return seed_payment(ctx, conn, project_id=PROJECT, payment_id=name, card=card)

    def move(pk: int, change: Change, expect: set[Status] | None = None) -> None:
        with ctx.db.write() as conn:
            assert transition(ctx, conn, pk, change, expect=expect)

    move(payment("success"), Change(Status.SUCCESS, Code.SUCCESS, provider_auth_code="123456"))
    for code in (
        Code.GENERAL_DECLINE,
        Code.INCORRECT_DATA,
        Code.INSUFFICIENT_FUNDS,
        Code.TIMEOUT,
    ):
        move(payment(f"decline-{code}"), Change(Status.DECLINE, code))
    move(payment("expired", card=False), Change(Status.DECLINE, Code.EXPIRED))
    move(payment("error"), Change(Status.ERROR, Code.GENERAL_DECLINE, message="Error"))
    for outcome in ("3ds-decline", "3ds-success"):
        pk = payment(outcome)
        move(pk, Change(Status.AWAITING_3DS, Code.AWAITING_PROCESSING, notify_merchant=False))
        if outcome == "3ds-decline":
            move(pk, Change(Status.DECLINE, Code.THREE_DS_FAILED), {Status.AWAITING_3DS})
        else:
            move(pk, Change(Status.SUCCESS, Code.SUCCESS), {Status.AWAITING_3DS})
    for kind in ("customer", "avs_data"):
        with ctx.db.write() as conn:
            pk = seed_payment(ctx, conn, project_id=PROJECT, payment_id=f"clarify-{kind}")
            assert request_clarification(ctx, conn, pk, kind)
    submit_clarification(
        ctx, PROJECT, "clarify-customer", {"customer": {"psu_consent_text": "I agree"}}
    )
    submit_clarification(
        ctx, PROJECT, "clarify-avs_data", {"avs_data": {"avs_post_code": "SW1A 1AA"}}
    )
    submit_clarification(
        ctx, PROJECT, "clarify-avs_data", {"avs_data": {"avs_street_address": "1 Main St"}}
    )
    with ctx.db.write() as conn:
        pk = seed_payment(ctx, conn, project_id=PROJECT, payment_id="refused-consent")
        assert request_clarification(ctx, conn, pk, "customer")
    submit_clarification(
        ctx,
        PROJECT,
        "refused-consent",
        {"customer": {"psu_consent": "0", "psu_consent_text": "I do not agree"}},
    )
    with ctx.db.write() as conn:
        pk = seed_payment(ctx, conn, project_id=PROJECT, payment_id="auto-decline")
        assert request_clarification(ctx, conn, pk, "customer")
    clock.advance(ctx.settings.clarification_wait_seconds + 1)
    assert fire_due(ctx) >= 1
    return secret


EXPECTED_SHAPES = {
    "success 0 (card)",
    "decline 10000 (card)",
    "decline 10102 (card)",
    "decline 10105 (card)",
    "decline 10602 (card)",
    "decline 10101 (no card)",
    "error 10000 (card)",
    "decline 10104 (card)",
    "clarification customer",
    "clarification avs_data",
    "partial clarification customer",
    "partial clarification avs_data",
    "decline 603 (card)",
}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_every_shape_built_through_transition_verifies_under_every_library(
    ctx: AppContext, clock: FakeClock
) -> None:
    secret = produce_every_shape(ctx, clock, "http://127.0.0.1:9/callback")
    bodies = [row.body.encode() for row in callback_rows(ctx)]
    shapes = Counter(shape_of(json.loads(b)) for b in bodies)
    assert set(shapes) >= EXPECTED_SHAPES, EXPECTED_SHAPES - set(shapes)
    assert check_orderings(bodies, secret) == []


def test_the_checks_catch_bodies_an_official_library_would_refuse() -> None:
    body = {"payment": {"id": "x", "status": "success"}, "operation": {"code": "0"}}
    natural = {**body, "e2": "a", "e10": "b"}
    prefixed = {**body, "item": "a", "item-1": "b"}
    nulled = {**body, "note": None}
    for bad in (natural, prefixed, nulled):
        raw = json.dumps({**bad, "signature": sign(bad, "k")}).encode()
        assert check_orderings([raw]) != [], bad


# -- the whole session ----------------------------------------------------------------------


def _session_bodies() -> Iterator[bytes]:
    path = os.environ.get(CALLBACK_LOG_ENV)
    assert path, "the session's callback log is not set up (conftest.callback_log)"
    for line in Path(path).read_bytes().splitlines():
        if line:
            yield base64.b64decode(line)


def _is_callback(raw: bytes) -> bool:
    try:
        body = json.loads(raw)
    except ValueError:
        return False
    return isinstance(body, dict) and {"payment", "operation", "signature"} <= set(body)


@pytest.mark.last
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_every_callback_the_test_session_received_verifies_under_every_library(
    ctx: AppContext, clock: FakeClock
) -> None:
    with CallbackReceiver() as receiver:
        secret = produce_every_shape(ctx, clock, receiver.url)
        for _ in range(10):  # partial clarifications queue behind earlier callbacks
            deliver_due(ctx)
        own = [r.body for r in receiver.requests]
    assert all(row.state == "delivered" for row in callback_rows(ctx))
    assert check_orderings(own, secret) == []

    everything = list(_session_bodies())
    callbacks = [raw for raw in everything if _is_callback(raw)]
    assert len(callbacks) >= len(own) >= len(EXPECTED_SHAPES)
    assert set(own) <= set(callbacks), "this test's own callbacks are missing from the log"
    shapes = Counter(shape_of(json.loads(raw)) for raw in callbacks)
    assert set(shapes) >= EXPECTED_SHAPES, EXPECTED_SHAPES - set(shapes)
    unique = list(dict.fromkeys(callbacks))
    assert check_orderings(unique) == []
    print(
        f"\nverified {len(unique)} distinct callbacks ({len(callbacks)} received): {dict(shapes)}"
    )
