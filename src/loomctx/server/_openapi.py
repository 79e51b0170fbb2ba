"""The OpenAPI 3.1 document of the server's HTTP API, published at ``/openapi.json``.

Written out rather than generated: the proxy's request and response bodies are OpenAI's (see
their own specification); what this document adds is Loom's routes, its headers and its
error shape, which clients of the REST API need.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["OPENAPI"]

_ERROR: Final = {"$ref": "#/components/schemas/Error"}
_SESSION: Final = {"name": "session", "in": "path", "required": True, "schema": {"type": "string"}}


def _op(
    summary: str, *, params: list[dict[str, Any]] | None = None, body: bool = False, ok: int = 200
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "security": [{"bearer": []}],
        "responses": {
            str(ok): {"description": "OK", "content": {"application/json": {"schema": {}}}},
            "default": {
                "description": "An error, in OpenAI's shape",
                "content": {"application/json": {"schema": _ERROR}},
            },
        },
    }
    if params:
        op["parameters"] = params
    if body:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    return op


def _query(name: str, required: bool = True) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": {"type": "string"}}


OPENAPI: Final[dict[str, Any]] = {
    "openapi": "3.1.0",
    "info": {
        "title": "Loom server",
        "version": "1",
        "description": "An OpenAI-compatible proxy that builds each window with Loom, a REST "
        "API over sessions, memory, reports and knowledge bases, and MCP at /mcp/{session}. "
        "Send `Authorization: Bearer <key>`; the key names the tenant. The proxy reads the "
        "session from the `X-Loom-Session` header (else the `user` field) and answers with "
        "`X-Loom-Session` and `X-Loom-Report` (the id of the window's report). A request sent "
        "again (the same `Idempotency-Key` header, or without one the same request) records "
        "its turn once.",
    },
    "components": {
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
        },
        "schemas": {
            "Error": {
                "type": "object",
                "properties": {
                    "error": {
                        "type": "object",
                        "properties": {
                            "message": {"type": "string"},
                            "type": {"type": "string"},
                            "param": {"type": ["string", "null"]},
                            "code": {"type": ["string", "null"]},
                        },
                        "required": ["message", "type"],
                    }
                },
                "required": ["error"],
            }
        },
    },
    "paths": {
        "/v1/chat/completions": {
            "post": _op(
                "A chat completion through Loom (OpenAI's request and response; "
                "`stream: true` for server-sent events)",
                body=True,
            )
        },
        "/v1/responses": {
            "post": _op(
                "A response through Loom (OpenAI's Responses API: `input` items, function "
                "calls, `previous_response_id` of a response Loom answered; `stream: true` for "
                "its events)",
                body=True,
            )
        },
        "/v1/messages": {
            "post": {
                **_op(
                    "A message through Loom (Anthropic's Messages API; `stream: true` for its "
                    "events). The key may also come as `x-api-key`; errors are in Anthropic's "
                    'shape, `{"type": "error", "error": {"type", "message"}}`',
                    body=True,
                ),
                "security": [{"bearer": []}, {"apiKey": []}],
            }
        },
        "/v1/models": {"get": _op("The configured models")},
        "/v1/sessions": {"get": _op("The tenant's sessions, most recent first")},
        "/v1/sessions/{session}": {
            "get": _op("A session: its memory tiers and reports", params=[_SESSION])
        },
        "/v1/sessions/{session}/memory": {
            "get": _op(
                "Search a session's memory", params=[_SESSION, _query("q"), _query("limit", False)]
            ),
            "post": _op(
                'Remember `{"content"}` in a session\'s memory',
                params=[_SESSION],
                body=True,
                ok=201,
            ),
        },
        "/v1/sessions/{session}/memory/{task_id}": {
            "delete": _op(
                "Forget one task of a session's memory",
                params=[
                    _SESSION,
                    {
                        "name": "task_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    },
                ],
            )
        },
        "/v1/reports/{report_id}": {
            "get": _op(
                "The report of a window Loom built",
                params=[
                    {
                        "name": "report_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    }
                ],
            )
        },
        "/v1/knowledge/{name}/documents": {
            "post": _op(
                'Add `{"text", "id"?, "metadata"?}` to one of the tenant\'s knowledge bases '
                "(those its `knowledge` lists; any other name is a 404)",
                params=[
                    {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                body=True,
                ok=201,
            )
        },
        "/v1/knowledge/{name}/search": {
            "get": _op(
                "Search one of the tenant's knowledge bases (any other name is a 404)",
                params=[
                    {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                    _query("q"),
                    _query("limit", False),
                ],
            )
        },
        "/healthz": {
            "get": {"summary": "The process answers", "responses": {"200": {"description": "OK"}}}
        },
        "/readyz": {
            "get": {
                "summary": "The store answers",
                "responses": {"200": {"description": "ready"}, "503": {"description": "not ready"}},
            }
        },
    },
}
