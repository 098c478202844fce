"""Payment Page templates translated when compiled render exactly as translating at render
time does, in every language, with merchant values escaped."""

from __future__ import annotations

from typing import Any

import pytest
from jinja2 import Environment, FileSystemLoader, select_autoescape

from payplane_server.domain.cards import CardProblem
from payplane_server.web.i18n import LANGUAGES
from payplane_server.web.pages import TEMPLATES, gettext_for, render

HOSTILE = "<script>alert(\"x\")</script> & 'quotes'"
COMMON: dict[str, Any] = {
    "amount": "1 999,00 ₽",
    "description": HOSTILE,
    "payment_id": HOSTILE,
    "token": "t0k3n-abcdefghijklmnopqrstuv",
}
PAGES: dict[str, list[dict[str, Any]]] = {
    "method.html": [{}],
    "card.html": [
        {"csrf_token": "1.abc", "deadline": None, "remaining": None, "problems": {}},
        {
            "csrf_token": "1.abc",
            "deadline": "2026-11-23T10:00:00Z",
            "remaining": "14:59",
            "problems": {
                problem.field: problem.reason
                for problem in (
                    CardProblem("pan", "The card number is not valid."),
                    CardProblem("cvv", "The CVV must be 3 or 4 digits."),
                )
            },
            "expiry": HOSTILE,
            "holder": HOSTILE,
        },
    ],
    "acs.html": [{"csrf_token": "1.abc"}],
    "waiting.html": [{"payment_status": "processing"}],
    "result.html": [
        {
            "outcome": "success",
            "payment_status": "success",
            "heading": "Payment successful",
            "reason": None,
            "card": "400000******0077",
            "return_url": "https://shop.example/ok?a=1&b=2",
            "redirect_delay": 3,
        },
        {
            "outcome": "decline",
            "payment_status": "decline",
            "heading": "Payment declined",
            "reason": HOSTILE,
            "card": None,
            "return_url": None,
            "redirect_delay": 3,
        },
    ],
    "error.html": [
        {
            "status": 400,
            "title": "Invalid payment parameters",
            "message": HOSTILE,
            "problems": [{"param": "payment_amount", "reason": HOSTILE}],
            "code": "2004",
        }
    ],
}


def reference(template: str, language: str, values: dict[str, Any]) -> str:
    """The page as plain Jinja renders it, every ``_()`` called at render time."""
    environment = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    page = environment.get_template(template)
    return page.render(lang=language, _=gettext_for(language), **values)


def test_every_payment_page_template_is_covered() -> None:
    templates = {path.name for path in TEMPLATES.glob("*.html")}
    assert templates - {"base.html", "_summary.html"} == set(PAGES)


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("template", sorted(PAGES))
def test_a_page_translated_when_compiled_is_the_page_translated_when_rendered(
    template: str, language: str
) -> None:
    for variant in PAGES[template]:
        values = {**COMMON, **variant}
        values.pop("status", None)
        page = render(template, language, **values)
        assert page == reference(template, language, values)
        assert "<script>alert" not in page


def test_fixed_text_is_in_the_language_of_the_page() -> None:
    assert "Choose a payment method" in render("method.html", "en", **COMMON)
    russian = render("method.html", "ru", **COMMON)
    assert gettext_for("ru")("Choose a payment method") in russian
    assert "Choose a payment method" not in russian
