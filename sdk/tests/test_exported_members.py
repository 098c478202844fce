"""The public door of the package: exactly these names, kept sorted."""

from __future__ import annotations

import payplane

EXPECTED = [
    "DEFAULT_DATA_API_URL",
    "DEFAULT_PAYMENT_PAGE_URL",
    "INTERFACE_TYPE_ID",
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "ApiError",
    "Callback",
    "ClarificationResult",
    "DataApi",
    "DataApiError",
    "Gate",
    "GateApi",
    "GateApiError",
    "InvalidParameter",
    "InvalidSignature",
    "MalformedCallback",
    "Param",
    "ParamProblem",
    "ParamValue",
    "Payment",
    "PayplaneError",
    "ServiceUnreachable",
    "UnexpectedResponse",
    "ValidationException",
    "is_base64_signature",
    "sign",
    "signing_string",
    "verify",
]


def _isort_style(name: str) -> tuple[int, str]:
    # ruff's RUF022 order: CONSTANTS, then Classes, then functions.
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def test_all_lists_exactly_the_public_names() -> None:
    assert payplane.__all__ == EXPECTED


def test_all_is_sorted_constants_classes_functions() -> None:
    assert payplane.__all__ == sorted(payplane.__all__, key=_isort_style)


def test_every_exported_name_exists_and_public_ones_are_documented() -> None:
    for name in payplane.__all__:
        member = getattr(payplane, name)
        if callable(member) and not name.isupper() and name != "ParamValue":
            assert member.__doc__, f"{name} has no docstring"


def test_every_exported_object_claims_the_public_package() -> None:
    # Private modules stay private: nothing in __all__ is only reachable through them by name.
    for name in payplane.__all__:
        assert hasattr(payplane, name)
    assert not any(name.startswith("_") for name in payplane.__all__)
