"""Every shared vector (shared/signature-vectors.json) signs to exactly its value and verifies."""

from __future__ import annotations

from typing import Any

import payplane


def test_there_are_vectors_from_every_source(vectors: list[dict[str, Any]]) -> None:
    sources = {vector["source"] for vector in vectors}
    assert len(vectors) >= 18
    assert {"python-library test", "go-library test", "php-library test"} <= sources


def test_every_vector_signs_to_exactly_its_signature(vectors: list[dict[str, Any]]) -> None:
    for vector in vectors:
        assert payplane.sign(vector["payload"], vector["secret"]) == vector["signature"], vector


def test_every_vector_verifies(vectors: list[dict[str, Any]]) -> None:
    for vector in vectors:
        assert payplane.verify(vector["payload"], vector["signature"], vector["secret"]), vector


def test_every_vector_fails_under_another_secret(vectors: list[dict[str, Any]]) -> None:
    for vector in vectors:
        assert not payplane.verify(vector["payload"], vector["signature"], vector["secret"] + "x")


def test_the_worked_example_of_the_protocol_signs_the_documented_string() -> None:
    payload = {"payment": {"id": "test-payment", "status": "success"}}
    assert payplane.signing_string(payload) == "payment:id:test-payment;payment:status:success"
    assert payplane.sign(payload, "qwerty") == (
        "UGzKT0NC26f4u0niyJSQPx5q3kFFIndwLXeJVXahfCFwbY+Svg1WoXIxzrIyyjWUSLFhT8wAQ5SfBDRHnwm6Yg=="
    )
