"""Callbacks: read a body, check its signature, and only then hand out its content."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Union

from ._exceptions import InvalidParameter, InvalidSignature, MalformedCallback, PayplaneError
from ._http import load_json_object
from ._signature import SigningKey, _decode_signature, _key

__all__ = ["MAX_BODY_BYTES", "Body", "Callback", "find_signature", "verified_data"]

#: Callback bodies larger than this (1 MiB) are refused before they are parsed.
MAX_BODY_BYTES = 1024 * 1024

#: A callback body as it arrives: the raw request body, or JSON already parsed into a dict.
Body = Union[str, bytes, bytearray, memoryview, Mapping[str, Any]]

_SAFE_TEXT_CHARS = MAX_BODY_BYTES // 4  # no text this short can exceed 1 MiB in UTF-8


Malformed = Callable[[str], PayplaneError]


def _load(body: Body, what: str, malformed: Malformed) -> dict[str, Any]:
    kind = body.__class__
    if kind is str or (kind is not bytes and isinstance(body, str)):
        assert isinstance(body, str)
        if len(body) > _SAFE_TEXT_CHARS and len(body.encode("utf-8", "replace")) > MAX_BODY_BYTES:
            raise malformed(f"the {what} is larger than {MAX_BODY_BYTES} bytes")
    elif kind is bytes or isinstance(body, (bytes, bytearray, memoryview)):
        assert isinstance(body, (bytes, bytearray, memoryview))
        body = bytes(body)
        if len(body) > MAX_BODY_BYTES:
            raise malformed(f"the {what} is larger than {MAX_BODY_BYTES} bytes")
    elif isinstance(body, Mapping):
        return body  # type: ignore[return-value]  # keys are checked while verifying
    else:
        raise malformed(f"the {what} must be str, bytes or a dict, not {type(body).__name__}")
    try:
        return load_json_object(body)
    except ValueError as exc:
        raise malformed(f"the {what} cannot be read: {exc}") from exc


def find_signature(data: Mapping[str, Any]) -> object:
    """The signature of a callback-format body: top-level ``signature``, else in ``general``."""
    signature = data.get("signature")
    if signature is None:
        general = data.get("general")
        if isinstance(general, Mapping):
            signature = general.get("signature")
    return signature


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _copy(child) for key, child in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy(child) for child in value]
    return value


def verified_data(
    body: Body,
    key: SigningKey,
    what: str = "callback",
    require_payment: bool = True,
    malformed: Malformed = MalformedCallback,
) -> dict[str, Any]:
    """Parse ``body`` and check its signature; return the content only if it is genuine.

    Raises ``malformed(reason)`` (``MalformedCallback`` by default) for a body that cannot be
    read (or, with ``require_payment``, has no ``payment.id`` and ``payment.status``), and
    ``InvalidSignature`` for a signature that is missing, not Base64 of a 64-byte digest, or
    wrong.
    """
    given = body
    data = _load(body, what, malformed)
    signature = find_signature(data)
    if signature is None:
        raise InvalidSignature(f"the {what} carries no signature")
    expected = _decode_signature(signature)
    if expected is None:
        raise InvalidSignature(
            f"the {what}'s signature is not Base64 of a 64-byte HMAC-SHA512 digest"
        )
    try:
        genuine = key.verify_digest(data, expected)
    except InvalidParameter as exc:
        raise malformed(f"the {what} cannot be read: {exc}") from exc
    if not genuine:
        raise InvalidSignature(f"the {what}'s signature does not match its content")
    if data is given:
        data = _copy(data)  # the caller's dict may change later; the verified copy may not
    if require_payment:
        payment = data.get("payment")
        if not isinstance(payment, dict):
            raise malformed(f"the {what} has no payment object")
        for field in ("id", "status"):
            if not isinstance(payment.get(field), str):
                raise malformed(f"the {what} has no payment.{field} text")
    return data


class Callback:
    """A callback (or a status response in callback format) whose signature has been checked.

    Obtain one from ``Gate.handle_callback`` or ``GateApi.status``, or build one with
    ``Callback(body, secret)``, which checks the signature the same way: there is no way to
    hold a ``Callback`` whose signature did not verify.
    """

    #: Payment statuses: those of Payplane (protocol.md section 4) and the rest of the
    #: original platform's list, which other deployments may send.
    PROCESSING = "processing"
    AWAITING_3DS_RESULT = "awaiting 3ds result"
    AWAITING_CLARIFICATION = "awaiting clarification"
    SUCCESS = "success"
    DECLINE = "decline"
    ERROR = "error"
    AWAITING_REDIRECT_RESULT = "awaiting redirect result"
    AWAITING_CUSTOMER = "awaiting customer"
    AWAITING_CAPTURE = "awaiting capture"
    CANCELLED = "cancelled"
    REFUNDED = "refunded"
    PARTIALLY_REFUNDED = "partially refunded"
    REVERSED = "reversed"

    #: Every status above.
    STATUSES = (
        PROCESSING,
        AWAITING_3DS_RESULT,
        AWAITING_CLARIFICATION,
        SUCCESS,
        DECLINE,
        ERROR,
        AWAITING_REDIRECT_RESULT,
        AWAITING_CUSTOMER,
        AWAITING_CAPTURE,
        CANCELLED,
        REFUNDED,
        PARTIALLY_REFUNDED,
        REVERSED,
    )

    __slots__ = ("_data",)

    def __init__(self, body: Body, secret: str) -> None:
        self._data = verified_data(body, _key(secret))

    @classmethod
    def _verified(cls, data: dict[str, Any]) -> Callback:
        """Wrap data that ``verified_data`` has already checked."""
        callback = cls.__new__(cls)
        callback._data = data
        return callback

    def get_payment_id(self) -> str:
        """The payment ID (``payment.id``)."""
        return str(self._data["payment"]["id"])

    def get_payment_status(self) -> str:
        """The payment status (``payment.status``), one of ``STATUSES`` on Payplane."""
        return str(self._data["payment"]["status"])

    def get_payment(self) -> dict[str, Any]:
        """The ``payment`` object: id, type, status, date, method, sum, description."""
        payment: dict[str, Any] = self._data["payment"]
        return payment

    def get_project_id(self) -> int | None:
        """The project ID, if the body carries one."""
        value = self._data.get("project_id")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def get_operation(self) -> dict[str, Any] | None:
        """The ``operation`` object, if present."""
        operation = self._data.get("operation")
        return operation if isinstance(operation, dict) else None

    def get_value(self, path: str) -> Any:
        """The value at a dotted path (``"operation.sum_initial.amount"``), or None.

        A segment made of digits indexes into a list (``"errors.0.code"``).
        """
        node: Any = self._data
        for segment in path.split("."):
            if isinstance(node, dict):
                if segment not in node:
                    return None
                node = node[segment]
            elif isinstance(node, list) and segment.isdigit() and int(segment) < len(node):
                node = node[int(segment)]
            else:
                return None
        return node

    @property
    def clarification_fields(self) -> dict[str, Any] | None:
        """What the platform still needs (keyed by object, e.g. ``customer``), or None."""
        fields = self._data.get("clarification_fields")
        return fields if isinstance(fields, dict) else None

    def is_awaiting_clarification(self) -> bool:
        """True if the platform asks for additional payment information."""
        return (
            self.clarification_fields is not None
            or self.get_payment_status() == self.AWAITING_CLARIFICATION
        )

    @property
    def signature(self) -> str:
        """The (verified) signature the body carried."""
        return str(find_signature(self._data))

    def to_dict(self) -> dict[str, Any]:
        """A deep copy of the whole verified body, signature included."""
        copied: dict[str, Any] = _copy(self._data)
        return copied

    def __repr__(self) -> str:
        return (
            f"Callback(payment_id={self.get_payment_id()!r}, status={self.get_payment_status()!r})"
        )
