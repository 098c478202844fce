"""Persistence: schema, migrations and the unit of work."""

from .engine import Database, WriterBusy
from .migrate import migrate

__all__ = ["Database", "WriterBusy", "migrate"]
