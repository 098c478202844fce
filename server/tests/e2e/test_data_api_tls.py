"""The Data API over real TLS sockets: a request written byte by byte, old TLS refused, the
client library end to end, and two ``serve`` processes sharing one rate limit."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import payplane
import pytest
import trustme
from payplane import verify

from payplane_server.clock import FakeClock
from payplane_server.config import Settings
from payplane_server.context import AppContext
from payplane_server.db import Database
from payplane_server.testing import LiveServer, TempPostgres, free_port
from payplane_server.testing.data_api import DataApiWorld, build_world
from payplane_server.tls import ensure_certificate, server_ssl_context
from payplane_server.web import create_data_api_app

MASTER_KEY = base64.b64encode(b"t" * 32).decode()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_files(ca: trustme.CA, tmp_path: Path) -> tuple[Path, Path]:
    pem = tmp_path / "server.pem"
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(pem))
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return pem, ca_file


@pytest.fixture
def served(
    ctx: AppContext, tls_files: tuple[Path, Path]
) -> Iterator[tuple[LiveServer, DataApiWorld]]:
    world = build_world(ctx)
    pem, _ = tls_files
    server = LiveServer(
        create_data_api_app(ctx), ssl_context=server_ssl_context(pem, pem), lifespan="off"
    )
    with server:
        yield server, world


def read_response(tls: ssl.SSLSocket) -> tuple[str, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = tls.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers["content-length"])
    while len(body) < length:
        body += tls.recv(65536)
    return lines[0], headers, body


def raw_exchange(port: int, ca_file: Path, message: bytes, *, byte_by_byte: bool) -> Any:
    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
        if byte_by_byte:
            for index in range(len(message)):
                tls.sendall(message[index : index + 1])
        else:
            tls.sendall(message)
        return read_response(tls)


def test_a_request_written_byte_by_byte_with_a_form_content_type_gets_a_signed_answer(
    served: tuple[LiveServer, DataApiWorld], tls_files: tuple[Path, Path]
) -> None:
    server, world = served
    body = world.body("admin")
    message = (
        b"POST /v1/v1/balance/get HTTP/1.1\r\n"
        + f"Host: 127.0.0.1:{server.port}\r\n".encode()
        + b"Content-Type: application/x-www-form-urlencoded\r\n"
        + f"Content-Length: {len(body)}\r\n".encode()
        + b"\r\n"
        + body
    )
    status, headers, answer = raw_exchange(server.port, tls_files[1], message, byte_by_byte=True)
    assert status == "HTTP/1.1 200 OK"
    assert headers["content-type"].startswith("application/json")
    data = json.loads(answer.decode("utf-8"))
    assert data["balance"] == [{"name": "Shop_balance_EUR", "EUR": "30000"}]
    assert verify(data, data["signature"], world.tokens["admin"].secret)


def test_a_request_without_host_gets_400_in_the_envelope(
    served: tuple[LiveServer, DataApiWorld], tls_files: tuple[Path, Path]
) -> None:
    server, world = served
    body = world.body("admin")
    message = (
        b"POST /v1/balance/get HTTP/1.1\r\n"
        + f"Content-Length: {len(body)}\r\n".encode()
        + b"\r\n"
        + body
    )
    status, _, answer = raw_exchange(server.port, tls_files[1], message, byte_by_byte=False)
    assert status.startswith("HTTP/1.1 400")
    assert json.loads(answer) == {
        "name": "Bad Request",
        "message": "The Host header is required.",
        "code": "0",
        "status": "400",
    }


def old_tls_client(version: ssl.TLSVersion) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    # Let this client really offer the old protocol, so that a refusal is the server's.
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    context.minimum_version = version
    context.maximum_version = version
    return context


def accepts_old_tls_somewhere(pem: Path, version: ssl.TLSVersion) -> bool:
    """Control: the same client completes a handshake with a server that allows ``version``."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.set_ciphers("DEFAULT:@SECLEVEL=0")
    server_context.minimum_version = ssl.TLSVersion.TLSv1
    server_context.load_cert_chain(str(pem))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_one() -> None:
        connection, _ = listener.accept()
        with contextlib.suppress(ssl.SSLError, OSError):
            server_context.wrap_socket(connection, server_side=True).close()
        connection.close()

    thread = threading.Thread(target=serve_one, daemon=True)
    thread.start()
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            old_tls_client(version).wrap_socket(raw) as tls,
        ):
            return tls.version() == {"TLSv1": "TLSv1", "TLSv1_1": "TLSv1.1"}[version.name]
    except ssl.SSLError:
        return False
    finally:
        thread.join(timeout=10)
        listener.close()


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1])
def test_tls_before_1_2_is_refused_at_the_handshake(
    served: tuple[LiveServer, DataApiWorld], tls_files: tuple[Path, Path], version: ssl.TLSVersion
) -> None:
    server, _ = served
    if not accepts_old_tls_somewhere(tls_files[0], version):
        pytest.skip(f"this OpenSSL cannot speak {version.name} at all")
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        pytest.raises(ssl.SSLError),
    ):
        old_tls_client(version).wrap_socket(raw)


def test_tls_1_2_and_1_3_clients_are_served(
    served: tuple[LiveServer, DataApiWorld], tls_files: tuple[Path, Path]
) -> None:
    server, _ = served
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        context = ssl.create_default_context(cafile=str(tls_files[1]))
        context.minimum_version = context.maximum_version = version
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            assert tls.version() == version.name.replace("_", ".")


# The client library, end to end over TLS.


def test_the_client_library_reads_balances_operations_and_payments(
    served: tuple[LiveServer, DataApiWorld], tls_files: tuple[Path, Path]
) -> None:
    server, world = served
    issued = world.tokens["admin"]
    api = payplane.DataApi(issued.token, issued.secret, server.url + "/v1", str(tls_files[1]))
    assert api.balance() == [{"name": "Shop_balance_EUR", "EUR": "30000"}]
    operations = list(
        api.operations(
            "2026-11-20 00:00:00",
            "2026-11-21 23:59:59",
            time_zone="Europe/Berlin",
            page_size=7,
            fields=["payment_id", "operation_created_at"],
        )
    )
    # 40 operations of the admin's two projects; the first one is at 11:00 Berlin time.
    assert len(operations) == 40
    assert operations[0] == {"payment_id": "seed-0", "operation_created_at": "2026-11-20 11:00:00"}
    by_payment = api.operations_by_payment(102, "outlet-1")
    assert [op["operation_status"] for op in by_payment] == ["decline"]


def test_the_client_library_raises_the_envelope_for_an_inaccessible_project(
    served: tuple[LiveServer, DataApiWorld], tls_files: tuple[Path, Path]
) -> None:
    server, world = served
    issued = world.tokens["finance"]
    api = payplane.DataApi(issued.token, issued.secret, server.url + "/v1", str(tls_files[1]))
    with pytest.raises(payplane.DataApiError) as error:
        api.operations_by_payment(900, "seed-1")
    assert error.value.status == 401


def test_the_client_library_waits_out_a_429_and_succeeds(
    ctx: AppContext, clock: FakeClock, tls_files: tuple[Path, Path]
) -> None:
    world = build_world(ctx, seed=False)
    limited = AppContext.create(
        ctx.settings.replace(rate_limit_per_minute=3),
        clock=clock,
        db=Database(ctx.settings.resolved_database_url),
    )
    pem, ca_file = tls_files
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        # The client's wait moves the server's clock: no real sleeping.
        waits.append(seconds)
        clock.advance(seconds)

    try:
        app = create_data_api_app(limited)
        with LiveServer(app, ssl_context=server_ssl_context(pem, pem), lifespan="off") as server:
            issued = world.tokens["admin"]
            api = payplane.DataApi(
                issued.token,
                issued.secret,
                server.url + "/v1",
                str(ca_file),
                sleep=sleep,
                clock=lambda: clock.now().timestamp(),
            )
            answers = [api.balance() for _ in range(4)]
    finally:
        limited.close()
    assert answers == [[]] * 4
    assert len(waits) == 1 and waits[0] >= 3


# Two real ``serve`` processes on one database.


def _serve(settings_env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    port, api_port = free_port(), free_port()
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
        ],
        env=dict(os.environ, **settings_env),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    return process, port, api_port


def _wait_until_up(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError("serve did not come up:\n" + log.read_text())


@pytest.fixture
def shared_postgres_url(postgres: TempPostgres) -> Iterator[str]:
    """PostgreSQL, the database for more than one process or machine."""
    name = f"two_serve_{os.getpid()}"
    yield postgres.create_database(name, template="payplane_template")
    postgres.drop_database(name)


@pytest.mark.slow
@pytest.mark.postgres
def test_two_serve_processes_on_one_database_hold_the_limit_jointly(
    shared_postgres_url: str, tmp_path: Path
) -> None:
    database_url = shared_postgres_url
    data_dir = tmp_path / "data"
    env = {
        "PAYPLANE_DATA_DIR": str(data_dir),
        "PAYPLANE_DATABASE_URL": database_url,
        "PAYPLANE_MASTER_KEY": MASTER_KEY,
        "PAYPLANE_RATE_LIMIT_PER_MINUTE": "10",
    }
    settings = Settings(data_dir=data_dir, database_url=database_url, master_key=MASTER_KEY)
    ctx = AppContext.create(settings)
    try:
        world = build_world(ctx, seed=False)
    finally:
        ctx.close()
    processes = []
    try:
        # Made up front so that the two processes, started together, do not race to make it.
        certificate, _, _ = ensure_certificate(settings)
        for name in ("one", "two"):
            processes.append(_serve(env, tmp_path / f"{name}.log"))
        for (process, port, _), name in zip(processes, ("one", "two"), strict=True):
            _wait_until_up(process, port, tmp_path / f"{name}.log")
            assert str(certificate) in (tmp_path / f"{name}.log").read_text()
        codes: Counter[int] = Counter()
        clients = [
            httpx.Client(
                base_url=f"https://127.0.0.1:{api}",
                verify=ssl.create_default_context(cafile=str(certificate)),
            )
            for _, _, api in processes
        ]
        for index in range(16):
            response = clients[index % 2].post("/v1/v1/balance/get", content=world.body("admin"))
            codes[response.status_code] += 1
            if response.status_code == 429:
                assert int(response.headers["retry-after"]) >= 3
        for client in clients:
            client.close()
        assert codes == {200: 10, 429: 6}
    finally:
        for process, _, _ in processes:
            process.send_signal(signal.SIGTERM)
        for process, _, _ in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
