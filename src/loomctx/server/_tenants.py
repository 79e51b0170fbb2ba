"""Who a tenant is, checked against the store when a server starts, and the store's older
layouts moved to where this version reads them.

A tenant's data is found by its name, so a name must keep meaning one tenant. The store
records each tenant it has served, under ``("_loom", "tenants")``: the name, and the hashes
of every key it was served with. A configured tenant starts only if the store has no record
of its name, or if one of its `keys` or `previous_keys` is among the recorded hashes; each
start adds the tenant's current keys to the record. So:

- rotating keys: list the new key beside the old one and start once (or move the old hash to
  `previous_keys`, where it is proof of identity but opens nothing); then drop the old one;
- a new tenant given a retired tenant's name shares no key with it and is refused with a
  `ConfigError` naming the fix (another name), instead of inheriting the old one's sessions,
  memories, reports and knowledge.

A tenant without keys (one no client can reach, such as `loomctx mcp`'s local one) is neither
checked nor recorded.

Older layouts, moved on start-up (every move is one batch: all of it or nothing):

- session ids were claimed in one registry for every tenant, ``("_loom", "sessions")``; each
  claim moves to its tenant's ``(tenant, "sessions")``;
- a tenant's knowledge base lived at ``("knowledge", "<tenant>.<kb>")``, a join that two
  tenants could share (``acme`` + ``x.docs`` and ``acme.x`` + ``docs``); it moves to
  ``(tenant, "knowledge", kb)``, its chunks embedded again by the service's embedder (a store
  cannot hand vectors back). If two configured tenants' bases join to the same old name,
  nobody can tell whose documents it holds, and the server refuses to start.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Final

import numpy as np

from loomctx.embeddings import Embedder
from loomctx.errors import ConfigError
from loomctx.knowledge._base import CHUNK, DOCUMENT
from loomctx.server._config import ServeConfig, TenantConfig
from loomctx.stores.base import (
    Delete,
    Get,
    MemoryStore,
    Namespace,
    Op,
    Put,
    PutVectors,
    Record,
    Scan,
)

__all__ = [
    "CLAIM_KIND",
    "claims_namespace",
    "knowledge_namespace",
    "prepare_store",
    "proxy_namespace",
]

TENANTS: Final = ("_loom", "tenants")
TENANT_KIND: Final = "tenant"
OLD_CLAIMS: Final = ("_loom", "sessions")
CLAIM_KIND: Final = "session_claim"
_SAME_BATCH: Final = 2**62  # a vector of text written in the same batch (see `PutVectors`)


def claims_namespace(tenant: str) -> Namespace:
    """Where the tenant's session ids are claimed, one record per session."""
    return (tenant, "sessions")


def proxy_namespace(tenant: str) -> Namespace:
    """Where the proxy keeps, one record per session, what it recorded of the session."""
    return (tenant, "proxy")


def knowledge_namespace(tenant: str, kb: str) -> Namespace:
    """Where the tenant's knowledge base `kb` lives."""
    return (tenant, "knowledge", kb)


def prepare_store(store: MemoryStore, config: ServeConfig, embedder: Embedder | None) -> None:
    """Check every configured tenant against the store's record of it, then move what older
    versions stored to where this one reads it (see the module docstring)."""
    _check_tenants(store, config.tenants.values())
    _move_claims(store)
    _move_knowledge(store, config.tenants.values(), embedder)


def _check_tenants(store: MemoryStore, tenants: Iterable[TenantConfig]) -> None:
    keyed = [t for t in tenants if t.keys]
    if not keyed:
        return
    found = store.batch([Get(namespace=TENANTS, key=t.name) for t in keyed])
    writes: list[Op] = []
    for tenant, record in zip(keyed, found, strict=True):
        recorded = [str(k) for k in record.data.get("keys", [])] if record is not None else []
        if recorded and not set(recorded) & {*tenant.keys, *tenant.previous_keys}:
            raise ConfigError(
                f"tenant `{tenant.name}`: this store holds the data of an earlier tenant "
                f"`{tenant.name}`, served with other keys ({_shown(recorded)}), and none of "
                "this tenant's `keys` or `previous_keys` is one of them. If this is a new "
                "tenant, give it a name the store has not served (it would otherwise read "
                "the earlier one's sessions and knowledge). If it is that tenant with new "
                "keys, list one of its earlier key hashes in `previous_keys` (they prove "
                "who it is and open nothing) and start again"
            )
        keys = sorted({*recorded, *tenant.keys})
        if keys != sorted(recorded):
            created = record.data.get("created", time.time()) if record else time.time()
            data = {"keys": keys, "created": created}
            writes.append(
                Put(record=Record(namespace=TENANTS, key=tenant.name, kind=TENANT_KIND, data=data))
            )
    if writes:
        store.batch(writes)


def _shown(hashes: list[str]) -> str:
    shown = ", ".join(f"`{h[:15]}…`" for h in hashes[:3])
    return shown + (f" and {len(hashes) - 3} more" if len(hashes) > 3 else "")


def _move_claims(store: MemoryStore) -> None:
    old = store.batch([Scan(prefix=OLD_CLAIMS, kind=CLAIM_KIND, exact=True)])[0]
    if not old:
        return
    ops: list[Op] = []
    for r in old:
        tenant = str(r.data.get("tenant", ""))
        if tenant and "/" not in tenant:
            ns = claims_namespace(tenant)
            ops.append(Put(record=Record(namespace=ns, key=r.key, kind=CLAIM_KIND, data=r.data)))
        ops.append(Delete(namespace=OLD_CLAIMS, key=r.key))
    store.batch(ops)


def _move_knowledge(
    store: MemoryStore, tenants: Iterable[TenantConfig], embedder: Embedder | None
) -> None:
    owners: dict[str, list[tuple[str, str]]] = {}
    for tenant in tenants:
        for kb in tenant.knowledge:
            owners.setdefault(f"{tenant.name}.{kb}", []).append((tenant.name, kb))
    names = sorted(owners)
    found = store.batch([Scan(prefix=("knowledge", n), exact=True, limit=1) for n in names])
    for name, records in zip(names, found, strict=True):
        if not records:
            continue
        claimants = owners[name]
        if len(claimants) > 1:
            who = " and ".join(f"tenant `{t}`'s knowledge base `{kb}`" for t, kb in claimants)
            raise ConfigError(
                f"the store holds a knowledge base at ('knowledge', {name!r}), where an "
                f"earlier version kept {who}: both names join to it, so it cannot tell whose "
                "documents it holds. Rename one of the two knowledge bases in the config, or "
                "configure only the owner for one start (its documents move to it), then "
                "ingest the other's documents again"
            )
        owner, kb = claimants[0]
        _move_base(store, ("knowledge", name), knowledge_namespace(owner, kb), embedder)


def _move_base(
    store: MemoryStore, old: Namespace, new: Namespace, embedder: Embedder | None
) -> None:
    records = store.batch([Scan(prefix=old, exact=True)])[0]
    ops: list[Op] = []
    chunks: list[Record] = []
    for r in records:
        data = dict(r.data)
        if r.kind == DOCUMENT:  # its vectors are those embedded below, or none
            data["models"] = [embedder.name] if embedder is not None else []
        moved = Record(namespace=new, key=r.key, kind=r.kind, text=r.text, data=data)
        ops += [Put(record=moved), Delete(namespace=old, key=r.key)]
        if r.kind == CHUNK and r.text:
            chunks.append(moved)
    if embedder is not None and chunks:
        vectors = np.asarray(embedder.embed([c.text for c in chunks]), dtype=np.float32)
        items = [(new, c.key, _SAME_BATCH) for c in chunks]
        ops.append(PutVectors(model=embedder.name, items=items, vectors=vectors))
    store.batch(ops)
