"""How a proxied request meets its client's connection: a response that frees what the
request holds (the session's lock) whatever happens while it is sent, and waiting that stops
when the client goes away, since no one is left to answer.

The server runs a request to its end even after its client has left (the ASGI server does
not cancel it), so a request waiting on a slow upstream watches the connection itself
(`while_connected`): a client that disconnects cancels the upstream call with the wait. A
response that cannot start (the connection is gone, the server refuses a header) raises
out of the response, past the code that would have freed the session; `Settled` runs that
code whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from loomctx.server._errors import RequestError

__all__ = ["Settled", "close", "while_connected"]

T = TypeVar("T")


class Settled(Response):
    """`response`, then `settle`, whatever happens while it is sent: the client may have
    gone, or the server may refuse a header; a session's lock is freed all the same."""

    def __init__(self, response: Response, *, settle: Callable[[], Awaitable[None]]) -> None:
        super().__init__(status_code=response.status_code)
        self.response = response
        self.settle = settle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.response(scope, receive, send)
        finally:
            await self.settle()


async def while_connected(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result, unless the client disconnects first: then `work` is cancelled (and
    the upstream call it waits for with it) and a 499 raised, for the log; no one is left to
    read it."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this request is cancelled (the server shutting down)
        gone.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait((task,))
    if task.cancelled():
        raise RequestError(
            "the client closed the connection before the reply",
            status=499,
            code="client_closed_request",
        )
    return task.result()


async def close(stream: AsyncIterator[Any]) -> None:
    """Close an async generator (its `finally`s run now, not when it is collected); what
    fails in them was already answered or logged."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


async def _disconnected(request: Request) -> None:
    """Return once the client has disconnected (the body is read: nothing else comes)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
