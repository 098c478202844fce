"""``validate_callback_url``: the one rule for callback URLs (projects, merchant_callback_url,
and again before every delivery)."""

from __future__ import annotations

import socket

import pytest

from payplane_server.config import Settings
from payplane_server.services.callbacks import validate_callback_url

PLATFORM = Settings(host="127.0.0.1", port=8080, data_api_port=8443)


@pytest.mark.parametrize(
    "url",
    [
        "https://shop.example/payplane/callback",
        "http://shop.example:8081/cb?token=abc#frag",
        "http://127.0.0.1:9000/callback",  # another port on this machine: a local merchant
        "http://[::1]:9000/cb",
        "https://user:pass@shop.example/cb",
        "HTTPS://SHOP.EXAMPLE/CB",
    ],
)
def test_usable_urls_pass(url: str) -> None:
    assert validate_callback_url(url, PLATFORM) is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("", "empty"),
        ("ftp://shop.example/cb", "http or https"),
        ("file:///etc/passwd", "http or https"),
        ("gopher://shop.example:70/", "http or https"),
        ("javascript:alert(1)", "http or https"),
        ("shop.example/callback", "http or https"),
        ("http:///callback", "must name a host"),
        ("http://shop.example:99999/cb", "not a valid URL"),
        ("http://[::1/cb", "not a valid URL"),
        ("http://shop.example/a\nb", "control characters"),
        ("http://shop.example/ cb", "spaces"),
        ("http://shop.example/" + "a" * 2100, "longer than 2048"),
    ],
)
def test_unusable_urls_are_refused_with_a_reason(url: str, reason: str) -> None:
    problem = validate_callback_url(url, PLATFORM)
    assert problem is not None
    assert reason in problem


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/payment",
        "http://localhost:8080/",
        "http://LOCALHOST:8080/v2/payment/status",
        "http://127.1:8080/",
        "http://[::1]:8080/",
        "http://0.0.0.0:8080/",
        "https://127.0.0.1:8443/v1/balance/get",
    ],
)
def test_the_platforms_own_listeners_are_refused(url: str) -> None:
    assert validate_callback_url(url, PLATFORM) == "the callback URL points at this platform itself"


def test_the_public_url_counts_as_the_platform() -> None:
    public = PLATFORM.replace(public_url="https://pay.example.com")
    assert validate_callback_url("https://pay.example.com/cb", public) is not None
    assert validate_callback_url("https://pay.example.com:444/cb", public) is None
    assert validate_callback_url("https://shop.example.com/cb", public) is None


def test_a_wildcard_bind_makes_every_local_name_the_platform() -> None:
    everywhere = PLATFORM.replace(host="0.0.0.0")
    assert validate_callback_url("http://127.0.0.1:8080/", everywhere) is not None
    assert validate_callback_url("http://localhost:8080/", everywhere) is not None
    assert validate_callback_url("http://shop.example:8080/", everywhere) is None


def test_the_machines_own_name_counts_as_a_loopback_platform() -> None:
    name = socket.gethostname().lower()
    assert validate_callback_url(f"http://{name}:8080/cb", PLATFORM) == (
        "the callback URL points at this platform itself"
    )
    assert validate_callback_url(f"http://{name}:9000/cb", PLATFORM) is None
    elsewhere = PLATFORM.replace(host="10.9.8.7")
    assert validate_callback_url(f"http://{name}:8080/cb", elsewhere) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5/cb",
        "http://192.168.1.1/cb",
        "http://169.254.169.254/latest/meta-data",
        "http://127.0.0.1:9000/cb",
        "http://localhost:9000/cb",
        "http://[fd00::1]/cb",
    ],
)
def test_private_addresses_are_refused_when_the_operator_forbids_them(url: str) -> None:
    strict = PLATFORM.replace(allow_private_callback_urls=False)
    assert validate_callback_url(url, strict) == (
        "the callback URL points at a private or local address"
    )
    assert validate_callback_url(url, PLATFORM) is None
    assert validate_callback_url("https://93.184.215.14/cb", strict) is None
