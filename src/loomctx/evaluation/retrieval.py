"""Retrieval quality on LoCoMo and LongMemEval_S, measured against gold evidence (no LLM).

The functions behind ``loomctx bench locomo PATH`` and ``loomctx bench longmemeval PATH``
(docs/benchmarks.md), gathered from the modules that hold them: the datasets
(`loomctx.evaluation.datasets`), the metrics (`loomctx.evaluation.metrics`), LoCoMo
(`loomctx.evaluation.locomo`: ranking figures from retrieval alone, evidence-in-window figures
from the window an `Agent` sends) and LongMemEval (`loomctx.evaluation.longmemeval`). Each
evaluation returns a JSON-ready dict whose top-level metric keys are fixed:

- `evaluate_locomo`: ``r@5``, ``r@10``, ``r@20``, ``ndcg@10``, ``window@<B>`` per budget, plus
  ``by_category`` (``{"1": {...}, ...}``), ``excluding_category_5``, ``conversations``,
  ``questions``.
- `evaluate_longmemeval`: ``recall_any@5``, ``recall_all@5``, ``recall_all@10``, ``ndcg@10``,
  ``turns@10`` (the marked evidence turns among the first ten, over the ``turn_questions``
  that mark any), plus ``by_question_type`` and ``questions`` (non-abstention questions only).

With ``stages=True`` both also report ``stages``, the same ranking metrics for each step of
the pipeline: ``lexical`` (`LoomMemory` without an embedder), ``dense`` (the store's vector
search alone), ``fused`` (`LoomMemory.search` with the embedder), ``+rewriter`` (the
rewritten query's extra recall, ranked by recall relevance) and ``+reranker`` (the whole
pipeline, the same as the top-level numbers). Every metric is a fraction in 0..1.
"""

from __future__ import annotations

from loomctx.evaluation.datasets import (
    LocomoConversation,
    LocomoQuestion,
    LocomoTurn,
    LongMemEvalQuestion,
    load_locomo,
    load_longmemeval,
    locomo_date,
)
from loomctx.evaluation.locomo import evaluate_locomo
from loomctx.evaluation.longmemeval import evaluate_longmemeval
from loomctx.evaluation.metrics import ndcg_at, recall_at

__all__ = [
    "LocomoConversation",
    "LocomoQuestion",
    "LocomoTurn",
    "LongMemEvalQuestion",
    "evaluate_locomo",
    "evaluate_longmemeval",
    "load_locomo",
    "load_longmemeval",
    "locomo_date",
    "ndcg_at",
    "recall_at",
]
