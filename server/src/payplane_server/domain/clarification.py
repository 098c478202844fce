"""Clarification: what the platform asks the merchant for, how answers are judged, and how long
it waits (protocol.md section 6).

Pure: no I/O, no clock reads. A payment that waits for clarification carries a
``ClarificationState``: the parameters requested (by top-level object, the *kind*) and the values
accepted so far. What is still missing is shown to the merchant as ``clarification_fields`` in
the specification's shape::

    {"customer": {"type": "object", "description": "...",
                  "properties": {"psu_consent": {"type": "string", "description": "..."},
                                 "psu_consent_text": {"type": "string", "description": "...",
                                                      "default": "..."}}}}

Two kinds of bad answer are told apart:

- *malformed* (``check_structure``): ``additional_data`` that is not an object, unknown or
  unrequested keys, values that are not strings or are huge. The request is refused (HTTP 400)
  and nothing changes.
- *invalid* (``apply``): a string of the right shape whose value is not acceptable
  (``psu_consent`` other than ``"1"``/``"0"``, an empty or odd post code). The parameter stays
  missing and is asked for again; the wait restarts.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

__all__ = [
    "KINDS",
    "MAX_VALUE_CHARS",
    "ApplyResult",
    "ClarificationState",
    "FieldError",
    "KindSpec",
    "ParamSpec",
    "check_structure",
    "clarification_fields",
    "wait_deadline",
]

# Longer strings are malformed (400), not merely invalid: no legitimate value comes close.
MAX_VALUE_CHARS = 4096

CONSENT_GIVEN = "1"
CONSENT_REFUSED = "0"
DEFAULT_CONSENT_TEXT = (
    "I consent to the processing of this payment and to the sharing of the payment data "
    "with my bank to confirm it."
)

_POST_CODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 -]{0,15}")
_STREET_PUNCTUATION = frozenset(" .,'-/#&()")


@dataclass(frozen=True)
class FieldError:
    """One problem with one field of a request, named by its dotted path."""

    field: str
    message: str


Validator = Callable[[str], str | None]


def _printable(value: str) -> bool:
    return all(unicodedata.category(ch)[0] != "C" for ch in value)


def _consent(value: str) -> str | None:
    if value in (CONSENT_GIVEN, CONSENT_REFUSED):
        return None
    return 'must be "1" (consent given) or "0" (consent refused)'


def _consent_text(value: str) -> str | None:
    text = value.strip()
    if not text:
        return "must not be empty"
    if len(text) > 2000:
        return "must be at most 2000 characters"
    if not _printable(value.replace("\n", " ")):
        return "must not contain control characters"
    return None


def _post_code(value: str) -> str | None:
    if not value.strip():
        return "must not be empty"
    if len(value) > 16:
        return "must be at most 16 characters"
    if not _POST_CODE.fullmatch(value):
        return "may contain only Latin letters, digits, spaces and hyphens"
    return None


def _street(value: str) -> str | None:
    text = value.strip()
    if not text:
        return "must not be empty"
    if len(value) > 100:
        return "must be at most 100 characters"
    if not any(ch.isalnum() for ch in text):
        return "must contain letters or digits"
    for ch in value:
        if not (ch.isalnum() or ch in _STREET_PUNCTUATION):
            return "may contain only letters, digits, spaces and . , ' - / # & ( )"
    return None


@dataclass(frozen=True)
class ParamSpec:
    """A requested parameter: its descriptor (type, description, optional default) and check."""

    description: str
    validate: Validator
    # When the merchant does not send it, this value is taken (and shown as ``default``).
    default: str | None = None

    def descriptor(self) -> dict[str, str]:
        out = {"type": "string", "description": self.description}
        if self.default is not None:
            out["default"] = self.default
        return out


@dataclass(frozen=True)
class KindSpec:
    """A top-level object of ``additional_data`` and the parameters that may be asked under it."""

    description: str
    params: Mapping[str, ParamSpec]


KINDS: Mapping[str, KindSpec] = {
    "customer": KindSpec(
        description="Customer details",
        params={
            "psu_consent": ParamSpec(
                'The customer\'s consent is to be requested: "1" if given, "0" if refused',
                _consent,
            ),
            "psu_consent_text": ParamSpec(
                "Text displayed on the payment form", _consent_text, DEFAULT_CONSENT_TEXT
            ),
        },
    ),
    "avs_data": KindSpec(
        description="Address verification (AVS) data of the cardholder",
        params={
            "avs_post_code": ParamSpec("Post code of the cardholder's billing address", _post_code),
            "avs_street_address": ParamSpec(
                "Street address of the cardholder's billing address", _street
            ),
        },
    ),
}


def clarification_fields(missing: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
    """The ``clarification_fields`` object asking for ``missing`` (kind -> parameter names)."""
    out: dict[str, Any] = {}
    for kind, names in missing.items():
        if not names:
            continue
        spec = KINDS[kind]
        out[kind] = {
            "type": "object",
            "description": spec.description,
            "properties": {name: spec.params[name].descriptor() for name in names},
        }
    return out


def check_structure(
    additional_data: object, requested: Mapping[str, tuple[str, ...]] | None = None
) -> list[FieldError]:
    """Problems that make a clarification request malformed (refused with 400, no change).

    With ``requested`` (kind -> parameter names) given, keys the payment was not asked for are
    problems too.
    """
    if not isinstance(additional_data, dict):
        return [FieldError("additional_data", "must be an object")]
    errors: list[FieldError] = []
    for kind, group in additional_data.items():
        path = f"additional_data.{kind}"
        spec = KINDS.get(kind)
        if spec is None:
            errors.append(FieldError(path, "unknown key"))
            continue
        if requested is not None and kind not in requested:
            errors.append(FieldError(path, "was not requested for this payment"))
            continue
        if not isinstance(group, dict):
            errors.append(FieldError(path, "must be an object"))
            continue
        for name, value in group.items():
            param_path = f"{path}.{name}"
            if name not in spec.params:
                errors.append(FieldError(param_path, "unknown key"))
            elif requested is not None and name not in requested[kind]:
                errors.append(FieldError(param_path, "was not requested for this payment"))
            elif not isinstance(value, str):
                errors.append(FieldError(param_path, "must be a string"))
            elif len(value) > MAX_VALUE_CHARS:
                errors.append(FieldError(param_path, f"must be at most {MAX_VALUE_CHARS} chars"))
    return errors


@dataclass(frozen=True)
class ApplyResult:
    """The state after a submission, and what it means."""

    state: ClarificationState
    # Submitted values that were rejected (asked for again).
    invalid: tuple[FieldError, ...]

    @property
    def complete(self) -> bool:
        return self.state.complete

    @property
    def refused(self) -> bool:
        return self.state.refused


@dataclass(frozen=True)
class ClarificationState:
    """The parameters requested of a payment and the values accepted so far."""

    requested: dict[str, tuple[str, ...]]
    accepted: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def request(cls, kind: str) -> ClarificationState:
        """A fresh request for every parameter of ``kind``."""
        return cls(requested={kind: tuple(KINDS[kind].params)})

    @property
    def missing(self) -> dict[str, tuple[str, ...]]:
        """Requested parameters without an accepted value (defaults not yet applied)."""
        out: dict[str, tuple[str, ...]] = {}
        for kind, names in self.requested.items():
            have = self.accepted.get(kind, {})
            left = tuple(name for name in names if name not in have)
            if left:
                out[kind] = left
        return out

    @property
    def complete(self) -> bool:
        """True when every requested parameter has a value or a default, or consent was
        refused (nothing else matters then)."""
        if self.refused:
            return True
        for kind, names in self.missing.items():
            if any(KINDS[kind].params[name].default is None for name in names):
                return False
        return True

    @property
    def refused(self) -> bool:
        return self.accepted.get("customer", {}).get("psu_consent") == CONSENT_REFUSED

    def fields(self) -> dict[str, Any]:
        """``clarification_fields`` for what is still missing."""
        return clarification_fields(self.missing)

    def with_defaults(self) -> ClarificationState:
        """The state with every missing parameter that has a default filled in."""
        accepted = {kind: dict(values) for kind, values in self.accepted.items()}
        for kind, names in self.missing.items():
            for name in names:
                default = KINDS[kind].params[name].default
                if default is not None:
                    accepted.setdefault(kind, {})[name] = default
        return ClarificationState(self.requested, accepted)

    def apply(self, additional_data: Mapping[str, Mapping[str, str]]) -> ApplyResult:
        """Take a well-formed submission (see ``check_structure``): valid values are accepted
        (replacing earlier ones), invalid ones are dropped and asked for again."""
        accepted = {kind: dict(values) for kind, values in self.accepted.items()}
        invalid: list[FieldError] = []
        for kind, group in additional_data.items():
            for name, value in group.items():
                problem = KINDS[kind].params[name].validate(value)
                if problem is None:
                    accepted.setdefault(kind, {})[name] = value
                else:
                    accepted.get(kind, {}).pop(name, None)
                    invalid.append(FieldError(f"additional_data.{kind}.{name}", problem))
        accepted = {kind: values for kind, values in accepted.items() if values}
        state = ClarificationState(self.requested, accepted)
        if state.complete:
            state = state.with_defaults()
        return ApplyResult(state, tuple(invalid))

    def to_json(self) -> str:
        return json.dumps(
            {
                "requested": {k: list(v) for k, v in self.requested.items()},
                "accepted": self.accepted,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> ClarificationState:
        data = json.loads(text)
        return cls(
            requested={kind: tuple(names) for kind, names in data["requested"].items()},
            accepted={kind: dict(values) for kind, values in data.get("accepted", {}).items()},
        )


def wait_deadline(at: datetime, processing_deadline: datetime, wait_seconds: int) -> datetime:
    """When the wait that starts ``at`` runs out: ``wait_seconds`` later, but never past the
    payment's processing threshold."""
    return min(at + timedelta(seconds=wait_seconds), processing_deadline)
