"""What is new in a client's request: `loomctx.context.turns`, where the proxy and the
framework adapters (`loomctx.integrations`) both find it."""

from loomctx.context.turns import Split, fingerprint, request_digest, split_request

__all__ = ["Split", "fingerprint", "request_digest", "split_request"]
