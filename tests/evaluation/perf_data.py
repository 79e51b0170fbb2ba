"""A small LoCoMo-format file for `loomctx bench perf` tests: 25 sessions of 6 turns, each
with a session summary and observations (50 knowledge documents), and questions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PLACES = ["Denver", "Lisbon", "Osaka", "Nairobi", "Quito"]
HOBBIES = ["pottery", "climbing", "violin", "chess", "sailing"]


def perf_locomo(sessions: int = 25) -> list[dict[str, Any]]:
    conv: dict[str, Any] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    summaries: dict[str, str] = {}
    observations: dict[str, Any] = {}
    for s in range(1, sessions + 1):
        place, hobby = PLACES[s % len(PLACES)], HOBBIES[s % len(HOBBIES)]
        conv[f"session_{s}_date_time"] = f"1:00 pm on {s} May, 2023"
        conv[f"session_{s}"] = [
            {
                "speaker": "Ana" if t % 2 == 0 else "Ben",
                "dia_id": f"D{s}:{t + 1}",
                "text": f"Session {s} turn {t}: we talked about {hobby} lessons in {place} "
                f"and the weekend plans number {s * 10 + t}.",
            }
            for t in range(6)
        ]
        summaries[f"session_{s}_summary"] = (
            f"In session {s} Ana and Ben discussed the {hobby} club of {place}. Ana said the "
            f"membership fee for season {s} went up to {s * 3} euros per month."
        )
        observations[f"session_{s}_observation"] = {
            "Ana": [[f"Ana keeps a diary of every {hobby} class she took in {place} ({s}).", "D"]],
            "Ben": [[f"Ben wants to visit {place} again before the end of season {s}.", "D"]],
        }
    qa = [
        {"question": f"What did Ana say about the {h} club?", "evidence": ["D1:1"], "category": 1}
        for h in HOBBIES
    ] + [{"question": f"When is Ben going to {p}?", "evidence": ["D1:2"], "category": 2}
         for p in PLACES]  # fmt: skip
    return [
        {
            "sample_id": "conv-perf",
            "conversation": conv,
            "qa": qa,
            "session_summary": summaries,
            "observation": observations,
        }
    ]


def write_perf_locomo(path: Path, sessions: int = 25) -> Path:
    path.write_text(json.dumps(perf_locomo(sessions)), encoding="utf-8")
    return path
