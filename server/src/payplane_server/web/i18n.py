"""Languages of the Payment Page: gettext catalogs (``locale/<lang>/LC_MESSAGES/messages.po``)
compiled in memory with Babel when first needed, so no binary ``.mo`` is kept in the tree.

``negotiate`` maps any ``language_code`` (any case, with or without a region) to a supported
language; anything unknown is English. Updating the catalogs (from the repository root)::

    uv run pybabel extract -F server/babel.cfg -k N_ -k CardProblem:2 --no-location \
        --sort-output -o /tmp/messages.pot server/src/payplane_server
    uv run pybabel update -i /tmp/messages.pot -d server/src/payplane_server/web/locale \
        --no-location --width 100
"""

from __future__ import annotations

import gettext
import io
import threading
from pathlib import Path

from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

__all__ = ["DEFAULT_LANGUAGE", "LANGUAGES", "negotiate", "translations"]

LOCALE_DIR = Path(__file__).parent / "locale"
DEFAULT_LANGUAGE = "en"
LANGUAGES = ("en", "ru")

_cache: dict[str, gettext.NullTranslations] = {}
_lock = threading.Lock()


def negotiate(code: str | None) -> str:
    """``RU``, ``ru-RU``, ``ru_ru`` are ``ru``; unknown or missing is ``en``."""
    if not code:
        return DEFAULT_LANGUAGE
    primary = code.strip().replace("_", "-").split("-", 1)[0].lower()
    return primary if primary in LANGUAGES else DEFAULT_LANGUAGE


def _compile(language: str) -> gettext.NullTranslations:
    path = LOCALE_DIR / language / "LC_MESSAGES" / "messages.po"
    with path.open("rb") as handle:
        catalog = read_po(handle, locale=language)
    buffer = io.BytesIO()
    write_mo(buffer, catalog)
    buffer.seek(0)
    return gettext.GNUTranslations(buffer)


def translations(language: str) -> gettext.NullTranslations:
    """The compiled catalog of a supported language (built once per process)."""
    language = negotiate(language)
    found = _cache.get(language)
    if found is None:
        with _lock:
            found = _cache.get(language)
            if found is None:
                found = _compile(language)
                _cache[language] = found
    return found
