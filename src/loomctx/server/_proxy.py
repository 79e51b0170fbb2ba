"""The OpenAI-compatible proxy: one chat completion through Loom.

One request (`ChatProxy.prepare`, then `ChatProxy.forward`):

1. check: the body is a JSON object with `model` (one configured) and `messages`, the
   messages convert to Loom's model (`from_openai`), the tools are valid schemas, the session
   is the tenant's. A refused request stores nothing;
2. record: the messages the session's memory does not have yet (`loomctx.context.turns`
   tells them from what the client re-sent) become Tasks; those of the current turn (the last
   user message and the tool exchange after it) are tagged with the turn's id. They are
   written with the session's state and a record in its ledger of turns, in one batch
   guarded by the ledger's version, so a retried or duplicated request, or one another
   instance recorded first, records nothing again (`loomctx.server._ledger`);
3. build: a `ContextOrchestrator` over the client's system message (the stable prefix), the
   client's tools (all of them: the client runs them, so none may go missing), the session's
   memory (L1 history, L2, and memory and the tenant's knowledge bases searched together),
   the turn's tool exchange and the user's message, within the model's window less its output
   reserve; one `LayoutState` per server keeps each session's history append-only across
   requests, so each call repeats the previous prompt up to the dynamic tail;
4. announce the window: its ``context.assembled`` event (the one Loom's sessions publish, with
   the tenant, model and report id) goes on the service's bus, if one is configured;
5. forward the window upstream and stream the answer back; a reply without tool calls is
   recorded when it ends, guarded as the turn was, unless something else was recorded in the
   session since its turn (one with tool calls is recorded with its results, when the client
   sends them). The window's report is stored; its id is the `X-Loom-Report` header. The
   window itself (the exact messages and tools sent) is saved for the web inspector
   (`loomctx.server._windows`), in the same write. The report predicts the bill under the
   model's provider's cache (`ModelConfig.pricing`): the ``X-Loom-Predicted-Cached``,
   ``-Written`` and ``-Plain`` headers; the usage the provider reported is added to the saved
   window when the reply ends (after the headers, on a stream).

With `passthrough` on (the default: availability first), that write (the session's claim,
the report, the window) runs in a worker thread while the upstream is asked: the
model's time to first token hides it instead of adding to it. The response's headers, which
name the report, wait for it (`ChatProxy.saved`), so a client never holds the id of a report
that is not stored; if the write fails, the reply comes without one. With `passthrough` off,
nothing goes upstream before it is written: a failed write is a 500 and no model call.

A request whose current turn cannot fit the model's window even alone (the system
instructions, the tenant's and the client's, the tools, the last user message and the tool
exchange after it, against the window less its output reserve) is refused in step 1 with a
400 (``context_length_exceeded``) naming the sizes: no window could hold it.

If step 2 or 3 fails inside Loom (not for bad input), with a `LoomError` or any other
exception, the client's messages are forwarded as sent, after the tenant's `instructions`
(a passthrough never drops the operator's policy), and the failure logged; if they do not
fit the model's window with them, the client gets the same 400. With `passthrough` off the
client gets a 500 in OpenAI's error shape instead.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, TypeAlias

from loomctx.context.block import BuildContext
from loomctx.context.budget import BudgetManager
from loomctx.context.orchestrator import ContextWindow
from loomctx.context.recipe import memory_sources, window_orchestrator, window_sources
from loomctx.context.sources import (
    L1RecentSource,
    L2ImportantSource,
    TurnSource,
    UnifiedRetrievalSource,
)
from loomctx.context.turns import Split, split_request
from loomctx.errors import ConfigError, ConflictError, LoomError
from loomctx.memory.core import same_view
from loomctx.messages import Message, from_openai, split_units, to_openai, tool_spec
from loomctx.parts import AudioPart, fewer_parts
from loomctx.server._cache_marks import header_of
from loomctx.server._chat_request import ChatRequest, Prepared
from loomctx.server._config import ModelConfig, TenantConfig
from loomctx.server._errors import RequestError
from loomctx.server._ledger import Turn, record_reply, record_turn, save_state
from loomctx.server._otel import BuildSpan
from loomctx.server._service import LoomService
from loomctx.server._upstream import AnthropicUpstream, OpenAIUpstream, Reply, upstream_for
from loomctx.server._windows import reported_usage, usage_op, window_log, window_ops
from loomctx.session.topics import CONTEXT_ASSEMBLED
from loomctx.session.windows import WindowLog
from loomctx.stores.base import Put

__all__ = ["ChatProxy"]

log = logging.getLogger("loomctx.server")

_ATTEMPTS = 8  # to record a turn while other requests of its session are recorded

_MemorySources: TypeAlias = tuple[L1RecentSource, L2ImportantSource, UnifiedRetrievalSource]


class ChatProxy:
    """The proxy's steps over a `LoomService`."""

    def __init__(self, service: LoomService) -> None:
        self.service = service
        self._upstreams: dict[str, OpenAIUpstream | AnthropicUpstream] = {}
        # Each open session's memory sources, kept from request to request: they keep what
        # they worked out of its tasks (their messages, their token counts), which a new
        # source would work out again on every request.
        self._memory_sources: OrderedDict[tuple[str, str], _MemorySources] = OrderedDict()
        self._window_logs: dict[str, WindowLog] = {}

    def upstream(self, model: ModelConfig) -> OpenAIUpstream | AnthropicUpstream:
        """The upstream of `model` (made once)."""
        up = self._upstreams.get(model.name)
        if up is None:
            up = self._upstreams[model.name] = upstream_for(model)
        return up

    async def aclose(self) -> None:
        """Close the upstream clients."""
        for up in self._upstreams.values():
            await up.aclose()
        self._upstreams.clear()

    async def prepare(self, tenant: TenantConfig, request: ChatRequest) -> Prepared:
        """Steps 2 and 3. Bad input raises `RequestError`; a failure of Loom itself (the
        store, the build) gives a `Prepared` without a window, the request to pass through,
        unless `passthrough` is off."""
        prepared = Prepared(request=request, tenant=tenant, window=None, report_id=None, turn="")
        try:
            await self._prepare(prepared)
        except RequestError:
            raise
        except Exception as exc:  # a bug in Loom (or a store's) as much as a `LoomError`
            if not self.service.config.passthrough:
                raise
            log.warning(
                "loom failed; passing the request through after the tenant's instructions",
                exc_info=not isinstance(exc, LoomError),  # a bug: keep its traceback
                extra={
                    "tenant": tenant.name,
                    "session": request.session,
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )
            prepared.window = prepared.report_id = None
            try:
                self._check_fits(tenant, request, self.passthrough_messages(prepared), "request")
            except RequestError:
                await self.saved(prepared)  # what was written before Loom failed
                raise
        return prepared

    def passthrough_messages(self, prepared: Prepared) -> list[Message]:
        """What a passthrough sends: the tenant's instructions, then the client's messages as
        sent (a 400 for messages Loom cannot read)."""
        instructions = prepared.tenant.instructions
        try:
            sent = from_openai(prepared.request.body["messages"])
        except ConfigError as exc:
            raise RequestError(str(exc), param="messages") from None
        return [Message.system(instructions), *sent] if instructions else sent

    def _check_turn_fits(self, tenant: TenantConfig, request: ChatRequest, split: Split) -> None:
        """A 400 if no window can hold the turn: its system instructions, its user message
        and its tool exchange (refused, not passed through)."""
        system = "\n\n".join(t for t in (tenant.instructions, request.system) if t)
        current = [Message.system(system)] if system else []
        if split.turn_message is not None:  # with its images and files
            current.append(split.turn_message)
        if request.model.provider == "anthropic" and any(
            isinstance(p, AudioPart) for m in current for p in m.parts
        ):
            raise RequestError(
                f"the last user message holds audio, and model `{request.model.name}` is "
                "served by Anthropic, whose API takes no audio: send its transcript as text",
                param="messages",
                code="unsupported_content",
            )
        self._check_fits(tenant, request, [*current, *split.in_flight], "current turn")

    def _check_fits(
        self, tenant: TenantConfig, request: ChatRequest, messages: list[Message], what: str
    ) -> None:
        """A 400 naming the sizes if `messages` and the request's tools exceed what the
        model's window leaves for input."""
        model = request.model
        window = self.upstream(model).safe_window(model.window)
        available, reserve = BudgetManager.available(
            window, output_reserve_ratio=model.output_reserve
        )
        needed = self.service.counter_for(model).count_messages(messages, tools=request.tools)
        if needed > available:
            whose = "the tenant's and the client's" if tenant.instructions else "the client's"
            counted = f" ({window} as Loom counts them)" if window != model.window else ""
            raise RequestError(
                f"the {what} needs {needed} tokens (with the system instructions, {whose}, "
                f"and the tools), more than the {available} that model `{model.name}`'s "
                f"window of {model.window} tokens{counted} leaves for input after its output "
                f"reserve of {reserve}; shorten the messages{fewer_parts(messages)}",
                code="context_length_exceeded",
                param="messages",
            )

    async def saved(self, prepared: Prepared) -> None:
        """Wait for the write `prepare` started (the session's state, the report, the window).

        If it failed, the report is not stored: `prepared.report_id` becomes None and the
        failure is logged. Waiting again returns at once."""
        saving, prepared.saving = prepared.saving, None
        if saving is None:
            return
        try:
            await saving
        except Exception as exc:
            log.warning(
                "loom could not store the window; its report is not kept",
                exc_info=not isinstance(exc, LoomError),
                extra={
                    "tenant": prepared.tenant.name,
                    "session": prepared.request.session,
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )
            prepared.report_id = None

    async def _prepare(self, prepared: Prepared) -> None:
        service, request, tenant = self.service, prepared.request, prepared.tenant
        session = request.session
        recorded = None
        for _ in range(_ATTEMPTS):
            recorded = record_turn(
                service,
                tenant.name,
                session,
                request.conversation,
                model=request.model.name,
                header=request.idempotency_key,
                check=lambda split: self._check_turn_fits(tenant, request, split),
            )
            if recorded is not None:
                break
        if recorded is None:
            raise ConflictError(
                f"the session {session!r} changed under each of {_ATTEMPTS} attempts to record "
                "its turn: too many requests at once for one conversation; retry later"
            )
        split = recorded.split
        if split.diverged and split.known and not recorded.copy:
            log.info(
                "history diverged",
                extra={"tenant": tenant.name, "session": session, "recorded_from": split.known},
            )
        prepared.key, prepared.turn, prepared.state = recorded.key, recorded.turn, recorded.state
        prepared.recorded = True
        writes: list[Put] = [] if recorded.claimed else [service.claim_op(tenant.name, session)]
        state, turn = prepared.state, prepared.turn
        try:
            prepared.window = await self._build(tenant, request, split, turn)
            report = prepared.window.report.to_dict()
            report_id, op = service.report_op(tenant.name, session, request.model.name, report)
            writes.append(op)
            prepared.report_id = report_id
            writes += window_ops(self._window_log(tenant.name), request, prepared, state, report)
        finally:  # the session's claim, the report and the window, then the window's state
            saving = self._save(writes, tenant.name, session, recorded, state)
            if service.config.passthrough:
                prepared.saving = asyncio.ensure_future(saving)
            else:  # nothing goes upstream that Loom has not stored
                await saving
        await self._announce(tenant, session, request.model.name, split.query, prepared, "proxy")

    async def _save(
        self, writes: list[Put], tenant: str, session: str, turn: Turn, state: dict[str, Any]
    ) -> None:
        """Write the window's records, then the session's state with the window's place in
        it (`window_ops` updated it), in that order: the state never names a message of a
        window that is not stored."""
        await self.service.store.abatch(writes)
        await save_state(self.service, tenant, session, turn, state)

    async def build_only(
        self,
        tenant: TenantConfig,
        session: str,
        query: str,
        *,
        model: str | None = None,
        window: int | None = None,
    ) -> dict[str, Any]:
        """The window for `query` from the session's memory, built and reported but not sent
        and not recorded (the MCP `build_context` tool): OpenAI messages, report, report id."""
        models = self.service.config.models
        if model is not None and model not in models:
            raise RequestError(f"the model `{model}` is not configured", status=404)
        if window is not None and window < 256:
            raise RequestError(f"`window` must be at least 256 tokens, got {window}")
        if not query.strip():
            raise RequestError("`query` is blank: pass the request to build a window for")
        config = models[model] if model is not None else ModelConfig(name="window")
        if window is not None:
            config = replace(config, window=window)
        self.service.claim(tenant.name, session)
        request = ChatRequest(
            body={},
            model=config,
            system="",
            conversation=(),
            tools=(),
            stream=False,
            session=session,
            new_session=False,
        )
        split = split_request([{"role": "user", "content": query}], count=0, first="", last="")
        span = BuildSpan(model=model, tenant=tenant.name, session=session)
        try:
            built = await self._build(tenant, request, split, "t_" + uuid.uuid4().hex)
            report = built.report.to_dict()
            report_id = self.service.save_report(tenant.name, session, config.name, report)
            span.built(built.report, report_id, built.messages)
        except BaseException as exc:
            span.fail(exc)
            raise
        finally:
            span.end()
        await self._announce(tenant, session, config.name, query, built, "mcp", report_id)
        return {
            "messages": to_openai(built.messages),
            "token_count": built.token_count,
            "report_id": report_id,
            "report": report,
        }

    async def _announce(
        self,
        tenant: TenantConfig,
        session: str,
        model: str,
        query: str,
        built: Prepared | ContextWindow,
        via: str,
        report_id: str | None = None,
    ) -> None:
        """Publish the window's ``context.assembled`` event on the service's bus (if any),
        as Loom's sessions do, with the tenant, the model and the report's id (its whole
        form is at ``GET /v1/reports/{id}``). A bus that fails is logged, never the
        request's failure."""
        bus = self.service.bus
        if isinstance(built, Prepared):
            window, report_id = built.window, built.report_id
        else:
            window = built
        if bus is None or window is None:
            return
        payload = {
            "session_ids": [session],
            "query": query,
            "strategy": None,
            "report": window.report.summary(),
            "report_id": report_id,
            "tenant": tenant.name,
            "model": model,
            "via": via,
        }
        try:
            await bus.publish(CONTEXT_ASSEMBLED, payload, source=f"serve:{tenant.name}")
        except Exception as exc:
            log.warning(
                "the bus refused the window's event",
                extra={
                    "tenant": tenant.name,
                    "session": session,
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )

    async def _build(
        self, tenant: TenantConfig, request: ChatRequest, split: Split, turn: str
    ) -> ContextWindow:
        service = self.service
        system = "\n\n".join(t for t in (tenant.instructions, request.system) if t)
        in_flight = TurnSource()
        for unit in split_units(list(split.in_flight)):
            in_flight.add(unit.messages)
        # Every tool is kept whatever the budget: the proxy never drops one the client may call.
        sources = window_sources(
            system,
            tools=request.tools,
            always=[tool_spec(t)[0] for t in request.tools],
            memory=self._sources_of(tenant, request.session),
            turn=in_flight,
            user=split.turn_message,  # with its images and files
        )
        orchestrator = window_orchestrator(
            sources,
            counter=service.counter_for(request.model),
            window=self.upstream(request.model).safe_window(request.model.window),
            output_reserve_ratio=request.model.output_reserve,
            state=service.layout,
        )
        orchestrator.pricing = request.model.pricing  # what its report predicts the bill under
        ctx = BuildContext(
            session_id=f"{tenant.name}/{request.session}",
            agent_id="proxy",
            tenant_id=tenant.name,
            metadata={"run_id": turn},
        )
        with same_view():  # the memory checks other workers' writes once per build
            # A window ends on an assistant message only when the client's request does.
            asked = bool(split.in_flight) and split.in_flight[-1].role == "assistant"
            window = await orchestrator.build(query=split.query, ctx=ctx, prefill=asked)
        if len(window.tools) != len(request.tools):
            raise ConfigError(
                f"the client's {len(request.tools)} tools do not all fit the window of model "
                f"`{request.model.name}` ({len(window.tools)} would); the proxy never drops a "
                "tool the client may call"
            )
        return window

    def _window_log(self, tenant: str) -> WindowLog:
        """The tenant's saved windows (one log each: it remembers its messages' keys)."""
        log = self._window_logs.get(tenant)
        if log is None:
            log = self._window_logs[tenant] = window_log(self.service.store, tenant)
        return log

    def _sources_of(self, tenant: TenantConfig, session: str) -> _MemorySources:
        """The session's memory sources: made once per memory the service opens."""
        key = (tenant.name, session)
        memory = self.service.memory(tenant.name, session)
        kept = self._memory_sources.get(key)
        if kept is not None and kept[0].memory is memory:
            self._memory_sources.move_to_end(key)
            return kept
        kept = self._memory_sources[key] = memory_sources(
            memory, self.service.knowledge_bases(tenant)
        )
        while len(self._memory_sources) > self.service.max_open:
            self._memory_sources.popitem(last=False)
        return kept

    async def chunks(self, prepared: Prepared) -> AsyncIterator[dict[str, Any]]:
        """Step 4: the upstream's chunks (OpenAI shape), folded into `prepared.reply`; the
        caller records it (`record`) once the client has it all."""
        request = prepared.request
        upstream = self.upstream(request.model)
        fields = request.fields
        if not request.stream:
            fields["stream_options"] = {"include_usage": True}
        window = prepared.window
        breakpoints = window.layout.breakpoints() if window and window.layout else ()
        reply = Reply(request.model.name)
        instructions = prepared.tenant.instructions
        if isinstance(upstream, OpenAIUpstream):
            if window is not None:  # a tool result's images follow it in a user message
                messages = to_openai(window.messages, strict=True)
            else:  # passthrough: the client's messages as sent, after the tenant's policy
                messages = list(request.body["messages"])
                if any(
                    m.get("role") == "tool" and isinstance(m.get("content"), list) for m in messages
                ):
                    messages = to_openai(from_openai(messages), strict=True)  # tool images
                if instructions:
                    messages.insert(0, {"role": "system", "content": instructions})
            parts = upstream.stream(messages, fields=fields, breakpoints=breakpoints)
            if request.cache_marks:  # OpenAI caches prefixes by itself: no marks to send
                prepared.cache_marks = header_of(request.cache_marks, 0, sent=False)
        else:
            fields.pop("tools", None)
            if window is not None:
                msgs, tools = list(window.messages), list(window.tools)
            else:
                msgs, tools = self.passthrough_messages(prepared), list(request.tools)
            marks = None
            if request.cache_marks:
                marks, left_out = request.cache_marks.resolve(msgs)
                prepared.cache_marks = header_of(request.cache_marks, left_out, sent=True)
            parts = upstream.stream(
                msgs, tools=tools, fields=fields, breakpoints=breakpoints, marks=marks
            )
        prepared.reply = reply
        async for chunk in parts:
            reply.add(chunk)
            yield chunk
        prepared.complete = True

    def record(self, prepared: Prepared, reply: Reply | None = None) -> None:
        """Record a finished reply without tool calls in the session's memory (`reply`, or
        the one `chunks` streamed to its end), unless something was recorded in the session
        since the request's turn (another reply to it, or a later request, which has the
        reply in its history)."""
        if reply is None:
            reply = prepared.reply if prepared.complete else None
        if reply is not None:
            self._record_usage(prepared, reply)
        if reply is None or reply.calls or not reply.text or not prepared.recorded:
            return
        tenant, session = prepared.tenant.name, prepared.request.session
        record_reply(self.service, tenant, session, prepared.key, prepared.turn, reply.text)

    def _record_usage(self, prepared: Prepared, reply: Reply) -> None:
        """Add the usage the provider reported to the saved window, beside its prediction
        (the headers left before it was known on a stream). A failed write is logged: the
        reply is the client's already."""
        usage = reported_usage(reply.usage)
        if usage is None or prepared.window_record is None or prepared.report_id is None:
            return
        try:
            self.service.store.batch([usage_op(prepared.window_record, usage)])
        except Exception as exc:
            log.warning(
                "loom could not store the provider's usage of a window",
                exc_info=not isinstance(exc, LoomError),
                extra={
                    "tenant": prepared.tenant.name,
                    "session": prepared.request.session,
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )
