"""The one provider-neutral message model, its wire-format converters, and tool units.

Loom reasons about a conversation as a sequence of `Message` values that carry text (and, in
a user message, images and files: `loomctx.parts`):

- `system`, `user` and `assistant` messages hold `content` text; a `user` or `assistant`
  message may name its participant. A `user` message may also hold `parts`, its whole content
  in order (`TextPart`, `ImagePart`, `FilePart`, `AudioPart`); its `content` is then the text
  of its text parts. A `tool` result may hold parts too: text, images and files.
- An `assistant` message may also request tools: `tool_calls` holds one `ToolCall` (id, tool
  name, parsed JSON arguments) per requested call.
- A `tool` message is the result of one call: `tool_call_id` says which, `is_error` says the
  tool failed, and `name` may repeat the tool's name.

`to_openai` / `from_openai` convert to and from the OpenAI chat-completions format, and
`to_anthropic` / `from_anthropic` to and from the Anthropic messages format. Each function's
docstring says what the target format cannot carry; anything else survives the round trip.

A tool call and its results only make sense together: a provider rejects a history with a call
that has no result, or a result for an unknown call. `split_units` therefore cuts a history into
`MessageUnit` values, the smallest pieces Loom may keep or drop, and checks that every call is
answered exactly once, directly after the message that made it.

**What a message may hold is checked where it is built**, so that a bad value fails at the
boundary where it entered, naming the field, instead of later in a provider, a store or a
tokenizer:

- text (`content`, `name`, ids, and every string and key of tool-call arguments) must be
  valid Unicode: a surrogate code point (U+D800..U+DFFF, what ``errors="surrogateescape"`` or
  a JSON escape like ``"\\ud800"`` leaves in a `str`) cannot be encoded as UTF-8, so it is
  refused with its field and position. `valid_text` repairs such text (pairs joined, lone
  surrogates replaced by U+FFFD) for data that must be kept, such as a tool's output;
- tool-call arguments must be JSON a provider accepts: no NaN or Infinity (Python's `json`
  reads and writes them, JSON does not), and no nesting deeper than `MAX_ARGUMENT_DEPTH`
  levels (deeper data makes recursive code, ours or a provider's, fail). `parse_arguments`
  reads arguments from their JSON text under the same rules (and raises when they break
  them).

The model lives in `loomctx.messages._model`, the checks in `_text`, the converters in
`_openai`, `_anthropic` and `_tools` (with `_wire`, what the first two share); every name is
imported from here.
"""

from __future__ import annotations

from loomctx.messages._anthropic import (
    CACHE_CONTROL,
    CacheMarks,
    from_anthropic,
    mark_anthropic_cache,
    to_anthropic,
)
from loomctx.messages._model import (
    Message,
    MessageUnit,
    Role,
    ToolCall,
    flatten_units,
    split_units,
)
from loomctx.messages._openai import (
    from_openai,
    responses_input_to_openai,
    to_openai,
    tool_parts_note,
)
from loomctx.messages._text import MAX_ARGUMENT_DEPTH, parse_arguments, valid_text
from loomctx.messages._text import check_text as check_text
from loomctx.messages._text import surrogate_at as surrogate_at
from loomctx.messages._tools import to_anthropic_tools, to_openai_tools, tool_spec
from loomctx.parts import AudioPart, FilePart, ImagePart, Part, TextPart

__all__ = [
    "CACHE_CONTROL",
    "MAX_ARGUMENT_DEPTH",
    "AudioPart",
    "CacheMarks",
    "FilePart",
    "ImagePart",
    "Message",
    "MessageUnit",
    "Part",
    "Role",
    "TextPart",
    "ToolCall",
    "flatten_units",
    "from_anthropic",
    "from_openai",
    "mark_anthropic_cache",
    "parse_arguments",
    "responses_input_to_openai",
    "split_units",
    "to_anthropic",
    "to_anthropic_tools",
    "to_openai",
    "to_openai_tools",
    "tool_parts_note",
    "tool_spec",
    "valid_text",
]
