"""The callback body (the specification's callback table plus ``account``), built from records.

Pure. The same shape answers the status request (protocol.md section 6). Outbound payloads
must verify under every official library (protocol.md 1.1): no arrays over ten elements and no
sibling keys where one is a prefix of another followed by a character below ``:``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["CallbackFacts", "build_callback_body", "format_date"]


def format_date(value: datetime) -> str:
    """``YYYY-MM-DDThh:mm:ss+0000``."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S+0000")


@dataclass(frozen=True)
class CallbackFacts:
    project_id: int
    payment_id: str
    payment_status: str
    payment_date: datetime
    payment_method: str
    amount: int
    currency: str
    customer_id: str
    operation_id: int
    operation_type: str
    operation_status: str
    operation_date: datetime
    operation_created_date: datetime
    request_id: str
    sum_initial: tuple[int, str]
    sum_converted: tuple[int, str]
    code: str
    message: str
    provider_id: int
    provider_payment_id: str
    provider_auth_code: str
    account_number: str | None = None
    card_type: str | None = None
    card_holder: str | None = None
    expiry_month: str | None = None
    expiry_year: str | None = None
    clarification_fields: dict[str, Any] | None = None


def build_callback_body(facts: CallbackFacts) -> dict[str, Any]:
    """The unsigned callback body; the caller signs it with the project's secret key."""
    body: dict[str, Any] = {
        "project_id": facts.project_id,
        "payment": {
            "id": facts.payment_id,
            "type": "purchase",
            "status": facts.payment_status,
            "date": format_date(facts.payment_date),
            "method": facts.payment_method,
            "sum": {"amount": facts.amount, "currency": facts.currency},
            "description": facts.message,
        },
        "customer": {"id": facts.customer_id},
        "operation": {
            "id": facts.operation_id,
            "type": facts.operation_type,
            "status": facts.operation_status,
            "date": format_date(facts.operation_date),
            "created_date": format_date(facts.operation_created_date),
            "request_id": facts.request_id,
            "sum_initial": {"amount": facts.sum_initial[0], "currency": facts.sum_initial[1]},
            "sum_converted": {
                "amount": facts.sum_converted[0],
                "currency": facts.sum_converted[1],
            },
            "code": facts.code,
            "message": facts.message,
            "provider": {
                "id": facts.provider_id,
                "payment_id": facts.provider_payment_id,
                "auth_code": facts.provider_auth_code,
            },
        },
    }
    if facts.account_number:
        body["account"] = {
            "number": facts.account_number,
            "type": facts.card_type or "",
            "card_holder": facts.card_holder or "",
            "expiry_month": facts.expiry_month or "",
            "expiry_year": facts.expiry_year or "",
        }
    if facts.clarification_fields:
        body["clarification_fields"] = facts.clarification_fields
    return body
