"""Evaluation of the whole engine: retrieval quality on real long-conversation data (LoCoMo,
LongMemEval; `retrieval` gathers `datasets`, `metrics`, `locomo`, `longmemeval`, with
`crossval`), cost per call under prompt caching (`cost`), what Loom
would save on a log of recorded chat requests (`replay`), and speed beside other libraries
(`perf`).

It sits above the engine it measures (memory, retrieval, the orchestrator), so it is a layer of
its own, below the CLI that exposes it as `loomctx bench locomo|longmemeval|cost|perf`
and `loomctx replay`.
"""
