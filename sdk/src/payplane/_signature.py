"""The one signature algorithm of Payplane (protocol.md section 1).

``sign`` emits the canonical form. ``verify`` accepts the canonical form and every variant that
the official client libraries produce (protocol.md section 1.1): natural key order, whole-item
byte order with and without ``:`` doubling, per-level order, and the text renderings of booleans
and nulls found in Payment Page URLs. Every variant still needs the secret.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from collections.abc import Iterator, Mapping
from typing import Any, Callable

__all__ = ["is_base64_signature", "sign", "signing_string", "verify"]

_EXCLUDED = frozenset({"signature", "frame_mode"})
_QUERY_TEXT = {"true": "1", "True": "1", "false": "0", "False": "0", "None": "", "null": ""}
_DIGITS = re.compile(r"(\d+)")
_B64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")

Item = tuple[str, str]


def _text(value: Any) -> str:
    if value is True:
        return "1"
    if value is False:
        return "0"
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)
    raise TypeError(f"cannot sign a value of type {type(value).__name__}")


def _items(value: Any, prefix: str, out: list[Item], double: bool) -> None:
    if isinstance(value, Mapping):
        for key, child in value.items():
            if not isinstance(key, str):
                raise TypeError(f"cannot sign a non-string key {key!r}")
            if key in _EXCLUDED:
                continue
            segment = key.replace(":", "::") if double and ":" in key else key
            _items(child, prefix + ":" + segment if prefix else segment, out, double)
    elif isinstance(value, (list, tuple)):
        for index, child in enumerate(value):
            _items(child, f"{prefix}:{index}" if prefix else str(index), out, double)
    else:
        out.append((prefix, _text(value)))


def _flat_fast(params: Mapping[str, Any]) -> str | None:
    """The canonical string of a flat mapping of str/int values, or None if it is not flat."""
    parts = []
    for key in sorted(params):
        if key in _EXCLUDED:
            continue
        value = params[key]
        kind = type(value)
        if kind is str:
            if ":" in key:
                return None
            parts.append(key + ":" + value)
        elif kind is int:
            if ":" in key:
                return None
            parts.append(key + ":" + str(value))
        else:
            return None
    return ";".join(parts)


def signing_string(params: Mapping[str, Any]) -> str:
    """The canonical string that is signed: sorted ``path:value`` items joined by ``;``."""
    fast = _flat_fast(params)
    if fast is not None:
        return fast
    items: list[Item] = []
    _items(params, "", items, True)
    items.sort(key=lambda item: item[0])
    return ";".join(f"{key}:{value}" for key, value in items)


def _digest(secret: str, message: str) -> bytes:
    return hmac.digest(secret.encode("utf-8"), message.encode("utf-8"), "sha512")


def sign(params: Mapping[str, Any], secret: str) -> str:
    """Sign ``params`` with ``secret``: Base64 of HMAC-SHA512 over the canonical string."""
    return base64.b64encode(_digest(secret, signing_string(params))).decode("ascii")


def is_base64_signature(signature: object) -> bool:
    """True if ``signature`` is standard Base64 text of a 64-byte HMAC-SHA512 digest."""
    if not isinstance(signature, str) or len(signature) != 88 or not _B64.match(signature):
        return False
    try:
        return len(base64.b64decode(signature, validate=True)) == 64
    except (binascii.Error, ValueError):
        return False


def _natural(key: str) -> tuple[Any, ...]:
    parts = _DIGITS.split(key)
    return tuple(int(part) if index % 2 else part for index, part in enumerate(parts))


def _per_level(value: Any, prefix: str, out: list[Item], numeric_index: bool) -> None:
    if isinstance(value, Mapping):
        for key in sorted(k for k in value if k not in _EXCLUDED):
            _per_level(value[key], prefix + ":" + key if prefix else key, out, numeric_index)
    elif isinstance(value, (list, tuple)):
        indices = range(len(value)) if numeric_index else sorted(range(len(value)), key=str)
        for index in indices:
            _per_level(value[index], f"{prefix}:{index}" if prefix else str(index), out,
                       numeric_index)
    else:
        out.append((prefix, _text(value)))


def _join(items: list[Item]) -> str:
    return ";".join(f"{key}:{value}" for key, value in items)


def _variants(params: Mapping[str, Any]) -> Iterator[str]:
    """Every string an official library may have signed for ``params``, canonical first."""
    yield signing_string(params)
    for double in (True, False):
        items: list[Item] = []
        _items(params, "", items, double)
        orders: list[Callable[[Item], Any]] = [
            lambda item: item[0],
            lambda item: _natural(item[0]),
            lambda item: item[0] + ":" + item[1],
        ]
        for order in orders:
            yield _join(sorted(items, key=order))
    for numeric in (True, False):
        level: list[Item] = []
        _per_level(params, "", level, numeric)
        yield _join(level)


def _normalised(value: Any) -> tuple[Any, bool]:
    """Read URL-query text the way the libraries meant it: booleans and nulls as signed."""
    if isinstance(value, str):
        if value in _QUERY_TEXT:
            return _QUERY_TEXT[value], True
        return value, False
    if isinstance(value, Mapping):
        changed = False
        result = {}
        for key, child in value.items():
            result[key], child_changed = _normalised(child)
            changed = changed or child_changed
        return result, changed
    if isinstance(value, (list, tuple)):
        pairs = [_normalised(child) for child in value]
        return [child for child, _ in pairs], any(flag for _, flag in pairs)
    return value, False


def verify(params: Mapping[str, Any], signature: object, secret: str) -> bool:
    """True if ``signature`` signs ``params`` under any accepted variant (constant-time)."""
    if not is_base64_signature(signature):
        return False
    assert isinstance(signature, str)
    expected = base64.b64decode(signature)
    key = secret.encode("utf-8")
    tried: set[str] = set()
    readings: list[Mapping[str, Any]] = [params]
    normalised, changed = _normalised(params)
    if changed:
        readings.append(normalised)
    matched = False
    for reading in readings:
        for message in _variants(reading):
            if message in tried:
                continue
            tried.add(message)
            actual = hmac.digest(key, message.encode("utf-8"), "sha512")
            if hmac.compare_digest(actual, expected):
                matched = True
                break
        if matched:
            break
    return matched
