"""dashboard surface (filled in by its issue)."""

from __future__ import annotations

from starlette.routing import BaseRoute

__all__ = ["routes"]

routes: list[BaseRoute] = []
