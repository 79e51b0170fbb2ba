"""Token counting: exactness against tiktoken itself, offline operation, billing rules."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx import ConfigError, Message, TiktokenCounter, TokenCounter, ToolCall, counter_for_model
from loomctx.errors import TokenizerError
from loomctx.tokens import (
    CallableCounter,
    HeuristicCounter,
    HuggingFaceCounter,
    encoding_for_model,
    render_tool_definitions,
)

O200K = TiktokenCounter()
CL100K = TiktokenCounter("cl100k_base")

_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}

SAMPLE = (
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.\n"
    "Melanie: 真的吗？太好了！🎉 What did you learn there?\n"
    "    def f(x):  return x ** 2  # code, numbers 12345678, and <|endoftext|> as text\n"
)


@pytest.fixture(scope="module")
def reference_encodings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """tiktoken's own constructors, fed from a cache dir so they do not download."""
    import tiktoken
    import tiktoken.registry
    from tiktoken_ext import openai_public

    cache = tmp_path_factory.mktemp("tiktoken-cache")
    for name, url in _URLS.items():
        src = resources.files("loomctx").joinpath("_data", "tiktoken", f"{name}.tiktoken")
        (cache / hashlib.sha1(url.encode()).hexdigest()).write_bytes(src.read_bytes())
    mp = pytest.MonkeyPatch()
    mp.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    try:
        return {name: tiktoken.Encoding(**getattr(openai_public, name)()) for name in _URLS}
    finally:
        mp.undo()


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_counts_equal_tiktokens_own_encoding(
    name: str, reference_encodings: dict[str, object]
) -> None:
    ref = reference_encodings[name]
    ours = TiktokenCounter(name)
    for text in [SAMPLE, SAMPLE * 7, "", " ", "\n\n\n", "a" * 5000]:
        assert ours.count(text) == len(ref.encode_ordinary(text))  # type: ignore[attr-defined]
        assert ours.encode(text) == ref.encode_ordinary(text)  # type: ignore[attr-defined]


def test_known_counts() -> None:
    assert O200K.count("hello world") == 2
    assert CL100K.count("hello world") == 2
    assert O200K.count("") == 0
    assert O200K.name == "tiktoken:o200k_base"
    assert isinstance(O200K, TokenCounter)
    assert not O200K.is_estimate


def test_works_offline_with_an_empty_tiktoken_cache(tmp_path: Path) -> None:
    """A child process where every socket operation fails, with an empty TIKTOKEN_CACHE_DIR."""
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        textwrap.dedent(
            """
            import socket

            def _refuse(*args, **kwargs):
                raise OSError("network disabled by the test")

            socket.socket.connect = _refuse
            socket.socket.connect_ex = _refuse
            socket.create_connection = _refuse
            socket.getaddrinfo = _refuse
            """
        )
    )
    cache = tmp_path / "cache"
    cache.mkdir()
    code = (
        "import socket, loomctx\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 443))\n"
        "except OSError as e:\n"
        "    assert 'network disabled' in str(e)\n"
        "else:\n"
        "    raise SystemExit('network was reachable')\n"
        "print(loomctx.TiktokenCounter().count('hello world'),"
        " loomctx.TiktokenCounter('cl100k_base').count('hello world'))\n"
    )
    cmd = [sys.executable, "-c", code]
    if (
        shutil.which("unshare")
        and subprocess.run(
            ["unshare", "--net", "true"], capture_output=True, check=False
        ).returncode
        == 0
    ):
        cmd = ["unshare", "--net", *cmd]  # no network namespace at all, where permitted
    env = {"PYTHONPATH": str(blocker), "TIKTOKEN_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "2"]
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini", "o200k_base"),
        ("gpt-4o-2024-08-06", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("ft:gpt-4o-mini:org::abc", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo-0125", "cl100k_base"),
        ("GPT-4O", "o200k_base"),
    ],
)
def test_model_names_map_to_encodings(model: str, encoding: str) -> None:
    assert encoding_for_model(model) == encoding
    assert TiktokenCounter.for_model(model).encoding == encoding


def test_unknown_model_and_encoding_errors_say_what_to_do() -> None:
    with pytest.raises(TokenizerError, match="HuggingFaceCounter"):
        encoding_for_model("llama-3-70b")
    with pytest.raises(TokenizerError, match="'o200k_base'"):
        TiktokenCounter("p50k_base")


def test_counter_for_model_labels_claude_as_an_estimate() -> None:
    claude = counter_for_model("claude-sonnet-4-5")
    assert isinstance(claude, HeuristicCounter)
    assert claude.is_estimate
    assert claude.name.startswith("estimate:")
    assert isinstance(counter_for_model("gpt-4o"), TiktokenCounter)


def test_heuristic_rule() -> None:
    h = HeuristicCounter(safety_factor=1.0)
    assert h.count("a" * 35) == 10
    assert h.count("你好世界") == 4
    assert h.count("abcdefg你") == 3  # ceil(7 / 3.5) + 1
    assert HeuristicCounter().count("a" * 35) == 11  # the 1.1 safety factor, rounded up
    with pytest.raises(ConfigError, match="`chars_per_token`"):
        HeuristicCounter(chars_per_token=0)


def test_message_billing_rule() -> None:
    c = O200K
    hello = [Message.user("hello")]
    assert c.count_messages(hello) == 3 + c.count("user") + c.count("hello") + 3
    named = [Message.user("hello", name="ann")]
    assert c.count_messages(named) == c.count_messages(hello) + 1 + c.count("ann")
    call = ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"})
    with_call = [Message.assistant("", tool_calls=[call])]
    assert c.count_messages(with_call) == (
        3 + c.count("assistant") + 4 + c.count("get_weather") + c.count('{"city":"Paris"}') + 3
    )
    assert c.count_messages([]) == 0


TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["c", "f"]},
                "days": {"type": "array", "items": {"type": "integer"}},
                "opts": {"type": "object", "properties": {"hourly": {"type": "boolean"}}},
                "note": {"type": ["string", "null"]},
            },
            "required": ["city"],
        },
    },
}


def test_tool_definitions_render_like_the_provider_and_are_billed() -> None:
    text = render_tool_definitions([TOOL, {"name": "ping", "input_schema": {}}])
    assert "namespace functions {" in text
    assert "// Current weather for a city." in text
    assert "city: string," in text
    assert "// City name" in text
    assert 'unit?: "c" | "f",' in text
    assert "days?: number[]," in text
    assert "hourly?: boolean," in text
    assert "note?: string | null," in text
    assert "type ping = () => any;" in text
    msgs = [Message.user("hi")]
    assert O200K.count_messages(msgs, tools=[TOOL]) == (
        O200K.count_messages(msgs) + 12 + O200K.count(render_tool_definitions([TOOL]))
    )


def test_tool_definition_without_a_name_is_rejected() -> None:
    with pytest.raises(ConfigError, match="no `name`"):
        render_tool_definitions([{"type": "function", "function": {"description": "x"}}])


def test_counts_are_cached_and_the_cache_is_bounded() -> None:
    calls: list[str] = []

    def fn(text: str) -> int:
        calls.append(text)
        return len(text)

    c = CallableCounter(fn, cache_entries=2)
    assert c.count("aa") == 2
    assert c.count("aa") == 2
    assert calls == ["aa"]
    c.count("bb")
    c.count("cc")
    c.count("aa")  # evicted by the bound of two entries: counted again
    assert calls == ["aa", "bb", "cc", "aa"]
    with pytest.raises(ConfigError):
        CallableCounter(fn, cache_entries=-1)


def test_huge_texts_are_not_cached() -> None:
    c = CallableCounter(len, cache_chars=80)
    c.count("x" * 11)
    c.count("y" * 5)
    assert len(c._cache) == 1


GRAPHEMES = st.lists(
    st.sampled_from(
        ["a", "b ", "word ", "。", "你好", "é", "e\u0301", "👍🏽", "👨‍👩‍👧", "\n", "🇫🇷"]
    ),
    max_size=60,
).map("".join)


@pytest.mark.parametrize(
    "counter",
    [O200K, CL100K, CallableCounter(lambda t: len(t.encode()) // 3), HeuristicCounter()],
    ids=["o200k", "cl100k", "callable", "heuristic"],
)
@given(text=GRAPHEMES, k=st.integers(min_value=0, max_value=40))
def test_truncate_gives_a_whole_character_prefix_within_the_limit(
    counter: TokenCounter, text: str, k: int
) -> None:
    out = counter.truncate(text, k)
    assert text.startswith(out)
    assert counter.count(out) <= k
    if counter.count(text) <= k:
        assert out == text
    if out and len(out) < len(text):
        assert out[-1] != "\u200d"
        assert text[len(out)] not in ("\u0301", "\U0001f3fd", "\u200d")


def test_hugging_face_tokenizer_json(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"], show_progress=False)
    tok.train_from_iterator([SAMPLE] * 20, trainer=trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))

    hf = HuggingFaceCounter(path)
    for text in [SAMPLE, "hello world", "你好 🎉"]:
        assert hf.count(text) == len(tok.encode(text, add_special_tokens=False).ids)
    assert hf.name == f"hf:{tmp_path.name}"
    cut = hf.truncate(SAMPLE, 10)
    assert SAMPLE.startswith(cut)
    assert 0 < hf.count(cut) <= 10
    assert hf.truncate("hi", 10) == "hi"
    assert hf.truncate(SAMPLE, 0) == ""

    with pytest.raises(TokenizerError, match="no tokenizer file"):
        HuggingFaceCounter(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(TokenizerError, match=r"not a valid tokenizer\.json"):
        HuggingFaceCounter(bad)


def test_cutting_one_text_again_gives_what_a_fresh_counter_gives() -> None:
    """The ids of a text cut are kept for the next cut of it (a build cuts a long block to
    its source's ceiling, then to the room left); a kept text and a fresh one cut alike, and
    only the last texts cut are kept."""
    text = " ".join(f"word{i} and, then; more" for i in range(400))
    kept = TiktokenCounter()
    for k in (700, 5, 350, 1, 699, 0, 2_000):
        assert kept.truncate(text, k) == TiktokenCounter().truncate(text, k)
    for i in range(200):
        kept.truncate(f"{i} {text}", 3)
    assert len(kept._cut_ids) == 64
    kept.truncate("long text " * 2_000, 3)
    assert "long text " * 2_000 not in kept._cut_ids
