"""Rendering of the Payment Page's HTML: one Jinja2 environment (autoescaping everything, the
compiled templates cached for the life of the process), translated per request.

Templates call ``_("English text", name=value)``; the translation is looked up in the page's
language and the values are interpolated before autoescaping, so merchant-supplied values
are always escaped. ``templates/base.html`` is the shared layout (it needs no ``_``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, Template, select_autoescape
from starlette.responses import HTMLResponse

from .i18n import negotiate, translations

__all__ = ["NO_STORE", "gettext_for", "render", "render_page"]

TEMPLATES = Path(__file__).parent / "templates"
# Payment pages are per customer and change with the payment: never cached anywhere.
NO_STORE = {"Cache-Control": "no-store"}

_env = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
    auto_reload=False,
    cache_size=-1,
)

# Jinja's own cache still takes a lock and checks the loader on every lookup.
_templates: dict[str, Template] = {}
Gettext = Callable[..., str]
_gettexts: dict[str, Gettext] = {}


def gettext_for(language: str) -> Gettext:
    """``_(message, **values)`` in ``language``: the translation, ``%(name)s`` filled in."""
    language = negotiate(language)
    found = _gettexts.get(language)
    if found is None:
        lookup = translations(language).gettext

        def found(message: str, **values: Any) -> str:
            text = lookup(message)
            return text % values if values else text

        _gettexts[language] = found
    return found


def render(template: str, language: str, **values: Any) -> str:
    """The HTML text of ``template`` in ``language``."""
    language = negotiate(language)
    compiled = _templates.get(template)
    if compiled is None:
        compiled = _templates[template] = _env.get_template(template)
    return compiled.render(lang=language, _=gettext_for(language), **values)


def render_page(template: str, language: str, status: int = 200, **values: Any) -> HTMLResponse:
    """An uncacheable HTML response."""
    return HTMLResponse(render(template, language, **values), status_code=status, headers=NO_STORE)
