"""The built-in counters: tiktoken (shipped encodings), Hugging Face, a heuristic, a callable.

`counter_for_model(name)` picks one from a model name; `encoding_for_model` is the tiktoken
encoding of an OpenAI model name.
"""

from __future__ import annotations

import base64
import math
import re
import threading
from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Final

from loomctx.errors import ConfigError, MissingExtraError, TokenizerError
from loomctx.parts import ImageRule
from loomctx.tokens._base import BaseTokenCounter, back_off_grapheme

if TYPE_CHECKING:
    import tiktoken


__all__ = [
    "CallableCounter",
    "HeuristicCounter",
    "HuggingFaceCounter",
    "TiktokenCounter",
    "counter_for_model",
    "encoding_for_model",
]


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
            prefix = back_off_grapheme(text, len(prefix))
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
            prefix = back_off_grapheme(text, enc.offsets[keep - 1][1])
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
