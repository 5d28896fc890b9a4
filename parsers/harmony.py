"""gpt-oss output (the Harmony format) as a stream: reasoning, content and tool calls by channel.

Theory of operation
-------------------
vLLM 0.33 parses gpt-oss output token by token with openai_harmony's `StreamableParser` and
turns each completed message into a part of the answer (`vllm/parser/harmony.py`):

    <|channel|>analysis<|message|>...<|end|>                           -> reasoning
    <|start|>assistant<|channel|>final<|message|>...<|return|>         -> content
    <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{..}<|call|>
                                                                       -> tool call NAME

Parts of one kind are joined with "\n"; empty reasoning/content parts are skipped; tool
arguments are `json.dumps(json.loads(text))` unless the content type names no json (then the
text as is, and also when it is not JSON). A commentary message without recipient is content;
anything else (other recipients, other roles, unknown channels) is dropped.

Ours reads the decoded text (special tokens kept) with the shared marker lexer and one table
(`TABLE`: phase x token kind -> action, next phase; a marker a phase does not list is
text there), mirroring the parser's three states:

* HEAD: a header is read until `<|message|>` (every other token belongs to the header, as in
  strict Harmony). Then it is parsed exactly as openai_harmony does (`parse_header`): an
  error sends the parser to IDLE, as vLLM's (whose `HarmonyError` is swallowed token by
  token). The first header has the role preset to assistant (the prompt ends with
  `<|start|>assistant`) until a header parses.
* BODY: message text streams as it comes, to its kind; `<|end|>`, `<|return|>`, `<|call|>` or
  the end of the output completes the message.
* IDLE: between messages only `<|start|>` counts; vLLM's parser rejects (drops) the rest.
* RAW: header text over MAX_HEADER_CHARS is no header (a model ignoring the format): it and
  the rest of the output are content, what vLLM recovers when such an output ends inside
  its "header" (where it later drops text after a broken header, ours keeps it).

The output ending inside a header is vLLM's "recovered raw output": the text of every token
since the last completed message becomes a final-channel message. That text (broken headers
and `<|start|>` markers, never message bodies) is the only text the state keeps, bounded by
MAX_HEADER_CHARS; otherwise the state is the lexer's held partial marker, flags, and the JSON
writer of an in-flight call.

Where ours differs from vLLM (named in tests/parsers/test_harmony.py DIVERGENCES):

* Text, not tokens: a marker spelled by ordinary tokens (the model writing "<|end|>" as text)
  is a marker here, text for vLLM. Real outputs never do this; derender only has the text.
* Tool arguments stream canonically (`json.dumps`, ensure_ascii) while the model writes them.
  Arguments that turn out not to be JSON (cut by the end of the output, text after the value)
  keep their canonical text up to the fault followed by the raw text from there; vLLM's batch
  returns the raw text of the whole message. The well-formed outputs are equal byte for byte.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass

from parsers._base import make_tool_call_id
from parsers._events import (
    ContentDelta,
    Event,
    ReasoningDelta,
    ToolArgsDelta,
    ToolCallStart,
)
from parsers._state import JsonState
from parsers._text import MarkerSet
from parsers._whole_output import WholeOutputResult, collect
from parsers.tools._json_args import DONE, ERROR, MORE, JsonArgs, JsonArgsState

__all__ = [
    "HarmonyMachine",
    "HarmonyResult",
    "HarmonyState",
    "MAX_HEADER_CHARS",
    "parse_header",
    "HeaderError",
]

TEXT, EOS = "<text>", "<eos>"  # token kinds besides the markers (as parsers.tools._machine)
START, MESSAGE, END, RETURN, CALL = "<|start|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"
CHANNEL, CONSTRAIN = "<|channel|>", "<|constrain|>"

# Header text kept (a header, and broken ones since the last message: vLLM's recovery text).
# Real headers are under 100 characters.
MAX_HEADER_CHARS = 4096
# Whitespace after a complete JSON argument value, held until the call ends (json.loads
# accepts it; anything else after the value makes the arguments raw text).
MAX_ARGS_WS = 4096

HEAD, BODY, IDLE, RAW = "head", "body", "idle", "raw"
# Body kinds: what a message's text becomes.
REASONING, CONTENT, TOOL, IGNORE = "r", "c", "t", "i"

_ROLES = ("user", "assistant", "system", "developer", "tool")
# Rust's char::is_whitespace (Unicode White_Space), which openai_harmony trims with; Python's
# str.isspace also counts U+001C..U+001F.
_WS = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # fmt: skip
_ASCII_WS = re.compile(r"[ \t\n\x0c\r]+")  # split_ascii_whitespace
_CHANNEL_END = re.compile("[<" + re.escape(_WS) + "]")
_BUILTIN_TOOLS = ("python", "browser", "container")


class HeaderError(ValueError):
    """openai_harmony rejects this header (vLLM then drops the message)."""


@dataclass(frozen=True, slots=True)
class Header:
    role: str
    recipient: str | None
    channel: str | None
    content_type: str | None


def parse_header(text: str, preset_assistant: bool) -> Header:
    """openai_harmony's `parse_header_from_string` on a header's decoded text (strict)."""
    channel = None
    at = text.find(CHANNEL)
    if at >= 0:
        after = text[at + len(CHANNEL) :]
        match = _CHANNEL_END.search(after)
        end = match.start() if match else len(after)
        if end == 0:
            raise HeaderError("channel marker present but no channel value found in header")
        channel = after[:end]
        text = text[:at] + after[end:]
    text = text.strip(_WS)
    if CONSTRAIN in text:
        text = text.replace(CONSTRAIN, " " + CONSTRAIN).strip(_WS)
    parts = [p for p in _ASCII_WS.split(text) if p]
    if preset_assistant:
        role = "assistant"
    else:
        if not parts:
            raise HeaderError("message header did not contain a role")
        if parts[0] in _ROLES:
            role = parts[0]
        elif len(parts) > 1 or parts[0].startswith("to="):
            parts.pop(0)
            role = "tool"
        else:
            raise HeaderError(f"Unknown role: {parts[0]}")
    if parts and parts[0] == role:
        parts.pop(0)
    recipient = content_type = None
    if parts:
        count, last = len(parts), parts.pop()
        if last.startswith("to="):
            recipient = last[3:]
        elif count == 1:
            recipient = last
        else:
            content_type = last
            if parts:
                raw = parts.pop()
                recipient = raw[3:] if raw.startswith("to=") else raw
        if parts:
            raise HeaderError("unexpected tokens remaining in message header")
    return Header(role, recipient, channel, content_type)


def _normalize_recipient(recipient: str | None) -> str | None:
    """vLLM drops a `<|constrain|>` format older Harmony misparsed into the recipient."""
    if recipient is None:
        return None
    at = recipient.find(CONSTRAIN)
    return recipient if at < 0 else (recipient[:at].rstrip() or None)


def _is_function(recipient: str) -> bool:
    """vLLM's `is_function_recipient` for chat completions (bare names are functions)."""
    if not recipient or recipient.startswith("<|") or recipient == "assistant":
        return False
    if recipient.startswith("functions."):
        return len(recipient) > len("functions.")
    return recipient.split(".", 1)[0] not in _BUILTIN_TOOLS


def _kind(header: Header) -> tuple[str, str]:
    """(body kind, function name) of a message, as vLLM's `_SegmentType` decides it."""
    if header.role != "assistant":
        return IGNORE, ""
    recipient = _normalize_recipient(header.recipient)
    if recipient is not None and _is_function(recipient):
        return TOOL, recipient.removeprefix("functions.")
    if header.channel == "analysis":
        return REASONING, ""
    if header.channel == "final" or (header.channel == "commentary" and recipient is None):
        return CONTENT, ""
    return IGNORE, ""


@dataclass(frozen=True, slots=True)
class HarmonyState(JsonState):
    """tail: the lexer's held partial marker. phase: HEAD / BODY / IDLE. preset: the next
    header's role is preset to assistant. head: the header read so far. held: text since the
    last completed message before this header (broken headers, `<|start|>`). kind: the
    body's kind. raw_args: the call's arguments are text (not JSON, or a non-JSON content
    type). args: its JSON writer. ws: whitespace held after a complete JSON value. calls:
    tool calls started. said_r / said_c: a reasoning / content part was written (the next
    one starts with "\\n"). opened: this message wrote text."""

    tail: str = ""
    phase: str = HEAD
    preset: bool = True
    head: str = ""
    held: str = ""
    kind: str = IGNORE
    raw_args: bool = False
    args: JsonArgsState = JsonArgsState()
    ws: str = ""
    calls: int = 0
    said_r: bool = False
    said_c: bool = False
    opened: bool = False

    def __post_init__(self) -> None:
        if self.phase not in (HEAD, BODY, IDLE, RAW) or self.kind not in (REASONING, CONTENT, TOOL, IGNORE):
            raise ValueError("unknown phase or kind")
        if len(self.head) + len(self.held) > MAX_HEADER_CHARS or len(self.ws) > MAX_ARGS_WS:
            raise ValueError("header text over its limit")
        if len(self.tail) >= len(MESSAGE) or self.calls < 0:
            raise ValueError("malformed state")


_FIELDS = tuple(f.name for f in dataclasses.fields(HarmonyState))


class _Run:
    """Mutable scratch copy of a state while one delta is processed."""

    def __init__(self, machine: HarmonyMachine, state: HarmonyState, request_id: str) -> None:
        self.m = machine
        self.request_id = request_id
        self.f = {name: getattr(state, name) for name in _FIELDS}
        self.events: list[Event] = []

    def state(self) -> HarmonyState:
        return HarmonyState(**self.f)

    # -- header ------------------------------------------------------------------------------

    def header_text(self, text: str) -> None:
        self._hold("head", text)

    def begin(self, text: str) -> None:
        """`<|start|>` between messages: a header begins (the marker is recovery text)."""
        self._hold("held", text)

    def _hold(self, field: str, text: str) -> None:
        f = self.f
        if len(f["head"]) + len(f["held"]) + len(text) <= MAX_HEADER_CHARS:
            f[field] += text
            return
        # Not a header (a model ignoring the format): what vLLM would recover at the end of
        # the output is content now, and so is the rest of the output.
        spilled = f["held"] + f["head"] + text
        f.update(head="", held="", phase=RAW, opened=False)
        self._part(CONTENT, spilled)

    def raw(self, text: str) -> None:
        if text:
            self._part(CONTENT, text)

    def header_end(self, text: str) -> None:
        f = self.f
        try:
            header = parse_header(f["head"], f["preset"])
        except HeaderError:
            # vLLM's parser is back to expecting <|start|>; the header stays recovery text.
            f["held"] += f["head"]
            f["head"], f["phase"] = "", IDLE
            return
        kind, name = _kind(header)
        f.update(phase=BODY, preset=False, head="", held="", kind=kind, opened=False, ws="")
        if kind == TOOL:
            ctype = header.content_type
            f["raw_args"] = ctype is not None and "json" not in ctype
            f["args"] = self.m.json.start(name)
            index = f["calls"]
            f["calls"] = index + 1
            self.events.append(ToolCallStart(index, make_tool_call_id(self.request_id, index), name))

    # -- body --------------------------------------------------------------------------------

    def body(self, text: str) -> None:
        kind = self.f["kind"]
        if kind == TOOL:
            self._args(text)
        elif kind in (REASONING, CONTENT) and text:
            self._part(kind, text)

    def _part(self, kind: str, text: str) -> None:
        f = self.f
        said = "said_r" if kind == REASONING else "said_c"
        if not f["opened"]:
            if f[said]:
                text = "\n" + text
            f["opened"], f[said] = True, True
        self.events.append(ReasoningDelta(text) if kind == REASONING else ContentDelta(text))

    def _emit_args(self, text: str) -> None:
        if text:
            self.events.append(ToolArgsDelta(self.f["calls"] - 1, text))

    def _args(self, text: str) -> None:
        f = self.f
        if f["raw_args"]:
            self._emit_args(text)
            return
        args: JsonArgsState = f["args"]
        if args.status == DONE:
            ws = f["ws"] + text
            if not ws.strip(" \t\n\r") and len(ws) <= MAX_ARGS_WS:
                f["ws"] = ws
                return
            f["ws"], f["raw_args"] = "", True  # text after the value: raw from here
            self._emit_args(ws)
            return
        args, out, rest = self.m.json.feed(args, text)
        f["args"] = args
        if args.status == ERROR:
            out += self.m.json.held_raw(args) + (rest or "")
            f["raw_args"] = True
            self._emit_args(out)
            return
        self._emit_args(out)
        if args.status == DONE and rest:
            self._args(rest)

    def message_end(self, text: str) -> None:
        """An end marker or the end of the output completes the message."""
        f = self.f
        if f["kind"] == TOOL and not f["raw_args"]:
            args: JsonArgsState = f["args"]
            if args.status == MORE:
                args, out = self.m.json.end(args)
                if args.status != DONE:
                    out += self.m.json.held_raw(args)
                self._emit_args(out)
        f.update(phase=IDLE, kind=IGNORE, raw_args=False, args=JsonArgsState(), ws="", opened=False)

    def recover(self, text: str) -> None:
        """The output ended inside a header: vLLM's recovered raw output is a final message."""
        f = self.f
        recovered = f["held"] + f["head"]
        f.update(head="", held="", phase=IDLE)
        if recovered:
            f["opened"] = False
            self._part(CONTENT, recovered)
            f["opened"] = False


def _header_text(run: _Run, text: str) -> None:
    run.header_text(text)


def _begin(run: _Run, text: str) -> None:
    run.begin(text)


def _header_end(run: _Run, text: str) -> None:
    run.header_end(text)


def _body(run: _Run, text: str) -> None:
    run.body(text)


def _message_end(run: _Run, text: str) -> None:
    run.message_end(text)


def _recover(run: _Run, text: str) -> None:
    run.recover(text)


def _raw(run: _Run, text: str) -> None:
    run.raw(text)


def _drop(run: _Run, text: str) -> None:
    """Between messages vLLM's parser rejects every token but <|start|>."""


@dataclass(frozen=True, slots=True)
class Step:
    """What a (phase, token kind) does: the phase moves to `next` (None: stays), then `action`
    runs on the token's text."""

    action: Callable[[_Run, str], None]
    next: str | None = None


PHASES = (HEAD, BODY, IDLE, RAW)
MARKERS = (START, MESSAGE, END, RETURN, CALL)
LEXER = MarkerSet(MARKERS)
# A marker a phase does not list is text there (its TEXT step); every phase lists TEXT and EOS.
TABLE: dict[tuple[str, str], Step] = {
    (HEAD, TEXT): Step(_header_text),  # every other marker is header text too (strict)
    (HEAD, MESSAGE): Step(_header_end),
    (HEAD, EOS): Step(_recover),
    (BODY, TEXT): Step(_body),  # <|start|> and <|message|> are message text
    (BODY, END): Step(_message_end),
    (BODY, RETURN): Step(_message_end),
    (BODY, CALL): Step(_message_end),
    (BODY, EOS): Step(_message_end),
    (IDLE, TEXT): Step(_drop),
    (IDLE, START): Step(_begin, HEAD),
    (IDLE, EOS): Step(_drop),
    (RAW, TEXT): Step(_raw),  # markers included
    (RAW, EOS): Step(_drop),
}
assert all((phase, kind) in TABLE for phase in PHASES for kind in (TEXT, EOS))


def lookup(phase: str, kind: str) -> Step:
    step = TABLE.get((phase, kind))
    return step if step is not None else TABLE[(phase, TEXT)]


HarmonyResult = WholeOutputResult


class HarmonyMachine:
    """The Harmony parser (module docstring): immutable configuration, state in HarmonyState."""

    # vLLM's Harmony path needs both parsers; each keeps its own part.
    prefers_reasoning_side = False
    needs_auto_tools_alone = False

    @staticmethod
    def kept(reasoning_set: bool, tools_set: bool, include_reasoning: bool,
             tool_choice: object) -> tuple[bool, bool]:  # noqa: ARG004
        return reasoning_set and include_reasoning, tools_set

    def __init__(self, *, limit: int = 512 * 1024) -> None:
        self.json = JsonArgs(ascii_only=True, limit=limit)

    def initial_state(self) -> HarmonyState:
        return HarmonyState()

    @staticmethod
    def state_type() -> type[HarmonyState]:
        return HarmonyState

    def feed(self, state: HarmonyState, text: str, request_id: str) -> tuple[HarmonyState, list[Event]]:
        return self._step(state, text, request_id, final=False)

    def finish(self, state: HarmonyState, request_id: str) -> tuple[HarmonyState, list[Event]]:
        return self._step(state, "", request_id, final=True)

    def _step(
        self, state: HarmonyState, text: str, request_id: str, *, final: bool
    ) -> tuple[HarmonyState, list[Event]]:
        run = _Run(self, state, request_id)
        segments, tail = LEXER.split(state.tail + text, final=final)
        run.f["tail"] = tail
        for piece, is_marker in segments:
            step = lookup(run.f["phase"], piece if is_marker else TEXT)
            if step.next is not None:
                run.f["phase"] = step.next
            step.action(run, piece)
        if final:
            lookup(run.f["phase"], EOS).action(run, "")
        return run.state(), run.events

    def parse(self, text: str, request_id: str) -> HarmonyResult:
        state, events = self.feed(self.initial_state(), text, request_id)
        _, tail = self.finish(state, request_id)
        return collect([*events, *tail])
