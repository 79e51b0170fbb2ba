"""The bundled demo data: exactly what its generator writes, and holding the demo's facts."""

from __future__ import annotations

import json
from importlib import resources

from tests.cli import demo_data


def _bundled(name: str) -> str:
    return resources.files("loomctx").joinpath("_data", "demo", name).read_text(encoding="utf-8")


def test_the_bundled_conversation_is_what_the_generator_writes() -> None:
    assert _bundled("conversation.jsonl") == demo_data.render()


def test_the_conversation_is_long_and_holds_every_fact() -> None:
    messages = [json.loads(line) for line in _bundled("conversation.jsonl").splitlines()]
    assert len(messages) >= 250
    assert any(m.get("tool_calls") for m in messages)
    contents = [m.get("content") or "" for m in messages]
    for question, answer in demo_data.FACTS.values():
        assert question in contents
        assert answer in contents


def test_the_knowledge_folder_ships_with_the_package() -> None:
    folder = resources.files("loomctx").joinpath("_data", "demo", "knowledge")
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["architecture.md", "refunds.md", "runbook.md", "team.md"]
    assert "photo of the damage" in folder.joinpath("refunds.md").read_text(encoding="utf-8")
