"""Rendering of the Payment Page's HTML: one Jinja2 environment per language (autoescaping
everything, the compiled templates cached for the life of the process).

Templates call ``_("English text", name=value)``; the translation is looked up in the page's
language and the values are interpolated before autoescaping, so merchant-supplied values
are always escaped. A call with a bare literal and no values, the fixed text of a page, is
translated once, when the template is compiled for a language (``PreTranslate``), and is
escaped then like any other constant: rendering does not look it up again. Calls with values or
on a variable are made at render time. ``templates/base.html`` is the shared layout (it needs
no ``_``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, Template, select_autoescape
from jinja2.ext import Extension
from jinja2.lexer import Token, TokenStream
from starlette.responses import HTMLResponse

from .i18n import negotiate, translations

__all__ = ["NO_STORE", "PreTranslate", "gettext_for", "render", "render_page"]

TEMPLATES = Path(__file__).parent / "templates"
# Payment pages are per customer and change with the payment: never cached anywhere.
NO_STORE = {"Cache-Control": "no-store"}


class PreTranslate(Extension):
    """Replaces each ``_('literal')`` (no values) by its translation (``translate``, set for
    the environment's language by ``_environment``) as the template is compiled."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.translate: Callable[[str], str] = lambda message: message

    def filter_stream(self, stream: TokenStream) -> Iterator[Token]:
        translate = self.translate
        tokens = list(stream)
        index = 0
        while index < len(tokens):
            call = tokens[index : index + 4]
            if (
                [token.type for token in call] == ["name", "lparen", "string", "rparen"]
                and call[0].value == "_"
                and (index == 0 or tokens[index - 1].type != "dot")
            ):
                yield Token(call[0].lineno, "string", translate(call[2].value))
                index += 4
            else:
                yield tokens[index]
                index += 1


_loader = FileSystemLoader(TEMPLATES)
_environments: dict[str, Environment] = {}


def _environment(language: str) -> Environment:
    found = _environments.get(language)
    if found is None:
        found = Environment(
            loader=_loader,
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
            auto_reload=False,
            cache_size=-1,
            extensions=[PreTranslate],
        )
        extension = found.extensions[PreTranslate.identifier]
        assert isinstance(extension, PreTranslate)
        extension.translate = translations(language).gettext
        _environments[language] = found
    return found


# Jinja's own cache still takes a lock and checks the loader on every lookup.
_templates: dict[tuple[str, str], Template] = {}
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
    compiled = _templates.get((language, template))
    if compiled is None:
        compiled = _environment(language).get_template(template)
        _templates[language, template] = compiled
    return compiled.render(lang=language, _=gettext_for(language), **values)


def render_page(template: str, language: str, status: int = 200, **values: Any) -> HTMLResponse:
    """An uncacheable HTML response."""
    return HTMLResponse(render(template, language, **values), status_code=status, headers=NO_STORE)
