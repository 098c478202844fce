"""Payplane: a self-hostable payment platform."""

__version__ = "0.1.0"
