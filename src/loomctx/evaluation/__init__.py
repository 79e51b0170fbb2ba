"""Evaluation of the whole engine on real long-conversation data (LoCoMo, LongMemEval).

It sits above the engine it measures (memory, retrieval, the orchestrator), so it is a layer of
its own, below the CLI that will expose it as `loomctx bench locomo|longmemeval PATH`.
"""
