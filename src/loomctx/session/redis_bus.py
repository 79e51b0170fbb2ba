"""The Redis Streams bus's earlier import path: it lives in `loomctx.session.bus.redis`.

Kept so that code and documents naming ``loomctx.session.redis_bus`` keep working; new code
imports from `loomctx.session.bus.redis` (or `open_bus` from `loomctx.session.bus`).
"""

from __future__ import annotations

from loomctx.session.bus.redis import DeadLetter, RedisStreamsBus, RedisSubscription

__all__ = ["DeadLetter", "RedisStreamsBus", "RedisSubscription"]
