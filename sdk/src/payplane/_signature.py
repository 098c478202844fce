"""The one signature algorithm of Payplane (protocol.md section 1).

``sign`` emits the canonical form. ``verify`` accepts the canonical form and every variant that
the official client libraries produce (protocol.md section 1.1): natural key order, whole-item
byte order with and without ``:`` doubling, per-level order, and the text renderings of booleans
and nulls found in Payment Page URLs. Every variant still needs the secret.

Speed matters here (the platform signs and verifies on every request), so the HMAC keys are
prepared once per secret (RFC 2104's inner and outer pads hashed ahead of time; each message then
costs two hash copies instead of a full HMAC set-up), and ordinary payloads (plain dicts and
lists, no ``:`` in keys, no sibling-prefix corner) are walked level by level in sorted order,
which is the canonical order for them, so no global sort is needed; everything else takes the
general walk.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from operator import itemgetter
from typing import Any, Callable

from ._exceptions import InvalidParameter

__all__ = [
    "MAX_DEPTH",
    "SigningKey",
    "is_base64_signature",
    "sign",
    "signing_string",
    "verify",
]

#: Containers may nest this deep (the top-level object counts as level 1); deeper is refused.
MAX_DEPTH = 32

_EXCLUDED = frozenset({"signature", "frame_mode"})
_QUERY_BOOLEANS = {"true": "1", "True": "1", "false": "0", "False": "0"}
_QUERY_TEXT = {**_QUERY_BOOLEANS, "None": "", "null": ""}
_DIGITS = re.compile(r"(\d+)")
_BLOCK = 128  # SHA-512 block size in bytes
_IPAD = bytes(byte ^ 0x36 for byte in range(256))
_OPAD = bytes(byte ^ 0x5C for byte in range(256))
_FIRST = itemgetter(0)

Item = tuple[str, str]


def _too_deep(path: str) -> InvalidParameter:
    return InvalidParameter(f"parameters nest deeper than {MAX_DEPTH} levels at {path!r}")


def _text(value: Any, path: str) -> str:
    """The signed text of a leaf value: booleans 1/0, null empty, numbers in decimal."""
    if value is True:
        return "1"
    if value is False:
        return "0"
    if value is None:
        return ""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidParameter(f"cannot sign the non-finite number {value!r} at {path!r}")
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)
    raise InvalidParameter(f"cannot sign a value of type {type(value).__name__} at {path!r}")


def _key_text(key: object, prefix: str) -> str:
    if not isinstance(key, str):
        where = repr(prefix[:-1]) if prefix else "the top level"
        raise InvalidParameter(f"key {key!r} at {where} is not a string")
    return str.__str__(key)


def _walk_mapping(
    node: Mapping[Any, Any], prefix: str, out: list[Item], double: bool, depth: int
) -> bool:
    """Append the ``(path, text)`` items of ``node``; True if any key contained ``:``."""
    colon = False
    for key, child in node.items():
        if key.__class__ is not str:
            key = _key_text(key, prefix)
        if key in _EXCLUDED:
            continue
        if ":" in key:
            colon = True
            if double:
                key = key.replace(":", "::")
        kind = child.__class__
        if kind is str:
            out.append((prefix + key, child))
        elif kind is int:
            out.append((prefix + key, int.__repr__(child)))
        elif _walk_value(child, prefix + key, out, double, depth):
            colon = True
    return colon


def _walk_value(value: Any, path: str, out: list[Item], double: bool, depth: int) -> bool:
    if isinstance(value, Mapping):
        if depth >= MAX_DEPTH:
            raise _too_deep(path)
        return _walk_mapping(value, path + ":", out, double, depth + 1)
    if isinstance(value, (list, tuple)):
        if depth >= MAX_DEPTH:
            raise _too_deep(path)
        colon = False
        for index, child in enumerate(value):
            if _walk_value(child, f"{path}:{index}", out, double, depth + 1):
                colon = True
        return colon
    out.append((path, _text(value, path)))
    return False


def _walk_sorted(node: dict[Any, Any], prefix: str, out: list[str], depth: int) -> bool:
    """Append the canonical ``path:value`` items of ``node`` in canonical order.

    The fast path for ordinary payloads: each level's keys are sorted and walked in order,
    which gives the global order of section 1 unless a key contains ``:`` or a non-empty
    container's key is a prefix of a sibling's key followed by a character below ``:``
    (``a`` and ``a-b``), or a list of more than ten elements holds containers. In those cases
    (and for keys that are not text, or containers of other types) it returns False, leaving
    ``out`` incomplete, and the general walk decides. Raises for nesting deeper than allowed.
    """
    try:
        keys = sorted(node)
        if ":" in "".join(keys):  # also refuses keys that are not text (TypeError)
            return False
    except TypeError:
        return False
    if "signature" in node or "frame_mode" in node:
        keys = [key for key in keys if key not in _EXCLUDED]
    append = out.append
    pending = None  # the key of the last non-empty container, until the next key is seen
    for key in keys:
        if pending is not None:
            if key.startswith(pending) and key[len(pending)] < ":":
                return False
            pending = None
        child = node[key]
        kind = child.__class__
        if kind is str or kind is int:
            append(f"{prefix}{key}:{child}")
        elif kind is dict or kind is list:
            if depth >= MAX_DEPTH:
                raise _too_deep(prefix + key)
            if not child:
                continue
            pending = key
            if kind is dict:
                if not _walk_sorted(child, f"{prefix}{key}:", out, depth + 1):
                    return False
            elif not _walk_sorted_list(child, prefix + key, out, depth + 1):
                return False
        elif kind is bool:
            append(f"{prefix}{key}:{'1' if child else '0'}")
        elif isinstance(child, (Mapping, list, tuple)):
            return False
        else:
            append(f"{prefix}{key}:{_text(child, prefix + key)}")
    return True


def _walk_sorted_list(node: list[Any], path: str, out: list[str], depth: int) -> bool:
    """``_walk_sorted`` for a list: indices in text order, as the flattened keys sort."""
    if len(node) > 10:
        for child in node:
            if isinstance(child, (Mapping, list, tuple)) and child:
                return False
        order: Iterable[int] = sorted(range(len(node)), key=str)
    else:
        order = range(len(node))
    for index in order:
        child = node[index]
        kind = child.__class__
        if kind is str or kind is int:
            out.append(f"{path}:{index}:{child}")
        elif kind is dict or kind is list:
            if depth >= MAX_DEPTH:
                raise _too_deep(f"{path}:{index}")
            if kind is dict:
                if not _walk_sorted(child, f"{path}:{index}:", out, depth + 1):
                    return False
            elif not _walk_sorted_list(child, f"{path}:{index}", out, depth + 1):
                return False
        elif kind is bool:
            out.append(f"{path}:{index}:{'1' if child else '0'}")
        elif isinstance(child, (Mapping, list, tuple)):
            return False
        else:
            out.append(f"{path}:{index}:{_text(child, f'{path}:{index}')}")
    return True


def _items(params: Mapping[str, Any], double: bool) -> tuple[list[Item], bool]:
    if not isinstance(params, Mapping):
        raise InvalidParameter(f"parameters must be a mapping, not {type(params).__name__}")
    items: list[Item] = []
    colon = _walk_mapping(params, "", items, double, 1)
    return items, colon


def _join(items: list[Item]) -> str:
    return ";".join([key + ":" + value for key, value in items])


def signing_string(params: Mapping[str, Any]) -> str:
    """The canonical string that is signed: sorted ``path:value`` items joined by ``;``.

    Raises ``InvalidParameter`` for a key that is not a string, a value that cannot be signed,
    or nesting deeper than ``MAX_DEPTH``.
    """
    if params.__class__ is dict:
        out: list[str] = []
        if _walk_sorted(params, "", out, 1):
            return ";".join(out)
    items, colon = _items(params, True)
    # Without ':' in any key, flattened keys are unique and sorting by key alone is total; a
    # doubled ':' can make two paths equal, and then the value decides, so that insertion
    # order never changes a signature.
    if colon:
        items.sort()
    else:
        items.sort(key=_FIRST)
    return _join(items)


def _utf8(message: str) -> bytes:
    try:
        return message.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidParameter("parameters contain text that is not valid Unicode") from exc


class SigningKey:
    """A secret prepared for HMAC-SHA512: sign and verify many payloads with one key.

    Equivalent to ``hmac.digest(secret, message, "sha512")``; the pads are hashed once here.
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, secret: str | bytes) -> None:
        key = _utf8(secret) if isinstance(secret, str) else bytes(secret)
        if len(key) > _BLOCK:
            key = hashlib.sha512(key).digest()
        key = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha512(key.translate(_IPAD))
        self._outer = hashlib.sha512(key.translate(_OPAD))

    def digest(self, message: bytes) -> bytes:
        """HMAC-SHA512 of ``message``."""
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def sign_string(self, message: str) -> str:
        """Base64 of the HMAC-SHA512 of an already built signing string."""
        return binascii.b2a_base64(self.digest(_utf8(message)), newline=False).decode("ascii")

    def sign(self, params: Mapping[str, Any]) -> str:
        """Sign ``params``: Base64 of HMAC-SHA512 over the canonical string."""
        return self.sign_string(signing_string(params))

    def verify(self, params: Mapping[str, Any], signature: object) -> bool:
        """True if ``signature`` signs ``params`` under any accepted variant (constant-time)."""
        expected = _decode_signature(signature)
        if expected is None:
            return False
        return self.verify_digest(params, expected)

    def verify_digest(self, params: Mapping[str, Any], expected: bytes) -> bool:
        """``verify`` with the signature already decoded to its 64 bytes."""
        message = signing_string(params)
        if hmac.compare_digest(self.digest(_utf8(message)), expected):
            return True
        tried = {message}
        for reading in _readings(params):
            for message in _variants(reading):
                if message in tried:
                    continue
                tried.add(message)
                if hmac.compare_digest(self.digest(_utf8(message)), expected):
                    return True
        return False


_KEYS: dict[str, SigningKey] = {}
_KEYS_MAX = 64


def _key(secret: str) -> SigningKey:
    key = _KEYS.get(secret)
    if key is None:
        if not isinstance(secret, str):
            raise InvalidParameter(f"the secret must be a string, not {type(secret).__name__}")
        if len(_KEYS) >= _KEYS_MAX:
            _KEYS.clear()
        key = _KEYS[secret] = SigningKey(secret)
    return key


def sign(params: Mapping[str, Any], secret: str) -> str:
    """Sign ``params`` with ``secret``: Base64 of HMAC-SHA512 over the canonical string.

    ``signature`` and ``frame_mode`` members are left out wherever they stand. Raises
    ``InvalidParameter`` for input that cannot be signed (see ``signing_string``).
    """
    return _key(secret).sign(params)


def _decode_signature(signature: object) -> bytes | None:
    if signature.__class__ is not str:
        return None
    assert isinstance(signature, str)
    if len(signature) != 88 or not signature.endswith("==") or not signature.isascii():
        return None
    try:
        raw = binascii.a2b_base64(signature)
    except (binascii.Error, ValueError):
        return None
    # a2b_base64 skips characters outside the alphabet; the round trip refuses them.
    if len(raw) != 64 or binascii.b2a_base64(raw, newline=False) != signature.encode("ascii"):
        return None
    return raw


def is_base64_signature(signature: object) -> bool:
    """True if ``signature`` is standard Base64 text of a 64-byte HMAC-SHA512 digest."""
    return _decode_signature(signature) is not None


def _natural(key: str) -> tuple[Any, ...]:
    parts = _DIGITS.split(key)
    return tuple(int(part) if index % 2 else part for index, part in enumerate(parts))


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]{0,9}")
_MAX_ARRAY_INDEX = 2**32 - 2


def _js_order(keys: list[str]) -> list[str]:
    """The order in which a JS object built from sorted ``keys`` enumerates them.

    The JS library sorts the keys (UTF-16 code units) and copies them into a new object, and
    JS objects enumerate array-index keys (``"0"``, ``"17"``, below 2**32 - 1) first, in
    numeric order, before the other keys in insertion order.
    """
    ordered = sorted(keys, key=_utf16)
    indices = [k for k in ordered if _ARRAY_INDEX.fullmatch(k) and int(k) <= _MAX_ARRAY_INDEX]
    if not indices:
        return ordered
    index_set = set(indices)
    return sorted(indices, key=int) + [k for k in ordered if k not in index_set]


def _per_level(value: Any, prefix: str, out: list[Item], js_objects: bool) -> None:
    """The JS library's order: keys sorted level by level, no doubling.

    With ``js_objects`` the order is what the library's objects really enumerate (array
    indices numeric, also as object keys); without it, a plain sort of the key texts at every
    level (arrays then sort their indices as text: ``10`` before ``2``).
    """
    if isinstance(value, Mapping):
        keys = [k for k in value if k not in _EXCLUDED]
        for key in _js_order(keys) if js_objects else sorted(keys, key=_utf16):
            _per_level(value[key], prefix + ":" + key if prefix else key, out, js_objects)
    elif isinstance(value, (list, tuple)):
        indices = range(len(value)) if js_objects else sorted(range(len(value)), key=str)
        for index in indices:
            path = f"{prefix}:{index}" if prefix else str(index)
            _per_level(value[index], path, out, js_objects)
    else:
        out.append((prefix, _text(value, prefix)))


_ORDERS: list[Callable[[Item], Any]] = [
    _FIRST,
    lambda item: _natural(item[0]),
    lambda item: item[0] + ":" + item[1],
]


def _variants(params: Mapping[str, Any]) -> Iterator[str]:
    """Every string an official library may have signed for ``params``, canonical first."""
    yield signing_string(params)
    for double in (True, False):
        items, _ = _items(params, double)
        for order in _ORDERS:
            yield _join(sorted(items, key=order))
    for js_objects in (True, False):
        level: list[Item] = []
        _per_level(params, "", level, js_objects)
        yield _join(level)


def _normalised(value: Any, table: Mapping[str, str]) -> tuple[Any, bool]:
    """Read URL-query text the way the libraries meant it: booleans and nulls as signed."""
    if isinstance(value, str):
        if value in table:
            return table[value], True
        return value, False
    if isinstance(value, Mapping):
        changed = False
        result = {}
        for key, child in value.items():
            result[key], child_changed = _normalised(child, table)
            changed = changed or child_changed
        return result, changed
    if isinstance(value, (list, tuple)):
        pairs = [_normalised(child, table) for child in value]
        return [child for child, _ in pairs], any(flag for _, flag in pairs)
    return value, False


def _readings(params: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The parameters as given, then (only where they differ) their query readings.

    The full reading takes ``true``/``True`` as 1, ``false``/``False`` as 0 and
    ``None``/``null`` as empty. The booleans-only reading exists because the official Python
    library writes a null into the URL as ``None`` and also signs it as ``None`` (it signs
    ``str(value)``), so a URL of its with both a boolean and a null needs the booleans read
    and the ``None`` kept.
    """
    yield params
    full, changed = _normalised(params, _QUERY_TEXT)
    if changed:
        yield full
        booleans, changed = _normalised(params, _QUERY_BOOLEANS)
        if changed and booleans != full:
            yield booleans


def verify(params: Mapping[str, Any], signature: object, secret: str) -> bool:
    """True if ``signature`` signs ``params`` under any accepted variant (constant-time).

    A signature that is not Base64 of a 64-byte digest is simply not valid (False); input that
    cannot be signed at all raises ``InvalidParameter``.
    """
    return _key(secret).verify(params, signature)
