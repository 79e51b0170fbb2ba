"""The event bus: one import for the protocol, both backends, and `open_bus(url)`.

The protocol and its values live in `loomctx.session.bus.base` (what every bus promises), the
asyncio bus of one process in `loomctx.session.bus.inprocess`, the Redis Streams bus of many
processes in `loomctx.session.bus.redis` (extra ``redis``); what both backends do alike
(subscriptions with a worker, close, stats) is their base, `loomctx.session.bus._lifecycle`.
The Redis bus is also importable from its earlier path, ``loomctx.session.redis_bus``.

`open_bus(url)` picks the backend from a URL, as the ``bus`` setting of the CLI and
``LOOM_BUS`` do:

| url | bus |
|---|---|
| None, ``""`` or ``memory://`` | `InProcessEventBus` |
| ``redis://host:port/db``, ``rediss://...``, ``unix:///path.sock`` | `RedisStreamsBus` |

A Redis URL's query may carry the bus's options (``?prefix=app1&claim_idle=10``; see
`RedisStreamsBus.from_url`). Any other scheme is a `ConfigError`; a Redis URL without the
``redis`` extra installed is a `MissingExtraError` naming ``pip install 'loomctx[redis]'``.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlsplit

from loomctx.errors import BusClosedError as BusClosedError  # its home is `loomctx.errors`
from loomctx.errors import BusLoopError as BusLoopError
from loomctx.errors import ConfigError
from loomctx.session.bus.base import (
    HANDLER_FAILED,
    BusStats,
    Event,
    EventBus,
    Handler,
    HandlerFailure,
    Subscription,
    SubscriptionStats,
)
from loomctx.session.bus.inprocess import InProcessEventBus, InProcessSubscription

__all__ = [
    "HANDLER_FAILED",
    "BusStats",
    "Event",
    "EventBus",
    "Handler",
    "HandlerFailure",
    "InProcessEventBus",
    "InProcessSubscription",
    "Subscription",
    "SubscriptionStats",
    "open_bus",
]

_MEMORY: Final = ("memory",)
_REDIS: Final = ("redis", "rediss", "unix")


def open_bus(url: str | None = None, **options: Any) -> EventBus:
    """The bus `url` names (see the module docstring); `options` go to its constructor.

    The caller owns the bus: close it with ``await bus.close()`` (or ``async with``).
    """
    if url is None or (isinstance(url, str) and not url.strip()):
        return InProcessEventBus(**options)
    if not isinstance(url, str):
        raise ConfigError(f"the bus URL must be a string, got {url!r}.")
    scheme = urlsplit(url.strip()).scheme.lower()
    if scheme in _MEMORY:
        return InProcessEventBus(**options)
    if scheme in _REDIS:
        from loomctx.session.bus.redis import RedisStreamsBus  # needs the `redis` extra

        return RedisStreamsBus.from_url(url.strip(), **options)
    raise ConfigError(
        f"unknown event bus URL {url!r}: use `memory://` (in process, the default) or "
        "`redis://host:6379/0` (Redis Streams, for many workers)."
    )
