"""Secrets at rest: AES-GCM under a master key, keyed fingerprints, token hashes, masking.

The master key is 32 random bytes, Base64 in ``PAYPLANE_MASTER_KEY`` or, for the embedded
default, generated once into ``<data_dir>/master.key`` (mode 0600) with a warning that
production must set it. Subkeys for different purposes are derived with HKDF so that one key
never serves two jobs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
import string
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "SecretBox",
    "generate_secret",
    "generate_token",
    "hash_token",
    "load_master_key",
    "mask",
    "mask_pan",
]

log = logging.getLogger("payplane.crypto")
_TOKEN_ALPHABET = string.ascii_letters + string.digits


def _derive(master: bytes, purpose: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(master)


class SecretBox:
    """Encrypts small secrets (project keys, token keys) and makes keyed fingerprints."""

    _PREFIX = "v1:"
    # Opened secrets kept per process, keyed by the exact sealed value and its context: every
    # payment and every Data API request needs its project's or token's key, and opening it
    # costs more than the rest of the signature check. Bounded; a rotated key's sealed value
    # is never asked for again and goes at the next clearing.
    _OPENED_MAX = 1024

    def __init__(self, master_key: bytes) -> None:
        if len(master_key) != 32:
            raise ValueError("the master key must be 32 bytes")
        self._aead = AESGCM(_derive(master_key, b"payplane secrets at rest"))
        self._fingerprint_key = _derive(master_key, b"payplane card fingerprint")
        self._opened: dict[tuple[str, str], str] = {}

    def encrypt(self, plaintext: str, context: str = "") -> str:
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, plaintext.encode("utf-8"), context.encode("utf-8"))
        return self._PREFIX + base64.b64encode(nonce + sealed).decode("ascii")

    def decrypt(self, token: str, context: str = "") -> str:
        opened = self._opened.get((token, context))
        if opened is not None:
            return opened
        if not token.startswith(self._PREFIX):
            raise ValueError("unknown secret format")
        raw = base64.b64decode(token[len(self._PREFIX) :])
        opened = self._aead.decrypt(raw[:12], raw[12:], context.encode("utf-8")).decode("utf-8")
        # Only what authenticated is kept, under the exact value and context that opened it.
        if len(self._opened) >= self._OPENED_MAX:
            self._opened.clear()
        self._opened[(token, context)] = opened
        return opened

    def fingerprint(self, value: str) -> str:
        """A keyed, irreversible fingerprint (for a PAN: the same card gives the same value)."""
        return hmac.new(self._fingerprint_key, value.encode("utf-8"), hashlib.sha256).hexdigest()


def load_master_key(configured: str | None, data_dir: Path) -> bytes:
    """The master key from configuration, else from (or newly into) the data directory."""
    if configured:
        key = base64.b64decode(configured)
        if len(key) != 32:
            raise ValueError("PAYPLANE_MASTER_KEY must be 32 bytes, Base64-encoded")
        return key
    path = data_dir / "master.key"
    if path.exists():
        return base64.b64decode(path.read_text().strip())
    data_dir.mkdir(parents=True, exist_ok=True)
    key = os.urandom(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(base64.b64encode(key).decode("ascii") + "\n")
    log.warning(
        "generated a master key in %s; production must set PAYPLANE_MASTER_KEY and keep it safe",
        path,
    )
    return key


def generate_secret() -> str:
    """A new secret signing key (project or API token)."""
    return secrets.token_urlsafe(32)


def generate_token(length: int = 30) -> str:
    """A Data API token: ``length`` characters of [A-Za-z0-9] from a cryptographic generator."""
    return "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(length))


def hash_token(token: str) -> str:
    """Tokens are random and long, so a plain SHA-256 is a sound lookup hash."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def mask(secret: str, visible: int = 4) -> str:
    """A secret for display: only its last ``visible`` characters."""
    if len(secret) <= visible:
        return "*" * len(secret)
    return "*" * (len(secret) - visible) + secret[-visible:]


def mask_pan(pan: str) -> str:
    """First 6 and last 4 digits, the rest as ``*`` (``400000******0077``)."""
    return pan[:6] + "*" * (len(pan) - 10) + pan[-4:]
