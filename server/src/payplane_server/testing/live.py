"""A real uvicorn server for an ASGI app, on a loopback port, in a background thread."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from typing import Any, Literal

import uvicorn

__all__ = ["LiveServer", "free_port"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """``with LiveServer(app) as server: httpx.get(server.url + "/payment")``.

    ``ssl_context`` serves HTTPS with that context (the Data API's own TLS settings).
    """

    def __init__(
        self,
        app: Any,
        *,
        port: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        lifespan: Literal["auto", "on", "off"] = "on",
    ) -> None:
        self.port = port or free_port()
        self.ssl_context = ssl_context
        scheme = "https" if ssl_context else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan=lifespan,
            timeout_keep_alive=30,
        )
        self.server = uvicorn.Server(self.config)
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        self.config.load()
        if self.ssl_context is not None:
            self.config.ssl = self.ssl_context
        asyncio.run(self.server.serve())

    def start(self) -> LiveServer:
        self._thread = threading.Thread(target=self._run, name="live-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the live server failed to start")
            if time.monotonic() > deadline:
                raise RuntimeError("the live server did not start within 30 s")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
