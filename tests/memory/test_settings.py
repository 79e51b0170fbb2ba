"""`LoomMemory`'s settings values: checked where they are made, shared by many memories, and
what a memory does with each."""

from __future__ import annotations

import pytest

from loomctx import LoomMemory, MemoryEmbedding, MemoryRanking, MemoryTiers, Task
from loomctx.errors import ConfigError
from loomctx.testing import HashingEmbedder


def test_a_memory_made_without_settings_uses_the_defaults() -> None:
    memory = LoomMemory("agent", embedder=None)
    assert (memory.tiers, memory.ranking) == (MemoryTiers(), MemoryRanking())
    assert (memory.max_l1_size, memory.max_l2_size, memory.max_l3_size) == (50, 100, 500)
    assert memory.fusion_weights == (0.5, 0.5)
    memory.close()


def test_one_settings_value_serves_many_memories() -> None:
    tiers = MemoryTiers(max_l1_size=2)
    memories = [LoomMemory(f"s{i}", embedder=None, tiers=tiers) for i in range(2)]
    for n in range(3):
        memories[0].add_task(Task(action="user_message", parameters={"content": f"m{n}"}))
    assert [len(m.get_l1_tasks(limit=10)) for m in memories] == [2, 0]
    for memory in memories:
        memory.close()


def test_weights_read_from_json_become_a_tuple() -> None:
    ranking = MemoryRanking(fusion_weights=[0.6, 0.4])  # type: ignore[arg-type]
    assert ranking.fusion_weights == (0.6, 0.4)
    assert hash(ranking) == hash(MemoryRanking(fusion_weights=(0.6, 0.4)))


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: MemoryTiers(max_l3_size=-1), "`max_l3_size` must be an int >= 1"),
        (lambda: MemoryTiers(summary_tokens=2.5), "`summary_tokens` must be an int >= 1"),
        (lambda: MemoryEmbedding(in_background="no"), "`in_background` must be True or False"),
        (lambda: MemoryRanking(date_weight=2), "`date_weight` must be in 0..1"),
        (lambda: MemoryRanking(fusion_weights="0.5,0.5"), r"\(lexical, dense\)"),
    ],
)
def test_a_bad_setting_fails_where_it_is_written(make: object, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        make()  # type: ignore[operator]


def test_settings_are_given_as_values_not_loose_keywords() -> None:
    with pytest.raises(ConfigError, match="`tiers` must be a `MemoryTiers`"):
        LoomMemory("agent", embedder=None, tiers={"max_l1_size": 5})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_l1_size"):
        LoomMemory("agent", embedder=None, max_l1_size=5)  # type: ignore[call-arg]


def test_embedding_in_background_false_leaves_the_thread_to_the_caller() -> None:
    quiet = LoomMemory(
        "a", embedder=HashingEmbedder(16), embedding=MemoryEmbedding(in_background=False)
    )
    busy = LoomMemory("b", embedder=HashingEmbedder(16))
    assert quiet.background is not None
    assert busy.background is not None
    assert not quiet.background.running
    assert busy.background.running
    quiet.add_task(Task(action="user_message", parameters={"content": "hello"}))
    quiet.background.drain()
    assert quiet.unembedded == 0
    quiet.close()
    busy.close()
