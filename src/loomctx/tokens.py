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
"""

from __future__ import annotations

import base64
import copy
import json
import math
import re
import threading
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, Self, runtime_checkable

from loomctx.errors import ConfigError, MissingExtraError, TokenizerError
from loomctx.messages import tool_parts_note, tool_spec
from loomctx.parts import ImageRule, TextPart, part_tokens

if TYPE_CHECKING:
    import tiktoken

    from loomctx.messages import Message

__all__ = [
    "BaseTokenCounter",
    "CallableCounter",
    "HeuristicCounter",
    "HuggingFaceCounter",
    "TiktokenCounter",
    "TokenCounter",
    "UsageCalibration",
    "counter_for_model",
    "encoding_for_model",
    "render_tool_definitions",
]


TOKENS_PER_MESSAGE: Final = 3
TOKENS_PER_NAME: Final = 1
TOKENS_PER_TOOL_CALL: Final = 4
TOKENS_REPLY_PRIMING: Final = 3
TOKENS_TOOL_DEFINITIONS: Final = 12


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens the way a model's provider does.

    Implement `count`; inherit `count_messages` and `truncate` from `BaseTokenCounter`
    unless your tokenizer offers something better.
    """

    @property
    def name(self) -> str:
        """A stable identifier, e.g. ``"tiktoken:o200k_base"``."""
        ...

    def count(self, text: str) -> int:
        """The number of tokens in `text`."""
        ...

    def count_messages(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        """The tokens a provider bills for sending `messages` with `tools` defined."""
        ...

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text`, cut between whole characters, of at most `max_tokens`."""
        ...


class _CountCache:
    """Text -> count, bounded by entries and by total characters held.

    Hits are plain dict look-ups with no lock: a window build makes hundreds of them. Eviction
    is first in, first out (dicts keep insertion order), done under a lock on insert.
    """

    __slots__ = ("_chars", "_data", "_lock", "max_chars", "max_entries")

    def __init__(self, *, max_entries: int, max_chars: int) -> None:
        self._data: dict[str, int] = {}
        self._chars = 0
        self._lock = threading.Lock()
        self.max_entries = max_entries
        self.max_chars = max_chars

    def get(self, text: str) -> int | None:
        return self._data.get(text)

    def put(self, text: str, n: int) -> None:
        if len(text) > self.max_chars // 8:
            return  # one huge text must not flush everything else
        with self._lock:
            if text in self._data:
                return
            self._data[text] = n
            self._chars += len(text)
            while len(self._data) > self.max_entries or self._chars > self.max_chars:
                old = next(iter(self._data))
                del self._data[old]
                self._chars -= len(old)

    def __len__(self) -> int:
        return len(self._data)


class BaseTokenCounter(ABC):
    """Template for counters: subclasses implement `_count`, and get caching, the message
    billing rule and a generic `truncate` (binary search over characters)."""

    is_estimate: bool = False
    image_rule: ImageRule = "openai"  # whose published rule counts images (`loomctx.parts`)

    # 65,536 texts (and 8M characters at most): a 128k window counts ~3,000 items (each one's
    # text and its labelled form), a server counts many sessions' windows; with 4,096, a
    # build at 10k stored turns missed the cache for every retrieved turn, and a 128k one
    # re-counted nearly everything (memory path at 100k turns: 193 -> 150 ms p50).
    def __init__(self, *, cache_entries: int = 65_536, cache_chars: int = 8_000_000) -> None:
        if cache_entries < 0 or cache_chars < 0:
            raise ConfigError("`cache_entries` and `cache_chars` must be >= 0")
        self._cache = _CountCache(max_entries=cache_entries, max_chars=cache_chars)

    @property
    @abstractmethod
    def name(self) -> str:
        """A stable identifier for this counter."""

    @abstractmethod
    def _count(self, text: str) -> int:
        """Count `text` without the cache."""

    def count(self, text: str) -> int:
        """The number of tokens in `text` (cached for repeated texts)."""
        if not text:
            return 0
        n = self._cache.get(text)
        if n is None:
            n = self._count(text)
            self._cache.put(text, n)
        return n

    def count_messages(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        """The tokens billed for `messages` plus `tools`, by the rule in the module docstring."""
        total = TOKENS_REPLY_PRIMING if messages else 0
        for m in messages:
            total += TOKENS_PER_MESSAGE + self.count(m.role) + self.count(m.content)
            for part in m.parts:
                if not isinstance(part, TextPart):  # its text is in `content`
                    total += part_tokens(part, self.image_rule, self.count)
            if m.role == "tool" and m.parts:  # OpenAI's wire moves them to a user message
                note = tool_parts_note(m.tool_call_id)
                total += TOKENS_PER_MESSAGE + self.count("user") + self.count(note)
            if m.name:
                total += TOKENS_PER_NAME + self.count(m.name)
            for call in m.tool_calls:
                total += (
                    TOKENS_PER_TOOL_CALL + self.count(call.name) + self.count(call.arguments_json())
                )
        if tools:
            total += TOKENS_TOOL_DEFINITIONS + self.count(render_tool_definitions(tools))
        return total

    def with_image_rule(self, rule: ImageRule) -> Self:
        """This counter with images counted by `rule` (``openai`` or ``anthropic``): the same
        tokenizer and the same cache of text counts, for windows sent to the other provider."""
        if rule not in ("openai", "anthropic"):
            raise ConfigError(f"`rule` must be `openai` or `anthropic`, got {rule!r}")
        twin = copy.copy(self)  # shallow: the tokenizer and the cache are shared
        twin.image_rule = rule
        return twin

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` with at most `max_tokens` tokens, on a character
        boundary (never inside a grapheme such as an emoji with modifiers)."""
        if self.count(text) <= max_tokens:
            return text
        lo, hi = 0, len(text)  # invariant: text[:lo] fits, text[:hi] does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._count(text[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid
        return _back_off_grapheme(text, lo)


_CONTINUATION_RANGES: Final = (
    (0xFE00, 0xFE0F),  # variation selectors
    (0x1F3FB, 0x1F3FF),  # skin-tone modifiers
    (0xE0020, 0xE007F),  # tag characters (flag sequences)
    (0xE0100, 0xE01EF),  # variation selectors supplement
)
_ZWJ: Final = "\u200d"


def _continues_grapheme(ch: str) -> bool:
    cp = ord(ch)
    if ch == _ZWJ or unicodedata.combining(ch):
        return True
    return any(lo <= cp <= hi for lo, hi in _CONTINUATION_RANGES)


def _back_off_grapheme(text: str, cut: int) -> str:
    """Move `cut` left until it does not split a grapheme cluster (approximately: no
    trailing ZWJ, and the next character is not a combining mark or emoji modifier)."""
    while 0 < cut < len(text) and (_continues_grapheme(text[cut]) or text[cut - 1] == _ZWJ):
        cut -= 1
    return text[:cut]


# ---------------------------------------------------------------------------------------------
# tiktoken


_O200K_PATTERN: Final = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN: Final = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)

# Pattern and special tokens copied as data from tiktoken_ext/openai_public.py, so building
# an encoding never calls the constructors there (they download the ranks).
_ENCODINGS: Final[Mapping[str, tuple[str, Mapping[str, int]]]] = {
    "o200k_base": (_O200K_PATTERN, {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
    "cl100k_base": (
        _CL100K_PATTERN,
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
}

_MODEL_TO_ENCODING: Final[Mapping[str, str]] = {
    "gpt-5": "o200k_base",
    "gpt-4.5": "o200k_base",
    "gpt-4.1": "o200k_base",
    "gpt-4o": "o200k_base",
    "chatgpt-4o-latest": "o200k_base",
    "o1": "o200k_base",
    "o3": "o200k_base",
    "o4-mini": "o200k_base",
    "gpt-4": "cl100k_base",
    "gpt-3.5-turbo": "cl100k_base",
    "gpt-3.5": "cl100k_base",
    "gpt-35-turbo": "cl100k_base",
    "text-embedding-3-small": "cl100k_base",
    "text-embedding-3-large": "cl100k_base",
    "text-embedding-ada-002": "cl100k_base",
}
# Longest prefix first, so "gpt-4o-mini" maps by "gpt-4o" and not by "gpt-4".
_MODEL_PREFIXES: Final = tuple(sorted(_MODEL_TO_ENCODING, key=len, reverse=True))


def encoding_for_model(model: str) -> str:
    """The tiktoken encoding of an OpenAI model name (dated and fine-tuned names included).

    Raises `TokenizerError` for a name that is not an OpenAI model.
    """
    name = model.strip().lower()
    if name.startswith("ft:"):
        name = name[3:]
    if name.startswith("openai/"):
        name = name[len("openai/") :]
    for prefix in _MODEL_PREFIXES:
        if name == prefix or name.startswith((prefix + "-", prefix + ":")):
            return _MODEL_TO_ENCODING[prefix]
    raise TokenizerError(
        f"no tiktoken encoding is known for model {model!r}; pass `encoding=` "
        f"({', '.join(sorted(_ENCODINGS))}), use `HuggingFaceCounter` with the model's "
        "tokenizer.json, or `HeuristicCounter` for an estimate"
    )


_load_lock = threading.Lock()


@cache
def _load_encoding(encoding: str) -> tiktoken.Encoding:
    import tiktoken

    pattern, special = _ENCODINGS[encoding]
    ranks: dict[bytes, int] = {}
    data = resources.files("loomctx").joinpath("_data", "tiktoken", f"{encoding}.tiktoken")
    for line in data.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding(
        name=encoding, pat_str=pattern, mergeable_ranks=ranks, special_tokens=dict(special)
    )


_CUT_CACHE: Final = 64
_CUT_CHARS: Final = 16_000


class TiktokenCounter(BaseTokenCounter):
    """Exact counts for OpenAI models with tiktoken, from encoding files shipped in Loom.

    `TiktokenCounter()` uses `o200k_base` (GPT-4o, 4.1, 5, o-series);
    `TiktokenCounter("cl100k_base")` GPT-4 and GPT-3.5; `TiktokenCounter.for_model(name)`
    picks by model name. Text is encoded as ordinary text: a special-token string such as
    ``<|endoftext|>`` in content counts as the characters it is, as providers treat it.
    """

    def __init__(self, encoding: str = "o200k_base", **cache: int) -> None:
        if encoding not in _ENCODINGS:
            raise TokenizerError(
                f"unknown tiktoken encoding {encoding!r}; Loom ships "
                f"{', '.join(repr(e) for e in sorted(_ENCODINGS))}"
            )
        super().__init__(**cache)
        self.encoding = encoding
        with _load_lock:
            self._enc = _load_encoding(encoding)
        # The token ids of the last texts cut: a build cuts the same long block (a knowledge
        # chunk) twice or more, to its source's ceiling and then to the room left, and the
        # next build again; encoding it anew each time was half of what cutting cost.
        self._cut_ids: dict[str, list[int]] = {}
        self._cut_lock = threading.Lock()

    @classmethod
    def for_model(cls, model: str) -> TiktokenCounter:
        """A counter with the encoding of an OpenAI model name, e.g. ``"gpt-4o-mini"``."""
        return cls(encoding_for_model(model))

    @property
    def name(self) -> str:
        return f"tiktoken:{self.encoding}"

    def _count(self, text: str) -> int:
        return len(self._enc.encode_ordinary(text))

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, encoded as ordinary text."""
        return self._enc.encode_ordinary(text)

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` that ends on a token boundary, keeps whole characters
        and graphemes, and counts at most `max_tokens`."""
        if max_tokens <= 0:
            return ""
        ids = self._ids_to_cut(text)
        if len(ids) <= max_tokens:
            return text
        keep = max_tokens
        while keep > 0:
            # A token may end inside a multi-byte character: drop the incomplete tail.
            prefix = self._enc.decode_bytes(ids[:keep]).decode("utf-8", errors="ignore")
            prefix = _back_off_grapheme(text, len(prefix))
            # Re-encoding a cut word can take more tokens than it did inside the word.
            if self.count(prefix) <= max_tokens:  # cached: the next build cuts alike
                return prefix
            keep -= 1
        return ""

    def _ids_to_cut(self, text: str) -> list[int]:
        """`text`'s token ids, kept for the last `_CUT_CACHE` texts of at most `_CUT_CHARS`
        characters (first in, first out): a few MB at most, where a huge tool output's ids
        would take 40 bytes a token."""
        ids = self._cut_ids.get(text)
        if ids is None:
            ids = self._enc.encode_ordinary(text)
            if len(text) > _CUT_CHARS:
                return ids
            with self._cut_lock:
                self._cut_ids[text] = ids
                while len(self._cut_ids) > _CUT_CACHE:
                    del self._cut_ids[next(iter(self._cut_ids))]
        return ids


# ---------------------------------------------------------------------------------------------
# Hugging Face tokenizers


class HuggingFaceCounter(BaseTokenCounter):
    """Counts with a Hugging Face `tokenizer.json` (Llama, Qwen, Mistral, ...), offline.

    `HuggingFaceCounter("path/to/tokenizer.json")`; needs ``pip install 'loomctx[hf]'``.
    Messages are billed by the rule in this module's docstring: chat templates differ by
    model, so the framing per message is an approximation of a few tokens.
    """

    def __init__(self, path: str | Path, **cache: int) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - the test environment has the extra
            raise MissingExtraError(
                feature="HuggingFaceCounter", extra="hf", module="tokenizers"
            ) from exc
        p = Path(path)
        if not p.is_file():
            raise TokenizerError(
                f"no tokenizer file at {str(p)!r}; pass the path of a model's `tokenizer.json`"
            )
        try:
            self._tok = Tokenizer.from_file(str(p))
        except Exception as exc:
            raise TokenizerError(f"{str(p)!r} is not a valid tokenizer.json: {exc}") from exc
        super().__init__(**cache)
        self._path = p

    @property
    def name(self) -> str:
        return f"hf:{self._path.parent.name or self._path.name}"

    def _count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` that ends where a token ends, within `max_tokens`."""
        if max_tokens <= 0:
            return ""
        enc = self._tok.encode(text, add_special_tokens=False)
        if len(enc.ids) <= max_tokens:
            return text
        keep = max_tokens
        while keep > 0:
            prefix = _back_off_grapheme(text, enc.offsets[keep - 1][1])
            if self.count(prefix) <= max_tokens:  # cached: the next build cuts alike
                return prefix
            keep -= 1
        return ""


# ---------------------------------------------------------------------------------------------
# Estimates and adapters


# Kana, CJK ideographs (with extensions and compatibility forms), hangul, emoji.
_WIDE = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\U00020000-\U0002ffff\U0001f000-\U0001faff]"
)


class HeuristicCounter(BaseTokenCounter):
    """An *estimate* for models whose tokenizer is not available offline (Anthropic Claude).

    The rule: one token per `chars_per_token` characters of non-CJK text (3.5 by default,
    Anthropic's rule of thumb for English), plus `wide_char_tokens` per CJK, kana, hangul or
    emoji character (1.0 by default), rounded up, then multiplied by `safety_factor` (1.1 by
    default) so that budgets err on the side of fitting. `is_estimate` is true; prefer a real
    tokenizer when one exists for your model.
    """

    is_estimate = True
    image_rule: ImageRule = "anthropic"

    def __init__(
        self,
        *,
        chars_per_token: float = 3.5,
        wide_char_tokens: float = 1.0,
        safety_factor: float = 1.1,
        **cache: int,
    ) -> None:
        if chars_per_token <= 0 or wide_char_tokens <= 0 or safety_factor < 1:
            raise ConfigError(
                "`chars_per_token` and `wide_char_tokens` must be > 0 and `safety_factor` "
                f">= 1; got {chars_per_token!r}, {wide_char_tokens!r}, {safety_factor!r}"
            )
        super().__init__(**cache)
        self.chars_per_token = chars_per_token
        self.wide_char_tokens = wide_char_tokens
        self.safety_factor = safety_factor

    @property
    def name(self) -> str:
        return f"estimate:{self.chars_per_token}cpt"

    def _count(self, text: str) -> int:
        wide = len(_WIDE.findall(text))
        narrow = len(text) - wide
        raw = narrow / self.chars_per_token + wide * self.wide_char_tokens
        return math.ceil(math.ceil(raw) * self.safety_factor)


class CallableCounter(BaseTokenCounter):
    """Adapts a plain function ``text -> int`` (the seed API's `token_counter`) to a counter."""

    def __init__(self, fn: Callable[[str], int], *, name: str = "callable", **cache: int) -> None:
        super().__init__(**cache)
        self._fn = fn
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def _count(self, text: str) -> int:
        n = self._fn(text)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ConfigError(
                f"token counter function {self._name!r} returned {n!r} for a text of "
                f"{len(text)} characters; it must return a non-negative int"
            )
        return n


def counter_for_model(model: str) -> BaseTokenCounter:
    """A counter for a model name: tiktoken for OpenAI models, an estimate for Claude.

    For other models (Llama, Qwen, ...), build `HuggingFaceCounter` from their tokenizer.json.
    """
    low = model.strip().lower()
    if low.startswith(("claude", "anthropic/")):
        return HeuristicCounter()
    return TiktokenCounter.for_model(model)


class UsageCalibration:
    """How a provider's reported input tokens compare to Loom's count, learnt per model.

    `record(model, counted=..., reported=...)` after each call: `counted` is what Loom's
    counter gave for the request (messages and tools), `reported` the input tokens the
    provider billed (cached ones included). `factor(model)` is what to multiply Loom's count
    by to stay above the provider's, with a margin that shrinks as evidence comes in:

    - no calls yet: `prior` (default 1.25: Claude's tokenizer counts English text up to about
      a fifth above o200k, and code and other scripts more);
    - after n calls with ratios of mean m and standard deviation s:
      ``m * (1 + min_margin) + 2 * s / sqrt(n) + max(0, prior - m) / (n + 1)``: the
      observed ratio, a two-sigma allowance for its spread, and what is left of the prior's
      caution, which fades with every call.

    The last `window` calls per model are kept (a model's ratio drifts with what the
    conversation talks about). Thread-safe. `safe_window(model, window)` is `window` divided
    by the factor: the window to give the context engine so that the provider's count of
    what it builds fits the real one.
    """

    def __init__(self, *, prior: float = 1.25, min_margin: float = 0.02, window: int = 200) -> None:
        if not math.isfinite(prior) or prior < 1:
            raise ConfigError(f"`prior` must be a number >= 1, got {prior!r}")
        if not math.isfinite(min_margin) or not 0 <= min_margin < 1:
            raise ConfigError(f"`min_margin` must be in 0..1, got {min_margin!r}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigError(f"`window` must be an int >= 1, got {window!r}")
        self.prior = prior
        self.min_margin = min_margin
        self.window = window
        self._ratios: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def record(self, model: str, *, counted: int, reported: int) -> None:
        """One call's counts. Calls with nothing counted or reported teach nothing and are
        skipped; a negative count is an error."""
        if counted < 0 or reported < 0:
            raise ConfigError(
                f"token counts must be >= 0, got counted={counted!r}, reported={reported!r}"
            )
        if counted == 0 or reported == 0:
            return
        with self._lock:
            ratios = self._ratios.setdefault(model, [])
            ratios.append(reported / counted)
            del ratios[: max(0, len(ratios) - self.window)]

    def samples(self, model: str) -> int:
        """How many calls of `model` the factor is learnt from."""
        with self._lock:
            return len(self._ratios.get(model, ()))

    def factor(self, model: str) -> float:
        """Loom's count times this stays above the provider's (see the class docstring)."""
        with self._lock:
            ratios = list(self._ratios.get(model, ()))
        n = len(ratios)
        if n == 0:
            return self.prior
        mean = sum(ratios) / n
        spread = math.sqrt(sum((r - mean) ** 2 for r in ratios) / (n - 1)) if n > 1 else 0.0
        return (
            mean * (1 + self.min_margin)
            + 2 * spread / math.sqrt(n)
            + max(0.0, self.prior - mean) / (n + 1)
        )

    def safe_window(self, model: str, window: int) -> int:
        """`window` in Loom's tokens that the provider counts as at most `window`."""
        return max(1, math.floor(window / self.factor(model)))


# ---------------------------------------------------------------------------------------------
# Tool definitions as the provider renders them


def _ts_type(schema: Mapping[str, Any], indent: str) -> str:
    if "enum" in schema:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_ts_type({**schema, "type": k}, indent) for k in kind)
    if kind == "array":
        return f"{_ts_type(schema.get('items') or {}, indent)}[]"
    if kind == "object" or "properties" in schema:
        return _ts_object(schema, indent)
    return {"integer": "number", "number": "number", "string": "string", "boolean": "boolean",
            "null": "null"}.get(str(kind), "any")  # fmt: skip


def _ts_object(schema: Mapping[str, Any], indent: str) -> str:
    props: Mapping[str, Any] = schema.get("properties") or {}
    if not props:
        return "object"
    required = set(schema.get("required") or ())
    inner = indent + "  "
    lines = ["{"]
    for key, sub in props.items():
        if sub.get("description"):
            lines.append(f"{inner}// {sub['description']}")
        optional = "" if key in required else "?"
        lines.append(f"{inner}{key}{optional}: {_ts_type(sub, inner)},")
    lines.append(indent + "}")
    return "\n".join(lines)


def render_tool_definitions(tools: Sequence[Mapping[str, Any]]) -> str:
    """Tool schemas rendered as the `namespace functions` text that OpenAI-style chat models
    receive; `count_messages` bills this text. Accepts OpenAI and Anthropic tool formats."""
    out = ["# Tools", "", "## functions", "", "namespace functions {", ""]
    for tool in tools:
        name, description, params = tool_spec(tool)
        if description:
            out.append(f"// {description}")
        if params.get("properties"):
            out.append(f"type {name} = (_: {_ts_object(params, '')}) => any;")
        else:
            out.append(f"type {name} = () => any;")
        out.append("")
    out.append("} // namespace functions")
    return "\n".join(out)
