"""The web inspector's pages: server-rendered HTML, inline CSS and SVG, one small script.
This module holds the frame every page shares and the sessions, timeline and search pages;
one call's page is `loomctx.server._inspect_window`'s.

Every piece of window text (messages, tool output, retrieved text, prompts, session ids,
block ids and reasons) goes through `_e` (`html.escape`, quotes included) before it reaches
the page: it is untrusted data and must never run. The pages also carry a strict Content
Security Policy (`_inspect_auth.security_headers`: no script but the page's own, by nonce;
no request off the server), so an escaping slip would still not execute.

Colours: each source has a strong colour (bars, the left edge of its text) and a light tint
(the background of its text); text is always the dark ink on a tint, above WCAG AA contrast.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

from loomctx.context.billing import CachePrediction, ReportedUsage, unexpected_miss
from loomctx.context.report import ContextReport
from loomctx.server._inspect_data import Pricing, Row, SessionHits

__all__ = [
    "colours",
    "escape",
    "page",
    "quoted",
    "receipt",
    "search_page",
    "sessions_page",
    "timeline_page",
    "timeline_rows",
    "when",
]

_COLOURS: Final[Mapping[str, tuple[str, str]]] = {
    "system_prompt": ("#1f5fbf", "#e3edfc"),
    "tools": ("#7a45c9", "#efe6fb"),
    "skills": ("#b0327e", "#fbe5f2"),
    "user_input": ("#1a7a36", "#dff3e5"),
    "L1_recent": ("#8a5a00", "#fbf0d6"),
    "history": ("#8a5a00", "#fbf0d6"),
    "L2_important": ("#b24a00", "#fce6d6"),
    "L4_semantic": ("#0b7285", "#dcf1f4"),
    "unified_retrieval": ("#0b7285", "#dcf1f4"),
    "agent_output": ("#4f5861", "#eceff2"),
    "turn": ("#4f5861", "#eceff2"),
}
_SPARE: Final = (
    ("#a3332b", "#fbe4e2"),
    ("#2d6a4f", "#e0f1e8"),
    ("#5a4fcf", "#e9e7fb"),
    ("#7c5e10", "#f6efd9"),
)
OVERHEAD: Final = "#8c959f"
_INK: Final = "#1b1f24"

_CSS: Final = """
:root{color-scheme:light;--ink:#1b1f24;--muted:#505a64;--line:#d0d7de;--bg:#ffffff}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif}
body{color:var(--ink);background:var(--bg)}
header{display:flex;gap:1.5rem;align-items:center;padding:.6rem 1.2rem;background:#1b1f24}
header{color:#fff}header a{color:#fff}header form{margin-left:auto}
header .brand{font-weight:700;text-decoration:none}header button{border-color:#fff}
main{padding:1rem 1.2rem;max-width:1200px}
a{color:#0a4fb5}
h1{font-size:1.35rem;margin:.4rem 0 .8rem}
h2{font-size:1.1rem;margin:1.4rem 0 .5rem}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid var(--line)}
th,td{vertical-align:top}
th{font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:var(--muted)}
form.inline{display:flex;gap:.5rem;align-items:center;margin:.5rem 0 1rem;flex-wrap:wrap}
input[type=text],input[type=password],input[type=search]{font:inherit;padding:.3rem .5rem}
input[type=text],input[type=password],input[type=search]{border:1px solid #6e7781}
input[type=text],input[type=password],input[type=search]{border-radius:4px;min-width:16rem}
button{font:inherit;padding:.3rem .8rem;border:1px solid #1b1f24;border-radius:4px}
button{background:#1b1f24;color:#fff;cursor:pointer}
.bar{width:100%;height:30px;display:block}
td.barcell{width:55%}
.legend{display:flex;flex-wrap:wrap;gap:.4rem 1rem;margin:.3rem 0 .8rem;padding:0}
.legend{list-style:none}
.legend li{display:flex;align-items:center;gap:.35rem}
.swatch{display:inline-block;width:.9rem;height:.9rem;border-radius:2px}
.badge{display:inline-block;padding:0 .4rem;border-radius:3px;font-size:.85em}
.badge{border:1px solid currentColor}
.msg{border:1px solid var(--line);border-radius:6px;margin:.6rem 0;overflow:hidden}
.msg>h3{margin:0;font-size:.95rem;padding:.3rem .6rem;background:#f3f5f7}
.msg>h3{border-bottom:1px solid var(--line)}
.seg{white-space:pre-wrap;word-break:break-word;margin:0;padding:.4rem .6rem}
.seg{border-left:6px solid;font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,monospace}
.seg{color:var(--ink)}
.seg .src{display:block;font:600 12px system-ui,sans-serif;color:var(--ink);margin-bottom:.2rem}
.call{font:13px ui-monospace,monospace;padding:.3rem .6rem;background:#f6f8fa}
.status-dropped{color:#a3332b}.status-summarized{color:#7a45c9}.status-truncated{color:#8a5a00}
.diff li{margin:.2rem 0}
.presence{display:flex;gap:2px;flex-wrap:wrap;margin:.3rem 0}
.presence a{display:inline-block;min-width:2.4rem;text-align:center;font-size:12px}
.presence a{padding:.1rem .2rem;border-radius:3px;text-decoration:none;border:1px solid #6e7781}
.presence a{color:var(--ink)}
.presence a.in{background:#1a7a36;color:#fff;border-color:#1a7a36}
.presence a.out{background:#fbe4e2}
.live{font-size:.9em;color:var(--muted)}
details>summary{cursor:pointer}
pre.tools{white-space:pre-wrap;font:12px ui-monospace,monospace;background:#f6f8fa}
pre.tools{padding:.5rem}
"""

_SCRIPT: Final = """
(function(){
  var el=document.getElementById('live');
  if(!el||!window.EventSource){return;}
  var src=new EventSource(el.getAttribute('data-events'));
  var body=document.getElementById('rows');
  src.addEventListener('window',function(){
    var last=body.rows.length?body.rows[body.rows.length-1].getAttribute('data-seq'):'0';
    var url=el.getAttribute('data-rows')+'?after='+encodeURIComponent(last)+
      '&scale='+encodeURIComponent(body.getAttribute('data-scale'));
    fetch(url,{credentials:'same-origin'}).then(function(r){
      return r.ok?r.text():null;}).then(function(text){
      if(text===null){return;}
      body.insertAdjacentHTML('beforeend',text);
      el.textContent='updated '+new Date().toLocaleTimeString()+': '+body.rows.length+' calls';
    });
  });
  src.onerror=function(){el.textContent='live updates paused; retrying';};
})();
"""


def escape(value: object) -> str:
    """`value` as HTML text (quotes escaped too: safe in attributes)."""
    return html.escape(str(value), quote=True)


_e = escape


def quoted(value: str) -> str:
    """`value` as one segment of a URL path (every reserved character escaped)."""
    return quote(value, safe="")


_u = quoted


def colours(source: str) -> tuple[str, str]:
    """The strong colour and the tint of `source`."""
    if source == "framing":
        return OVERHEAD, "#f1f3f5"
    if source in _COLOURS:
        return _COLOURS[source]
    return _SPARE[sum(source.encode()) % len(_SPARE)]


_SIGN_OUT: Final = '<form method="post" action="{}/logout"><button>Sign out</button></form>'


def page(
    title: str, body: str, *, base: str, nonce: str, script: bool = False, signed_in: bool = True
) -> str:
    """A whole page: `body` (HTML already escaped) in the inspector's frame, with a sign-out
    button (a POST: a link or an image elsewhere cannot sign anyone out) when `signed_in`."""
    js = f'<script nonce="{_e(nonce)}">{_SCRIPT}</script>' if script else ""
    out = _SIGN_OUT.format(_e(base)) if signed_in else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_e(title)} · Loom inspector</title><style>{_CSS}</style></head><body>"
        f'<header><a class="brand" href="{_e(base)}">Loom inspector</a>'
        f'<nav aria-label="main"><a href="{_e(base)}">Sessions</a> · '
        f'<a href="{_e(base)}/search">Search</a></nav>{out}</header>'
        f"<main>{body}</main>{js}</body></html>"
    )


def when(stamp: object) -> str:
    """A stored time stamp as the pages show it (``2026-01-31 09:30:00``)."""
    return str(stamp or "")[:19].replace("T", " ")


def _billed(pricing: Pricing, cached: int, new: int) -> str:
    return pricing.label(pricing.billed(cached, new))


def receipt(predicted: CachePrediction | None, reported: ReportedUsage | None) -> str:
    """A call's cache receipt: predicted read / written / plain tokens, then what the
    provider reported, and a badge when its cache missed unexpectedly."""
    if predicted is None:
        return ""
    out = (
        f'<div class="muted receipt">predicted {predicted.cached:,} read · '
        f"{predicted.written:,} written · {predicted.plain:,} plain</div>"
    )
    if reported is None:
        return out + '<div class="muted receipt">reported: not known</div>'
    out += (
        f'<div class="muted receipt">reported {reported.cache_read:,} read · '
        f"{reported.cache_write:,} written of {reported.input:,}</div>"
    )
    if unexpected_miss(predicted.cached, reported):
        out += (
            '<span class="badge status-dropped" title="the provider read under half of the '
            'tokens predicted cached">cache miss</span>'
        )
    return out


# --- sessions -------------------------------------------------------------------------------


def sessions_page(
    sessions: Sequence[Mapping[str, Any]],
    *,
    base: str,
    nonce: str,
    query: str,
    pricing: Pricing,
    tenant: str | None,
) -> str:
    """The sessions list, filtered by `query` (a substring of the id or the model)."""
    needle = query.strip().casefold()
    shown = [
        s
        for s in sessions
        if not needle or needle in f"{s['session']} {s.get('model', '')}".casefold()
    ]
    rows = []
    for s in reversed(shown):  # the most recent first
        tokens, new = int(s.get("tokens", 0)), int(s.get("new_tokens", s.get("tokens", 0)))
        href = f"{base}/s/{_u(s['session'])}"
        rows.append(
            f'<tr><td><a href="{_e(href)}">{_e(s["session"])}</a></td>'
            f"<td>{_e(s.get('model') or '')}</td>"
            f'<td class="num">{int(s.get("turns", 0))}</td>'
            f'<td class="num">{int(s.get("windows", 0))}</td>'
            f'<td class="num">{tokens:,}</td>'
            f'<td class="num">{_e(_billed(pricing, tokens - new, new))}</td>'
            f"<td>{_e(when(s.get('last_at')))}</td></tr>"
        )
    who = f" of tenant {_e(tenant)}" if tenant else ""
    table = (
        f"<table><caption class='muted'>{len(shown)} of {len(sessions)} sessions{who}; "
        f"cost so far under {_e(pricing.name)} prompt-cache pricing (input only)</caption>"
        "<thead><tr><th scope='col'>session</th><th scope='col'>model</th>"
        "<th scope='col' class='num'>turns</th><th scope='col' class='num'>calls</th>"
        "<th scope='col' class='num'>prompt tokens</th><th scope='col' class='num'>cost</th>"
        "<th scope='col'>last call</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        if sessions
        else "<p>No saved windows yet: run an agent (`loomctx chat`, or a client through "
        "`loomctx serve`) and its calls appear here.</p>"
    )
    body = (
        "<h1>Sessions</h1>"
        f'<form class="inline" method="get" action="{_e(base)}" role="search">'
        '<label for="q">Filter sessions</label>'
        f'<input type="search" id="q" name="q" value="{_e(query)}">'
        "<button type='submit'>Filter</button></form>"
        f'<form class="inline" method="get" action="{_e(base)}/search" role="search">'
        '<label for="text">Which calls contained this text?</label>'
        '<input type="search" id="text" name="q"><button type="submit">Search</button></form>'
        f"{table}"
    )
    return page("Sessions", body, base=base, nonce=nonce)


# --- a session's timeline -------------------------------------------------------------------


def _bar(report: ContextReport, scale: int, label: str) -> str:
    """One call as a stacked bar: each source's tokens, the framing, the budget line, the
    output reserve, the cached prefix underneath, and a compaction mark."""
    width = 1000.0 / max(1, scale)
    x = 0.0
    parts = []
    described = []
    for s in report.sources:
        if s.used <= 0:
            continue
        w = s.used * width
        strong, _ = colours(s.name)
        parts.append(
            f'<rect class="seg" data-source="{_e(s.name)}" data-tokens="{s.used}" '
            f'x="{x:.2f}" y="2" width="{w:.2f}" height="18" fill="{strong}">'
            f"<title>{_e(s.name)}: {s.used:,} tokens</title></rect>"
        )
        described.append(f"{s.name} {s.used:,}")
        x += w
    overhead = report.token_count - sum(s.used for s in report.sources)
    if overhead > 0:
        w = overhead * width
        parts.append(
            f'<rect class="seg" data-source="framing" data-tokens="{overhead}" x="{x:.2f}" '
            f'y="2" width="{w:.2f}" height="18" fill="{OVERHEAD}">'
            f"<title>framing: {overhead:,} tokens</title></rect>"
        )
        x += w
    avail = report.available * width
    end = report.window * width
    parts.append(
        f'<rect class="reserve" x="{avail:.2f}" y="2" width="{max(0.0, end - avail):.2f}" '
        'height="18" fill="url(#hatch)" stroke="#6e7781" stroke-width="1">'
        f"<title>output reserve: {report.output_reserve:,} tokens</title></rect>"
        f'<line class="budget" x1="{avail:.2f}" x2="{avail:.2f}" y1="0" y2="30" '
        'stroke="#a3332b" stroke-width="3"><title>input budget: '
        f"{report.available:,} tokens</title></line>"
    )
    if report.reused_prefix_tokens:
        cw = report.reused_prefix_tokens * width
        parts.append(
            f'<rect class="cached" data-tokens="{report.reused_prefix_tokens}" x="0" y="23" '
            f'width="{cw:.2f}" height="6" fill="#1b1f24"><title>cached prefix: '
            f"{report.reused_prefix_tokens:,} tokens</title></rect>"
        )
    aria = (
        f"call {label}: {report.token_count:,} of {report.available:,} input tokens "
        f"({report.reused_prefix_tokens:,} cached); " + ", ".join(described)
    )
    hatch = (
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f3f5f7"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#8c959f" stroke-width="2"/></pattern></defs>'
    )
    return (
        f'<svg class="bar" role="img" aria-label="{_e(aria)}" viewBox="0 0 1000 30" '
        f'preserveAspectRatio="none" data-scale="{scale}" data-tokens="{report.token_count}">'
        f"{hatch}{''.join(parts)}</svg>"
    )


def timeline_rows(
    rows: Sequence[Row], *, base: str, session: str, pricing: Pricing, scale: int = 0
) -> str:
    """The timeline table's rows (also what the live script fetches: the new ones only,
    drawn to the page's `scale`, the largest window shown)."""
    scale = max([scale, *(r.report.window for r in rows)]) or 1
    out = []
    for r in rows:
        rep = r.report
        href = f"{base}/s/{_u(session)}/w/{r.turn}/{r.call}"
        marks = []
        for n in rep.compactions:
            marks.append(
                f'<span class="badge" title="{_e(n.reason)}">{_e(n.action)} '
                f"{n.tokens_before:,}→{n.tokens_after:,}</span>"
            )
        dropped = len(rep.dropped)
        if dropped:
            marks.append(f'<span class="badge status-dropped">{dropped} left out</span>')
        out.append(
            f'<tr class="call-row" data-turn="{r.turn}" data-call="{r.call}" data-seq="{r.seq}">'
            f'<td><a href="{_e(href)}">call {_e(r.label)}</a>'
            f'<div class="muted">{_e(r.prompt[:80])}</div></td>'
            f'<td class="barcell">{_bar(rep, scale, r.label)}</td>'
            f'<td class="num">{rep.token_count:,}<div class="muted">'
            f"{rep.reused_prefix_tokens:,} repeated</div>"
            f"{receipt(r.predicted, r.reported)}</td>"
            f'<td class="num">{_e(pricing.label(r.billed))}</td>'
            f"<td>{' '.join(marks)}</td></tr>"
        )
    return "".join(out)


def _legend(names: Iterable[str]) -> str:
    items = [
        f'<li><span class="swatch" style="background:{colours(n)[0]}" aria-hidden="true">'
        f"</span>{_e(n)}</li>"
        for n in names
    ]
    items.append(
        f'<li><span class="swatch" style="background:{OVERHEAD}" aria-hidden="true"></span>'
        "framing</li>"
        '<li><span class="swatch" style="background:#a3332b" aria-hidden="true"></span>'
        "input budget line</li>"
        '<li><span class="swatch" style="background:#f3f5f7;border:1px solid #6e7781" '
        'aria-hidden="true"></span>output reserve</li>'
        '<li><span class="swatch" style="background:#1b1f24" aria-hidden="true"></span>'
        "cached prefix (underline)</li>"
    )
    return f'<ul class="legend" aria-label="legend">{"".join(items)}</ul>'


def timeline_page(
    session: Mapping[str, Any],
    rows: Sequence[Row],
    *,
    base: str,
    nonce: str,
    pricing: Pricing,
) -> str:
    """A session's timeline: one row and one bar per model call, newest last, live."""
    name = str(session["session"])
    sources = list(dict.fromkeys(s.name for r in rows for s in r.report.sources if s.used))
    total = sum(r.billed for r in rows)
    scale = max((r.report.window for r in rows), default=1)
    href = f"{base}/s/{_u(name)}"
    body = (
        f"<h1>Session {_e(name)}</h1>"
        f'<p class="muted">{int(session.get("turns", 0))} turns, {len(rows)} model calls, '
        f"{sum(r.report.token_count for r in rows):,} prompt tokens, "
        f"{_e(pricing.label(total))} under {_e(pricing.name)} prompt-cache pricing.</p>"
        f"{_legend(sources)}"
        "<table><caption class='muted'>One row per model call: tokens by source against "
        "the input budget and the output reserve</caption><thead><tr>"
        "<th scope='col'>call</th><th scope='col'>window</th>"
        "<th scope='col' class='num'>tokens</th><th scope='col' class='num'>billed</th>"
        "<th scope='col'>notes</th></tr></thead>"
        f'<tbody id="rows" data-scale="{scale}">'
        f"{timeline_rows(rows, base=base, session=name, pricing=pricing, scale=scale)}"
        "</tbody></table>"
        f'<p id="live" class="live" role="status" aria-live="polite" '
        f'data-events="{_e(href)}/events?seen={int(session.get("windows", 0))}" '
        f'data-rows="{_e(href)}/rows">'
        "live: new calls appear here as they are made</p>"
    )
    return page(f"Session {name}", body, base=base, nonce=nonce, script=True)


# --- search ---------------------------------------------------------------------------------


def search_page(query: str, hits: Sequence[SessionHits] | None, *, base: str, nonce: str) -> str:
    """Which calls contained a text, and when it left the window."""
    form = (
        "<h1>Search the windows</h1>"
        f'<form class="inline" method="get" action="{_e(base)}/search" role="search">'
        '<label for="q">Text the model saw</label>'
        f'<input type="search" id="q" name="q" value="{_e(query)}">'
        "<button type='submit'>Search</button></form>"
    )
    if hits is None:
        return page("Search", form, base=base, nonce=nonce)
    if not hits:
        return page(
            "Search",
            form + f"<p>No saved call's window contained {_e(repr(query))}.</p>",
            base=base,
            nonce=nonce,
        )
    parts = [form, f"<p>{sum(len(h.present) for h in hits)} call(s) contained it.</p>"]
    for h in hits:
        session = f"{base}/s/{_u(h.session)}"
        inside = {(t, c) for t, c, _ in h.present}
        cells = "".join(
            f'<a class="{"in" if (t, c) in inside else "out"}" href="{_e(session)}/w/{t}/{c}" '
            f'aria-label="call {t}.{c}: {"contained it" if (t, c) in inside else "did not"}"'
            f">{t}.{c}</a>"
            for t, c in h.calls
        )
        notes = [
            f'left the window at <a href="{_e(session)}/w/{t}/{c}">call {t}.{c}</a> ({_e(why)})'
            for t, c, why in h.left
        ]
        at_end = h.present[-1][:2] == h.calls[-1]
        notes.append("in the window at the last call" if at_end else "not at the last call")
        left = "; ".join(notes)
        first = h.present[0]
        parts.append(
            f'<section class="hits" aria-labelledby="h-{_e(h.session)}">'
            f'<h2 id="h-{_e(h.session)}">Session <a href="{_e(session)}">{_e(h.session)}</a></h2>'
            f"<p>In {len(h.present)} of {len(h.calls)} calls, first in call "
            f"{first[0]}.{first[1]} ({_e(first[2])} message); {left}.</p>"
            f'<div class="presence">{cells}</div></section>'
        )
    return page("Search", "".join(parts), base=base, nonce=nonce)
