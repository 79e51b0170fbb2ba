"""A recorded log of chat requests made from a LoCoMo conversation, as a client that re-sends
its whole history would log it: the requests take in turn OpenAI's chat-completions shape
(wrapped as a gateway exports it), Anthropic's Messages shape and OpenAI's Responses shape
(`instructions` and `input` items, as a client that does not store its responses sends
them).

The conversation is the first of LoCoMo's dev file where it is (`LOCOMO`), else the small
conversation in LoCoMo's format that the retrieval benches' tests use."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loomctx.evaluation.cost import load_exchanges
from tests.evaluation.test_evaluate import locomo_data, write

LOCOMO = Path("/work/shared/data/locomo/locomo10_dev.json")
SYSTEM = "You are a helpful assistant with a long memory."
WINDOW = 1000 if LOCOMO.exists() else 300
"""A context window that the log's history (20 or more exchanges) outgrows halfway."""
BAD_LINES = {4: "{not json", 7: json.dumps({"model": "gpt-4o"}), 9: json.dumps([1, 2])}
"""Malformed lines, by the line number they take in the log."""


def exchanges(turns: int) -> list[tuple[str, str]]:
    """The first `turns` (user turn, reply) exchanges of the conversation."""
    if LOCOMO.exists():
        return load_exchanges(LOCOMO, limit=1)[0][:turns]
    with tempfile.TemporaryDirectory() as tmp:
        return load_exchanges(write(Path(tmp) / "locomo.json", locomo_data()))[0][:turns]


def requests(pairs: Sequence[tuple[str, str]], *, model: str = "gpt-4o") -> list[str]:
    """One JSON line a user turn, its whole history sent with it, the shapes in turn."""
    lines: list[str] = []
    history: list[dict[str, Any]] = []
    for i, (asked, said) in enumerate(pairs):
        history.append({"role": "user", "content": asked})
        if i % 3 == 0:
            body = {"model": model, "messages": [{"role": "system", "content": SYSTEM}, *history]}
            lines.append(json.dumps({"request": body}))
        elif i % 3 == 2:
            items = [
                {
                    "type": "message",
                    "role": m["role"],
                    "content": [
                        {
                            "type": "input_text" if m["role"] == "user" else "output_text",
                            "text": m["content"],
                        }
                    ],
                }
                for m in history
            ]
            body = {"model": model, "instructions": SYSTEM, "input": items, "store": False}
            lines.append(json.dumps(body))
        else:
            blocks = [
                {"role": m["role"], "content": [{"type": "text", "text": m["content"]}]}
                for m in history
            ]
            lines.append(json.dumps({"model": model, "system": SYSTEM, "messages": blocks}))
        history.append({"role": "assistant", "content": said})
    return lines


def write_log(path: Path, *, turns: int = 24, bad: bool = True) -> Path:
    """The log of `turns` exchanges at `path`, with `BAD_LINES` among them if `bad`."""
    lines = requests(exchanges(turns))
    if bad:
        for number, line in sorted(BAD_LINES.items()):
            lines.insert(number - 1, line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
