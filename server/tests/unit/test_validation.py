"""The one Payment Page validator (protocol.md sections 3 and 9) and the strict query parser."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, quote_plus, urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from payplane_server.domain import validation as v
from payplane_server.domain.validation import parse_query, validate
from payplane_server.errors import ParamProblem

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
GOOD: dict[str, Any] = {
    "project_id": "402",
    "payment_id": "order-1",
    "payment_amount": "1999",
    "payment_currency": "USD",
    "customer_id": "c-1",
}


def problems(**changes: Any) -> dict[str, str]:
    params = {**GOOD, **changes}
    for name, value in changes.items():
        if value is ...:
            del params[name]
    request, found = validate(params, now=NOW)
    assert (request is None) == bool(found)
    return {problem.param: problem.reason for problem in found}


def test_the_required_parameters_are_enough() -> None:
    request, found = validate(GOOD, now=NOW)
    assert found == []
    assert request is not None
    assert (request.project_id, request.amount, request.currency) == (402, 1999, "USD")
    assert request.params == GOOD


def test_json_typed_values_are_accepted_too() -> None:
    request, found = validate({**GOOD, "project_id": 402, "payment_amount": 1999}, now=NOW)
    assert found == [] and request is not None and request.amount == 1999


@pytest.mark.parametrize(
    "name", ["project_id", "payment_id", "payment_amount", "payment_currency", "customer_id"]
)
def test_a_missing_or_null_required_parameter_is_named(name: str) -> None:
    assert problems(**{name: ...}) == {name: "This value is required, null given."}
    assert problems(**{name: None}) == {name: "This value is required, null given."}


@pytest.mark.parametrize("name", ["payment_id", "customer_id"])
def test_blank_text_is_refused(name: str) -> None:
    assert problems(**{name: ""}) == {name: v.BLANK}
    assert problems(**{name: "   "}) == {name: v.BLANK}


@pytest.mark.parametrize(
    ("amount", "reason"),
    [
        ("0", v.NOT_POSITIVE),
        ("-5", v.NOT_POSITIVE),
        (0, v.NOT_POSITIVE),
        (-1, v.NOT_POSITIVE),
        (str(2**63), v.TOO_BIG),
        (2**63, v.TOO_BIG),
        ("9" * 5000, v.TOO_BIG),
        ("12.5", v.NOT_INTEGER),
        ("1e3", v.NOT_INTEGER),
        (" 12", v.NOT_INTEGER),
        ("١٢", v.NOT_INTEGER),
        ("", v.NOT_INTEGER),
        (True, v.NOT_INTEGER),
        (12.0, v.NOT_INTEGER),
        ([1], v.NOT_INTEGER),
    ],
)
def test_amounts_must_be_positive_integers_below_2_63(amount: Any, reason: str) -> None:
    assert problems(payment_amount=amount) == {"payment_amount": reason}


def test_the_largest_amount_is_accepted() -> None:
    assert problems(payment_amount=str(2**63 - 1)) == {}


@pytest.mark.parametrize("currency", ["XXX", "usd", "US", "DOLLAR", "XAU", "ABC"])
def test_unknown_currencies_are_refused(currency: str) -> None:
    assert problems(payment_currency=currency) == {"payment_currency": v.UNKNOWN_CURRENCY}


def test_project_id_must_be_a_positive_integer() -> None:
    assert problems(project_id="abc") == {"project_id": v.NOT_INTEGER}
    assert problems(project_id="0") == {"project_id": v.NOT_POSITIVE}


def test_text_over_its_column_is_refused() -> None:
    assert problems(payment_id="x" * 256) == {"payment_id": v._too_long(255)}
    assert problems(payment_id="x" * 255) == {}


def test_values_over_64_kib_semicolons_and_nul_are_refused_even_if_unknown() -> None:
    huge = "x" * (64 * 1024 + 1)
    assert problems(payment_description=huge) == {"payment_description": v.TOO_LONG_BYTES}
    assert problems(whatever=huge) == {"whatever": v.TOO_LONG_BYTES}
    assert problems(customer_id="a;b") == {"customer_id": v.SEMICOLON}
    assert problems(whatever="a;b") == {"whatever": v.SEMICOLON}
    assert problems(payment_description="a\x00b") == {"payment_description": v.CONTROL}
    assert problems(payment_id="a\x01b") == {"payment_id": v.CONTROL}


def test_unknown_parameters_are_ignored_and_not_kept() -> None:
    request, _ = validate({**GOOD, "close_on_missclick": "True"}, now=NOW)
    assert request is not None and "close_on_missclick" not in request.params


def test_lone_surrogates_from_json_are_refused() -> None:
    assert problems(customer_id="a\ud800") == {"customer_id": v.BAD_TEXT}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-22T11:00:00", datetime(2026, 11, 22, 11, tzinfo=UTC)),
        ("2026-11-22T11:00:00+00:00", datetime(2026, 11, 22, 11, tzinfo=UTC)),
        ("2026-11-22T14:00:00+0300", datetime(2026, 11, 22, 11, tzinfo=UTC)),
        ("2026-11-22T11:00:00Z", datetime(2026, 11, 22, 11, tzinfo=UTC)),
        ("2026-11-23", datetime(2026, 11, 23, tzinfo=UTC)),
    ],
)
def test_best_before_is_iso_8601_and_utc_without_offset(text: str, expected: datetime) -> None:
    assert v.parse_best_before(text) == expected
    request, _ = validate({**GOOD, "best_before": text}, now=NOW)
    assert request is not None and request.best_before == expected


@pytest.mark.parametrize(
    "text", ["tomorrow", "2026-13-01T00:00:00", "", "9999-12-31T23:59:59-14:00", "1" * 100]
)
def test_unparsable_best_before_is_refused(text: str) -> None:
    assert problems(best_before=text) == {"best_before": v.BAD_DATETIME}


def test_best_before_in_the_past_is_refused_only_when_now_is_given() -> None:
    assert problems(best_before="2026-11-22T09:59:59Z") == {"best_before": v.PAST}
    assert problems(best_before="2026-11-22T10:00:00Z") == {"best_before": v.PAST}
    request, found = validate({**GOOD, "best_before": "2020-01-01T00:00:00"})
    assert found == [] and request is not None


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "ftp://shop.example/",
        "/relative",
        "http://",
        "https://a b/",
        "data:text/html,x",
        "http://shop.example/\x07",
    ],
)
def test_merchant_urls_must_be_absolute_http(url: str) -> None:
    assert problems(merchant_success_url=url) == {"merchant_success_url": v.BAD_URL}


def test_merchant_urls_over_http_and_https_pass() -> None:
    assert (
        problems(
            merchant_success_url="https://shop.example/ok?order=1",
            merchant_fail_url="http://127.0.0.1:8000/fail",
        )
        == {}
    )


@pytest.mark.parametrize(
    ("name", "value", "ok"),
    [
        ("language_code", "ru", True),
        ("language_code", "RU", True),
        ("language_code", "pt-BR", True),
        ("language_code", "russian", False),
        ("customer_email", "a@b.example", True),
        ("customer_email", "not-an-email", False),
        ("customer_phone", "+7 (999) 123-45-67", True),
        ("customer_phone", "12", False),
        ("customer_country", "RU", True),
        ("customer_country", "RUS", False),
        ("region_code", "US", True),
    ],
)
def test_formatted_optional_parameters(name: str, value: str, ok: bool) -> None:
    assert (problems(**{name: value}) == {}) is ok


def test_language_code_is_kept_lower_case() -> None:
    request, _ = validate({**GOOD, "language_code": "RU"}, now=NOW)
    assert request is not None and request.language_code == "ru"


def test_every_bad_parameter_is_reported_at_once_in_order() -> None:
    request, found = validate(
        {"project_id": "x", "payment_amount": "0", "payment_currency": "ZZZ"}, now=NOW
    )
    assert request is None
    assert [p.param for p in found] == [
        "project_id",
        "payment_amount",
        "payment_currency",
        "payment_id",
        "customer_id",
    ]


def test_the_signature_is_not_a_parameter() -> None:
    request, found = validate({**GOOD, "signature": "a;b"}, now=NOW)
    assert found == [] and request is not None and "signature" not in request.params


# --- the raw query -------------------------------------------------------------------------


def test_a_plain_query_parses() -> None:
    params, found = parse_query(b"a=1&b=x+y&c=%D1%80%D1%83&d=&e=%2B")
    assert found == []
    assert params == {"a": "1", "b": "x y", "c": "ру", "d": "", "e": "+"}


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=12), st.text(max_size=24), min_size=1, max_size=10
    ),
    st.booleans(),
)
def test_any_encoded_query_parses_back_to_its_parameters(
    sent: dict[str, str], spaces_as_plus: bool
) -> None:
    # Fields with nothing to decode take a shorter path than the others: both agree.
    raw = urlencode(sent, quote_via=quote_plus if spaces_as_plus else quote)
    assert parse_query(raw.encode()) == (sent, [])


def test_a_parameter_repeated_in_another_encoding_is_still_repeated() -> None:
    for raw in (b"a=1&a=%31", b"a=%31&a=1", b"a+b=1&a%20b=2"):
        _, found = parse_query(raw)
        assert found == [ParamProblem(found[0].param, v.REPEATED)]


def test_empty_fields_are_skipped() -> None:
    assert parse_query(b"a=1&&b=2&") == ({"a": "1", "b": "2"}, [])


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"a=1&a=2", ParamProblem("a", v.REPEATED)),
        (b"a=%zz", ParamProblem("a", v.BAD_ENCODING)),
        (b"a=%4", ParamProblem("a", v.BAD_ENCODING)),
        (b"a=%ff%fe", ParamProblem("a", v.NOT_UTF8)),
        (b"a=\xff", ParamProblem("query", "The query string is not valid UTF-8.")),
        (b"flag", ParamProblem("flag", v.MALFORMED)),
        (b"=1", ParamProblem("query", v.MALFORMED)),
        (b"%zz=1", ParamProblem("query", v.MALFORMED)),
        (b"&".join(b"p%d=1" % i for i in range(201)), ParamProblem("query", v.TOO_MANY)),
    ],
)
def test_a_malformed_query_is_a_problem_not_an_exception(raw: bytes, problem: ParamProblem) -> None:
    _, found = parse_query(raw)
    assert problem in found


def test_semicolons_survive_parsing_for_the_validator_to_refuse() -> None:
    params, found = parse_query(b"customer_id=a;b&payment_id=x%3By")
    assert found == [] and params == {"customer_id": "a;b", "payment_id": "x;y"}
