"""The long-lived objects of one process, built once from Settings and passed to every surface."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .clock import Clock, SystemClock
from .config import Settings
from .crypto import SecretBox, load_master_key
from .db import Database

__all__ = ["AppContext"]


@dataclass
class AppContext:
    settings: Settings
    db: Database
    box: SecretBox
    clock: Clock
    # Pluggable parts, set by their owners (the acquirer, the callback signal, ...).
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        settings: Settings,
        *,
        clock: Clock | None = None,
        db: Database | None = None,
    ) -> AppContext:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        key = load_master_key(settings.master_key, settings.data_dir)
        return cls(
            settings=settings,
            db=db or Database(settings.resolved_database_url),
            box=SecretBox(key),
            clock=clock or SystemClock(),
        )

    def close(self) -> None:
        self.db.dispose()
