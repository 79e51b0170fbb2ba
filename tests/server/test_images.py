"""Images and files through the proxy: the official `openai` client sends them inside a user
message, Loom counts them, keeps them whole in the window and sends them upstream intact, in
OpenAI's or Anthropic's wire format; memory keeps a text stand-in for them."""

from __future__ import annotations

import base64
import struct
import zlib

import openai
import pytest

from tests.agent._servers import anthropic_text, openai_text
from tests.server.conftest import ACME_KEY


def png(width: int, height: int) -> str:
    """A valid PNG of `width` x `height` black pixels, base64-encoded."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    rows = zlib.compress(b"\x00" * ((width + 1) * height), 9)
    raw = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows)
    return base64.b64encode(raw + chunk(b"IEND", b"")).decode("ascii")


SCREENSHOT = png(800, 600)
PDF = base64.b64encode(b"%PDF-1.4\n1 0 obj << /Type /Page >> endobj\n%%EOF").decode("ascii")


def image_turn(detail: str = "high") -> dict:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is wrong on this screen?"},
            {
                "type": "image_url",
                "image_url": {"url": f"data:image/png;base64,{SCREENSHOT}", "detail": detail},
            },
            {"type": "image_url", "image_url": {"url": "https://example.com/error.jpg"}},
            {
                "type": "file",
                "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "log.pdf"},
            },
        ],
    }


def test_an_image_reaches_an_openai_upstream_intact(loom_factory) -> None:
    loom = loom_factory(window=8000)  # the PDF's page alone is counted as 3000 tokens
    loom.wire.script(openai_text("A dialog box."), openai_text("Yes."))
    client = loom.openai(ACME_KEY)
    turn = image_turn()
    reply = client.chat.completions.create(model="gpt-test", messages=[turn], user="eyes")
    assert reply.choices[0].message.content == "A dialog box."
    sent = loom.wire.requests[0].body["messages"]
    assert sent[-1] == turn  # every part, in order, as the client sent it
    assert not any("[image:" in str(m["content"]) for m in sent)  # and no stand-in beside it
    # The next turn: memory kept the screenshot's stand-in, not the image itself.
    client.chat.completions.create(
        model="gpt-test",
        messages=[
            turn,
            {"role": "assistant", "content": "A dialog box."},
            {"role": "user", "content": "Is it an error?"},
        ],
        user="eyes",
    )
    history = loom.wire.requests[1].body["messages"]
    earlier = [m for m in history if "What is wrong on this screen?" in str(m["content"])]
    assert len(earlier) == 1
    assert isinstance(earlier[0]["content"], str)
    assert "[image: image/png 800x600]" in earlier[0]["content"]
    assert "[file: log.pdf application/pdf]" in earlier[0]["content"]
    assert history[-1] == {"role": "user", "content": "Is it an error?"}


def test_an_image_reaches_an_anthropic_upstream_intact(loom_factory) -> None:
    loom = loom_factory(window=12000)  # a Claude window keeps a margin for its estimate
    loom.wire.script(anthropic_text("A dialog box."))
    client = loom.openai(ACME_KEY)
    reply = client.chat.completions.create(
        model="claude-test", messages=[image_turn()], user="claude-eyes"
    )
    assert reply.choices[0].message.content == "A dialog box."
    [last] = loom.wire.requests[0].body["messages"][-1:]
    assert last["role"] == "user"
    blocks = [{k: v for k, v in b.items() if k != "cache_control"} for b in last["content"]]
    assert blocks == [
        {"type": "text", "text": "What is wrong on this screen?"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": SCREENSHOT},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/error.jpg"}},
        {
            "type": "document",
            "title": "log.pdf",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
        },
    ]


def test_an_image_the_window_cannot_hold_is_refused_with_its_size(loom_factory) -> None:
    """Without the image the turn fits; the image (765 tokens at high detail, 1445 for the
    URL whose size is unknown) makes it larger than the window: a 400 naming the sizes,
    nothing sent upstream."""
    loom = loom_factory(window=1000)
    client = loom.openai(ACME_KEY)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="gpt-test", messages=[image_turn()], user="big")
    assert err.value.code == "context_length_exceeded"
    assert "the current turn needs" in str(err.value)
    assert "send fewer or smaller images and files (it holds 3;" in str(err.value)
    assert loom.wire.requests == []


def test_a_malformed_image_part_is_a_clear_400(loom) -> None:
    client = loom.openai(ACME_KEY)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="gpt-test",
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "file:///etc/x"}}],
                }
            ],
            user="bad",
        )
    assert "must be an http(s) URL or a base64 data URL" in str(err.value)
    assert loom.wire.requests == []


def test_a_claude_window_counts_images_by_anthropic_s_rule(loom_factory) -> None:
    """A 1092 x 1092 screenshot: 765 tokens by OpenAI's tiles, 1590 by Anthropic's rule. A
    window of 2000 (1280 for input as Loom counts Claude) holds it for an OpenAI model, not
    for Claude: the Claude request is refused, naming the size, nothing sent upstream."""
    loom = loom_factory(window=2000)
    loom.wire.script(openai_text("A chart."))
    client = loom.openai(ACME_KEY)
    turn = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What does it show?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png(1092, 1092)}"}},
        ],
    }
    client.chat.completions.create(model="gpt-test", messages=[turn], user="gpt")
    assert loom.wire.requests[0].body["messages"][-1] == turn
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="claude-test", messages=[turn], user="claude")
    assert err.value.code == "context_length_exceeded"
    needed = int(str(err.value).split("the current turn needs ")[1].split()[0])
    assert needed > 1590
    assert len(loom.wire.requests) == 1


def test_a_turn_of_only_an_image_is_sent(loom) -> None:
    """No text at all: the turn is still the window's last message, with its image."""
    loom.wire.script(openai_text("A cat."))
    turn = {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}],
    }
    reply = loom.openai(ACME_KEY).chat.completions.create(
        model="gpt-test", messages=[turn], user="only-an-image"
    )
    assert reply.choices[0].message.content == "A cat."
    assert loom.wire.requests[0].body["messages"][-1] == turn
