"""Images in a window: counted in the budget, kept whole with their message and unit, and a
window that cannot hold one reports it dropped, with the reason and its size."""

from __future__ import annotations

import asyncio
import base64
import struct

from hypothesis import event, given
from hypothesis import strategies as st

from loomctx import BudgetExceededError, ContextOrchestrator, Message, TiktokenCounter
from loomctx.context.sources import HistorySource, PromptSource, UserInputSource
from loomctx.messages import ImagePart, split_units
from loomctx.parts import openai_image_tokens
from tests.strategies import histories

COUNTER = TiktokenCounter()


def png_header(width: int, height: int) -> str:
    """Base64 of a PNG's signature and header: all that sizing an image reads."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    raw = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\0\0\0\0"
    return base64.b64encode(raw).decode("ascii")


IMAGES = st.one_of(
    st.builds(
        lambda w, h, detail: ImagePart(
            data=png_header(w, h), media_type="image/png", detail=detail
        ),
        st.integers(1, 5000),
        st.integers(1, 5000),
        st.sampled_from([None, "low", "high", "auto"]),
    ),
    st.just(ImagePart(url="https://example.com/shot.jpg")),
)


@st.composite
def with_images(draw: st.DrawFn, history: list[Message]) -> list[Message]:
    """`history` with images added to some of its user messages."""
    out = []
    for m in history:
        if m.role == "user" and draw(st.booleans()):
            m = Message.user(m.content, parts=draw(st.lists(IMAGES, min_size=1, max_size=2)))
        out.append(m)
    return out


SCENARIO = st.fixed_dictionaries(
    {
        "history": histories(system=False, names=False, max_units=8).flatmap(with_images),
        "turn": st.lists(IMAGES, max_size=2).map(lambda p: Message.user("and this?", parts=p)),
        "window": st.integers(min_value=60, max_value=6000),
    }
)


def orchestrator(s: dict[str, object]) -> ContextOrchestrator:
    return ContextOrchestrator(
        token_counter=COUNTER,
        sources=[
            PromptSource("Describe screenshots."),
            HistorySource(s["history"]),  # type: ignore[arg-type]
            UserInputSource(message=s["turn"]),  # type: ignore[arg-type]
        ],
        model_context_window=s["window"],  # type: ignore[arg-type]
        output_reserve_ratio=0.125,
    )


@given(SCENARIO)
def test_images_are_counted_in_the_budget_and_kept_whole_with_their_unit(
    s: dict[str, object],
) -> None:
    orch = orchestrator(s)
    try:
        window = asyncio.run(orch.build(query="and this?"))
    except BudgetExceededError as exc:
        offenders = {o.name for o in exc.offenders}
    else:
        offenders = set()
    if offenders:
        event("the user turn does not fit")
        assert offenders <= {"system_prompt", "user_input"}
        return
    assert window.token_count == COUNTER.count_messages(window.messages, tools=window.tools)
    assert window.token_count <= orch.available
    assert window.messages[-1] == s["turn"]  # the turn, every image of it, whole
    layout = window.layout
    assert layout is not None
    history = list(window.messages[layout.summary_end : layout.history_end])
    split_units(history)
    full: list[Message] = s["history"]  # type: ignore[assignment]
    if history:
        assert history == full[len(full) - len(history) :]  # each message as given, parts too
    if any(m.parts for m in history):
        event("an image in the history kept")


def test_an_image_the_window_cannot_hold_is_reported_dropped_with_its_size() -> None:
    image = ImagePart(data=png_header(1024, 1024), media_type="image/png", detail="high")
    assert openai_image_tokens((1024, 1024), "high") == 765
    screenshot = Message.user("Here is the dashboard.", parts=[image])
    history = [screenshot, Message.assistant("It shows an outage.")]
    orch = ContextOrchestrator(
        token_counter=COUNTER,
        sources=[HistorySource(history), UserInputSource()],
        model_context_window=600,
        output_reserve_ratio=0.0,
    )
    window = asyncio.run(orch.build(query="What did it show?"))
    assert all(not m.parts for m in window.messages)
    assert window.token_count <= 600
    [dropped] = [b for b in window.report.blocks if b.id == "history:0"]
    assert dropped.status == "dropped"
    assert dropped.offered_tokens == COUNTER.count_messages([screenshot]) - 3  # its size
    assert dropped.offered_tokens > 765
    assert dropped.reason.startswith(f"needs {dropped.offered_tokens} tokens whole")
    assert "image or a file, never cut" in dropped.reason
    # With room for it, the same image is sent whole.
    roomy = ContextOrchestrator(
        token_counter=COUNTER,
        sources=[HistorySource(history), UserInputSource()],
        model_context_window=2000,
        output_reserve_ratio=0.0,
    )
    assert screenshot in asyncio.run(roomy.build(query="What did it show?")).messages
