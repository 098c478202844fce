"""The OpenAPI 3 document of the machine-facing endpoints: the Gate API, the parameter check
service and the Data API (both path forms). ``GET /openapi.json`` serves it on the Payment Page
host and on the Data API listener.

Every documented response shape is what the endpoints really send; schemathesis checks that in
the test suite (``server/tests/security/test_openapi_fuzz.py``). Operations carry a tag naming
the host that serves them (``payment-page`` or ``data-api``).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ..config import Settings
from ..domain.validation import KNOWN_PARAMS

__all__ = ["DATA_API_PATHS", "document", "routes"]

DATA_API_PATHS = ("balance/get", "operations/get", "operations/get-by-payment")

_GATE_ERROR = {
    "type": "object",
    "required": ["status", "code", "message", "errors"],
    "properties": {
        "status": {"type": "string", "enum": ["error"]},
        "code": {"type": "string"},
        "message": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
}
_ENVELOPE = {
    "type": "object",
    "required": ["name", "message", "code", "status"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "message": {"type": "string"},
        "code": {"type": "string", "enum": ["0"]},
        "status": {"type": "string", "pattern": "^[1-5][0-9][0-9]$"},
    },
}
_GENERAL = {
    "type": "object",
    "required": ["project_id", "payment_id", "signature"],
    "properties": {
        "project_id": {"type": "integer", "minimum": 1},
        "payment_id": {"type": "string", "minLength": 1, "maxLength": 255},
        "signature": {"type": "string"},
    },
}
_SUM = {
    "type": "object",
    "required": ["amount", "currency"],
    "properties": {"amount": {"type": "integer"}, "currency": {"type": "string"}},
}
_CLARIFICATION_FIELDS = {
    "type": "object",
    "additionalProperties": {
        "type": "object",
        "required": ["type", "description", "properties"],
        "properties": {
            "type": {"type": "string"},
            "description": {"type": "string"},
            "properties": {"type": "object"},
        },
    },
}
_CALLBACK = {
    "type": "object",
    "required": ["project_id", "payment", "customer", "operation", "signature"],
    "properties": {
        "project_id": {"type": "integer"},
        "payment": {
            "type": "object",
            "required": ["id", "type", "status", "date", "method", "sum", "description"],
            "properties": {
                "id": {"type": "string"},
                "type": {"type": "string"},
                "status": {"type": "string"},
                "date": {"type": "string"},
                "method": {"type": "string"},
                "sum": _SUM,
                "description": {"type": "string"},
            },
        },
        "customer": {"type": "object", "properties": {"id": {"type": "string"}}},
        "operation": {"type": "object"},
        "clarification_fields": _CLARIFICATION_FIELDS,
        "signature": {"type": "string"},
    },
}
_DATA_API_REQUEST = {
    "type": "object",
    "required": ["token", "signature"],
    "properties": {
        "token": {"type": "string", "minLength": 30, "maxLength": 30},
        "signature": {"type": "string"},
    },
    "additionalProperties": True,
}
_DATA_API_SUCCESS: dict[str, dict[str, Any]] = {
    "balance/get": {
        "type": "object",
        "required": ["balance", "signature"],
        "properties": {
            "balance": {"type": "array", "items": {"type": "object"}},
            "signature": {"type": "string"},
        },
    },
    "operations/get": {
        "type": "object",
        "required": ["operations", "total", "limit", "offset", "signature"],
        "properties": {
            "operations": {"type": "array", "items": {"type": "object"}},
            "total": {"type": "integer"},
            "limit": {"type": "integer"},
            "offset": {"type": "integer"},
            "signature": {"type": "string"},
        },
    },
    "operations/get-by-payment": {
        "type": "object",
        "required": ["operations", "signature"],
        "properties": {
            "operations": {"type": "array", "items": {"type": "object"}},
            "signature": {"type": "string"},
        },
    },
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _text(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/plain": {"schema": {"type": "string"}}}}


def _gate(summary: str, body: dict[str, Any], ok: dict[str, Any]) -> dict[str, Any]:
    return {
        "post": {
            "tags": ["payment-page"],
            "summary": summary,
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": {
                "200": ok,
                "400": _json(_GATE_ERROR, "Malformed request (code 2004)"),
                "401": _json(_GATE_ERROR, "Wrong signature or unknown project (code 3003)"),
                "404": _json(_GATE_ERROR, "Unknown payment (code 3061)"),
                "408": _json(_GATE_ERROR, "The body arrived too slowly"),
                "409": _json(_GATE_ERROR, "The payment is not awaiting clarification (3060)"),
                "413": _json(_GATE_ERROR, "The body is over the size limit"),
            },
        }
    }


def _params_check() -> dict[str, Any]:
    ok = _json(
        {
            "type": "object",
            "required": ["status"],
            "properties": {"status": {"type": "string", "enum": ["ok"]}},
        },
        "Every parameter is valid",
    )
    bad = _json(
        {
            "type": "object",
            "required": ["errors"],
            "properties": {
                "errors": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["param", "reason"],
                        "properties": {
                            "param": {"type": "string"},
                            "reason": {"type": "string"},
                        },
                    },
                }
            },
        },
        "One or more parameters are not valid",
    )
    query = [
        {"name": name, "in": "query", "required": False, "schema": {"type": "string"}}
        for name in sorted(KNOWN_PARAMS)
    ]
    body_schema = {
        "type": "object",
        "properties": {name: {"type": "string"} for name in sorted(KNOWN_PARAMS)},
    }
    responses = {"200": ok, "400": bad}
    return {
        "get": {
            "tags": ["payment-page"],
            "summary": "Check Payment Page parameters given as a query string",
            "parameters": query,
            "responses": responses,
        },
        "post": {
            "tags": ["payment-page"],
            "summary": "Check Payment Page parameters given as a JSON object",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": body_schema}},
            },
            "responses": {**responses, "413": _text("The body is over the size limit")},
        },
    }


def _data_api(path: str) -> dict[str, Any]:
    errors = {
        "400": "Not a JSON object, or a mandatory parameter missing or malformed",
        "401": "Token or signature missing or wrong, or a project the token may not see",
        "404": "The payment does not exist in that project",
        "408": "The body arrived too slowly",
        "413": "The body is over the size limit",
        "429": "More than the allowed requests per minute for the token's account",
    }
    responses = {status: _json(_ENVELOPE, text) for status, text in errors.items()}
    responses["429"]["headers"] = {"Retry-After": {"schema": {"type": "string"}}}
    return {
        "post": {
            "tags": ["data-api"],
            "summary": f"Data API v1/{path}",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _DATA_API_REQUEST}},
            },
            "responses": {"200": _json(_DATA_API_SUCCESS[path], "Signed answer"), **responses},
        }
    }


def _data_api_url(settings: Settings) -> str:
    scheme = "http" if settings.data_api_plain_http else "https"
    host = settings.data_api_host or settings.host
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"{scheme}://{host}:{settings.data_api_port}"


def document(settings: Settings) -> dict[str, Any]:
    """The OpenAPI 3.0 document; the servers are this installation's addresses."""
    paths: dict[str, Any] = {
        "/v2/payment/clarification": _gate(
            "Submit additional payment information",
            {
                "type": "object",
                "required": ["general", "additional_data"],
                "properties": {
                    "general": _GENERAL,
                    "additional_data": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                        },
                    },
                },
            },
            _json(
                {
                    "type": "object",
                    "required": ["status", "project_id", "payment_id", "request_id"],
                    "properties": {
                        "status": {
                            "type": "string",
                            "enum": ["success", "awaiting clarification"],
                        },
                        "project_id": {"type": "integer"},
                        "payment_id": {"type": "string"},
                        "request_id": {"type": "string"},
                        "clarification_fields": _CLARIFICATION_FIELDS,
                    },
                },
                "Accepted; lists what is still missing when incomplete",
            ),
        ),
        "/v2/payment/status": _gate(
            "Read a payment's status in the callback format",
            {"type": "object", "required": ["general"], "properties": {"general": _GENERAL}},
            _json(_CALLBACK, "The payment, signed, in the callback format"),
        ),
        "/params/check": _params_check(),
        "/v1/params/check": _params_check(),
    }
    for path in DATA_API_PATHS:
        for prefix in ("/v1/v1", "/v1"):
            item = _data_api(path)
            item["servers"] = [{"url": _data_api_url(settings)}]
            paths[f"{prefix}/{path}"] = item
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Payplane",
            "version": "1",
            "description": "Gate API, parameter check service and Data API (protocol.md).",
        },
        "servers": [{"url": settings.payment_page_url}],
        "tags": [
            {"name": "payment-page", "description": "Served on the Payment Page host"},
            {"name": "data-api", "description": "Served on the Data API listener (TLS)"},
        ],
        "paths": paths,
    }


async def openapi_json(request: Request) -> Response:
    settings: Settings = request.app.state.context.settings
    return JSONResponse(document(settings))


routes: list[BaseRoute] = [Route("/openapi.json", openapi_json, methods=["GET"])]
