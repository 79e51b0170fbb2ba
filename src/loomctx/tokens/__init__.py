"""Token counting: real tokenizers, offline, with the provider's billing rules.

Every budget in Loom is measured by a `TokenCounter`. The built-in counters:

- `TiktokenCounter`: OpenAI's BPE encodings (`o200k_base`, the default, and `cl100k_base`).
  The encoding files ship inside this package, so counting never touches the network and
  never reads or writes tiktoken's download cache.
- `HuggingFaceCounter`: any model with a Hugging Face `tokenizer.json` (Llama, Qwen,
  Mistral, ...); needs the `hf` extra.
- `HeuristicCounter`: an *estimate* for models whose tokenizer is not available locally
  (Anthropic's Claude). It says so: `is_estimate` is true.

`counter_for_model(name)` picks one from a model name.

How messages are billed (`count_messages`), following OpenAI's published accounting for
chat models (the same rule is applied by every counter; for Claude it is part of the estimate):

- each message costs 3 tokens of framing, plus its role, plus its content;
- a `name` costs 1 token plus the name;
- each tool call costs 4 tokens of framing plus its function name and its JSON arguments;
- each image or file of a message costs what its provider's published rule says
  (`loomctx.parts`): OpenAI's tiles for most counters, Anthropic's ``width * height / 750``
  for `HeuristicCounter` (the Claude estimate), as its `image_rule` says; audio its
  duration at 10 tokens a second. A tool result's images and files also cost the user
  message that carries them to an OpenAI model (`loomctx.messages.to_openai`, `strict`);
- the reply is primed with 3 tokens;
- tool definitions are billed as the text the provider renders them into: a TypeScript-like
  `namespace functions { ... }` block (see `render_tool_definitions`), plus 12 tokens.

Counts of unchanged text are cached per counter (bounded by entries and characters), so
re-counting a stable system prompt or tool list every turn costs a dictionary look-up.

**Exact for OpenAI, an estimate for Claude.** Anthropic publishes no tokenizer for its current
models, so a Claude window counted with o200k (or `HeuristicCounter`) is an estimate, and
Claude's own count of the same text is usually higher. `UsageCalibration` keeps a safety
margin for that: it starts from a conservative prior factor and, from the input tokens the
provider reports for each call (`AnthropicLLM(calibration=...)` records them), learns per model
how Claude's count compares to Loom's, so the margin shrinks as calls are made.
`safe_window(model, window)` is the window to give the context engine.

The package: the protocol and the base (`_base`), the billing rules (`_rules`), the count
cache (`_cache`), the counters (`_counters`) and the calibration (`_calibration`); every name
is imported from here, except `TokenCounter`, `TiktokenCounter` and `counter_for_model`,
which are exported from `loomctx` itself (and still importable here).
"""

from __future__ import annotations

from loomctx.tokens._base import BaseTokenCounter
from loomctx.tokens._base import TokenCounter as TokenCounter  # exported from `loomctx`
from loomctx.tokens._calibration import UsageCalibration
from loomctx.tokens._counters import (
    CallableCounter,
    HeuristicCounter,
    HuggingFaceCounter,
    encoding_for_model,
)
from loomctx.tokens._counters import TiktokenCounter as TiktokenCounter  # exported from `loomctx`
from loomctx.tokens._counters import counter_for_model as counter_for_model
from loomctx.tokens._rules import TOKENS_PER_MESSAGE as TOKENS_PER_MESSAGE
from loomctx.tokens._rules import TOKENS_PER_NAME as TOKENS_PER_NAME
from loomctx.tokens._rules import TOKENS_PER_TOOL_CALL as TOKENS_PER_TOOL_CALL
from loomctx.tokens._rules import TOKENS_REPLY_PRIMING as TOKENS_REPLY_PRIMING
from loomctx.tokens._rules import TOKENS_TOOL_DEFINITIONS as TOKENS_TOOL_DEFINITIONS
from loomctx.tokens._rules import render_tool_definitions

__all__ = [
    "BaseTokenCounter",
    "CallableCounter",
    "HeuristicCounter",
    "HuggingFaceCounter",
    "UsageCalibration",
    "encoding_for_model",
    "render_tool_definitions",
]
