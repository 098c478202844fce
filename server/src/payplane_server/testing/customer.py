"""A customer who pays on the Payment Page over real HTTP, for tests and benchmarks.

``Customer(client)`` drives any httpx client (Starlette's TestClient, or ``httpx.Client`` with
``base_url`` pointing at a LiveServer): it opens a signed URL, reads the page token and the
CSRF token from the pages as a browser would, and submits the forms.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

import httpx
from payplane import sign

__all__ = ["TEST_CARD_HOLDER", "Customer", "csrf_of", "signed_url", "token_of"]

TEST_CARD_HOLDER = "Ivan Petrov"
_TOKEN = re.compile(r"/pay/([A-Za-z0-9_-]{16,64})/")
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def signed_url(params: Mapping[str, Any], secret: str, base: str = "") -> str:
    """``<base>/payment?<params>&signature=<percent-encoded signature>`` (canonical form)."""
    signature = quote(sign(params, secret), safe="")
    return f"{base}/payment?{urlencode(params)}&signature={signature}"


def token_of(html: str) -> str:
    """The page token in a Payment Page's links or form actions."""
    match = _TOKEN.search(html)
    if match is None:
        raise AssertionError("no page token on this page")
    return match.group(1)


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    if match is None:
        raise AssertionError("no CSRF token on this page")
    return match.group(1)


class Customer:
    """One customer's browser, reduced to its HTTP requests (no redirects followed)."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def open(self, url: str) -> tuple[httpx.Response, str | None]:
        """Open a signed URL: the response and, when a payment page came back, its token."""
        response = self.client.get(url, follow_redirects=False)
        token: str | None = None
        if response.status_code in (200, 303):
            text = response.headers.get("location", "") + response.text
            match = _TOKEN.search(text)
            token = match.group(1) if match else None
        return response, token

    def pay(
        self,
        token: str,
        pan: str,
        *,
        expiry: str = "12/30",
        cvv: str = "123",
        holder: str = TEST_CARD_HOLDER,
        csrf: str | None = None,
    ) -> httpx.Response:
        """Load the card form, then submit it (``csrf`` overrides the form's token)."""
        if csrf is None:
            form = self.client.get(f"/pay/{token}/card", follow_redirects=False)
            csrf = csrf_of(form.text)
        return self.client.post(
            f"/pay/{token}/card",
            data={"csrf_token": csrf, "pan": pan, "expiry": expiry, "cvv": cvv, "holder": holder},
            follow_redirects=False,
        )

    def answer_challenge(self, token: str, code: str) -> httpx.Response:
        form = self.client.get(f"/pay/{token}/3ds", follow_redirects=False)
        return self.client.post(
            f"/pay/{token}/3ds",
            data={"csrf_token": csrf_of(form.text), "code": code},
            follow_redirects=False,
        )
