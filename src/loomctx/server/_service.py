"""`LoomService`: what every face of the server shares: one store, the tenants' sessions,
memories, knowledge bases and window reports, and one `LayoutState` for cache-aware builds.

Where things live in the store, every namespace under the tenant's name (so every read is
confined to one tenant: DESIGN.md invariant 6):

- ``(tenant, "agent", "session", session)``: the session's `LoomMemory` (its Tasks, tiers,
  archive), where every session's memory lives (`loomctx.session._layout`, agent
  `DEFAULT_AGENT`); what an earlier version kept at ``(tenant, "memory", session)`` moves
  there when the session is first opened;
- ``(tenant, "proxy")``: one ``proxy_session`` record per session: how much of the client's
  history is recorded (a count and a hash chain, see `loomctx.context.turns`), the current
  turn, when it was last used;
- ``(tenant, "turns", session)``: the session's ledger, one ``proxy_turn`` record per request
  recorded; its version guards every write of what the proxy records of the session
  (`loomctx.server._ledger`);
- ``(tenant, "reports")``: one ``context_report`` record per window Loom built, by report id;
- ``(tenant, "responses")``: one ``proxy_response`` record per response of ``/v1/responses``
  (its session and conversation, for a later ``previous_response_id``), by response id;
- ``(tenant, "knowledge", kb)``: the tenant's knowledge bases, each in a namespace of its own
  (exact parts: whatever the names contain, two tenants' bases never meet), and only those
  the tenant is configured with;
- ``(tenant, "sessions")``: one ``session_claim`` record per session id the tenant used. A
  session is ``(tenant, id)``: two tenants may use the same id, each its own session, and
  neither can see, block or probe the other's (an id another tenant uses reads as unused).

Which tenant a name means is checked against the store when the service starts, and older
layouts are moved (`loomctx.server._tenants`).

Memories are kept open (least recently used first out, at most `max_open`): a memory syncs
with the store before every read (`LoomMemory` checks the namespace's version), so several
instances serving the same store stay consistent.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

from loomctx.context.orchestrator import LayoutState
from loomctx.embeddings import Embedder
from loomctx.knowledge import KnowledgeBase
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import Task, TaskStatus
from loomctx.server._config import ModelConfig, ServeConfig, TenantConfig
from loomctx.server._errors import RequestError
from loomctx.server._tenants import (
    CLAIM_KIND,
    claims_namespace,
    knowledge_namespace,
    prepare_store,
    proxy_namespace,
)
from loomctx.session._layout import (
    DEFAULT_AGENT,
    SessionLayout,
    served_memory_before,
    session_memory,
)
from loomctx.session.bus import EventBus
from loomctx.stores import open_store
from loomctx.stores.base import Delete, Get, MemoryStore, Put, Record, Scan
from loomctx.tokens import TiktokenCounter

__all__ = ["LoomService", "open_store"]

_SESSION: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}\Z")
PROXY_KIND: Final = "proxy_session"
REPORT_KIND: Final = "context_report"
REMEMBERED_IMPORTANCE: Final = 0.9
"""The importance of what a client explicitly asks to remember (REST and MCP alike)."""


def check_session_id(session: object) -> str:
    """`session` if it is a valid session id, else a 400 `RequestError`."""
    if not isinstance(session, str) or not _SESSION.match(session):
        raise RequestError(
            f"session id {session!r:.80} is not valid: use 1-128 letters, digits, `_`, `.`, "
            "`:`, `@` or `-`, starting with a letter or digit",
            param="session",
            code="invalid_session",
        )
    return session


class LoomService:
    """The state one server instance shares between its requests (see the module docstring)."""

    def __init__(
        self,
        config: ServeConfig,
        *,
        store: MemoryStore | None = None,
        embedder: Embedder | None = None,
        bus: EventBus | None = None,
        max_open: int = 256,
    ) -> None:
        self.config = config
        # Where each window's `context.assembled` event goes: `bus`, or the one the `bus`
        # setting names, opened by the app on its event loop (`create_app`); None: nowhere.
        self.bus = bus
        self.store = store if store is not None else open_store(config.store)
        self._owns_store = store is None
        if embedder is None and config.embedder == "default":
            from loomctx.embeddings import default_embedder

            embedder = default_embedder()
        self.embedder = embedder
        try:
            prepare_store(self.store, config, embedder)
        except BaseException:
            if self._owns_store:
                getattr(self.store, "close", lambda: None)()
            raise
        self.counter = TiktokenCounter()  # every tenant's windows
        # The same tokenizer and cache, counting images by Anthropic's rule, for Claude.
        self._claude_counter = self.counter.with_image_rule("anthropic")
        self.layout = LayoutState(max_sessions=4096)
        self.max_open = max_open
        self._memories: OrderedDict[tuple[str, str], LoomMemory] = OrderedDict()
        self._kbs: dict[tuple[str, str], KnowledgeBase] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def counter_for(self, model: ModelConfig) -> TiktokenCounter:
        """The counter for `model`'s windows: images count by its provider's rule."""
        return self._claude_counter if model.provider == "anthropic" else self.counter

    # --- tenants and sessions ---------------------------------------------------------------

    def authenticate(self, authorization: str | None) -> TenantConfig:
        """The tenant of a ``Authorization: Bearer <key>`` header, else a 401."""
        key = ""
        if authorization:
            scheme, _, key = authorization.partition(" ")
            if scheme.lower() != "bearer":
                key = ""
        tenant = self.config.tenant_for_key(key.strip()) if key.strip() else None
        if tenant is None:
            raise RequestError(
                "invalid API key: send `Authorization: Bearer <key>` with a key configured "
                "for a tenant in `[serve.tenants]` (the server stores its SHA-256 hash only)",
                status=401,
                code="invalid_api_key",
            )
        return tenant

    def check_access(self, tenant: str, session: str) -> bool:
        """Whether `tenant` has used `session` (a valid id; else a 400)."""
        found = self.store.batch(
            [Get(namespace=claims_namespace(tenant), key=check_session_id(session))]
        )[0]
        return found is not None

    def require_session(self, tenant: str, session: str) -> None:
        """A 404 unless `tenant` has used `session`; the same answer for an id never used
        and for one only another tenant used (which is not this tenant's session)."""
        if not self.check_access(tenant, session):
            raise RequestError(
                f"session {session!r} does not exist for this API key",
                status=404,
                code="session_not_found",
                param="session",
            )

    def claim(self, tenant: str, session: str) -> None:
        """Record that `tenant` uses `session` (idempotent: racing claims write the same)."""
        if not self.check_access(tenant, session):
            self.store.batch([self.claim_op(tenant, session)])

    def claim_op(self, tenant: str, session: str) -> Put:
        """The write that records that `tenant` uses `session`."""
        record = Record(
            namespace=claims_namespace(tenant),
            key=session,
            kind=CLAIM_KIND,
            data={"tenant": tenant, "created": time.time()},
        )
        return Put(record=record)

    def lock(self, tenant: str, session: str) -> asyncio.Lock:
        """The lock that orders one session's requests in this process."""
        return self._locks.setdefault((tenant, session), asyncio.Lock())

    def memory(self, tenant: str, session: str) -> LoomMemory:
        """The session's memory (opened once, kept while used)."""
        key = (tenant, session)
        memory = self._memories.get(key)
        if memory is not None:
            self._memories.move_to_end(key)
            return memory
        namespace = session_memory(
            self.store,
            SessionLayout(tenant, DEFAULT_AGENT),
            session,
            before=[served_memory_before(tenant, session)],
        )
        memory = LoomMemory(
            session,
            store=self.store,
            namespace=namespace,
            embedder=self.embedder,
            counter=self.counter,
        )
        self._memories[key] = memory
        while len(self._memories) > self.max_open:
            self._memories.popitem(last=False)[1].close()
        return memory

    def proxy_state(self, tenant: str, session: str) -> dict[str, Any]:
        """What the proxy recorded of the session's history (empty for a new session)."""
        found = self.store.batch([Get(namespace=proxy_namespace(tenant), key=session)])[0]
        return dict(found.data) if found is not None else {}

    def save_proxy_state(self, tenant: str, session: str, state: Mapping[str, Any]) -> None:
        """Keep the proxy's view of the session."""
        self.store.batch([self.proxy_state_op(tenant, session, state)])

    def proxy_state_op(self, tenant: str, session: str, state: Mapping[str, Any]) -> Put:
        """The write that keeps the proxy's view of the session."""
        record = Record(
            namespace=proxy_namespace(tenant), key=session, kind=PROXY_KIND, data=dict(state)
        )
        return Put(record=record)

    def sessions(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's sessions, most recently used first: those the proxy served, and
        those only REST or MCP used (no model, no messages)."""
        scan = Scan(prefix=proxy_namespace(tenant), kind=PROXY_KIND, exact=True, newest_first=True)
        claims = Scan(prefix=claims_namespace(tenant), kind=CLAIM_KIND, exact=True)
        found, claimed = self.store.batch([scan, claims])
        out = [
            {
                "id": r.key,
                "model": r.data.get("model"),
                "messages": r.data.get("count", 0),
                "requests": r.data.get("requests", 0),
                "updated_at": r.updated_at,
            }
            for r in found
        ]
        served = {r.key for r in found}
        out += [
            {"id": r.key, "model": None, "messages": 0, "requests": 0, "updated_at": r.updated_at}
            for r in claimed
            if r.key not in served
        ]
        out.sort(key=lambda s: s["updated_at"], reverse=True)
        return out

    def session_info(self, tenant: str, session: str) -> dict[str, Any]:
        """One session: its proxy state, its memory's tiers and its reports (404 if unknown)."""
        self.require_session(tenant, session)
        memory = self.memory(tenant, session)
        state = self.proxy_state(tenant, session)
        return {
            "id": session,
            "model": state.get("model"),
            "messages": state.get("count", 0),
            "requests": state.get("requests", 0),
            "l1": [t.to_dict() for t in memory.get_l1_tasks(limit=memory.max_l1_size)],
            "l2": len(memory.get_l2_tasks()),
            "l3": len(memory.get_l3_summaries()),
            "reports": self.report_ids(tenant, session),
        }

    # --- memory -----------------------------------------------------------------------------

    def recall(self, tenant: str, session: str, query: str, limit: int = 5) -> list[dict[str, Any]]:
        """Tasks of the session's memory relevant to `query`, best first (none for a session
        the tenant never used)."""
        if not self.check_access(tenant, session):
            return []
        hits = self.memory(tenant, session).search(query, limit=limit)
        return [
            {"task_id": h.task.task_id, "score": round(h.score, 6), "task": h.task.to_dict()}
            for h in hits
        ]

    def remember(self, tenant: str, session: str, content: str) -> str:
        """Record `content` (a fact, a preference) in the session's memory, claiming the
        session for `tenant`; returns the task's id. What a client asks to remember is
        important by definition (`REMEMBERED_IMPORTANCE`), so it is promoted to L2 at once
        and kept in windows after it leaves L1. A blank `content` is a 400."""
        if not isinstance(content, str) or not content.strip():
            raise RequestError(
                '`content` is blank: pass the text to remember, as {"content": "..."}',
                param="content",
            )
        self.claim(tenant, session)
        task = Task(
            source_agent="user",
            target_agent="memory",
            action="remember",
            parameters={"content": content},
            result="remembered",
            status=TaskStatus.COMPLETED,
            metadata={"session_id": session, "importance": REMEMBERED_IMPORTANCE},
        )
        memory = self.memory(tenant, session)
        memory.add_tasks([task])
        memory.promote_tasks()
        return task.task_id

    def forget(self, tenant: str, session: str, task_id: str) -> bool:
        """Delete a task from the session's memory (and its L3 summary); False if absent."""
        if not self.check_access(tenant, session):
            return False
        memory = self.memory(tenant, session)
        ns = memory.namespace
        found = self.store.batch([Get(namespace=ns, key=f"task:{task_id}")])[0]
        if found is None:
            return False
        self.store.batch(
            [
                Delete(namespace=ns, key=f"task:{task_id}"),
                Delete(namespace=ns, key=f"summary:{task_id}"),
            ]
        )
        return True

    # --- knowledge --------------------------------------------------------------------------

    def knowledge(self, tenant: TenantConfig, name: str) -> KnowledgeBase:
        """The tenant's knowledge base `name` (opened once); a 404 for a name the tenant is
        not configured with, the same whether or not another tenant has one of that name."""
        if name not in tenant.knowledge:
            known = ", ".join(f"`{k}`" for k in tenant.knowledge) or "none"
            raise RequestError(
                f"knowledge base {name!r:.80} does not exist for this API key; this tenant's "
                f"knowledge bases (`knowledge` in its `[serve.tenants]` table): {known}",
                status=404,
                code="knowledge_base_not_found",
                param="name",
            )
        key = (tenant.name, name)
        kb = self._kbs.get(key)
        if kb is None:
            kb = self._kbs[key] = KnowledgeBase(
                name,
                self.store,
                namespace=knowledge_namespace(tenant.name, name),
                embedder=self.embedder,
                counter=self.counter,
            )
        return kb

    def knowledge_bases(self, tenant: TenantConfig) -> list[KnowledgeBase]:
        """The knowledge bases searched for the tenant's windows."""
        return [self.knowledge(tenant, name) for name in tenant.knowledge]

    # --- reports ----------------------------------------------------------------------------

    def save_report(self, tenant: str, session: str, model: str, report: Mapping[str, Any]) -> str:
        """Store a window's report; returns its id."""
        report_id, op = self.report_op(tenant, session, model, report)
        self.store.batch([op])
        return report_id

    def report_op(
        self, tenant: str, session: str, model: str, report: Mapping[str, Any]
    ) -> tuple[str, Put]:
        """A new report id, and the write that stores the report under it."""
        report_id = "rep_" + uuid.uuid4().hex
        record = Record(
            namespace=(tenant, "reports"),
            key=report_id,
            kind=REPORT_KIND,
            data={"id": report_id, "session": session, "model": model, "report": dict(report)},
        )
        return report_id, Put(record=record)

    def report(self, tenant: str, report_id: str) -> dict[str, Any]:
        """A stored report of `tenant` (404 for an unknown id, or another tenant's)."""
        found = self.store.batch([Get(namespace=(tenant, "reports"), key=report_id)])[0]
        if found is None:
            raise RequestError(
                f"report {report_id!r:.80} does not exist for this API key",
                status=404,
                code="report_not_found",
            )
        out = dict(found.data)
        out["created_at"] = found.created_at
        return out

    def report_ids(self, tenant: str, session: str) -> list[str]:
        """The ids of a session's reports, oldest first."""
        scan = Scan(
            prefix=(tenant, "reports"), kind=REPORT_KIND, exact=True, where={"session": session}
        )
        return [r.key for r in self.store.batch([scan])[0]]

    def close(self) -> None:
        """Close the memories, knowledge bases and (if opened here) the store."""
        while self._memories:
            self._memories.popitem()[1].close()
        for kb in self._kbs.values():
            kb.close()
        self._kbs.clear()
        if self._owns_store:
            close = getattr(self.store, "close", None)
            if close is not None:
                close()
