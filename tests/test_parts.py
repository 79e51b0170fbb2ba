"""Images and files in messages: the part values, their wire forms (OpenAI, Anthropic), their
sizes read from image headers, and their token costs by the providers' published rules."""

from __future__ import annotations

import base64
import struct

import pytest

from loomctx.context.turns import message_digest
from loomctx.errors import ConfigError, MessageFormatError
from loomctx.memory.task import tasks_from_messages
from loomctx.messages import (
    FilePart,
    ImagePart,
    Message,
    TextPart,
    from_anthropic,
    from_openai,
    to_anthropic,
    to_openai,
)
from loomctx.parts import (
    PDF_PAGE_TOKENS,
    anthropic_image_tokens,
    image_size,
    openai_image_tokens,
    stand_in,
)
from loomctx.session.windows import _message_of, message_dict
from loomctx.tokens import HeuristicCounter, TiktokenCounter


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def png(width: int, height: int) -> str:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b64(b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\0\0\0\0")


def gif(width: int, height: int) -> str:
    return b64(b"GIF89a" + struct.pack("<HH", width, height) + b"\0\0\0")


def jpeg(width: int, height: int, *, exif: int = 0) -> str:
    app1 = b"\xff\xe1" + struct.pack(">H", exif + 2) + b"\0" * exif if exif else b""
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b64(b"\xff\xd8" + app1 + sof + b"\xff\xd9")


def webp(kind: bytes, width: int, height: int) -> str:
    if kind == b"VP8 ":
        body = b"\0" * 3 + b"\x9d\x01\x2a" + struct.pack("<HH", width, height)
    elif kind == b"VP8L":
        bits = (width - 1) | ((height - 1) << 14)
        body = b"\x2f" + bits.to_bytes(4, "little")
    else:
        body = b"\0" * 4 + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return b64(b"RIFF\0\0\0\0WEBP" + kind + struct.pack("<I", len(body)) + body)


# --- sizes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        png(800, 600),
        gif(800, 600),
        jpeg(800, 600),
        jpeg(800, 600, exif=20_000),  # the frame header after large metadata
        webp(b"VP8 ", 800, 600),
        webp(b"VP8L", 800, 600),
        webp(b"VP8X", 800, 600),
    ],
)
def test_the_size_is_read_from_the_image_header(data: str) -> None:
    assert image_size(data) == (800, 600)


@pytest.mark.parametrize("data", ["", "bm90IGFuIGltYWdl", "%%%not base64%%%", png(0, 10)])
def test_an_unreadable_size_is_unknown(data: str) -> None:
    assert image_size(data) is None


# --- token rules: the providers' worked examples -------------------------------------------


@pytest.mark.parametrize(
    ("size", "detail", "tokens"),
    [
        ((1024, 1024), "high", 765),  # 768 x 768: 4 tiles
        ((2048, 4096), "high", 1105),  # 1024 x 2048, then 768 x 1536: 6 tiles
        ((4096, 8192), "low", 85),
        ((1024, 1024), None, 765),  # no detail: auto, counted as high
        ((512, 512), "auto", 255),  # small images are not scaled up: 1 tile
        (None, "high", 1445),  # unknown size: the most the rule allows (768 x 2048, 8 tiles)
        (None, "low", 85),
    ],
)
def test_openai_image_tokens(size: tuple[int, int] | None, detail: str, tokens: int) -> None:
    assert openai_image_tokens(size, detail) == tokens


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((200, 200), 54),  # Anthropic's table: ~54
        ((1000, 1000), 1334),  # ~1334
        ((1092, 1092), 1590),  # ~1590
        ((3136, 1568), 1600),  # 1568 x 784 after the resize, capped at ~1.15 MP
        (None, 1600),  # unknown size: the most the rule allows
    ],
)
def test_anthropic_image_tokens(size: tuple[int, int] | None, tokens: int) -> None:
    assert anthropic_image_tokens(size) == tokens


def test_counters_add_each_image_by_their_rule() -> None:
    image = ImagePart(data=png(1024, 1024), media_type="image/png", detail="high")
    with_image = Message.user("look", parts=[image])
    plain = Message.user("look")
    openai, claude = TiktokenCounter(), HeuristicCounter()
    assert openai.count_messages([with_image]) - openai.count_messages([plain]) == 765
    assert claude.count_messages([with_image]) - claude.count_messages([plain]) == 1399
    url = Message.user("look", parts=[ImagePart(url="https://example.com/a.png", detail="low")])
    assert openai.count_messages([url]) - openai.count_messages([plain]) == 85


def test_a_pdf_costs_per_page_and_a_text_document_its_text() -> None:
    counter = TiktokenCounter()
    pages = b64(b"%PDF-1.4 /Type /Pages /Type /Page x /Type /Page y /Type/Page")
    plain = Message.user("read")
    pdf = Message.user("read", parts=[FilePart(data=pages, media_type="application/pdf")])
    text = Message.user("read", parts=[FilePart(text="hello world", media_type="text/plain")])
    base = counter.count_messages([plain])
    assert counter.count_messages([pdf]) - base == 3 * PDF_PAGE_TOKENS
    assert counter.count_messages([text]) - base == counter.count("hello world")


# --- the message model -------------------------------------------------------------------------


def test_a_message_with_parts_keeps_its_text_in_content() -> None:
    image = ImagePart(url="https://example.com/a.png")
    m = Message.user("What is this?", parts=[image])
    assert m.content == "What is this?"
    assert m.parts == (TextPart(text="What is this?"), image)
    mixed = Message(role="user", parts=(TextPart(text="a"), image, TextPart(text="b")))
    assert mixed.content == "ab"
    # Parts that are all text fold into `content`: the text-only message it always was.
    assert Message(role="user", parts=(TextPart(text="hi"),)) == Message.user("hi")


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (
            lambda: Message(role="assistant", parts=(ImagePart(url="https://x.io/a.png"),)),
            "a `assistant` message cannot carry images or files",
        ),
        (
            lambda: Message(
                role="user",
                content="x",
                parts=(TextPart(text="y"), ImagePart(url="https://x.io/a.png")),
            ),
            "`content` and the text of `parts` differ",
        ),
        (lambda: Message(role="user", parts=("an image",)), "`parts` must hold `TextPart`"),
        (lambda: ImagePart(), "needs exactly one of `url`, `data`, got none"),
        (lambda: ImagePart(data=png(1, 1)), "needs its `media_type`"),
        (lambda: ImagePart(url="https://x.io/a.png", detail="max"), "`detail` must be"),
        (lambda: FilePart(url="https://x.io/a.pdf", file_id="f"), "exactly one of"),
    ],
)
def test_bad_parts_are_refused(build, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MessageFormatError, match=match):
        build()


# --- wire forms --------------------------------------------------------------------------------

SHOT = png(800, 600)
PDF = b64(b"%PDF-1.4 /Type /Page")
OPENAI_TURN = {
    "role": "user",
    "content": [
        {"type": "text", "text": "Compare "},
        {
            "type": "image_url",
            "image_url": {"url": f"data:image/png;base64,{SHOT}", "detail": "low"},
        },
        {"type": "text", "text": "with"},
        {"type": "image_url", "image_url": {"url": "https://example.com/b.jpg"}},
        {
            "type": "file",
            "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "r.pdf"},
        },
        {"type": "file", "file": {"file_id": "file-123"}},
    ],
}


def test_openai_parts_round_trip_in_order() -> None:
    [m] = from_openai([OPENAI_TURN])
    assert m.content == "Compare with"
    assert [type(p).__name__ for p in m.parts] == [
        "TextPart",
        "ImagePart",
        "TextPart",
        "ImagePart",
        "FilePart",
        "FilePart",
    ]
    assert m.parts[1] == ImagePart(data=SHOT, media_type="image/png", detail="low")
    assert to_openai([m]) == [OPENAI_TURN]


def test_responses_input_parts_are_read() -> None:
    [m] = from_openai(
        [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "see"},
                    {
                        "type": "input_image",
                        "image_url": "https://example.com/c.png",
                        "detail": "high",
                    },
                    {
                        "type": "input_file",
                        "file_data": f"data:application/pdf;base64,{PDF}",
                        "filename": "r.pdf",
                    },
                ],
            }
        ]
    )
    assert m.parts == (
        TextPart(text="see"),
        ImagePart(url="https://example.com/c.png", detail="high"),
        FilePart(data=PDF, media_type="application/pdf", filename="r.pdf"),
    )


def test_anthropic_parts_round_trip_in_order() -> None:
    blocks = [
        {"type": "text", "text": "Compare "},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": SHOT}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/b.jpg"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
            "title": "r.pdf",
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "notes"},
        },
        {"type": "document", "source": {"type": "url", "url": "https://example.com/r.pdf"}},
    ]
    [m] = from_anthropic([{"role": "user", "content": blocks}])
    assert m.content == "Compare "
    system, wire = to_anthropic([m])
    assert system is None
    assert wire == [{"role": "user", "content": blocks}]


def test_anthropic_images_beside_tool_results_keep_their_place() -> None:
    blocks = [
        {"type": "tool_result", "tool_use_id": "t1", "content": "done"},
        {"type": "text", "text": "and the screen:"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/s.png"}},
    ]
    history = from_anthropic(
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
            },
            {"role": "user", "content": blocks},
        ]
    )
    assert [m.role for m in history] == ["user", "assistant", "tool", "user"]
    assert history[-1].parts == (
        TextPart(text="and the screen:"),
        ImagePart(url="https://example.com/s.png"),
    )
    assert to_anthropic(history)[1][-1]["content"] == blocks


def test_openai_images_become_anthropic_blocks() -> None:
    [m] = from_openai([OPENAI_TURN])
    _, [wire] = to_anthropic([m])
    kinds = [(b["type"], b.get("source", {}).get("type")) for b in wire["content"]]
    assert kinds == [
        ("text", None),
        ("image", "base64"),
        ("text", None),
        ("image", "url"),
        ("document", "base64"),
        ("document", "file"),
    ]
    assert wire["content"][1]["source"]["data"] == SHOT


@pytest.mark.parametrize(
    ("part", "match"),
    [
        ({"type": "input_audio", "input_audio": {}}, "an audio part needs its base64 `data`"),
        (
            {"type": "input_audio", "input_audio": {"data": "UklG", "format": "ogg"}},
            "`wav` or `mp3`",
        ),
        ({"type": "input_audio"}, "audio part 0 needs `input_audio`"),
        ({"type": "video"}, "content part 0 has type `video`"),
        ({"type": "image_url", "image_url": {"url": "data:image/svg+xml,<svg/>"}}, "http(s) URL"),
        ({"type": "image_url", "image_url": None}, "image part 0 needs `image_url`"),
        ({"type": "input_image", "file_id": "file-1"}, "names an uploaded file"),
        ({"type": "file", "file": {}}, "exactly one of"),
    ],
)
def test_bad_openai_parts_are_refused(part: dict, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(MessageFormatError, match=match.replace("(", r"\(").replace(")", r"\)")):
        from_openai([{"role": "user", "content": [part]}])


# --- where images meet text-only stores ----------------------------------------------------------


def test_memory_keeps_a_stand_in_for_each_image_and_file() -> None:
    [m] = from_openai([OPENAI_TURN])
    [task] = tasks_from_messages([m])
    assert task.parameters["content"] == (
        "Compare \n[image: image/png 800x600]\nwith\n"
        "[image: https://example.com/b.jpg]\n[file: r.pdf application/pdf]\n[file: attached]"
    )
    assert stand_in(FilePart(text="x", media_type="text/plain")) == "[file: text/plain]"


def test_a_saved_window_keeps_its_images() -> None:
    [m] = from_openai([OPENAI_TURN])
    assert _message_of(message_dict(m)) == m
    assert "parts" not in message_dict(Message.user("plain"))


def test_the_message_digest_tells_images_apart_and_keeps_text_ones() -> None:
    one = Message.user("see", parts=[ImagePart(url="https://example.com/1.png")])
    two = Message.user("see", parts=[ImagePart(url="https://example.com/2.png")])
    assert message_digest(one) != message_digest(two)
    assert message_digest(one) != message_digest(Message.user("see"))


def test_a_counter_for_the_other_provider_shares_its_tokenizer_and_cache() -> None:
    counter = TiktokenCounter()
    claude = counter.with_image_rule("anthropic")
    image = Message.user("x", parts=[ImagePart(data=png(1092, 1092), media_type="image/png")])
    assert counter.count_messages([image]) - counter.count_messages([Message.user("x")]) == 765
    assert claude.count_messages([image]) - claude.count_messages([Message.user("x")]) == 1590
    assert claude.count("shared text") == counter.count("shared text")
    assert claude._cache is counter._cache
    with pytest.raises(ConfigError, match="`rule` must be `openai` or `anthropic`"):
        counter.with_image_rule("gemini")  # type: ignore[arg-type]


def test_a_pdf_s_page_tree_count_is_read_when_its_pages_are_compressed() -> None:
    tree = b64(b"%PDF-1.7\n1 0 obj << /Type /Pages /Kids [3 0 R] /Count 12 >> endobj\n%%EOF")
    assert FilePart(data=tree, media_type="application/pdf").pages == 12
    assert FilePart(data=b64(b"not a pdf at all"), media_type="text/csv").pages == 1
    assert FilePart(url="https://example.com/r.pdf").pages == 1  # unknown: one page


# --- audio ----------------------------------------------------------------------------------


def _wav(seconds: float, rate: int = 8000) -> str:
    import io
    import wave

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\x00\x00" * int(seconds * rate))
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def test_audio_is_counted_by_its_duration_read_from_its_header() -> None:
    from loomctx.parts import AudioPart, audio_tokens

    clip = AudioPart(data=_wav(2.5), format="wav")
    assert clip.seconds == pytest.approx(2.5)
    assert audio_tokens(clip) == 25  # ten a second
    # An MP3 at 128 kbit/s (its first frame's header): 48,000 bytes are 3 seconds.
    frame = b"\xff\xfb\x90\x00" + b"\x00" * (48_000 - 4)
    mp3 = AudioPart(data=base64.b64encode(frame).decode("ascii"), format="mp3")
    assert mp3.seconds == pytest.approx(3.0)
    assert audio_tokens(mp3) == 30
    # Data whose duration cannot be read: taken at 8 kB/s, so 16,000 bytes are 2 seconds.
    unknown = AudioPart(data=base64.b64encode(b"\x01" * 16_000).decode("ascii"), format="mp3")
    assert unknown.seconds == pytest.approx(2.0, rel=1e-3)


def test_audio_travels_to_openai_and_is_refused_for_anthropic() -> None:
    from loomctx.messages import Message, from_openai, to_anthropic, to_openai
    from loomctx.tokens import TiktokenCounter

    wire = {
        "role": "user",
        "content": [
            {"type": "text", "text": "Listen."},
            {"type": "input_audio", "input_audio": {"data": _wav(1.0), "format": "wav"}},
        ],
    }
    [message] = from_openai([wire])
    assert to_openai([message]) == [wire]
    assert "[audio: wav 1.0 s]" in [stand_in(p) for p in message.parts]
    counter = TiktokenCounter()
    assert (
        counter.count_messages([message]) - counter.count_messages([Message.user("Listen.")]) == 10
    )
    with pytest.raises(MessageFormatError, match="Anthropic's API takes no audio"):
        to_anthropic([message])
    with pytest.raises(MessageFormatError, match="cannot carry audio"):
        Message.tool("", tool_call_id="c", parts=[message.parts[1]])


# --- images in tool results -----------------------------------------------------------------

TOOL_SHOT = ImagePart(url="https://example.com/shot.png")


def _tool_exchange() -> list[Message]:
    from loomctx.messages import ToolCall

    calls = [ToolCall(id="c1", name="shot", arguments={}), ToolCall(id="c2", name="ls")]
    return [
        Message.user("Look."),
        Message.assistant(tool_calls=calls),
        Message.tool("Taken.", tool_call_id="c1", parts=[TOOL_SHOT]),
        Message.tool("a.txt", tool_call_id="c2"),
        Message.assistant("Done."),
    ]


def test_a_tool_results_images_stay_in_it_and_round_trip() -> None:
    messages = _tool_exchange()
    assert messages[2].parts == (TextPart(text="Taken."), TOOL_SHOT)
    wire = to_openai(messages)
    assert wire[2]["content"] == [
        {"type": "text", "text": "Taken."},
        {"type": "image_url", "image_url": {"url": TOOL_SHOT.url}},
    ]
    assert from_openai(wire) == messages
    _, anthropic = to_anthropic(messages)
    result = anthropic[2]["content"][0]
    assert result["content"] == [
        {"type": "text", "text": "Taken."},
        {"type": "image", "source": {"type": "url", "url": TOOL_SHOT.url}},
    ]
    assert from_anthropic(anthropic) == messages


def test_for_openai_s_api_a_tool_results_images_follow_the_results_in_a_user_message() -> None:
    from loomctx.messages import tool_parts_note

    wire = to_openai(_tool_exchange(), strict=True)
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert wire[2]["content"] == "Taken."
    assert wire[4]["content"] == [
        {"type": "text", "text": tool_parts_note("c1")},
        {"type": "image_url", "image_url": {"url": TOOL_SHOT.url}},
    ]
    # The user message it adds is counted with the result, so the budget holds on this wire.
    counter = TiktokenCounter()
    plain = Message.tool("Taken.", tool_call_id="c1")
    added = counter.count_messages([_tool_exchange()[2]]) - counter.count_messages([plain])
    moved = counter.count_messages([plain, *from_openai(wire[4:5])]) - counter.count_messages(
        [plain]
    )
    assert added >= moved


def test_memory_keeps_a_stand_in_for_a_tool_results_image() -> None:
    [_, shot, listing, _] = tasks_from_messages(_tool_exchange())
    assert shot.result == "Taken.\n[image: https://example.com/shot.png]"
    assert listing.result == "a.txt"
