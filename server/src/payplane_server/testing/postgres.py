"""A throwaway PostgreSQL cluster on loopback, made with the system's initdb and pg_ctl."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from sqlalchemy import create_engine, text

from .live import free_port

__all__ = ["TempPostgres", "postgres_available"]


def _bindir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


def postgres_available() -> bool:
    return _bindir() is not None


class TempPostgres:
    """``start()`` makes and starts a cluster in a temporary directory; ``stop()`` removes it.

    When run as root the server runs as the ``postgres`` system user (initdb refuses root).
    """

    def __init__(self, *, durable: bool = False) -> None:
        bindir = _bindir()
        if bindir is None:
            raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        self.bindir = bindir
        self.durable = durable
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="payplane-pg-"))
        self.datadir = self.root / "data"
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        subprocess.run(
            [*self._as_user, *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.root,
        )

    def start(self) -> TempPostgres:
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.datadir),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--locale=C",
        )
        options = [
            f"-p {self.port}",
            f"-k {self.root}",
            "-c listen_addresses=127.0.0.1",
            "-c max_connections=400",
            "-c shared_buffers=256MB",
        ]
        if not self.durable:
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.datadir),
            "-l",
            str(self.root / "server.log"),
            "-o",
            " ".join(options),
            "-w",
            "start",
        )
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str, template: str | None = None) -> str:
        engine = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                clause = f" TEMPLATE {template}" if template else ""
                conn.execute(text(f'CREATE DATABASE "{name}"{clause}'))
        finally:
            engine.dispose()
        return self.url(name)

    def drop_database(self, name: str) -> None:
        engine = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            engine.dispose()

    def stop(self) -> None:
        try:
            self._run(
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.datadir),
                "-m",
                "immediate",
                "-w",
                "stop",
            )
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
