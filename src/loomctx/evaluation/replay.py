"""What Loom would have saved on recorded traffic: a log of chat requests replayed offline.

`replay_log` reads a JSONL file of chat requests as gateways and SDK loggers record them, one
request per line: OpenAI's chat-completions shape (``model``, ``messages``, ``tools``) or
Anthropic's Messages shape (``system``, ``messages`` of content blocks), or OpenAI's Responses
shape (``instructions``, ``input`` items, function ``tools``), bare or wrapped as
``{"request": {...}}`` or ``{"body": {...}}``. A line it cannot read is reported with its
number and the reason, and the rest is replayed: one bad line does not hide a day of traffic.

Requests are grouped into conversations the way the proxy tells a session's history from its
new messages (`loomctx.context.turns`): a request whose messages extend an earlier request's
(same first message, and that request's last message in place) continues its conversation;
any other request starts one. Each conversation is then replayed through the one window
recipe as the proxy builds it (`loomctx.context.recipe`): what is new in each request is
recorded in a conversation memory (SQLite in a temporary folder, lexical search: no model,
no network), and the window for the request is built from it with the client's system
prompt, every tool, the turn's tool exchange and the user's turn.

Per call, both prompts are measured as `loomctx bench cost` measures them
(`loomctx.evaluation.cost`): tokens sent, tokens a provider's exact-prefix cache reads (the
leading part identical to the conversation's previous prompt) and billed input tokens under
each provider's cache (`loomctx.context.billing`, the ``billed_<name>`` pricings of
`loomctx.evaluation.cost.HEADLINE`): the client's prompt as a client marks it (one
breakpoint at its end), Loom's where Loom marks it (its dynamic tail after the last
breakpoint, at the plain price); and whether the prompt is longer than the model's context
window, which the provider would refuse. A request Loom cannot build a window for (the
client's tools alone do not fit it) is counted as the client sent it, as the proxy would
forward it, with a ``note``.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loomctx.context.block import BuildContext
from loomctx.context.orchestrator import LayoutState, repeated_prefix_tokens
from loomctx.context.recipe import memory_sources, window_orchestrator, window_sources
from loomctx.context.sources import TurnSource
from loomctx.context.turns import Split, message_digest, split_request
from loomctx.errors import ConfigError, LoomError, MissingExtraError
from loomctx.evaluation.cost import HEADLINE
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import tasks_from_messages
from loomctx.messages import (
    Message,
    from_anthropic,
    from_openai,
    responses_input_to_openai,
    split_units,
    to_openai,
    to_openai_tools,
    tool_spec,
)
from loomctx.stores.sqlite import SQLiteStore
from loomctx.tokens import TiktokenCounter, TokenCounter

__all__ = [
    "DEFAULT_WINDOW",
    "KNOWN_WINDOWS",
    "LoggedRequest",
    "NoRequestError",
    "Skipped",
    "group_conversations",
    "model_window",
    "plot_replay",
    "read_log",
    "replay_log",
]

DEFAULT_WINDOW = 128_000
"""The context window assumed for a model `KNOWN_WINDOWS` does not name."""

KNOWN_WINDOWS: Mapping[str, int] = {
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude": 200_000,
}
"""Context windows of well-known models, by the start of the model's name (longest first)."""

_INSTRUCTION_ROLES = frozenset({"system", "developer"})
_WRAPPERS = ("request", "body")


def model_window(model: str) -> int:
    """The context window of `model` from `KNOWN_WINDOWS`, else `DEFAULT_WINDOW`."""
    for prefix in sorted(KNOWN_WINDOWS, key=len, reverse=True):
        if model.lower().startswith(prefix):
            return KNOWN_WINDOWS[prefix]
    return DEFAULT_WINDOW


class NoRequestError(ConfigError):
    """A log holds no chat request that could be read: nothing to replay."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoggedRequest:
    """One request of the log, converted: its line, model, the client's system prompt, its
    conversation (OpenAI messages, no system ones), the prompt as sent, and its tools (in
    OpenAI's function format)."""

    line: int
    model: str
    system: str
    conversation: tuple[Mapping[str, Any], ...]
    sent: tuple[Message, ...]
    tools: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Skipped:
    """A line of the log that was not replayed, and why."""

    line: int
    reason: str


def _is_anthropic(request: Mapping[str, Any], messages: Sequence[Any]) -> bool:
    if "system" in request:
        return True
    for m in messages:
        content = m.get("content") if isinstance(m, Mapping) else None
        if isinstance(content, list) and any(
            isinstance(b, Mapping)
            and (b.get("type") in ("tool_use", "tool_result") or "source" in b)
            for b in content
        ):
            return True
    return False


def _holds_request(request: Mapping[str, Any]) -> bool:
    return "messages" in request or "input" in request


def _of_responses(request: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses API request (`instructions`, `input` items, flat function `tools`) as a
    chat-completions one. Built-in tools (web search, file search...) have no schema the
    client sends: they are left out. A request that continues a stored response
    (`previous_response_id`) holds only its new input: the log cannot say what came before."""
    if request.get("previous_response_id") is not None:
        raise ConfigError(
            "a Responses request with `previous_response_id` holds only its new `input`, not "
            "the conversation it continues; log requests that send their whole `input` (as "
            "with `store: false`) to replay them"
        )
    messages = responses_input_to_openai(request["input"])
    instructions = request.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    elif instructions is not None and not isinstance(instructions, str):
        raise ConfigError("`instructions` must be a string")
    tools = request.get("tools") or []
    if isinstance(tools, list):
        tools = [t for t in tools if isinstance(t, Mapping) and t.get("type") == "function"]
    return {"model": request.get("model"), "messages": messages, "tools": tools}


def _parse(line: int, raw: Any) -> LoggedRequest:
    """One decoded line as a request; `ConfigError` (a `MessageFormatError` for messages)
    naming what is wrong."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"expected a JSON object, got {type(raw).__name__}")
    request: Mapping[str, Any] = raw
    for key in _WRAPPERS:
        if not _holds_request(request) and isinstance(request.get(key), Mapping):
            request = request[key]
    if "messages" not in request and "input" in request:
        request = _of_responses(request)
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ConfigError(
            "no `messages` list nor Responses `input` (nor a `request` or `body` object "
            "holding one)"
        )
    model = request.get("model")
    model = model if isinstance(model, str) and model else "unknown"
    tools = request.get("tools") or []
    if not isinstance(tools, list):
        raise ConfigError("`tools` must be a list of tool schemas")
    for i, tool in enumerate(tools):
        try:
            tool_spec(tool)
        except ConfigError as exc:
            raise ConfigError(f"`tools[{i}]`: {exc}") from None
    if _is_anthropic(request, messages):
        sent = from_anthropic(messages, system=request.get("system"))
    else:
        if any(not isinstance(m, Mapping) for m in messages):
            raise ConfigError("every message must be a JSON object with a `role`")
        sent = from_openai(messages)
    talk = [m for m in sent if m.role not in _INSTRUCTION_ROLES]
    if not talk:
        raise ConfigError("only system messages: no conversation to replay")
    split_units(talk)  # tool calls and their results pair up, as the proxy requires
    return LoggedRequest(
        line=line,
        model=model,
        system="\n\n".join(m.content for m in sent if m.role in _INSTRUCTION_ROLES and m.content),
        conversation=tuple(to_openai(talk)),
        sent=tuple(sent),
        tools=tuple(to_openai_tools(tools)),
    )


def read_log(path: str | Path) -> tuple[list[LoggedRequest], list[Skipped]]:
    """The requests of the JSONL file at `path`, read a line at a time, and the lines
    skipped (blank lines are neither). `ConfigError` if the file cannot be opened."""
    requests: list[LoggedRequest] = []
    skipped: list[Skipped] = []
    try:
        with Path(path).open("rb") as lines:
            for number, raw in enumerate(lines, start=1):
                try:
                    line = raw.decode("utf-8")
                    if line.strip():
                        requests.append(_parse(number, json.loads(line)))
                except UnicodeDecodeError as exc:
                    skipped.append(Skipped(line=number, reason=f"not UTF-8: {exc.reason}"))
                except json.JSONDecodeError as exc:
                    reason = f"not JSON: {exc.msg} at column {exc.colno}"
                    skipped.append(Skipped(line=number, reason=reason))
                except (LoomError, RecursionError) as exc:
                    skipped.append(Skipped(line=number, reason=str(exc)))
    except OSError as exc:
        raise ConfigError(f"cannot read the log {str(path)!r}: {exc.strerror}") from None
    return requests, skipped


@dataclass(slots=True)
class _Marks:
    """What a conversation has recorded: its count of messages, the first's and the last's
    fingerprints (as the proxy keeps them per session)."""

    count: int = 0
    first: str = ""
    last: str = ""

    def split(self, conversation: Sequence[Mapping[str, Any]]) -> Split:
        return split_request(conversation, count=self.count, first=self.first, last=self.last)

    def advance(self, split: Split) -> None:
        self.count, self.first, self.last = split.total, split.first, split.last


def group_conversations(requests: Sequence[LoggedRequest]) -> list[list[LoggedRequest]]:
    """`requests` grouped into conversations, in the log's order: a request whose messages
    extend an earlier request's continues the conversation of the longest such one (the
    latest, among equals); any other request starts a conversation."""
    groups: list[list[LoggedRequest]] = []
    marks: list[_Marks] = []
    by_first: dict[str, list[int]] = {}  # only a conversation that starts alike may continue
    for request in requests:
        conversation = request.conversation
        head = message_digest(from_openai(conversation[:1])[0]) if conversation else ""
        best = None
        for k in reversed(by_first.get(head, [])):
            m = marks[k]
            if m.count > len(conversation) or (best is not None and m.count <= marks[best].count):
                continue
            if not m.split(conversation).diverged:
                best = k
        if best is None:
            best = len(groups)
            groups.append([])
            marks.append(_Marks())
            by_first.setdefault(head, []).append(best)
        groups[best].append(request)
        marks[best].advance(marks[best].split(conversation))
    return groups


@dataclass(frozen=True, slots=True, kw_only=True)
class _Prompt:
    """One prompt as a provider bills it."""

    sent: int
    cached: int
    over_window: bool
    marks: tuple[int, ...] = ()  # sizes up to each cache breakpoint
    previous_marks: tuple[int, ...] = ()  # the conversation's previous prompt's

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sent": self.sent, "cached": self.cached}
        for name, pricing in HEADLINE.items():
            split = pricing.predict(
                tokens=self.sent,
                reused=self.cached,
                marks=self.marks,
                previous_marks=self.previous_marks,
            )
            out[f"billed_{name}"] = round(pricing.bill(split), 1)
        out["over_window"] = self.over_window
        return out


async def _replay(
    requests: Sequence[LoggedRequest],
    name: str,
    window: int | None,
    output_reserve: float,
    counter: TokenCounter,
    folder: Path,
) -> list[dict[str, Any]]:
    """Each request of one conversation as sent and through Loom."""
    store = SQLiteStore(folder / "replay.db")
    # Lexical: a replay must build the same windows however fast a background thread embeds.
    memory = LoomMemory(name, store=store, counter=counter, embedder=None)
    sources = memory_sources(memory)
    layout = LayoutState()
    marks = _Marks()
    turn = ""
    calls: list[dict[str, Any]] = []
    sent_before: tuple[Sequence[Message], Sequence[Mapping[str, Any]]] | None = None
    loom_before: tuple[Sequence[Message], Sequence[Mapping[str, Any]]] | None = None
    client_at: tuple[int, ...] = ()
    loom_at: tuple[int, ...] = ()
    try:
        for request in requests:
            size = window or model_window(request.model)
            split = marks.split(request.conversation)
            marks.advance(split)
            # A request that repeats its turn (a retry) is that turn again, as in the proxy's
            # ledger: its user message is the window's turn, not history as well.
            if not turn or split.known <= split.turn_start < split.total:
                turn = "t_" + uuid.uuid4().hex
            old = tasks_from_messages(list(split.before_turn), agent="assistant", session_id=name)
            now = tasks_from_messages(list(split.current), agent="assistant", session_id=name)
            memory.add_tasks(
                [*old, *(t.evolve(metadata={**t.metadata, "run_id": turn}) for t in now)]
            )
            tools = list(request.tools)
            client = _measure(counter, sent_before, list(request.sent), tools, size, (), client_at)
            client_at = (client.sent,)  # a client marks the end of its prompt
            sent_before = (request.sent, tools)
            call: dict[str, Any] = {"line": request.line, "model": request.model, "window": size}
            try:
                built = await _build(
                    request, split, turn, sources, layout, counter, size, output_reserve
                )
            except LoomError as exc:  # the proxy would forward the request as sent
                call["note"] = f"sent as is: {exc}"
                loom = client
            else:
                loom = _measure(counter, loom_before, built[0], built[1], size, built[2], loom_at)
                loom_before, loom_at = (built[0], built[1]), built[2]
            memory.promote_tasks()
            calls.append({**call, "client": client.to_dict(), "loom": loom.to_dict()})
    finally:
        memory.close()
        store.close()
    return calls


def _measure(
    counter: TokenCounter,
    previous: tuple[Sequence[Message], Sequence[Mapping[str, Any]]] | None,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]],
    window: int,
    marks: tuple[int, ...],
    previous_marks: tuple[int, ...],
) -> _Prompt:
    """A prompt measured against the conversation's `previous` one; `marks` its sizes up to
    each cache breakpoint (none: one at its end, as a client marks it)."""
    sent = counter.count_messages(messages, tools=tools)
    cached = repeated_prefix_tokens(counter, previous, messages, tools)
    return _Prompt(
        sent=sent,
        cached=cached,
        over_window=sent > window,
        marks=marks or (sent,),
        previous_marks=previous_marks,
    )


async def _build(
    request: LoggedRequest,
    split: Split,
    turn: str,
    sources: Sequence[Any],
    layout: LayoutState,
    counter: TokenCounter,
    window: int,
    output_reserve: float,
) -> tuple[list[Message], list[Mapping[str, Any]], tuple[int, ...]]:
    """The window the proxy would send for `request` (see `ChatProxy._build`), and its sizes
    up to each cache breakpoint."""
    in_flight = TurnSource()
    for unit in split_units(list(split.in_flight)):
        in_flight.add(unit.messages)
    orchestrator = window_orchestrator(
        window_sources(
            request.system,
            tools=request.tools,
            always=[tool_spec(t)[0] for t in request.tools],
            memory=sources,
            turn=in_flight,
            user=split.turn_message,
        ),
        counter=counter,
        window=window,
        output_reserve_ratio=output_reserve,
        state=layout,
    )
    ctx = BuildContext(session_id="replay", agent_id="replay", metadata={"run_id": turn})
    asked = bool(split.in_flight) and split.in_flight[-1].role == "assistant"
    built = await orchestrator.build(query=split.query, ctx=ctx, prefill=asked)
    if len(built.tools) != len(request.tools):
        raise ConfigError(f"the client's {len(request.tools)} tools do not all fit the window")
    return list(built.messages), list(built.tools), built.report.cache_marks


def _total(calls: Sequence[Mapping[str, Any]], side: str) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": len(calls)}
    for key in ("sent", "cached", *(f"billed_{p}" for p in HEADLINE)):
        out[key] = round(sum(c[side][key] for c in calls), 1)
    out["over_window"] = sum(c[side]["over_window"] for c in calls)
    return out


def replay_log(
    path: str | Path, *, window: int | None = None, output_reserve: float = 0.2
) -> dict[str, Any]:
    """Replay the log at `path` (module docstring) at a `window`-token context window (by
    default each request's model's, `model_window`), an `output_reserve` share of it kept for the
    reply as the proxy keeps it. Returns ``{"calls": [...], "conversations": [...],
    "total": {"client": {...}, "loom": {...}, "saved": {...}}, "skipped": [...],
    "config": {...}}``. `NoRequestError` if no line of the log is a request."""
    if window is not None and (isinstance(window, bool) or window < 256):
        raise ConfigError(f"`window` must be at least 256 tokens, got {window!r}")
    if not 0 < output_reserve < 1:
        raise ConfigError(
            f"`output_reserve` must be a share of the window in (0, 1), got {output_reserve!r}"
        )
    requests, skipped = read_log(path)
    if not requests:
        why = "; ".join(f"line {s.line}: {s.reason}" for s in skipped[:5]) or "it is empty"
        raise NoRequestError(
            f"no chat request in {str(path)!r} ({why}); expected one JSON object a line in "
            "OpenAI's chat-completions or Anthropic's Messages request shape"
        )
    counter = TiktokenCounter()
    calls: list[dict[str, Any]] = []
    conversations: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="loomctx-replay-") as tmp:
        for i, group in enumerate(group_conversations(requests)):
            folder = Path(tmp) / str(i)
            folder.mkdir()
            own = asyncio.run(_replay(group, f"c{i}", window, output_reserve, counter, folder))
            calls += [{"conversation": i, **c} for c in own]
            conversations.append(
                {"conversation": i, "lines": [r.line for r in group], "calls": len(own)}
            )
    client, loom = _total(calls, "client"), _total(calls, "loom")
    saved = {
        key: round(1 - loom[key] / client[key], 4) if client[key] else 0.0
        for key in ("sent", *(f"billed_{p}" for p in HEADLINE))
    }
    return {
        "calls": calls,
        "conversations": conversations,
        "total": {"client": client, "loom": loom, "saved": saved},
        "skipped": [{"line": s.line, "reason": s.reason} for s in skipped],
        "config": {
            "path": str(path),
            "window": window,
            "output_reserve": output_reserve,
            "counter": counter.name,
        },
    }


def plot_replay(result: Mapping[str, Any], path: str | Path) -> None:
    """A PNG at `path`: tokens sent per call as the client sent them and through Loom, with
    the model's window and the input budget within it; billed tokens under each provider's
    prices, summed over the calls."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingExtraError(
            feature="`loomctx replay --plot`", extra="bench", module="matplotlib"
        ) from exc
    calls = result["calls"]
    xs = list(range(1, len(calls) + 1))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.2, 6.4), sharex=True)
    for side, label in (("client", "as sent"), ("loom", "through Loom")):
        top.plot(xs, [c[side]["sent"] for c in calls], marker=".", label=label)
        for provider in HEADLINE:
            running, total = [], 0.0
            for c in calls:
                total += c[side][f"billed_{provider}"]
                running.append(total)
            bottom.plot(xs, running, label=f"{provider}, {label}")
    share = 1 - result["config"]["output_reserve"]
    top.step(xs, [c["window"] for c in calls], where="mid", linestyle="--", label="window")
    budget = [c["window"] * share for c in calls]
    top.step(xs, budget, where="mid", linestyle=":", label="window less the reply's reserve")
    top.set_ylabel("tokens sent")
    top.set_title("Per call")
    top.legend()
    bottom.set_ylabel("billed input tokens, summed")
    bottom.set_xlabel("call (in the log's conversations, in order)")
    bottom.legend(fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as exc:
        raise ConfigError(f"cannot write the plot to {str(path)!r}: {exc.strerror}") from None
    finally:
        plt.close(fig)
