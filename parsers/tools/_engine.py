"""vLLM 0.33's declarative parser engine (`vllm/parser/engine`) as a serialisable table machine.

Most 0.33 tool families are a `ParserEngineConfig`: terminals, a transition table
`(state, terminal) -> (next state, events)` and the event each state gives plain text. A
family here is the same data (`EngineSpec`), plus its argument format. This module turns the
spec into a `_machine.Table` and reproduces what vLLM's `ParserEngine` does with the events
when its tool adapter parses reasoning-free content (`extract_tool_calls_from_content`, the
batch path derender uses: text only, starting in CONTENT).

Events
------
* TEXT (content): before the first tool event it is content; after it, it is *deferred*:
  kept when no call slot is ever announced, dropped otherwise. vLLM announces a slot when it
  sends its name, which it does for any non-empty (and, with `validate_tool_names`, declared)
  name: the slot's own name text, or a `"name": "..."` found in its arguments.
* CALL_START opens a slot; NAME text is the slot's name; ARG text is argument text (marker
  literals included where the transition says so); CALL_END closes the slot.
* Reasoning text is dropped (this is the tool pass); markers without a transition are text of
  the current state; the tokenizer's other special tokens are dropped.
* End of output: an open slot is closed, as vLLM's `finish()` does.

Batch content (`_strip_content_whitespace` and `_events_to_delta`): with a call returned, the
content is stripped (`strip_content_ws_with_tools`) or, when it is only whitespace, dropped
(`drop_ws_only_content_before_tools`); with slots but no call, a whitespace-only content is
None; without slots the content is verbatim. tool_choice="none" with tools
(`suppress_calls`) ignores every tool event: all text outside call markup is content, verbatim.

Calls (`_build_extracted_result`): a slot with neither name nor arguments is skipped; the
name is stripped; a slot whose name is empty takes the name (and arguments) of its body read
as a `{"name", "arguments"}` JSON object; the arguments are the family's conversion of the
raw argument text ("{}" when blank), coerced to the tool's schema types; a name that is
empty (or undeclared, with `validate_tool_names`) drops the slot.

Streaming
---------
A named call commits when its name is complete (the slot leaves NAME): its id and name are
sent and its arguments stream through the family's `ArgFormat`. A slot without a usable name
holds its raw arguments (bounded by the tool-call limit) until a `"name": "..."` appears in
them, or decides at its end as the batch rule does. Content before the first tool event
streams, holding back what the whitespace rules may still drop: trailing whitespace
(stripping families), or a whitespace-only prefix. Content after it is held in `deferred`.

Under a reasoning parser that is not engine-based, vLLM's DelegatingParser keeps the content
verbatim when no call is made (`with_raw_without_calls`): the engine then also holds the raw
text after its first tool event, and streams the markers it would absorb in content.

Divergences from vLLM's batch (stream == our batch instead), each because the text had
already streamed before it could be known: (raw mode) an absorbed marker before a call stays
content; whitespace at the very start of the content,
followed by other content and then a returned call, is kept (vLLM strips it; its own stream
keeps it too); a held whitespace run longer than MAX_HELD_CHARS is streamed. The argument
formats document their own.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from parsers._base import MAX_HELD_CHARS, Vocab
from parsers._errors import StateError
from parsers._state import JsonState
from parsers.tools._base import is_json, json_dumps, json_loads
from parsers.tools._coerce import fix_arg_types, normalize_types, schema_types
from parsers.tools._coerce import tool_properties as _tool_properties
from parsers.tools._machine import (
    EOS,
    TEXT,
    CallState,
    Run,
    Step,
    Table,
    TableToolParser,
    ToolStreamState,
)

__all__ = [
    "S",
    "Ev",
    "Tr",
    "EngineSpec",
    "EngineExt",
    "EngineCall",
    "EngineToolParser",
    "WS",
    "name_in_args",
    "name_and_args_from_json",
    "emit_event",
    "engine_state_class",
    "string_only",
    "string_only_schema",
]


class S(enum.StrEnum):
    """vLLM's ParserState."""

    CONTENT = "content"
    REASONING = "reasoning"
    HEADER = "message_header"
    PREAMBLE = "tool_preamble"
    NAME = "tool_name"
    ARGS = "tool_args"
    BETWEEN = "tool_between"


TOOL_STATES = frozenset({S.PREAMBLE, S.NAME, S.ARGS, S.BETWEEN})
PLAIN_STATES = frozenset({S.CONTENT, S.REASONING})


class Ev(enum.Enum):
    """vLLM's EventType."""

    TEXT = "text"
    REASONING_START = "reasoning_start"
    REASONING = "reasoning"
    REASONING_END = "reasoning_end"
    CALL_START = "call_start"
    NAME = "name"
    ARG = "arg"
    CALL_END = "call_end"
    # Ours, not vLLM's: the grammar leaves the tool states with a slot open and no CALL_END.
    # vLLM's slot then stays open, unannounced (its name was never sent), and the batch
    # still returns it; no later event reaches it. Here it is closed without announcing.
    LEAVE = "leave"


TOOL_EVENTS = frozenset({Ev.CALL_START, Ev.NAME, Ev.ARG, Ev.CALL_END, Ev.LEAVE})
REASONING_EVENTS = frozenset({Ev.REASONING_START, Ev.REASONING_END})


@dataclass(frozen=True, slots=True)
class Tr:
    """A transition: the next state and the events it emits (each carries the marker)."""

    next: S
    events: tuple[Ev, ...] = ()


DEFAULT_CONTENT_EVENTS: Mapping[S, Ev] = {
    S.CONTENT: Ev.TEXT,
    S.REASONING: Ev.REASONING,
    S.NAME: Ev.NAME,
    S.ARGS: Ev.ARG,
}


@dataclass(frozen=True, eq=False)  # hashed by identity: tables are cached per spec
class EngineSpec:
    """One family's `ParserEngineConfig`, as far as tool extraction from content sees it."""

    terminals: Mapping[str, str | tuple[str, ...]]
    transitions: Mapping[tuple[S, str], Tr]
    content_events: Mapping[S, Ev] = field(default_factory=lambda: dict(DEFAULT_CONTENT_EVENTS))
    strip_content_ws_with_tools: bool = True
    drop_ws_only_content_before_tools: bool = True
    validate_tool_names: bool = False
    # Content after the first tool event is content, not deferred (Inkling's flush of the
    # engine's deferred content: text blocks may follow tool blocks).
    keeps_content_after_tools: bool = False
    # Special tokens that are not terminals but must not be dropped either.
    preserve_tokens: frozenset[str] = frozenset()

    def literal_terminals(self) -> dict[str, str]:
        """Every spelling of every terminal -> the terminal's name."""
        out: dict[str, str] = {}
        for name, value in self.terminals.items():
            for literal in (value,) if isinstance(value, str) else value:
                out[literal] = name
        return out

    def reasoning_markup(self) -> frozenset[str]:
        """Terminals `skip_reasoning_parsing` turns into text: vLLM's
        `_compute_reasoning_markup_terminals` (reasoning-exclusive markers only)."""
        markers = {
            terminal
            for (state, terminal), tr in self.transitions.items()
            if S.REASONING in (state, tr.next) and tr.next not in TOOL_STATES
        }
        for (state, terminal), tr in self.transitions.items():
            if terminal in markers and (
                state not in PLAIN_STATES
                or tr.next not in PLAIN_STATES
                or not REASONING_EVENTS.issuperset(tr.events)
            ):
                return frozenset()
        return frozenset(markers)


# -- state ---------------------------------------------------------------------------------


class Mode(enum.StrEnum):
    NAME = "name"  # reading the name
    ARGS = "args"  # committed: arguments stream through the format
    FIND = "find"  # empty name: raw arguments held in `raw` until a `"name": "..."` shows
    HOLD = "hold"  # blank name: raw arguments held in `raw`, decided at the end as JSON
    SKIP = "skip"  # dropped (an undeclared name): its text is ignored


@dataclass(frozen=True, slots=True)
class EngineCall(CallState):
    mode: Mode = Mode.NAME


@dataclass(frozen=True, slots=True)
class EngineExt(JsonState):
    """The engine's content bookkeeping (see the module docstring).

    ws:        whitespace held at the end of the content before the first tool event.
    nonws:     non-whitespace content was emitted.
    tool_seen: the first tool event happened (later content is deferred).
    deferred:  content after the first tool event, held until a slot is announced (then
               dropped) or the output ends (then kept).
    announced: a slot was announced.
    slots:     slots opened.
    raw:       `keeps_raw_without_calls` only: every character since the first tool event
               (markup included) while no slot is announced, the content if none ever is.
    """

    ws: str = ""
    nonws: bool = False
    tool_seen: bool = False
    deferred: str = ""
    announced: bool = False
    slots: int = 0
    raw: str = ""

    def held_chars(self) -> int:
        return len(self.ws) + len(self.deferred) + len(self.raw)


@dataclass(frozen=True, slots=True)
class EngineState(ToolStreamState):
    call_class: ClassVar[type[EngineCall]] = EngineCall  # narrowed per family's argument state
    call: EngineCall | None = None
    ext: EngineExt = EngineExt()


_STATE_CLASSES: dict[tuple[type, type], type[EngineState]] = {}


def engine_state_class(
    args_state: type[JsonState], ext_class: type[EngineExt] = EngineExt
) -> type[EngineState]:
    """The state class of a family whose argument format keeps `args_state` (and whose
    bookkeeping extends `EngineExt` as `ext_class`), built once per pair."""
    key = (args_state, ext_class)
    found = _STATE_CLASSES.get(key)
    if found is None:
        found = _STATE_CLASSES[key] = _make_state_class(args_state, ext_class)
    return found


def _make_state_class(args_state: type[JsonState], ext_class: type[EngineExt]) -> type[EngineState]:
    call = dataclasses.make_dataclass(
        f"EngineCall_{args_state.__name__}",
        [("args", args_state | None, dataclasses.field(default=None))],
        bases=(EngineCall,),
        frozen=True,
        slots=True,
    )
    state = dataclasses.make_dataclass(
        f"EngineState_{args_state.__name__}_{ext_class.__name__}",
        [("call", call | None, dataclasses.field(default=None)),
         ("ext", ext_class, dataclasses.field(default_factory=ext_class))],  # fmt: skip
        bases=(EngineState,),
        frozen=True,
        slots=True,
    )
    engine_state: type[EngineState] = state
    engine_state.call_class = call
    return engine_state


# -- the parser ----------------------------------------------------------------------------


class EngineToolParser(TableToolParser):
    """A family on vLLM's parser engine: subclasses set `name`, `spec` and `args_state`, and
    implement `arg_format(name)` (and may override the name hooks)."""

    spec: EngineSpec  # a class default; a family may pick its spec per instance
    args_state: ClassVar[type[JsonState]]
    state_class: type[EngineState]
    ext_class: ClassVar[type[EngineExt]] = EngineExt
    initial_phase: ClassVar[str] = S.CONTENT
    # The family's engine strips a slot's name text before deciding on it (GLM overrides
    # `_emit_name_delta` / `_handle_tool_end`): a name of only whitespace is then no name.
    strips_slot_name: ClassVar[bool] = False
    # Composed under a reasoning parser that is not engine-based, vLLM's DelegatingParser
    # returns the content verbatim (markup included) when no call is made: the engine then
    # keeps the raw text after its first tool event (`with_raw_without_calls`).
    keeps_raw_without_calls: bool = False

    def __init__(
        self,
        vocab: Vocab | None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        max_call_chars: int | None = None,
        special_tokens: Iterable[str] = (),
        skip_reasoning_parsing: bool = False,
    ) -> None:
        """`special_tokens`: the tokenizer's `all_special_tokens`, dropped from text like
        vLLM's engine drops special tokens that are not terminals. `skip_reasoning_parsing`:
        reasoning-exclusive markers are text, as vLLM's serving layer sets when no reasoning
        parser is configured."""
        super().__init__(vocab, tools, max_call_chars=max_call_chars)
        literals = self.spec.literal_terminals()
        drops = frozenset(special_tokens) - set(literals) - self.spec.preserve_tokens
        self.table = _build_table(self.spec, drops, skip_reasoning_parsing)
        self.state_class = engine_state_class(self.args_state, self.ext_class)
        self._tool_names = _tool_names(self.tools)
        self._properties: dict[str, Mapping[str, Any]] = {}

    @classmethod
    def state_type(cls) -> type[ToolStreamState]:
        return engine_state_class(cls.args_state, cls.ext_class)

    def with_raw_without_calls(self) -> EngineToolParser:
        """A copy whose content, when no slot is announced, is the text verbatim."""
        clone = copy.copy(self)
        clone.keeps_raw_without_calls = True
        return clone

    def tool_properties(self, name: str) -> Mapping[str, Any]:
        """The `properties` of tool `name`'s parameters ({} without tools: no coercion)."""
        found = self._properties.get(name)
        if found is None:
            found = _tool_properties(self.tools, name) if self.tools and name else {}
            if not isinstance(found, Mapping):
                found = {}
            self._properties[name] = found
        return found

    def coerce(self, args_json: str, name: str) -> str:
        """vLLM's `_fix_arg_types`: values coerced to the tool's schema types."""
        return fix_arg_types(args_json, name, self.tools)

    # -- family hooks ----------------------------------------------------------------------

    def batch_arguments(self, raw: str, name: str) -> str:
        """The batch rule for a call decided whole (held): the family's conversion of the
        raw argument text, before coercion. Default: run the format over it."""
        fmt = self.arg_format(name)
        state = fmt.start(name)
        state, out, _ = fmt.feed(state, raw)
        _, tail = fmt.end(state)
        return out + tail

    def body_name_and_args(self, raw: str) -> tuple[Any, str]:
        """vLLM's `_extract_name_and_args` of the family (its `_extract_args_value` keys)."""
        return name_and_args_from_json(raw)

    def commit_name(self, raw_name: str) -> str:
        """The name a slot's name text commits under (vLLM strips it)."""
        return raw_name.strip()

    def name_text(self, raw_name: str, closing: bool) -> str:
        """The slot's name text as vLLM keeps it when the slot leaves its name (`closing`:
        the slot ended before any argument text). Default: as read; a family whose engine
        resets an unusable name to "" (then found in the arguments) says so here."""
        return raw_name

    def own_call_id(self, raw_name: str) -> str | None:
        """The call id the format writes in the name text (None: a deterministic id)."""
        return None

    def announces(self, raw_name: str) -> bool:
        """Whether vLLM sends (announces) this name text when the slot leaves its name."""
        return self.accepts(raw_name)

    def closes_unnamed(self, raw_name: str) -> bool:
        """Whether a slot that ends without arguments is decided (vLLM's engine skips a slot
        with neither name nor arguments; a family that accepts every name says when)."""
        return True

    def accepts(self, name: str) -> bool:
        """vLLM's `_accept_tool_name`."""
        if not name:
            return False
        if not self.spec.validate_tool_names or not self.tools:
            return True
        return name in self._tool_names

    def check_ext(self, state: ToolStreamState) -> None:
        ext = state.ext
        if not isinstance(ext, EngineExt) or ext.slots < 0:
            raise StateError(f"{self.name}: bad engine state")
        if state.call is not None and state.phase not in TOOL_STATES:
            raise StateError(f"{self.name}: a call outside the tool states")

    def held_chars(self, state: ToolStreamState) -> int:
        ext = state.ext
        return super().held_chars(state) + (ext.held_chars() if isinstance(ext, EngineExt) else 0)


# What every engine action runs on: a machine run over an engine family's parser.
ERun: TypeAlias = Run[EngineToolParser]


# -- the table built from the spec ------------------------------------------------------------


@functools.cache
def _build_table(spec: EngineSpec, drops: frozenset[str], skip_reasoning: bool) -> Table:
    literals = spec.literal_terminals()
    neutral = spec.reasoning_markup() if skip_reasoning else frozenset()
    steps: dict[tuple[str, str], Step] = {}
    for state in S:
        steps[(state, TEXT)] = Step(_keeping_raw(_state_text))
        steps[(state, EOS)] = Step(_end_of_output)
        for literal in drops:
            steps[(state, literal)] = Step(_keeping_raw(_ignore, absorbs=True))
    for (state, terminal), tr in spec.transitions.items():
        if terminal in neutral:
            continue  # the marker stays text of the state
        absorbs = state == tr.next == S.CONTENT and not tr.events
        for literal, name in literals.items():
            if name == terminal:
                steps[(state, literal)] = Step(_keeping_raw(_transition(tr), absorbs=absorbs))
    return Table(tuple(S), (*literals, *drops), steps)


def _keeping_raw(
    action: Callable[[ERun, str], None], *, absorbs: bool = False
) -> Callable[[ERun, str], None]:
    """`keeps_raw_without_calls`: text after the first tool event is also kept raw, and a
    marker the engine absorbs in content before it (a stray `</think>`, a special token) is
    content, since the content is verbatim unless a call comes."""

    def step(run: ERun, text: str) -> None:
        if not run.parser.keeps_raw_without_calls:
            action(run, text)
            return
        if absorbs and not run.ext.tool_seen and not run.suppress:
            _content(run, text)
            return
        action(run, text)
        ext: EngineExt = run.ext
        if ext.tool_seen and not ext.announced:
            run.ext = ext.replace(raw=ext.raw + text)

    return step


def _ignore(run: ERun, text: str) -> None:
    """A special token that is no terminal: vLLM's engine drops it."""


def _state_text(run: ERun, text: str) -> None:
    _emit(run, run.parser.spec.content_events.get(S(run.phase)), text)


def _transition(tr: Tr) -> Callable[[ERun, str], None]:
    def apply(run: ERun, literal: str) -> None:
        run.phase = tr.next
        for event in tr.events:
            _emit(run, event, literal)

    return apply


def _end_of_output(run: ERun, text: str) -> None:
    """vLLM's `finish()`: an open slot is closed; then the content rules decide what is left."""
    if run.phase in TOOL_STATES:
        if run.ext.slots:
            _emit(run, Ev.CALL_END, "")
        run.phase = S.CONTENT
    elif run.phase == S.REASONING:
        run.phase = S.CONTENT
    _content_at_end(run)


# -- events ------------------------------------------------------------------------------------


def emit_event(run: ERun, event: Ev | None, value: str) -> None:
    """Apply one engine event (families with their own text handling feed events here)."""
    _emit(run, event, value)


def _emit(run: ERun, event: Ev | None, value: str) -> None:
    if event is None or event in REASONING_EVENTS or event is Ev.REASONING:
        return
    if event is Ev.TEXT:
        _content(run, value)
        return
    if run.suppress:
        return
    if not run.ext.tool_seen:
        run.ext = run.ext.replace(tool_seen=True)
    if event is Ev.CALL_START:
        _open_slot(run)
    elif event is Ev.NAME:
        _name_text(run, value)
    elif event is Ev.ARG:
        _arg_text(run, value)
    elif event is Ev.LEAVE:
        _close_slot(run, announce=False)
    else:
        _close_slot(run)


def _open_slot(run: ERun) -> None:
    if run.call is not None:  # vLLM starts a new slot; the old one stays as it is
        _close_slot(run)
    run.ext = run.ext.replace(slots=run.ext.slots + 1)
    run.call = run.parser.state_class.call_class()


def _slot(run: ERun) -> EngineCall:
    if run.call is None:  # ARG/NAME/END without a CALL_START: vLLM's slot -1 / fresh slot
        _open_slot(run)
    call: EngineCall = run.call
    return call


def _name_text(run: ERun, text: str) -> None:
    call = _slot(run)
    if call.mode is Mode.NAME:
        run.call = call.replace(name=call.name + text)


def _arg_text(run: ERun, text: str) -> None:
    call = _slot(run)
    if call.mode is Mode.NAME:
        call = _leave_name(run, call, closing=False)
    if call.mode is Mode.ARGS:
        _feed_args(run, call, text)
    elif call.mode is Mode.FIND and text:
        _find_name(run, call, text)
    elif call.mode is Mode.HOLD and text:
        run.call = call.replace(raw=call.raw + text)


def _leave_name(
    run: ERun, call: EngineCall, *, closing: bool, announce: bool = True
) -> EngineCall:
    """The slot's name is complete: commit, announce, or hold for a name in the body."""
    parser = run.parser
    raw = parser.name_text(call.name.strip() if parser.strips_slot_name else call.name, closing)
    name = parser.commit_name(raw)
    if announce and parser.announces(raw):
        _announce(run)
    if parser.accepts(name):
        return _commit(run, call, name, call_id=parser.own_call_id(raw))
    mode = Mode.SKIP if name else Mode.HOLD if raw else Mode.FIND
    call = call.replace(mode=mode)
    run.call = call
    return call


def _commit(
    run: ERun, call: EngineCall, name: str, replay: str = "", call_id: str | None = None
) -> EngineCall:
    parser = run.parser
    call = call.replace(name=name, mode=Mode.ARGS, raw="", args=parser.arg_format(name).start(name))
    run.call = call
    run.start_call(name, call_id)
    call = run.call
    if replay:
        _feed_args(run, call, replay)
    committed: EngineCall = run.call
    return committed


def _feed_args(run: ERun, call: EngineCall, text: str) -> None:
    fmt = run.parser.arg_format(call.name)
    args, out, _ = fmt.feed(call.args, text)
    run.call = call.replace(args=args)
    run.args(out)


def _find_name(run: ERun, call: EngineCall, text: str) -> None:
    """A nameless slot: vLLM takes the first `"name": "..."` of its arguments as its name
    (announced as found; the batch then strips it, and a blank one falls back to JSON)."""
    raw = call.raw + text
    parser = run.parser
    found = name_in_args(raw)
    if parser.strips_slot_name:
        found = found.strip()
    if not (found and parser.accepts(found)):
        run.call = call.replace(raw=raw)
        return
    _announce(run)
    name = found.strip()
    if parser.accepts(name):
        _commit(run, call.replace(raw=""), name, replay=raw)
    else:
        run.call = call.replace(raw=raw, mode=Mode.HOLD)


def _close_slot(run: ERun, announce: bool = True) -> None:
    call = run.call
    if call is None:
        return
    if call.mode is Mode.NAME:
        if not run.parser.closes_unnamed(call.name):
            run.call = None
            return
        call = _leave_name(run, call, closing=True, announce=announce)
    if call.mode is Mode.ARGS:
        fmt = run.parser.arg_format(call.name)
        _, out = fmt.end(call.args)
        run.args(out)
    elif call.mode in (Mode.FIND, Mode.HOLD) and call.raw.strip():
        _decide_held(run, call.raw, announce)
    run.call = None


def _decide_held(run: ERun, raw: str, announce: bool = True) -> None:
    """A slot without a usable name, at its end: the body as a `{"name", ...}` object."""
    parser = run.parser
    name, arguments = parser.body_name_and_args(raw)
    if isinstance(name, str) and parser.accepts(name):
        if announce:
            _announce(run)
        run.emit_call(name, parser.coerce(arguments, name))


def _announce(run: ERun) -> None:
    run.ext = run.ext.replace(announced=True, deferred="", raw="")


# -- content ---------------------------------------------------------------------------------


def _content(run: ERun, text: str) -> None:
    if not text:
        return
    ext: EngineExt = run.ext
    if run.suppress:
        run.content(text)
    elif ext.tool_seen and not run.parser.spec.keeps_content_after_tools:
        if not ext.announced and not run.parser.keeps_raw_without_calls:  # raw holds it
            run.ext = ext.replace(deferred=ext.deferred + text)
    else:
        _content_before_tools(run, ext, text)


def _content_before_tools(run: ERun, ext: EngineExt, text: str) -> None:
    """Stream, holding back what the whitespace rules may still drop (module docstring)."""
    spec = run.parser.spec
    if not spec.strip_content_ws_with_tools and (ext.nonws or not spec.drop_ws_only_content_before_tools):
        run.content(ext.ws + text)
        run.ext = ext.replace(ws="", nonws=True)
        return
    body = text.rstrip() if spec.strip_content_ws_with_tools else text
    if not body.strip():
        ws = ext.ws + text
    else:
        run.content(ext.ws + body)
        ws = text[len(body):]
        ext = ext.replace(nonws=True)
    if len(ws) > MAX_HELD_CHARS:  # documented bound: an overlong run streams
        run.content(ws)
        ws = ""
    run.ext = ext.replace(ws=ws)


def _content_at_end(run: ERun) -> None:
    """What the batch keeps of the held whitespace and the deferred content (which is only
    ever non-empty when no slot was announced)."""
    ext: EngineExt = run.ext
    spec = run.parser.spec
    kept = ext.ws + ext.deferred
    if ext.tool_seen and not ext.announced and run.parser.keeps_raw_without_calls:
        run.content(ext.ws + ext.raw)
    elif not ext.tool_seen:
        run.content(kept)
    elif run.n_calls and spec.strip_content_ws_with_tools:
        run.content((kept if ext.nonws else kept.lstrip()).rstrip())
    elif ext.nonws or kept.strip() or not spec.drop_ws_only_content_before_tools:
        run.content(kept)
    run.ext = ext.replace(ws="", deferred="")


# -- names and bodies ------------------------------------------------------------------------

# Unicode White_Space run: what `\s*` means in the `regex` module vLLM's patterns use
# (Python's `re` would also match U+001C..U+001F).
WS = "[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*"
_NAME_IN_ARGS = re.compile(rf'"name"{WS}:{WS}"([^"]*)"')


def name_in_args(raw: str) -> str:
    """The engine's fallback name: the first `"name": "..."` in the raw call body, or ""."""
    found = _NAME_IN_ARGS.search(raw)
    return found.group(1) if found else ""


def name_and_args_from_json(
    raw: str, keys: tuple[str, ...] = ("arguments", "parameters")
) -> tuple[Any, str]:
    """vLLM's `_extract_name_and_args`: (name, arguments) of a raw body read as a
    `{"name", "arguments"}` object. Not JSON, or not an object: no name, the stripped body.
    The arguments are `arguments` (else `parameters`): a string verbatim, anything else
    `json.dumps`; with neither, the object without `name`. The name may be any JSON value."""
    body = raw.strip()
    obj = json_loads(body)
    if not is_json(obj) or not isinstance(obj, dict):
        return "", body
    name = obj.get("name", "")
    for key in keys:  # the family's `_extract_args_value` members, in its order
        if key in obj:
            value = obj[key]
            return name, value if isinstance(value, str) else json_dumps(value)
    return name, json_dumps({k: v for k, v in obj.items() if k != "name"})


def string_only(properties: Mapping[str, Any], key: str) -> bool:
    """Whether coercion leaves a string value of member `key` as it is: the schema does not
    describe it, or its types are exactly "string" (aliases included)."""
    prop = properties.get(key)
    return not isinstance(prop, dict) or string_only_schema(prop)


def string_only_schema(schema: Any) -> bool:
    """Whether coercion to `schema` leaves every string as it is: its types are exactly
    "string" (aliases included)."""
    return normalize_types(schema_types(schema)) == {"string"}


def _tool_names(tools: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    names = set()
    for tool in tools:
        function = tool.get("function")
        if tool.get("type", "function") == "function" and isinstance(function, Mapping):
            if isinstance(function.get("name"), str):
                names.add(function["name"])
    return frozenset(names)
