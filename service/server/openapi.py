"""openapi.json as this service answers: what FastAPI cannot know added to what it generates.

    openapi(app, settings)     what the app's `openapi()` answers (service.server.app)

Errors as problem+json (the `Problem` schema), the bearer scheme on every route but the open
ones, the TTL, wait and partition bounds this service was configured with, and integer bounds
as exact JSON integers.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from service.server.settings import Settings

__all__ = ["openapi"]

_PROBLEM_SCHEMA = {
    "type": "object",
    "description": "RFC 9457 problem details; clients map `type` back to an error class. "
    "Extra members (reason, blocking_holder, retry_after_s, outcome, field, errors, ...) "
    "depend on the type.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "examples": ["urn:lakelock:locked"]},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "what to fix or do next"},
        "instance": {"type": "string"},
    },
    "additionalProperties": True,
}

_OPEN = {"/healthz", "/readyz", "/openapi.json"}


def openapi(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """openapi.json, with what FastAPI cannot know: problem+json errors, the bearer scheme,
    and the bounds this service was configured with."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components = schema.setdefault("components", {})
    components.setdefault("schemas", {})["Problem"] = _PROBLEM_SCHEMA
    for unused in ("HTTPValidationError", "ValidationError"):
        components["schemas"].pop(unused, None)
    components["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "a secret from LAKELOCK_TOKENS; roles reader < job < operator",
        }
    }
    _secure_and_bound_waits(schema["paths"], settings)
    _bound_bodies(components["schemas"], settings)
    _exact_integer_bounds(schema)
    app.openapi_schema = schema
    return schema


def _secure_and_bound_waits(paths: dict[str, Any], settings: Settings) -> None:
    """The bearer scheme on every route but the open ones (when auth is on); the longest wait."""
    for path, operations in paths.items():
        for operation in operations.values():
            if path not in _OPEN and settings.auth == "on":
                operation["security"] = [{"bearer": []}]
            for parameter in operation.get("parameters", []):
                if parameter["name"] in ("wait", "wait_s"):
                    parameter["schema"]["maximum"] = settings.max_wait_s


_INT64 = (-(2**63), 2**63 - 1)


def _exact_integer_bounds(node: Any) -> None:
    """Integer bounds as exact JSON integers. FastAPI's OpenAPI model holds `minimum` and
    `maximum` as floats: a bound past 2**53 rounds, and a 64-bit one (a snapshot id's 2**63 - 1)
    becomes 2**63, which would declare an id the service refuses valid. Every integer bound
    here is either exact as a float or a 64-bit extreme, so rounding back and clamping to the
    64-bit range gives the model's own bound."""
    if isinstance(node, list):
        for item in node:
            _exact_integer_bounds(item)
    elif isinstance(node, dict):
        if node.get("type") == "integer":
            for key in ("minimum", "maximum"):
                if isinstance(node.get(key), float):
                    node[key] = min(max(int(node[key]), _INT64[0]), _INT64[1])
        for value in node.values():
            _exact_integer_bounds(value)


def _bound_bodies(bodies: dict[str, Any], settings: Settings) -> None:
    """The TTL, wait and partition bounds of this service in the request bodies."""
    for name in ("AcquireBody", "ClaimBody", "RenewBody"):
        ttl = bodies.get(name, {}).get("properties", {}).get("ttl_s")
        if ttl is not None:
            target = next((o for o in ttl.get("anyOf", []) if o.get("type") == "number"), ttl)
            target.pop("exclusiveMinimum", None)
            target.update(minimum=settings.min_ttl_s, maximum=settings.max_ttl_s)
    acquire = bodies.get("AcquireBody", {}).get("properties", {})
    if "wait_s" in acquire:
        acquire["wait_s"]["maximum"] = settings.max_wait_s
    for option in acquire.get("partitions", {}).get("anyOf", []):
        if option.get("type") == "array":
            option.update(minItems=1, maxItems=settings.max_partitions, uniqueItems=True)
