"""A tenant's identity in the store: a retired tenant's name, reused, is refused at start-up
instead of inheriting its data; keys rotate; and what an earlier version stored (session
claims in one registry, knowledge bases at a dotted name) moves to where each tenant's is."""

from __future__ import annotations

from pathlib import Path

import pytest

from loomctx.errors import ConfigError
from loomctx.knowledge import KnowledgeBase
from loomctx.server import LoomService, hash_key
from loomctx.server._config import ServeConfig, serve_config_from
from loomctx.stores.base import Put, Record, Scan, Unembedded
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing import HashingEmbedder

OLD, NEW, NEWER = "sk-gamma-old-1111", "sk-gamma-new-2222", "sk-gamma-newer-3333"


def _config(store: Path, **tenants: dict[str, object]) -> ServeConfig:
    return serve_config_from({"tenants": tenants}, store=str(store), embedder="none")


def _start(store: Path, **tenants: dict[str, object]) -> LoomService:
    return LoomService(_config(store, **tenants))


def test_a_retired_tenants_name_reused_by_a_new_tenant_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "loom.db"
    old = _start(db, gamma={"keys": [hash_key(OLD)]})
    old.claim("gamma", "private")
    old.close()
    with pytest.raises(ConfigError) as refused:
        _start(db, gamma={"keys": [hash_key(NEW)]})  # a new customer, the old one's name
    message = str(refused.value)
    assert "tenant `gamma`" in message
    assert "name the store has not served" in message  # the fix for a new tenant
    assert "`previous_keys`" in message  # and for the same tenant with new keys
    assert hash_key(OLD)[:15] in message  # which keys the store knows it by
    assert OLD not in message
    # Another name starts, and sees nothing of gamma's.
    fresh = _start(db, delta={"keys": [hash_key(NEW)]})
    assert not fresh.check_access("delta", "private")
    assert fresh.sessions("delta") == []
    fresh.close()


def test_keys_rotate_with_an_overlap_or_through_previous_keys(tmp_path: Path) -> None:
    db = tmp_path / "loom.db"
    service = _start(db, gamma={"keys": [hash_key(OLD)]})
    service.claim("gamma", "kept")
    service.close()
    # Rotation with an overlap: both keys for one start, then the new one alone.
    _start(db, gamma={"keys": [hash_key(OLD), hash_key(NEW)]}).close()
    service = _start(db, gamma={"keys": [hash_key(NEW)]})
    assert service.check_access("gamma", "kept")
    service.close()
    # Rotation at once (a leaked key): the retired hash proves identity and opens nothing.
    service = _start(db, gamma={"keys": [hash_key(NEWER)], "previous_keys": [hash_key(NEW)]})
    assert service.check_access("gamma", "kept")
    assert service.config.tenant_for_key(NEW) is None
    assert service.config.tenant_for_key(NEWER) is not None
    service.close()


@pytest.mark.parametrize(
    ("tenant", "error"),
    [
        ({"keys": [hash_key(OLD)], "previous_keys": [hash_key(OLD)]}, "both `keys` and"),
        ({"previous_keys": ["plain-key"]}, "`previous_keys`"),
        ({"previous_keys": "x"}, "`previous_keys`"),
    ],
)
def test_previous_keys_are_checked(tenant: dict[str, object], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        serve_config_from({"tenants": {"t": tenant}}, store="x.db", embedder="none")


def test_an_earlier_versions_session_claims_move_to_their_tenants(tmp_path: Path) -> None:
    db = tmp_path / "loom.db"
    with SQLiteStore(db) as store:
        store.batch(
            [
                Put(
                    record=Record(
                        namespace=("_loom", "sessions"),
                        key=session,
                        kind="session_claim",
                        data={"tenant": tenant, "created": 1.0},
                    )
                )
                for tenant, session in (("acme", "a1"), ("globex", "g1"))
            ]
        )
    service = _start(db, acme={"keys": [hash_key(OLD)]}, globex={"keys": [hash_key(NEW)]})
    assert [s["id"] for s in service.sessions("acme")] == ["a1"]
    assert [s["id"] for s in service.sessions("globex")] == ["g1"]
    assert not service.check_access("globex", "a1")
    assert service.store.batch([Scan(prefix=("_loom", "sessions"))])[0] == []
    service.close()


def test_an_earlier_versions_knowledge_base_moves_to_its_tenant(tmp_path: Path) -> None:
    """It lived at ``("knowledge", "acme.handbook")``; it moves, searchable lexically and
    densely (its chunks embedded again: a store cannot hand vectors back)."""
    db = tmp_path / "loom.db"
    embedder = HashingEmbedder()
    with SQLiteStore(db) as store:
        old = KnowledgeBase("acme.handbook", store, embedder=embedder)  # the old layout
        old.add_text("Expense reports are due on the fifth of each month.", document_id="exp")
        old.close()
    service = LoomService(
        _config(db, acme={"keys": [hash_key(OLD)], "knowledge": ["handbook"]}),
        embedder=embedder,
    )
    tenant = service.config.tenants["acme"]
    kb = service.knowledge(tenant, "handbook")
    assert kb.namespace == ("acme", "knowledge", "handbook")
    assert [d.document_id for d in kb.documents()] == ["exp"]
    assert "fifth" in kb.search_sync("when are expense reports due", limit=1)[0].text
    store = service.store
    assert store.batch([Scan(prefix=("knowledge", "acme.handbook"))])[0] == []
    unembedded = Unembedded(model=embedder.name, prefix=kb.namespace, exact=True)
    assert store.batch([unembedded])[0] == []  # every moved chunk has its vector
    service.close()


def test_an_old_knowledge_base_two_tenants_join_to_is_refused(tmp_path: Path) -> None:
    """``acme`` + ``x.docs`` and ``acme.x`` + ``docs`` were one base: whose is it?"""
    db = tmp_path / "loom.db"
    with SQLiteStore(db) as store:
        KnowledgeBase("acme.x.docs", store).add_text("Whose document am I?")
    with pytest.raises(ConfigError) as refused:
        _start(
            db,
            acme={"keys": [hash_key(OLD)], "knowledge": ["x.docs"]},
            **{"acme.x": {"keys": [hash_key(NEW)], "knowledge": ["docs"]}},
        )
    message = str(refused.value)
    assert "('knowledge', 'acme.x.docs')" in message
    assert "tenant `acme`'s knowledge base `x.docs`" in message
    assert "tenant `acme.x`'s knowledge base `docs`" in message
    assert "Rename one" in message
    # Configured with only its owner, it moves there.
    service = _start(db, acme={"keys": [hash_key(OLD)], "knowledge": ["x.docs"]})
    kb = service.knowledge(service.config.tenants["acme"], "x.docs")
    assert len(kb.documents()) == 1
    service.close()
