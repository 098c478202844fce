"""Persistence: schema, migrations and the unit of work."""

from .engine import Database, WriterBusy, driver_rows
from .migrate import migrate

__all__ = ["Database", "WriterBusy", "driver_rows", "migrate"]
