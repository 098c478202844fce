"""`payplane-server serve` as an operator runs it: a real process tree on loopback."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from payplane_server.testing import free_port

pytestmark = pytest.mark.slow


class Served:
    def __init__(self, process: subprocess.Popen[str], port: int, api_port: int, log: Path):
        self.process = process
        self.url = f"http://127.0.0.1:{port}"
        self.api_port = api_port
        self.log = log

    def children(self) -> set[int]:
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return {int(pid) for pid in path.read_text().split()}


def _start(tmp_path: Path, *extra: str) -> Served:
    port, api_port = free_port(), free_port()
    log = tmp_path / "serve.log"
    env = dict(os.environ, PAYPLANE_DATA_DIR=str(tmp_path / "data"))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "payplane_server",
            "serve",
            "--port",
            str(port),
            "--data-api-port",
            str(api_port),
            *extra,
        ],
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )
    served = Served(process, port, api_port, log)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            if httpx.get(served.url + "/healthz", timeout=1).status_code == 200:
                return served
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError("serve did not come up:\n" + log.read_text())


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(*extra: str) -> Served:
        served = _start(tmp_path, *extra)
        started.append(served)
        return served

    yield start
    for served in started:
        if served.process.poll() is None:
            served.process.send_signal(signal.SIGTERM)
            try:
                served.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                served.process.kill()


def test_serve_runs_the_page_host_and_a_tls_data_api_with_a_self_signed_certificate(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    served = serve()
    certificate = tmp_path / "data" / "tls" / "data-api.crt"
    assert str(certificate) in served.log.read_text()
    context = ssl.create_default_context(cafile=str(certificate))
    with (
        socket.create_connection(("127.0.0.1", served.api_port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    assert (tmp_path / "data" / "master.key").exists()
    assert "production must set PAYPLANE_MASTER_KEY" in served.log.read_text()


def test_sigterm_stops_serve_cleanly(serve: Callable[..., Served]) -> None:
    served = serve()
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(timeout=20) == 0


def test_a_killed_serving_process_is_replaced_and_service_goes_on(
    serve: Callable[..., Served],
) -> None:
    served = serve("--workers", "2")
    assert "NOTE: on SQLite one serving process is faster" in served.log.read_text()
    deadline = time.monotonic() + 90
    while len(served.children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    before = served.children()
    assert len(before) == 2
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        now = served.children()
        if len(now) == 2 and victim not in now:
            break
        time.sleep(0.1)
    assert victim not in served.children() and len(served.children()) == 2
    for _ in range(20):
        assert httpx.get(served.url + "/healthz", timeout=5).status_code == 200


def test_plain_http_data_api_is_served_with_a_warning(
    serve: Callable[..., Served],
) -> None:
    served = serve("--data-api-plain-http")
    assert "WARNING: the Data API is served over plain HTTP" in served.log.read_text()
    assert "one serving process is faster" not in served.log.read_text()  # one process here
    with socket.create_connection(("127.0.0.1", served.api_port), timeout=5) as raw:
        raw.sendall(b"POST /v1/balance/get HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert raw.recv(64).startswith(b"HTTP/1.1 ")
