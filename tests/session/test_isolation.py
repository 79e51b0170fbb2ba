"""DESIGN.md invariant 6 under random operations: a session's window shows only Tasks given to
that session (added, distributed, broadcast or filtered to it), however the others are used.

Every Task carries a unique marker word; each window's text is searched for every marker, and
the queries name markers of other sessions' Tasks on purpose, to lure the L4 search.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from loomctx.context.orchestrator import ContextWindow
from loomctx.errors import ConfigError
from loomctx.memory.settings import MemoryTiers
from loomctx.memory.task import Task, task_text
from loomctx.session.controller import ContextController
from loomctx.session.session import SessionState
from loomctx.stores.sqlite import SQLiteStore
from loomctx.tokens import TiktokenCounter
from tests.session._helpers import note, said, text_of

COUNTER = TiktokenCounter()
MARKER = re.compile(r"\bmark\d+x\b")
CALLS = {"pause": SessionState.PAUSED, "resume": SessionState.ACTIVE, "end": SessionState.ENDED}


class Isolation(RuleBasedStateMachine):
    def __init__(self, store: SQLiteStore, agent_id: str) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.controller = ContextController(store, agent_id=agent_id, counter=COUNTER)
        self.runner.run(self.controller.start())
        self.given: dict[str, set[str]] = {}  # session -> markers of the Tasks given to it
        self.states: dict[str, SessionState] = {}
        self.groups: dict[str, int] = {}
        self.made = 0

    def teardown(self) -> None:
        self.runner.run(self.controller.close())
        self.runner.close()

    def live(self) -> list[str]:
        return [s for s, state in self.states.items() if state is not SessionState.ENDED]

    def task(self, importance: float, *, user: bool) -> Task:
        self.made += 1
        marker = f"mark{self.made}x"
        if user:
            return said(f"t{self.made}", f"customer says {marker} please", importance=importance)
        return note(f"t{self.made}", f"lookup found {marker}", importance=importance)

    def check(self, window: ContextWindow, allowed: set[str]) -> None:
        # The query (the last message) names markers on purpose; everything before it is
        # what the sources chose.
        assert window.messages[-1].role == "user"
        before = replace(window, messages=window.messages[:-1])
        seen = set(MARKER.findall(text_of(before)))
        assert seen <= allowed, f"cross-talk: {sorted(seen - allowed)}"

    @precondition(lambda self: len(self.states) < 4)
    @rule(group=st.integers(0, 1))
    def create(self, group: int) -> None:
        sid = f"s{len(self.states)}"
        self.runner.run(
            self.controller.create_session(
                sid,
                tiers=MemoryTiers(max_l1_size=3, max_l2_size=2, max_l3_size=2),
                metadata={"group": group},
            )
        )
        self.given[sid] = set()
        self.states[sid] = SessionState.ACTIVE
        self.groups[sid] = group

    @precondition(lambda self: self.live())
    @rule(data=st.data(), importance=st.sampled_from([0.2, 0.9]), user=st.booleans())
    def add(self, data: st.DataObject, importance: float, user: bool) -> None:
        sid = data.draw(st.sampled_from(self.live()))
        task = self.task(importance, user=user)
        self.runner.run(self.controller.get_session(sid).add_task(task))
        self.given[sid].add(MARKER.findall(task_text(task))[0])

    @precondition(lambda self: self.live())
    @rule(data=st.data(), importance=st.sampled_from([0.2, 0.9]))
    def distribute(self, data: st.DataObject, importance: float) -> None:
        targets = data.draw(st.lists(st.sampled_from(self.live()), min_size=1, unique=True))
        task = self.task(importance, user=False)
        got = self.runner.run(self.controller.distribute_task(task, targets))
        assert got == targets
        for sid in targets:
            self.given[sid].add(MARKER.findall(task_text(task))[0])

    @rule()
    def broadcast(self) -> None:
        task = self.task(0.9, user=True)
        got = self.runner.run(self.controller.broadcast(task))
        assert got == self.live()
        for sid in got:
            self.given[sid].add(MARKER.findall(task_text(task))[0])

    @rule(group=st.integers(0, 1))
    def filtered(self, group: int) -> None:
        task = self.task(0.5, user=False)
        got = self.runner.run(
            self.controller.distribute_filtered(task, lambda s: s.metadata["group"] == group)
        )
        assert got == [s for s in self.live() if self.groups[s] == group]
        for sid in got:
            self.given[sid].add(MARKER.findall(task_text(task))[0])

    @precondition(lambda self: self.states)
    @rule(data=st.data(), call=st.sampled_from(sorted(CALLS)))
    def transition(self, data: st.DataObject, call: str) -> None:
        sid = data.draw(st.sampled_from(sorted(self.states)))
        session = self.controller.get_session(sid)
        valid = {
            SessionState.ACTIVE: {"pause", "end"},
            SessionState.PAUSED: {"resume", "end"},
            SessionState.ENDED: set(),
        }[self.states[sid]]
        if call in valid:
            self.runner.run(getattr(session, call)())
            self.states[sid] = CALLS[call]
        else:
            with pytest.raises(ConfigError):
                self.runner.run(getattr(session, call)())
        assert session.state is self.states[sid]

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def build(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(self.live()))
        lure = " ".join(f"mark{n}x" for n in range(1, self.made + 1))
        window = self.runner.run(self.controller.get_session(sid).build_context(f"any of {lure}"))
        self.check(window, self.given[sid])

    @precondition(lambda self: self.live())
    @rule(data=st.data(), strategy=st.sampled_from(["equal", "priority", "relevance"]))
    def aggregate(self, data: st.DataObject, strategy: str) -> None:
        chosen = data.draw(st.lists(st.sampled_from(self.live()), min_size=1, unique=True))
        lure = " ".join(f"mark{n}x" for n in range(1, self.made + 1))
        window = self.runner.run(
            self.controller.aggregate_context(chosen, f"any of {lure}", 3000, strategy=strategy)  # type: ignore[arg-type]
        )
        self.check(window, set().union(*(self.given[s] for s in chosen)))

    @invariant()
    def states_are_stored(self) -> None:
        for state in SessionState:
            expected = [s for s, now in self.states.items() if now is state]
            assert self.controller.session_ids(state) == expected


def test_a_session_sees_only_what_was_given_to_it(tmp_path: Path) -> None:
    # One store for every example, a new agent (so new namespaces) for each: opening a
    # SQLite file per example would cost more than the example.
    with SQLiteStore(tmp_path / "isolation.db") as store:
        agents = itertools.count()
        run_state_machine_as_test(
            lambda: Isolation(store, f"agent{next(agents)}"),
            settings=settings(stateful_step_count=20),
        )
