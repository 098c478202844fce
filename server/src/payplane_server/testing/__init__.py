"""Real parts for tests and benchmarks: a throwaway PostgreSQL cluster, a live server on
loopback, and a recording HTTP receiver for callbacks. Nothing here is a mock."""

from .live import LiveServer, free_port
from .postgres import TempPostgres, postgres_available
from .receiver import CallbackReceiver, Received

__all__ = [
    "CallbackReceiver",
    "LiveServer",
    "Received",
    "TempPostgres",
    "free_port",
    "postgres_available",
]
