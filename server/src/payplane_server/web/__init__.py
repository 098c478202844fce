"""HTTP surfaces: the Payment Page, the Gate API, the parameter check, the Dashboard (one app)
and the Data API (its own app on its own TLS listener)."""

from .app import create_app, create_data_api_app

__all__ = ["create_app", "create_data_api_app"]
