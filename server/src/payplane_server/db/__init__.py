"""Persistence: schema, migrations and the unit of work."""

from .engine import Database
from .migrate import migrate

__all__ = ["Database", "migrate"]
