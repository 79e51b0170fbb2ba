"""Tiered memory of tasks on a durable store: `LoomMemory` keeps recent tasks (L1), important
ones (L2), summaries of what left them (L3) and every task, searchable by words and vectors
(L4), with the plain path (`add` messages, `recall` a query) on top; importance, summaries and
the background embedder are its parts.
"""
