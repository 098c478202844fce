"""Reading Data API request bodies and rendering their answers (pure, no I/O but zoneinfo).

Every problem with the input is a ``DataApiError(400)`` with a message naming the parameter;
nothing here can raise anything else for any JSON a client sends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from ..errors import DataApiError
from ..services.reporting import MAX_INTERVAL, OperationRow, StoredTime, stored_utc

__all__ = [
    "MAX_DEPTH",
    "MAX_LIMIT",
    "OPERATION_FIELDS",
    "OPERATION_STATUSES",
    "OPERATION_TYPES",
    "ByPaymentRequest",
    "OperationsRequest",
    "format_date",
    "parse_balance",
    "parse_body",
    "parse_by_payment",
    "parse_operations",
    "render_operation",
]

MAX_DEPTH = 32
MAX_LIMIT = 1000
MAX_OFFSET = 1_000_000_000
MAX_PROJECT_IDS = 1000
OPERATION_TYPES = ("sale",)
OPERATION_STATUSES = (
    "processing",
    "awaiting 3ds result",
    "awaiting clarification",
    "success",
    "decline",
    "error",
)
OPERATION_FIELDS = (
    "project_id",
    "operation_id",
    "payment_id",
    "operation_type",
    "operation_status",
    "payment_method",
    "account_number",
    "customer_id",
    "description",
    "operation_created_at",
    "operation_completed_at",
    "sum_initial",
    "sum_converted",
    "code",
    "message",
)
_UTC_ZONE = ZoneInfo("UTC")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}", re.ASCII)
_DIGITS = re.compile(r"\d{1,18}", re.ASCII)


def _bad(message: str) -> DataApiError:
    return DataApiError(400, message)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in JSON")


# One decoder for every request, as ``json.loads`` keeps one for its default settings.
_JSON = json.JSONDecoder(parse_constant=_reject_constant)


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in node.values())
        elif isinstance(node, list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in node)
    return deepest


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, whatever the Content-Type said."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad("The request body is not valid UTF-8.") from None
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise _bad("The request body is empty; send a JSON object.")
    try:
        value = _JSON.decode(text)
    except RecursionError:
        raise _bad(f"The request body nests deeper than {MAX_DEPTH} levels.") from None
    except ValueError:
        raise _bad("The request body is not valid JSON.") from None
    if not isinstance(value, dict):
        raise _bad("The request body must be a JSON object.")
    # Every level opens with a bracket: a body with few of them needs no walk.
    if text.count("{") + text.count("[") > MAX_DEPTH and _depth(value) > MAX_DEPTH:
        raise _bad(f"The request body nests deeper than {MAX_DEPTH} levels.")
    return value


def _int(value: Any, name: str, *, low: int, high: int) -> int:
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _bad(f"{name} must be an integer.")
    if not low <= value <= high:
        raise _bad(f"{name} must be between {low} and {high}.")
    return value


def _project_ids(params: Mapping[str, Any]) -> tuple[int, ...] | None:
    if "project_ids" not in params or params["project_ids"] is None:
        return None
    raw = params["project_ids"]
    if not isinstance(raw, list) or not raw:
        raise _bad("project_ids must be a non-empty array of project IDs.")
    if len(raw) > MAX_PROJECT_IDS:
        raise _bad(f"project_ids may list at most {MAX_PROJECT_IDS} projects.")
    ids = [_int(item, "Each of project_ids", low=1, high=2**63 - 1) for item in raw]
    return tuple(dict.fromkeys(ids))


def _choices(params: Mapping[str, Any], name: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if name not in params or params[name] is None:
        return ()
    raw = params[name]
    if not isinstance(raw, list) or not raw:
        raise _bad(f"{name} must be a non-empty array of strings.")
    for item in raw:
        if not isinstance(item, str) or item not in allowed:
            raise _bad(f"{name} may contain only: {', '.join(allowed)}.")
    return tuple(dict.fromkeys(raw))


@lru_cache(maxsize=1)
def _zones() -> frozenset[str]:
    return frozenset(available_timezones()) | {"UTC"}


def _time_zone(params: Mapping[str, Any]) -> ZoneInfo:
    name = params.get("time_zone")
    if name is None or name == "UTC":
        return _UTC_ZONE
    if not isinstance(name, str) or name not in _zones():
        raise _bad("time_zone must be an IANA time zone name such as Europe/Berlin or UTC.")
    return ZoneInfo(name)


def _fields(params: Mapping[str, Any]) -> tuple[str, ...]:
    raw = params.get("fields")
    if raw is None:
        return OPERATION_FIELDS
    if not isinstance(raw, list) or not raw:
        raise _bad("fields must be a non-empty array of field names.")
    for item in raw:
        if not isinstance(item, str) or item not in OPERATION_FIELDS:
            raise _bad(f"fields may contain only: {', '.join(OPERATION_FIELDS)}.")
    return tuple(dict.fromkeys(raw))


def _local(value: Any, name: str, zone: ZoneInfo) -> datetime:
    if not isinstance(value, str) or not _DATE.fullmatch(value):
        raise _bad(f"{name} must be a date-time in the form YYYY-MM-DD hh:mm:ss.")
    try:
        local = datetime.strptime(value.replace("T", " "), "%Y-%m-%d %H:%M:%S")
        return local.replace(tzinfo=zone).astimezone(UTC)
    except (ValueError, OverflowError):
        raise _bad(f"{name} is not a valid date-time.") from None


@dataclass(frozen=True)
class OperationsRequest:
    project_ids: tuple[int, ...] | None
    start: datetime
    end: datetime
    zone: ZoneInfo
    types: tuple[str, ...]
    statuses: tuple[str, ...]
    fields: tuple[str, ...]
    limit: int
    offset: int


@dataclass(frozen=True)
class ByPaymentRequest:
    project_id: int
    payment_id: str
    zone: ZoneInfo
    fields: tuple[str, ...]


def parse_balance(params: Mapping[str, Any]) -> tuple[int, ...] | None:
    """``v1/balance/get``: no mandatory parameters; ``project_ids`` narrows the answer."""
    return _project_ids(params)


def parse_operations(params: Mapping[str, Any]) -> OperationsRequest:
    """``v1/operations/get``. The interval's ``to`` is inclusive to the second."""
    zone = _time_zone(params)
    interval = params.get("interval")
    if interval is None:
        raise _bad('interval is required: {"from": "YYYY-MM-DD hh:mm:ss", "to": ...}.')
    if not isinstance(interval, dict):
        raise _bad("interval must be an object with from and to.")
    if "from" not in interval or "to" not in interval:
        raise _bad("interval must have both from and to.")
    start = _local(interval["from"], "interval.from", zone)
    last = _local(interval["to"], "interval.to", zone)
    if last < start:
        raise _bad("interval.to is earlier than interval.from.")
    try:
        end = last + timedelta(seconds=1)
    except OverflowError:
        raise _bad("interval.to is not a valid date-time.") from None
    if end - start > MAX_INTERVAL:
        raise _bad(f"The interval may span at most {MAX_INTERVAL.days} days.")
    limit = params.get("limit", MAX_LIMIT)
    offset = params.get("offset", 0)
    return OperationsRequest(
        project_ids=_project_ids(params),
        start=start,
        end=end,
        zone=zone,
        types=_choices(params, "operation_types", OPERATION_TYPES),
        statuses=_choices(params, "statuses", OPERATION_STATUSES),
        fields=_fields(params),
        limit=_int(MAX_LIMIT if limit is None else limit, "limit", low=1, high=MAX_LIMIT),
        offset=_int(0 if offset is None else offset, "offset", low=0, high=MAX_OFFSET),
    )


def parse_by_payment(params: Mapping[str, Any]) -> ByPaymentRequest:
    """``v1/operations/get-by-payment``: ``project_id`` and ``payment_id`` are mandatory."""
    if params.get("project_id") is None:
        raise _bad("project_id is required.")
    project_id = _int(params["project_id"], "project_id", low=1, high=2**63 - 1)
    payment_id = params.get("payment_id")
    if isinstance(payment_id, int) and not isinstance(payment_id, bool):
        payment_id = str(payment_id)
    if payment_id is None:
        raise _bad("payment_id is required.")
    if not isinstance(payment_id, str) or not 1 <= len(payment_id) <= 255:
        raise _bad("payment_id must be a string of 1 to 255 characters.")
    return ByPaymentRequest(project_id, payment_id, _time_zone(params), _fields(params))


def format_date(value: StoredTime | None, zone: ZoneInfo) -> str | None:
    """``YYYY-MM-DD hh:mm:ss`` in ``zone`` of a stored UTC time."""
    if value is None:
        return None
    if zone is _UTC_ZONE:
        if isinstance(value, str):
            return value[:19]  # stored as UTC text with microseconds
        return value.replace(tzinfo=None).isoformat(" ", "seconds")
    return stored_utc(value).astimezone(zone).replace(tzinfo=None).isoformat(" ", "seconds")


def render_operation(row: OperationRow, zone: ZoneInfo, fields: tuple[str, ...]) -> dict[str, Any]:
    """One operation item with the requested fields, in the order of ``fields``."""
    (
        project_id,
        operation_id,
        payment_id,
        operation_type,
        operation_status,
        payment_method,
        account_number,
        customer_id,
        description,
        created_at,
        completed_at,
        initial_amount,
        initial_currency,
        converted_amount,
        converted_currency,
        code,
        message,
    ) = row
    values: dict[str, Any] = {
        "project_id": project_id,
        "operation_id": operation_id,
        "payment_id": payment_id,
        "operation_type": operation_type,
        "operation_status": operation_status,
        "payment_method": payment_method or "card",
        "account_number": account_number,
        "customer_id": customer_id,
        "description": description,
        "operation_created_at": format_date(created_at, zone),
        "operation_completed_at": format_date(completed_at, zone),
        "sum_initial": {"amount": initial_amount, "currency": initial_currency},
        "sum_converted": {"amount": converted_amount, "currency": converted_currency},
        "code": code,
        "message": message,
    }
    if fields is OPERATION_FIELDS:
        return values
    return {name: values[name] for name in fields}
