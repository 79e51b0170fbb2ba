"""The web inspector's page of one model call (`window_page`): its numbers, the sources'
shares, what was left out and why, what changed since the previous call, and the exact text
sent, message by message, coloured by the source each part came from.

Every piece of window text goes through `escape` before it reaches the page, as on every
page of the inspector (`loomctx.server._inspect_html`, whose frame and colours it uses).
"""

from __future__ import annotations

import json
import re
from typing import Final

from loomctx.context.render import CONTEXT_PREAMBLE, SUMMARY_PREAMBLE
from loomctx.context.report import ContextReport
from loomctx.messages import Message
from loomctx.server._inspect_data import Pricing, WindowDiff
from loomctx.server._inspect_html import colours, page, receipt, when
from loomctx.server._inspect_html import escape as _e
from loomctx.server._inspect_html import quoted as _u
from loomctx.session.windows import SavedWindow

__all__ = ["window_page"]


_FENCE: Final = re.compile(r'<context source="([^"]*)">\n(.*?)\n</context>', re.DOTALL)


def _segment(text: str, source: str) -> str:
    strong, tint = colours(source)
    return (
        f'<pre class="seg" data-source="{_e(source)}" style="border-color:{strong};'
        f'background:{tint}"><span class="src">{_e(source)}</span>{_e(text)}</pre>'
    )


def _message_sources(window: SavedWindow) -> list[str]:
    """Which source each message is attributed to, by the layout (DESIGN.md section 5.4):
    the system message to the instructions' source, the last plain user message to the
    user turn's, what follows it to the in-flight turn's, the rest to history's. Fenced
    reference data inside a message is coloured by the source its fence names."""
    by_section: dict[str, str] = {}
    for b in window.report.blocks:
        by_section.setdefault(b.section, b.source)
    plain_users = [
        i for i, m in enumerate(window.messages) if m.role == "user" and not _is_framed(m)
    ]
    last_user = plain_users[-1] if plain_users else len(window.messages)
    out = []
    for i, m in enumerate(window.messages):
        if _is_framed(m):
            out.append("framing")
        elif m.role == "system":
            out.append(by_section.get("instructions", "system_prompt"))
        elif i == last_user:
            out.append(by_section.get("user", "user_input"))
        elif i > last_user:
            out.append(by_section.get("turn", "turn"))
        else:
            out.append(by_section.get("history", "history"))
    return out


def _is_framed(m: Message) -> bool:
    """A message Loom wrote around fenced data: the dynamic tail, or the summary of what
    was compacted (its own words are framing; the fences inside name their sources)."""
    return m.role == "user" and m.content.startswith((CONTEXT_PREAMBLE, SUMMARY_PREAMBLE))


def _message(i: int, m: Message, source: str) -> str:
    title = m.role if m.role != "tool" else f"tool result ({m.name or m.tool_call_id or ''})"
    parts = []
    pos = 0
    for match in _FENCE.finditer(m.content):
        if m.content[pos : match.start()].strip():
            parts.append(_segment(m.content[pos : match.start()], source))
        parts.append(_segment(match.group(2), match.group(1)))
        pos = match.end()
    if m.content[pos:].strip() or not (m.content.strip() or m.tool_calls or parts):
        parts.append(_segment(m.content[pos:], source))
    for call in m.tool_calls:
        parts.append(f'<div class="call">→ {_e(call.name)}({_e(call.arguments_json())})</div>')
    return (
        f'<section class="msg" aria-labelledby="m{i}"><h3 id="m{i}">{i} · {_e(title)}</h3>'
        f"{''.join(parts)}</section>"
    )


def _left_out(report: ContextReport) -> str:
    blocks = [b for b in report.blocks if b.status != "kept"]
    if not report.blocks:
        return "<p>This report has no per-block detail (saved in its summary form).</p>"
    if not blocks:
        return "<p>Every offered block is in the window, whole.</p>"
    rows = "".join(
        f'<tr class="block status-{_e(b.status)}"><td>{_e(b.id)}</td><td>{_e(b.source)}</td>'
        f'<td class="status-{_e(b.status)}">{_e(b.status)}</td>'
        f'<td class="num">{b.offered_tokens:,}</td><td class="num">{b.used_tokens:,}</td>'
        f"<td>{_e(b.reason)}</td></tr>"
        for b in blocks
    )
    return (
        "<table id='left-out'><thead><tr><th scope='col'>block</th><th scope='col'>source</th>"
        "<th scope='col'>what happened</th><th scope='col' class='num'>offered</th>"
        "<th scope='col' class='num'>in window</th><th scope='col'>why</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _diff(diff: WindowDiff | None) -> str:
    if diff is None:
        return "<p>This is the session's first call: nothing to compare with.</p>"
    items = [f"<li><strong>Cache:</strong> {_e(diff.cause)}.</li>"]
    items.append(f"<li>{diff.same_messages} leading message(s) unchanged.</li>")
    if diff.tools_changed:
        items.append("<li>The tool schemas changed.</li>")
    for b in diff.added:
        items.append(f'<li class="added">added: <code>{_e(b)}</code></li>')
    for b in diff.removed:
        items.append(f'<li class="removed">no longer in the window: <code>{_e(b)}</code></li>')
    for b, before, after in diff.status_changed:
        items.append(
            f'<li class="changed">changed: <code>{_e(b)}</code> {_e(before)} → {_e(after)}</li>'
        )
    if diff.compacted:
        items.append("<li>History was compacted in this build.</li>")
    return f'<ul class="diff" id="diff" aria-label="changes">{"".join(items)}</ul>'


def window_page(
    window: SavedWindow,
    *,
    diff: WindowDiff | None,
    neighbours: tuple[str | None, str | None],
    base: str,
    nonce: str,
    pricing: Pricing,
) -> str:
    """One call: its numbers, what was left out and why, the diff against the previous call,
    and the exact text sent, message by message, coloured by source."""
    rep = window.report
    predicted = pricing.predict(rep)
    session = f"{base}/s/{_u(window.session)}"
    nav = [f'<a href="{_e(session)}">timeline</a>']
    prev, nxt = neighbours
    if prev:
        nav.append(f'<a href="{_e(session)}/w/{prev}" rel="prev">previous call</a>')
    if nxt:
        nav.append(f'<a href="{_e(session)}/w/{nxt}" rel="next">next call</a>')
    sources = "".join(
        f'<tr><td><span class="swatch" style="background:{colours(s.name)[0]}" '
        f'aria-hidden="true"></span> {_e(s.name)}</td><td class="num">{s.allocated:,}</td>'
        f'<td class="num">{s.offered:,}</td><td class="num">{s.used:,}</td>'
        f"<td>{_e(s.note or (s.error or ''))}</td></tr>"
        for s in rep.sources
    )
    kinds = _message_sources(window)
    messages = (
        "".join(_message(i, m, kinds[i - 1]) for i, m in enumerate(window.messages, 1))
        or "<p>This window was saved without its messages (an older version).</p>"
    )
    tools = ""
    if window.tools:
        names = ", ".join(
            str(t.get("name") or t.get("function", {}).get("name", "?")) for t in window.tools
        )
        tools = (
            f"<details><summary>{len(window.tools)} tool schema(s) sent: {_e(names)}</summary>"
            f'<pre class="tools">{_e(json.dumps(list(window.tools), indent=2))}</pre></details>'
        )
    body = (
        f"<h1>Session {_e(window.session)} · call {window.turn}.{window.call}</h1>"
        f'<nav aria-label="calls">{" · ".join(nav)}</nav>'
        f'<p class="muted">{_e(window.model or "model")} · {_e(when(window.saved_at))} · '
        f"{rep.token_count:,} of {rep.available:,} input tokens (window {rep.window:,}, "
        f"output reserve {rep.output_reserve:,}) · {rep.reused_prefix_tokens:,} repeated · "
        f"{_e(pricing.label(pricing.cache.bill(predicted)))}</p>"
        f"{receipt(predicted, window.usage)}"
        f"<p><strong>Prompt:</strong> {_e(window.prompt)}</p>"
        "<h2>Sources</h2><table><thead><tr><th scope='col'>source</th>"
        "<th scope='col' class='num'>allocated</th><th scope='col' class='num'>offered</th>"
        "<th scope='col' class='num'>used</th><th scope='col'>note</th></tr></thead>"
        f"<tbody>{sources}</tbody></table>"
        f"<h2>Left out, truncated or summarized</h2>{_left_out(rep)}"
        f"<h2>Changes since the previous call</h2>{_diff(diff)}"
        f"<h2>The exact text sent</h2>{tools}{messages}"
    )
    return page(f"{window.session} {window.turn}.{window.call}", body, base=base, nonce=nonce)
