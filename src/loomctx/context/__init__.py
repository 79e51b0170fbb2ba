"""The context engine: the window that fits an exact budget, built before every model call.

`orchestrator` builds it: `collector` asks every source (`sources`) at once, `compactor` fits
their blocks into the `budget`, `render` lays them out for prompt caches and `report` says
what went in and why; `recipe` is the one recipe an agent's, a proxy's and a session's windows
are built by. `packing` and `excerpt` are the pure cutting functions underneath, and
`assembler` the simpler prompt assembler of named components.

`ContextOrchestrator`, `ContextWindow` and `ContextReport` are at the top level (`loomctx`);
the built-in sources are in `loomctx.context.sources`.
"""

from loomctx.context.assembler import ComponentPriority, ContextAssembler, ContextComponent
from loomctx.context.billing import CachePrediction, CachePricing, ReportedUsage, pricing_for
from loomctx.context.block import BuildContext, ContextBlock, ContextSource, TokenBudget
from loomctx.context.budget import AdaptiveBudgetManager, BudgetManager
from loomctx.context.collector import ContextCollector
from loomctx.context.compactor import CachePolicy, ContextCompactor
from loomctx.context.layout_state import LayoutState
from loomctx.context.report import BlockReport, CompactionNote, SourceReport

__all__ = [
    "AdaptiveBudgetManager",
    "BlockReport",
    "BudgetManager",
    "BuildContext",
    "CachePolicy",
    "CachePrediction",
    "CachePricing",
    "CompactionNote",
    "ComponentPriority",
    "ContextAssembler",
    "ContextBlock",
    "ContextCollector",
    "ContextCompactor",
    "ContextComponent",
    "ContextSource",
    "LayoutState",
    "ReportedUsage",
    "SourceReport",
    "TokenBudget",
    "pricing_for",
]
