"""A real HTTP server on loopback that records every request (a merchant's callback URL)."""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["CallbackReceiver", "Received"]


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self) -> Any:
        return json.loads(self.body)


# Decides the answer to the n-th request (1-based): (status, delay in seconds, body).
Behaviour = Callable[[int, Received], tuple[int, float, bytes]]


_LOG_LOCK = threading.Lock()


def _record(body: bytes) -> None:
    """Append ``body`` to the file named by ``PAYPLANE_CALLBACK_LOG`` (a test session's record
    of every callback received, verified at its end), when that is set."""
    path = os.environ.get("PAYPLANE_CALLBACK_LOG")
    if path:
        with _LOG_LOCK, open(path, "ab") as log:
            log.write(base64.b64encode(body) + b"\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 overflows when several workers open their
    # connections at once: the kernel drops the SYN and the client's retry comes a second
    # later, past a test's short callback timeout. A merchant's server listens with more.
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A sender that dies mid-request (a SIGKILLed worker) resets its connection: that is
        # the sender's event, not a fault of the receiver worth a traceback on stderr.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _always_ok(n: int, request: Received) -> tuple[int, float, bytes]:
    return 200, 0.0, b"ok"


class CallbackReceiver:
    """``with CallbackReceiver() as receiver: ...; receiver.wait_for(3)``"""

    def __init__(self, behaviour: Behaviour = _always_ok) -> None:
        self.behaviour = behaviour
        self.requests: list[Received] = []
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                _record(body)
                request = Received(self.path, dict(self.headers.items()), body, time.monotonic())
                with receiver._cond:
                    receiver.requests.append(request)
                    number = len(receiver.requests)
                    receiver._cond.notify_all()
                status, delay, answer = receiver.behaviour(number, request)
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except OSError:
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/callback"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        """Block until ``count`` requests arrived (or raise TimeoutError); returns them all."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.requests) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{len(self.requests)} of {count} requests arrived")
                self._cond.wait(remaining)
            return list(self.requests)

    def __enter__(self) -> CallbackReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
