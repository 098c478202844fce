"""Payplane client library."""

from ._signature import sign, signing_string, verify

__all__ = ["sign", "signing_string", "verify"]
