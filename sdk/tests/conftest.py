"""Fixtures of the client library's tests: the shared vectors, real local HTTP(S) servers, and
the official JS library driven through one long-lived node process.

A peer that is missing on a developer machine skips its tests; under CI=true it fails them.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Union

import pytest
import trustme

IN_CI = os.environ.get("CI", "").lower() == "true"
REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
PEERS = Path(__file__).resolve().parent / "peers"


def require(available: bool, what: str) -> None:
    """Skip when ``what`` is missing on a developer machine; fail under CI."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required under CI=true but is not available")
    pytest.skip(f"{what} is not available")


@pytest.fixture(scope="session")
def shared() -> Path:
    """The shared folder beside the repository (protocol, vectors)."""
    return SHARED


@pytest.fixture(scope="session")
def vectors() -> list[dict[str, Any]]:
    """Every entry of ``shared/signature-vectors.json`` (read, never skipped)."""
    data = json.loads((SHARED / "signature-vectors.json").read_text("utf-8"))
    entries: list[dict[str, Any]] = data["vectors"]
    return entries


# --- real local HTTP(S) servers ---------------------------------------------------------------


@dataclass
class Request:
    """One request as the local server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Body = Union[bytes, str, dict[str, Any], list[Any]]
#: A route answers ``(status, body)`` or ``(status, body, headers)``; dicts are sent as JSON.
Answer = Union[tuple[int, Body], tuple[int, Body, dict[str, str]]]
Route = Callable[[Request], Answer]


class LocalServer:
    """A stdlib HTTP server on 127.0.0.1 (random port) answering through ``route``.

    ``requests`` records everything received. With ``tls`` (a ``trustme.CA``) it speaks HTTPS
    with a certificate for 127.0.0.1 issued by that CA.
    """

    def __init__(self, route: Route, tls: trustme.CA | None = None) -> None:
        self.route = route
        self.requests: list[Request] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = Request(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                server.requests.append(request)
                answer = server.route(request)
                status, payload = answer[0], answer[1]
                extra = answer[2] if len(answer) > 2 else {}  # type: ignore[misc]
                if isinstance(payload, (dict, list)):
                    payload = json.dumps(payload).encode()
                elif isinstance(payload, str):
                    payload = payload.encode()
                self.send_response(status)
                headers = {"Content-Type": "application/json", **extra}
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _handle
            do_POST = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        scheme = "http"
        if tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.issue_cert("127.0.0.1", "localhost").configure_cert(context)
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
            scheme = "https"
        port = self._httpd.server_address[1]
        self.url = f"{scheme}://127.0.0.1:{port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> LocalServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


@pytest.fixture
def local_server() -> Iterator[Callable[..., LocalServer]]:
    """Factory: ``local_server(route, tls=None)`` starts a server, stopped after the test."""
    started: list[LocalServer] = []

    def start(route: Route, tls: trustme.CA | None = None) -> LocalServer:
        server = LocalServer(route, tls).__enter__()
        started.append(server)
        return server

    yield start
    for server in started:
        server.__exit__()


@pytest.fixture(scope="session")
def tls_ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[trustme.CA, str]:
    """A certificate authority made at test time, and the path of its certificate file."""
    ca = trustme.CA()
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return ca, str(path)


@pytest.fixture
def unused_url() -> str:
    """An http:// address on loopback where nothing listens."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- the official JS library, through one node process ----------------------------------------


class NodePeer:
    """Sends JSON lines to ``peers/peer.js`` and reads one JSON line back per request."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            ["node", str(PEERS / "peer.js")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            cwd=PEERS,
        )
        self._lock = threading.Lock()

    def call(self, **request: Any) -> Any:
        assert self._process.stdin is not None and self._process.stdout is not None
        with self._lock:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("the node peer exited")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"node peer: {answer['error']}")
        return answer["result"]

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(10)


@pytest.fixture(scope="session")
def node_peer() -> Iterator[NodePeer]:
    """The official JS library (npm ``ecommpay``) in a node process, for the whole session."""
    require(shutil.which("node") is not None, "node (for the official JS library)")
    require(
        (PEERS / "node_modules" / "ecommpay" / "package.json").exists(),
        "sdk/tests/peers/node_modules/ecommpay (run `npm ci` in sdk/tests/peers)",
    )
    peer = NodePeer()
    try:
        yield peer
    finally:
        peer.close()
