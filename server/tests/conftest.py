"""Shared fixtures: real SQLite and PostgreSQL databases, a fake clock, live servers.

``database_url`` is parametrised over both engines, so a test that takes it (or ``ctx``) runs
on SQLite and on PostgreSQL. PostgreSQL is a throwaway cluster started once per session; each
test gets a fresh database copied from a migrated template. Without PostgreSQL binaries the
PostgreSQL cases skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import base64
import itertools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from payplane_server.clock import FakeClock
from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.db import Database, migrate
from payplane_server.testing import TempPostgres, postgres_available

IN_CI = os.environ.get("CI", "").lower() == "true"
MASTER_KEY = base64.b64encode(b"k" * 32).decode()
_counter = itertools.count()


def require(available: bool, what: str) -> None:
    """Skip when ``what`` is missing on a developer machine; fail under CI."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required under CI=true but is not installed")
    pytest.skip(f"{what} is not installed")


@pytest.fixture(scope="session")
def postgres() -> Iterator[TempPostgres]:
    require(postgres_available(), "PostgreSQL")
    server = TempPostgres().start()
    try:
        server.create_database("payplane_template")
        migrate(server.url("payplane_template"))
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file, copied for each test (migrating costs far more than copying)."""
    path = tmp_path_factory.mktemp("template") / "payplane.db"
    url = f"sqlite:///{path}"
    migrate(url)
    assert not path.with_name(path.name + "-wal").exists()
    return path


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        target = tmp_path / "payplane.db"
        shutil.copyfile(template, target)
        url = f"sqlite:///{target}"
        yield url
        return
    server: TempPostgres = request.getfixturevalue("postgres")
    name = f"t_{os.getpid()}_{next(_counter)}"
    url = server.create_database(name, template="payplane_template")
    yield url
    server.drop_database(name)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings(data_dir=tmp_path / "data", database_url=database_url, master_key=MASTER_KEY)


@pytest.fixture
def ctx(settings: Settings, clock: FakeClock) -> Iterator[AppContext]:
    context = AppContext.create(settings, clock=clock, db=Database(settings.resolved_database_url))
    yield context
    context.close()


@pytest.fixture
def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    require(path is not None, "Chromium (Debian package chromium)")
    assert path is not None
    return path


# Every body a CallbackReceiver gets in this session is appended to this file (see
# ``testing/receiver.py``); ``test_callback_shapes`` verifies them all, last.
CALLBACK_LOG_ENV = "PAYPLANE_CALLBACK_LOG"


@pytest.fixture(scope="session", autouse=True)
def callback_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("callback-log") / "received.b64"
    path.touch()
    previous = os.environ.get(CALLBACK_LOG_ENV)
    os.environ[CALLBACK_LOG_ENV] = str(path)
    yield path
    if previous is None:
        os.environ.pop(CALLBACK_LOG_ENV, None)
    else:
        os.environ[CALLBACK_LOG_ENV] = previous


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "last: runs after every other test of the session")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    last = [item for item in items if item.get_closest_marker("last")]
    if last:
        items[:] = [item for item in items if not item.get_closest_marker("last")] + last


# Every log record of the session (our loggers at DEBUG, third-party at WARNING) goes to
# ``<basetemp>/logscan/inprocess.log``; ``tests/security/test_log_scan.py`` scans it, last,
# together with every ``*.log`` a test wrote under the session's temporary directory (the logs
# of the server processes the e2e, scale and chaos tests start), for secrets and card data.
LOG_SCAN_DIR_ENV = "PAYPLANE_TEST_LOG_DIR"


@pytest.fixture(scope="session", autouse=True)
def log_capture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    import logging

    directory = tmp_path_factory.getbasetemp() / "logscan"
    directory.mkdir(exist_ok=True)
    handler = logging.FileHandler(directory / "inprocess.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    ours = logging.getLogger("payplane")
    previous_level = ours.level
    ours.setLevel(logging.DEBUG)
    root.addHandler(handler)
    os.environ[LOG_SCAN_DIR_ENV] = str(directory)
    yield directory
    root.removeHandler(handler)
    ours.setLevel(previous_level)
    handler.close()
