"""Settings from the environment and an optional TOML file, with safe defaults.

Precedence: explicit keyword arguments (the CLI), then ``PAYPLANE_*`` environment variables,
then the file named by ``PAYPLANE_CONFIG`` (or ``<data_dir>/payplane.toml`` when it exists), then
the defaults below. Secrets are never part of ``repr``.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Settings", "load_settings"]


def _secret_field(default: str | None = None) -> Any:
    return field(default=default, repr=False)


@dataclass(frozen=True)
class Settings:
    """Everything a Payplane process needs to know; built once, passed everywhere."""

    data_dir: Path = Path("./data")
    database_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    public_url: str | None = None
    workers: int = 1
    role: str = "all"

    data_api_host: str | None = None
    data_api_port: int = 8443
    data_api_plain_http: bool = False
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None

    master_key: str | None = _secret_field()

    rate_limit_per_minute: int = 60
    rate_limit_retry_after: int = 3
    clarification_wait_seconds: int = 30 * 60
    processing_threshold_seconds: int = 24 * 60 * 60
    callback_timeout_seconds: float = 30.0
    callback_concurrency: int = 64
    callback_per_host_concurrency: int = 4
    allow_private_callback_urls: bool = True
    max_body_bytes: int = 1024 * 1024
    # A request body on the Payment Page host must arrive within this many seconds (else 408).
    body_timeout_seconds: float = 30.0
    # The simulator's "short delay" before its time-out decline (card 4539121411168251).
    simulator_delay_seconds: float = 0.5
    log_level: str = "info"

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'payplane.db').resolve()}"

    @property
    def is_sqlite(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")

    @property
    def payment_page_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


_ENV_PREFIX = "PAYPLANE_"


def _coerce(name: str, raw: Any) -> Any:
    kind = {f.name: f.type for f in dataclasses.fields(Settings)}[name]
    if raw is None:
        return None
    text = str(raw)
    if "bool" in str(kind):
        return text.strip().lower() in ("1", "true", "yes", "on")
    if "Path" in str(kind):
        return Path(text)
    if str(kind) == "int":
        return int(text)
    if str(kind) == "float":
        return float(text)
    return text


def load_settings(environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
    """Build Settings from (in order of precedence) overrides, environment, file, defaults."""
    env = dict(os.environ if environ is None else environ)
    names = {f.name for f in dataclasses.fields(Settings)}
    values: dict[str, Any] = {}

    data_dir = overrides.get("data_dir") or env.get(_ENV_PREFIX + "DATA_DIR") or "./data"
    config_file = env.get(_ENV_PREFIX + "CONFIG")
    path = Path(config_file) if config_file else Path(data_dir) / "payplane.toml"
    if path.is_file():
        with path.open("rb") as handle:
            for key, raw in tomllib.load(handle).items():
                if key in names:
                    values[key] = _coerce(key, raw)
    for name in names:
        raw_env = env.get(_ENV_PREFIX + name.upper())
        if raw_env is not None and raw_env != "":
            values[name] = _coerce(name, raw_env)
    for name, raw in overrides.items():
        if raw is not None:
            values[name] = _coerce(name, raw) if isinstance(raw, str) else raw
    values["data_dir"] = Path(values.get("data_dir", data_dir))
    return Settings(**values)
