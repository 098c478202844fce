"""Persistence: schema, migrations and the unit of work."""

from .driver import DriverStatement, driver_rows
from .engine import Database, WriterBusy
from .migrate import migrate

__all__ = ["Database", "DriverStatement", "WriterBusy", "driver_rows", "migrate"]
