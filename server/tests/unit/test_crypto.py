"""Secrets at rest: encryption bound to context, fingerprints, tokens, masking, the master key."""

from __future__ import annotations

import logging
import re
import stat
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag

from payplane_server.crypto import (
    SecretBox,
    generate_token,
    hash_token,
    load_master_key,
    mask,
    mask_pan,
)

BOX = SecretBox(b"m" * 32)


def test_a_secret_round_trips_and_is_not_stored_in_clear() -> None:
    sealed = BOX.encrypt("s3cret-key", "project:1")
    assert "s3cret" not in sealed
    assert BOX.decrypt(sealed, "project:1") == "s3cret-key"


def test_the_same_secret_encrypts_differently_each_time() -> None:
    assert BOX.encrypt("x", "c") != BOX.encrypt("x", "c")


def test_a_secret_sealed_for_one_owner_does_not_open_as_another() -> None:
    sealed = BOX.encrypt("key", "project:1")
    with pytest.raises(InvalidTag):
        BOX.decrypt(sealed, "project:2")


def test_a_secret_opened_once_still_does_not_open_tampered_or_as_another_owner() -> None:
    box = SecretBox(b"m" * 32)
    sealed = box.encrypt("key", "project:1")
    assert box.decrypt(sealed, "project:1") == "key"
    assert box.decrypt(sealed, "project:1") == "key"
    with pytest.raises(InvalidTag):
        box.decrypt(sealed, "project:2")
    tampered = sealed[:-4] + ("AAAA" if not sealed.endswith("AAAA") else "BBBB")
    with pytest.raises(InvalidTag):
        box.decrypt(tampered, "project:1")
    for number in range(3 * SecretBox._OPENED_MAX):
        other = box.encrypt(f"k{number}", "c")
        assert box.decrypt(other, "c") == f"k{number}"
    assert len(box._opened) <= SecretBox._OPENED_MAX
    assert box.decrypt(sealed, "project:1") == "key"


def test_another_master_key_cannot_decrypt() -> None:
    sealed = BOX.encrypt("key", "c")
    with pytest.raises(InvalidTag):
        SecretBox(b"n" * 32).decrypt(sealed, "c")


def test_fingerprints_are_keyed_and_stable() -> None:
    pan = "4000000000000077"
    assert BOX.fingerprint(pan) == BOX.fingerprint(pan)
    assert SecretBox(b"n" * 32).fingerprint(pan) != BOX.fingerprint(pan)
    assert pan not in BOX.fingerprint(pan)


def test_tokens_are_thirty_alphanumeric_characters_and_unique() -> None:
    tokens = {generate_token() for _ in range(200)}
    assert len(tokens) == 200
    assert all(re.fullmatch(r"[A-Za-z0-9]{30}", token) for token in tokens)
    assert hash_token("a" * 30) != hash_token("b" * 30)
    assert len(hash_token("a" * 30)) == 64


def test_masking_shows_only_what_it_should() -> None:
    assert mask_pan("4000000000000077") == "400000******0077"
    assert mask("abcdefghij") == "******ghij"
    assert mask("abc") == "***"


def test_the_master_key_is_generated_once_private_and_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        first = load_master_key(None, tmp_path)
    assert "production must set PAYPLANE_MASTER_KEY" in caplog.text
    assert stat.S_IMODE((tmp_path / "master.key").stat().st_mode) == 0o600
    assert load_master_key(None, tmp_path) == first
    assert len(first) == 32


def test_a_configured_master_key_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        load_master_key("c2hvcnQ=", tmp_path)
