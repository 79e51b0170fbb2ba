"""One chat request through the proxy, answered in a face's wire format (`Exchange`).

The session's lock is held from the moment the request is taken until its reply is
recorded, so that the requests of one conversation are recorded in order:

1. `ChatProxy.prepare` records the turn and builds the window (what Loom itself took is the
   log's ``loom_ms``); a failure here frees the session and is the request's error;
2. the upstream is asked; its reply (or, streaming, its first chunk) is awaited unless the
   client goes first (a 499); the headers wait for the window's write, which ran meanwhile:
   the session, the stored report's id, the cache marks, and the bill the window predicts
   (`PREDICTED_HEADERS`) or ``X-Loom-Passthrough`` for a request passed through;
3. the response goes out; a stream that fails upstream ends on an error event (it cannot
   become a 502 once started), and a bug in Loom ends it on a server error event;
4. once it is sent, or could not be, the upstream's stream is closed, the span ended, and the
   reply recorded in a worker thread, after which the session is free again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from loomctx.server._chat_request import ChatRequest, Prepared
from loomctx.server._config import TenantConfig
from loomctx.server._errors import error_body
from loomctx.server._faces import Face
from loomctx.server._otel import ChatSpan
from loomctx.server._proxy import ChatProxy
from loomctx.server._responding import Settled, close, while_connected
from loomctx.server._upstream import UpstreamError

__all__ = ["PREDICTED_HEADERS", "REPORT_HEADER", "SESSION_HEADER", "Exchange"]

SESSION_HEADER = "X-Loom-Session"
REPORT_HEADER = "X-Loom-Report"
PREDICTED_HEADERS = (
    "X-Loom-Predicted-Cached",
    "X-Loom-Predicted-Written",
    "X-Loom-Predicted-Plain",
)
"""The window's predicted prompt tokens read from the provider's cache, written to it, and
billed at the plain input price (`loomctx.context.billing`, under the model's provider)."""

log = logging.getLogger("loomctx.server")


class Exchange:
    """One chat request (`chat`, from `request`) through `proxy`, answered in `face`'s wire
    format, with the session's lock held until its reply is recorded (module docstring)."""

    def __init__(
        self,
        proxy: ChatProxy,
        request: Request,
        tenant: TenantConfig,
        chat: ChatRequest,
        face: Face,
    ) -> None:
        self.proxy, self.request, self.tenant, self.chat, self.face = (
            proxy,
            request,
            tenant,
            chat,
            face,
        )
        self.span = ChatSpan(
            model=chat.model.upstream_model,
            provider=chat.model.provider,
            tenant=tenant.name,
            session=chat.session,
        )
        self.lock = proxy.service.lock(tenant.name, chat.session)
        # What `settle` closes, newest first: the upstream's chunks, the response's events.
        self.streams: list[AsyncIterator[Any]] = []

    async def respond(self) -> Response:
        """The response: JSON, or a stream of events; it settles the exchange once sent."""
        chat = self.chat
        await self.lock.acquire()
        started = time.perf_counter()
        try:
            prepared = await self.proxy.prepare(self.tenant, chat)
        except BaseException as exc:
            await self._failed(exc)
            raise
        # What Loom itself took (recording the turn, building the window), before the model.
        self.request.state.log["loom_ms"] = round((time.perf_counter() - started) * 1000, 2)
        chunks = self.proxy.chunks(prepared)
        self.streams.append(chunks)

        async def settle() -> None:
            await self._settle(prepared)

        try:  # the upstream's reply (or its first chunk), unless the client goes first
            first = await while_connected(
                self.request, anext(chunks) if chat.stream else _drain(chunks)
            )
            headers = await self._headers(prepared)
            if not chat.stream:
                assert prepared.reply is not None
                payload = await self.face.body(prepared.reply)
                return Settled(JSONResponse(payload, headers=headers), settle=settle)
        except BaseException as exc:
            await close(chunks)
            await self._failed(exc, prepared)
            raise
        body = self._events(first, chunks)
        self.streams.append(body)
        response = StreamingResponse(body, media_type="text/event-stream", headers=headers)
        return Settled(response, settle=settle)

    async def _failed(self, exc: BaseException, prepared: Prepared | None = None) -> None:
        """End the span on `exc` and free the session (once its state is written)."""
        self.span.fail(exc)
        self.span.end()
        try:
            if prepared is not None:  # the session's state is written before it is free
                await self.proxy.saved(prepared)
        finally:
            self.lock.release()

    async def _headers(self, prepared: Prepared) -> dict[str, str]:
        """Once the window's write is done (it ran while the upstream was asked): the
        headers, and the window on the span, with the report's id if it is stored."""
        waited = time.perf_counter()
        await self.proxy.saved(prepared)
        log_fields = self.request.state.log
        log_fields["save_wait_ms"] = round((time.perf_counter() - waited) * 1000, 2)
        window = prepared.window
        self.span.window(
            window.report if window else None,
            prepared.report_id,
            window.messages if window else (),
        )
        headers = {SESSION_HEADER: self.chat.session}
        if prepared.report_id is not None:
            headers[REPORT_HEADER] = prepared.report_id
            log_fields["report"] = prepared.report_id
        if prepared.cache_marks is not None:
            headers["X-Loom-Cache-Marks"] = prepared.cache_marks
        if window is None:
            headers["X-Loom-Passthrough"] = "true"
        else:  # the bill the window predicts; the provider's usage is recorded later
            report = window.report
            predicted = (report.predicted_cached, report.predicted_written, report.predicted_plain)
            headers.update(zip(PREDICTED_HEADERS, map(str, predicted), strict=True))
        return headers

    async def _events(
        self, first: dict[str, Any] | None, chunks: AsyncIterator[dict[str, Any]]
    ) -> AsyncGenerator[bytes]:
        """The response's events in the face's format, from the upstream's `first` chunk
        and the rest of its `chunks`; a failure ends the stream on an error event."""
        try:
            async with contextlib.aclosing(self.face.events(_chain(first, chunks))) as sent:
                async for data in sent:
                    yield data
        except UpstreamError as exc:  # the stream cannot end as a 502: it ends on the error
            self.span.fail(exc)
            yield self.face.error_event(exc.body)
        except Exception as exc:  # a bug: the client still learns the reply is cut
            log.exception("request failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            self.span.fail(exc)
            body = error_body(
                f"Loom failed in the middle of this reply ({type(exc).__name__}); the "
                "server's log has the details",
                type="server_error",
            )
            yield self.face.error_event(body)

    async def _settle(self, prepared: Prepared) -> None:
        """Once the response is sent, or could not be (the client went away, the server
        refused a header): close the upstream's stream (which cancels a call still
        running), end the span, record the reply in a worker thread (the event loop
        serves other sessions meanwhile), then free the session, whatever fails here."""
        try:
            for stream in reversed(self.streams):
                await close(stream)
            if prepared.complete and prepared.reply is not None:
                self.span.reply(prepared.reply.completion())
            self.span.end()
            loop = asyncio.get_running_loop()
            recording = loop.run_in_executor(None, self.proxy.record, prepared)
        except BaseException:
            self.lock.release()
            raise
        recording.add_done_callback(self._recorded)

    def _recorded(self, done: asyncio.Future[None]) -> None:
        """Free the session once the reply is recorded; log a recording that failed."""
        self.lock.release()
        if not done.cancelled() and done.exception() is not None:
            log.error(
                "the reply could not be recorded",
                exc_info=done.exception(),
                extra={"tenant": self.tenant.name, "session": self.chat.session},
            )


async def _drain(chunks: AsyncIterator[Any]) -> None:
    async for _ in chunks:
        pass


async def _chain(
    first: dict[str, Any] | None, chunks: AsyncIterator[dict[str, Any]]
) -> AsyncGenerator[dict[str, Any]]:
    if first is not None:
        yield first
    async for chunk in chunks:
        yield chunk
