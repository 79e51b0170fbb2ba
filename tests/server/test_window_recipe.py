"""The one window recipe: an `Agent`, the proxy, a `Session` and the cost bench (which replays
conversations through an `Agent`) build the same window from the same conversation, so every
figure measured describes what users get."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from loomctx import AgentWindow
from loomctx.agent.executor import Agent
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task, TaskStatus
from loomctx.messages import Message, to_openai
from loomctx.server import hash_key
from loomctx.session.bus import InProcessEventBus
from loomctx.session.controller import ContextController
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing import FunctionLLM
from tests.agent._servers import openai_text
from tests.server.conftest import ACME_KEY

SYSTEM = "Be brief."
PROMPT = "Which city did I say my sister moved to, and when?"
START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def conversation() -> list[Task]:
    """Thirty exchanges, more than a 2,000-token window holds."""
    said = [
        (f"Day {i}: my sister moved to Lisbon in {2010 + i}, she says the light is golden. "
         f"What should I pack for a visit in month {i}?",
         f"For month {i} in Lisbon: light layers, walking shoes and a rain jacket; the "
         f"evenings by the river get cool.")
        for i in range(30)
    ]  # fmt: skip
    tasks = []
    for i, (asked, answer) in enumerate(said):
        for j, (action, who, text) in enumerate(
            ((USER_MESSAGE, "user", asked), (ASSISTANT_MESSAGE, "agent", answer))
        ):
            stamp = START + timedelta(minutes=10 * i + j)
            tasks.append(
                Task(
                    task_id=f"t{i:02}{j}",
                    source_agent=who,
                    target_agent="agent" if who == "user" else "user",
                    action=action,
                    parameters={"content": text},
                    status=TaskStatus.COMPLETED,
                    created_at=stamp,
                    updated_at=stamp,
                )
            )
    return tasks


async def test_the_agent_the_proxy_and_a_session_build_the_same_window(
    loom_factory, tmp_path: Path
) -> None:
    # A tenant without knowledge bases, as a Session has none.
    plain = {"keys": [hash_key(ACME_KEY)], "instructions": "You work for ACME."}
    loom = loom_factory(tenants={"acme": plain})
    service = loom.service
    tenant = service.config.tenants["acme"]
    system = f"{tenant.instructions}\n\n{SYSTEM}"
    model = service.config.models["gpt-test"]

    # The proxy: the session's memory holds the conversation; the client sends the new turn.
    service.memory("acme", "s1").add_tasks(conversation())
    loom.wire.script(openai_text("Lisbon."))
    loom.openai(ACME_KEY).chat.completions.create(
        model="gpt-test",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}],
        extra_headers={"X-Loom-Session": "s1"},
    )
    proxy = loom.wire.requests[0].body["messages"]

    # An Agent (and so `loomctx bench cost`) on a memory holding the same conversation.
    store = SQLiteStore(tmp_path / "agent.db")
    memory = LoomMemory("s1", store=store, embedder=None)
    memory.add_tasks(conversation())
    llm = FunctionLLM(lambda messages, tools, options: "Lisbon.")
    agent = Agent(
        llm,
        system,
        memory=memory,
        knowledge_bases=service.knowledge_bases(tenant),
        window=AgentWindow(
            model_context_window=model.window, output_reserve_ratio=model.output_reserve
        ),
    )
    await agent.run(PROMPT)
    memory.close()
    store.close()
    sent = list(llm.calls[0].messages)

    # A Session of a controller, with the same window.
    session_store = SQLiteStore(tmp_path / "sessions.db")
    bus = InProcessEventBus()
    controller = ContextController(session_store, bus)
    await controller.start()
    try:
        session = await controller.create_session(
            "s1",
            system_prompt=system,
            model_context_window=model.window,
            output_reserve_ratio=model.output_reserve,
        )
        session.memory.add_tasks(conversation())
        built = (await session.build_context(PROMPT)).messages
    finally:
        await controller.close()
        await bus.close()
        session_store.close()

    # Instructions alone are the system message everywhere (an agent heads its sections only
    # when it has a stage or a task context too); the rest is the recipe's, the same too.
    assert sent[0] == Message.system(system)
    assert proxy[0] == {"role": "system", "content": system}
    assert built[0] == Message.system(system)
    # History fills the window (the first exchanges do not fit): the recipe did choose.
    assert sent[-1] == Message.user(PROMPT)
    assert 4 < len(sent) < 2 + 60
    assert to_openai(sent[1:]) == proxy[1:]
    # A Session's `build_context` does not record its query as a turn (the agent and the
    # proxy do, before they build), so its retrieval searches a memory one task short, and
    # what stands out of it (`CachePolicy.tail_lift`) may differ: its tail, and the room that
    # leaves history, are its own; the recipe's layout is the same.
    history = [m for m in sent[1:-1] if not m.content.startswith("Reference context")]
    viewed = [m for m in built[1:-1] if not m.content.startswith("Reference context")]
    assert built[-1] == sent[-1]
    units = history[1:]  # the agent's whole units after its summary, the newest last
    assert viewed[-len(units) :] == units
    assert built[1].content.startswith("Earlier conversation, summarized")
