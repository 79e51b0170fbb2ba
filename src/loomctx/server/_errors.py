"""The one error a served request can be refused with, and its wire shape.

`RequestError` is a `ConfigError` (bad input, named with how to fix it) that also carries the
HTTP status and OpenAI's error `type` and `code`: every face of the server answers a refused
request with OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, because
that is what the clients of an OpenAI-compatible endpoint parse (the `openai` SDKs raise
``BadRequestError``, ``AuthenticationError``, ``NotFoundError``... from the status, and show
the message).
"""

from __future__ import annotations

from typing import Any

from loomctx.errors import ConfigError

__all__ = ["RequestError", "error_body"]


class RequestError(ConfigError):
    """A request Loom refuses: `status` (HTTP), `type` and `code` (OpenAI's vocabulary)."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.code = code
        self.param = param

    def body(self) -> dict[str, Any]:
        """The error in OpenAI's shape."""
        return error_body(str(self), type=self.type, code=self.code, param=self.param)


def error_body(
    message: str, *, type: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """``{"error": {...}}`` as OpenAI sends it."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}
