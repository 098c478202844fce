"""Entry point of ``payplane-server``."""

from __future__ import annotations

from .cli import app

__all__ = ["main"]


def main() -> None:
    app()


if __name__ == "__main__":
    main()
