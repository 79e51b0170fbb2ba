"""A report's blocks made from plain rows when read (`Blocks`) read, compare and serialize as
the tuple of `BlockReport`s they stand for."""

from __future__ import annotations

import copy
import json
import pickle
from dataclasses import replace

from loomctx.context.report import BlockReport, BlockRow, Blocks, ContextReport, SourceReport

ROWS: list[BlockRow] = [
    ("history:u1", "history", "history", 120, 120, "kept", ""),
    ("history:u2", "history", "history", 300, 80, "truncated", "cut to the room left"),
    ("memory:m7", "memory", "context", 40, 0, "dropped", "over budget"),
    ("history:u0", "history", "history", 500, 0, "summarized", "compacted"),
]


def report(blocks: Blocks | tuple[BlockReport, ...]) -> ContextReport:
    source = SourceReport(
        name="history", priority=0.8, allocated=600, offered=960, used=200, blocks_offered=4,
        blocks_kept=2,
    )  # fmt: skip
    return ContextReport(
        window=8000, output_reserve=1000, available=7000, token_count=260, overhead_tokens=60,
        token_counter="o200k_base", sources=(source,), blocks=blocks,
    )  # fmt: skip


def plain() -> tuple[BlockReport, ...]:
    return tuple(
        BlockReport(
            id=i, source=s, section=sec, offered_tokens=o, used_tokens=u, status=st, reason=r
        )
        for i, s, sec, o, u, st, r in ROWS
    )


def test_blocks_read_as_the_tuple_of_block_reports() -> None:
    blocks = Blocks(ROWS)
    assert len(blocks) == 4
    assert blocks == plain()
    assert plain() == blocks
    assert blocks[1] == plain()[1]
    assert blocks[-2:] == plain()[-2:]
    assert list(blocks) == list(plain())
    assert hash(blocks) == hash(plain())
    assert repr(blocks) == repr(plain())
    assert blocks != plain()[:3]
    assert Blocks(ROWS[:3]) != blocks


def test_a_report_with_lazy_blocks_is_the_report_with_their_tuple() -> None:
    lazy, eager = report(Blocks(ROWS)), report(plain())
    assert lazy == eager
    assert lazy.to_dict() == eager.to_dict()
    assert json.dumps(lazy.to_dict()) == json.dumps(eager.to_dict())
    assert lazy.summary() == eager.summary()
    assert lazy.summary()["components"] == 2
    assert lazy.summary()["dropped"] == 2
    assert lazy.dropped == eager.dropped
    assert ContextReport.from_dict(lazy.to_dict()) == eager


def test_copies_and_pickles_of_lazy_blocks_are_plain_tuples() -> None:
    lazy = report(Blocks(ROWS))
    for other in (copy.deepcopy(lazy), pickle.loads(pickle.dumps(lazy))):
        assert other == lazy
        assert type(other.blocks) is tuple
    edited = replace(lazy, blocks=(*lazy.blocks, plain()[0]))
    assert len(edited.blocks) == 5
