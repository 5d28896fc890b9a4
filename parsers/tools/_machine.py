"""The tool-call machine every family runs on: one shared lexer, one transition table per family.

Theory of operation
-------------------
A family declares its markers (literal strings) and a table

    (phase, token kind) -> Step(action, next phase)

where a token kind is a marker literal, `TEXT` (a run of text containing no marker) or `EOS`
(the end of the output). The shared lexer (`parsers._text.MarkerSet`, leftmost-longest, as
vLLM's parser-engine lexer) cuts each delta into tokens and holds back a tail that may still
grow into a marker; the driver looks every token up and runs its step: first the phase moves
to `next` (None: stays), then the action runs. An action may move the phase itself (a decision
that depends on the text, e.g. a malformed call), and may hand back part of its text: the
leftover is dispatched again as `TEXT` in the phase it left (an argument value that ended
inside a text run, say).

The table is total: a marker the phase does not list falls back to `(phase, ANY_MARKER)` and
then to `(phase, TEXT)` (the marker is text there, as in vLLM's engine, where a terminal
without a transition is content of the current state), and every phase must list `TEXT` and
`EOS`. `Table.kinds()` enumerates every pair for the totality property test.

State: `ToolStreamState`, a frozen JSON value. Its shared fields are the lexer's held tail,
the phase, the number of calls started, the raw text kept while the first call may still be
rejected (vLLM then makes the whole output content) and the in-flight call (`CallState`); a
family narrows `call` and `ext` to its own typed extensions by subclassing. `Run`, the
mutable scratch copy an action works on, is derived from the state's fields.

Calls stream incrementally: `Run.start_call` sends the call's id and name as soon as the
family knows the call is real (its commit point), `Run.args` sends argument fragments as the
family's argument format produces them. A call is never taken back once started, so a family
decides everything that can still turn a call into content before it commits, and documents
what it does with a call that turns out malformed afterwards.

Cost: each feed is O(len(delta)); state size is O(marker + held argument token + what a
family documents), never the text already emitted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic

from typing_extensions import TypeVar

from parsers._base import ToolParser, ToolParseResult, make_tool_call_id
from parsers._errors import LimitExceededError, ParseError, StateError
from parsers._events import Event, ToolCallStart, push_args, push_content
from parsers._state import JsonState
from parsers._text import MarkerSet
from parsers.tools._args import ArgFormat
from parsers.tools._base import MAX_TOOL_CALL_CHARS, assemble

__all__ = [
    "TEXT",
    "EOS",
    "ANY_MARKER",
    "Action",
    "Step",
    "Table",
    "CallState",
    "ToolStreamState",
    "Run",
    "TableToolParser",
    "drop",
    "to_content",
    "feed_call_args",
    "end_call_args",
]

# Token kinds beside the markers; NUL-prefixed so no tokenizer's special token (Gemma's
# "<eos>") can collide with them.
TEXT = "\x00text"
EOS = "\x00eos"
ANY_MARKER = "\x00marker"

# An action gets the run and the token's text; it may return leftover text (see above).
Action = Callable[["Run[Any]", str], str | None]


def drop(run: Run, text: str) -> None:
    """Text or marker the format discards (kept while the first call may be rejected)."""
    run.keep_raw(text)


def to_content(run: Run, text: str) -> None:
    run.content(text)


def nothing(run: Run, text: str) -> None:
    """For EOS steps with nothing left to do."""


def feed_call_args(run: Run, text: str) -> None:
    """Argument text of the committed call, through its family's `arg_format(name)` (the call
    keeps the format's state in `args`); the fragments go out."""
    call = run.call
    assert call is not None and call.args is not None  # a committed call (check_ext)
    args, out, _ = run.parser.arg_format(call.name).feed(call.args, text)
    run.call = call.replace(args=args)
    run.args(out)


def end_call_args(run: Run, marker: str = "") -> None:
    """The committed call's arguments end (at `marker`, or the output): the format's tail."""
    call = run.call
    assert call is not None and call.args is not None
    _, out = run.parser.arg_format(call.name).end(call.args)
    run.args(out)
    run.call = None


@dataclass(frozen=True, slots=True)
class Step:
    action: Action
    next: str | None = None


class Table:
    """A family's transition table over its markers (see the module docstring)."""

    def __init__(
        self,
        phases: Iterable[str],
        markers: Iterable[str],
        steps: Mapping[tuple[Any, str], Step],  # phases: str or a StrEnum of them
    ) -> None:
        self.phases = frozenset(phases)
        self.markers = tuple(dict.fromkeys(m for m in markers if m))
        self.steps: dict[tuple[str, str], Step] = dict(steps)
        self.lexer = MarkerSet(self.markers)
        known = {*self.markers, TEXT, EOS, ANY_MARKER}
        for (phase, kind), step in self.steps.items():
            if phase not in self.phases or kind not in known:
                raise ValueError(f"table entry ({phase!r}, {kind!r}) names an unknown phase or kind")
            if step.next is not None and step.next not in self.phases:
                raise ValueError(f"table entry ({phase!r}, {kind!r}) goes to unknown {step.next!r}")
        for phase in self.phases:
            for kind in (TEXT, EOS):
                if (phase, kind) not in self.steps:
                    raise ValueError(f"phase {phase!r} has no {kind} step")

    def lookup(self, phase: str, kind: str) -> Step:
        step = self.steps.get((phase, kind))
        if step is not None:
            return step
        if kind not in (TEXT, EOS):
            return self.steps.get((phase, ANY_MARKER)) or self.steps[(phase, TEXT)]
        raise StateError(f"phase {phase!r} has no {kind} step")

    def kinds(self) -> Iterator[tuple[str, str]]:
        """Every (phase, token kind) pair the machine can meet."""
        for phase in sorted(self.phases):
            for kind in (*self.markers, TEXT, EOS):
                yield phase, kind


@dataclass(frozen=True, slots=True)
class CallState(JsonState):
    """The call being read. A family narrows `args` to its argument format's state.

    name:    the function name read so far (bounded by MAX_NAME_CHARS).
    started: ToolCallStart was sent (the call is committed).
    raw:     raw call text the family holds before committing, or whole when it must decide
             a call at its end (bounded by the tool-call limit).
    """

    name: str = ""
    started: bool = False
    raw: str = ""
    args: JsonState | None = None


@dataclass(frozen=True, slots=True)
class ToolStreamState(JsonState):
    """Complete streaming progress of one tool parser over one choice (see module docstring).

    parser:  the parser's state tag, so a state of another parser is rejected.
    pending: raw text since the first call marker, while the first call may still be rejected.
    """

    VERSION: ClassVar[int] = 3

    parser: str
    phase: str
    held: str = ""
    n_calls: int = 0
    pending: str = ""
    call: CallState | None = None
    ext: JsonState | None = None

    def __post_init__(self) -> None:
        if self.n_calls < 0:
            raise ValueError("negative call count")


# Longest function name a call may carry while it is being read (names are identifiers;
# OpenAI limits them to 64 characters, 1 KiB leaves room for namespaced names).
MAX_NAME_CHARS = 1024


ParserT_co = TypeVar("ParserT_co", bound="TableToolParser", default="TableToolParser", covariant=True)


class Run(Generic[ParserT_co]):
    """Mutable scratch copy of a state for one feed/finish call, plus the events it emits.
    Generic over the family's parser class, so an action typed `Run[MyParser]` reads the
    family's own attributes."""

    def __init__(self, parser: ParserT_co, state: ToolStreamState, request_id: str, eos: bool) -> None:
        # `parser` (the state's tag) stays as it is: `Run.parser` is the parser object.
        self._fields = tuple(f.name for f in dataclasses.fields(state) if f.name != "parser")
        for name in self._fields:
            setattr(self, name, getattr(state, name))
        self._state_type = type(state)
        self._tag = state.parser
        self.parser = parser
        self.request_id = request_id
        self.eos = eos
        self.events: list[Event] = []

    # Typed views of the fields copied above (set dynamically from the state's fields).
    phase: str
    held: str
    n_calls: int
    pending: str
    call: Any
    ext: Any

    def to_state(self) -> ToolStreamState:
        fields = {name: getattr(self, name) for name in self._fields}
        return self._state_type(parser=self._tag, **fields)

    # -- output ------------------------------------------------------------------------

    def content(self, text: str) -> None:
        push_content(self.events, text)

    @property
    def suppress(self) -> bool:
        """tool_choice="none" on vLLM's parser engine: calls are parsed, never emitted."""
        return self.parser.suppress_calls

    def start_call(self, name: str, call_id: str | None = None) -> int:
        """Commit the in-flight call: send its id and name. Returns its index."""
        index = self.n_calls
        if not self.suppress:
            call_id = call_id or self.parser.call_id(self.request_id, index)
            self.events.append(ToolCallStart(index, call_id, name))
        self.n_calls += 1
        self.pending = ""
        if self.call is not None:
            self.call = self.call.replace(started=True)
        return index

    def args(self, text: str) -> None:
        """An argument fragment of the call started last."""
        if not self.suppress:
            push_args(self.events, self.n_calls - 1, text)

    def emit_call(self, name: str, arguments: str, call_id: str | None = None) -> None:
        """A call decided whole (a family that held it to its end)."""
        self.start_call(name, call_id)
        self.args(arguments)

    # -- raw text kept for the first call ---------------------------------------------------

    def keep_raw(self, text: str) -> None:
        """Text the format drops, kept while no call was emitted (a rejected first call
        turns all of it into content)."""
        if self.n_calls == 0:
            self.pending += text

    def open_call_raw(self, marker: str) -> None:
        """A call marker was consumed: it starts the call's raw text (after the text kept
        for the first call, while no call was emitted)."""
        self.pending = self.pending + marker if self.n_calls == 0 else marker

    def reject_call(self, raw: str, verbatim_phase: str, resume_phase: str) -> None:
        """A call that is not a call (`raw`: its text after its marker). The first one makes
        the whole output content (as vLLM's batch does: `pending` + this call, then
        everything verbatim); after calls were emitted, only its own text (marker included)
        becomes content and parsing resumes."""
        self.content(self.pending + raw)
        self.pending = ""
        self.call = None
        self.phase = verbatim_phase if self.n_calls == 0 else resume_phase


class TableToolParser(ToolParser):
    """A `ToolParser` driven by a `Table` (see the module docstring).

    Subclasses set `name`, `table`, `initial_phase` and, when they extend the state,
    `state_class` (a `ToolStreamState` subclass narrowing `call` / `ext`).
    """

    # Instance attributes with class defaults: engine families build theirs per instance.
    table: Table
    initial_phase: ClassVar[str]
    state_class: type[ToolStreamState] = ToolStreamState
    # Phases in which a call is being read (a state has a call exactly there); None: the
    # family checks this itself.
    call_phases: ClassVar[frozenset[str] | None] = None

    def call_id(self, request_id: str, index: int) -> str:
        return make_tool_call_id(request_id, index)

    def arg_format(self, name: str) -> ArgFormat[Any]:
        """The argument format of a call committed under `name` (families that stream their
        arguments through one: `feed_call_args` / `end_call_args`)."""
        raise NotImplementedError

    @property
    def state_tag(self) -> str:
        """What states record as `parser`: a state of another parser, or of another output
        format of the same family, is rejected."""
        return self.name

    @property
    def call_limit(self) -> int:
        return min(self.max_call_chars or MAX_TOOL_CALL_CHARS, MAX_TOOL_CALL_CHARS)

    def initial_state(self) -> ToolStreamState:
        return self.state_class(parser=self.state_tag, phase=self.initial_phase)

    @classmethod
    def state_type(cls) -> type[ToolStreamState]:
        return cls.state_class

    def feed(
        self, state: JsonState, text: str, request_id: str
    ) -> tuple[ToolStreamState, list[Event]]:
        state = self._check_state(state)
        if not isinstance(text, str):
            raise ParseError("delta text must be a string")
        run = Run(self, state, request_id, eos=False)
        segments, run.held = self.table.lexer.split(state.held + text, final=False)
        self._run_segments(run, segments)
        return self._done(run)

    def finish(
        self, state: JsonState, request_id: str
    ) -> tuple[ToolStreamState, list[Event]]:
        state = self._check_state(state)
        run = Run(self, state, request_id, eos=True)
        segments, _ = self.table.lexer.split(state.held, final=True)
        run.held = ""
        self._run_segments(run, segments)
        self._dispatch(run, EOS, "")
        return self._done(run)

    def parse(self, text: str, request_id: str) -> ToolParseResult:
        state, events = self.feed(self.initial_state(), text, request_id)
        _, tail = self.finish(state, request_id)
        return assemble(events + tail)

    # -- driver -----------------------------------------------------------------------------

    def _run_segments(self, run: Run[Any], segments: Sequence[tuple[str, bool]]) -> None:
        for text, is_marker in segments:
            self._dispatch(run, text if is_marker else TEXT, text)

    def _dispatch(self, run: Run[Any], kind: str, text: str) -> None:
        while True:
            phase = run.phase
            step = self.table.lookup(phase, kind)
            if step.next is not None:
                run.phase = step.next
            leftover = step.action(run, text)
            if not leftover:
                return
            if len(leftover) >= len(text) and run.phase == phase:
                raise ParseError(f"{self.name}: phase {phase!r} made no progress")
            kind, text = TEXT, leftover

    def _check_state(self, state: object) -> ToolStreamState:
        if not isinstance(state, self.state_class):
            raise StateError(f"{self.name}: not a {self.state_class.__name__}")
        if state.parser != self.state_tag:
            raise StateError(f"{self.name}: state belongs to parser {state.parser!r}")
        if state.phase not in self.table.phases:
            raise StateError(f"{self.name}: phase {state.phase!r} is not legal here")
        if len(state.held) >= max(self.table.lexer.max_len, 1):
            raise StateError(f"{self.name}: held text longer than any marker")
        if self.call_phases is not None and (state.call is not None) != (state.phase in self.call_phases):
            raise StateError(f"{self.name}: a call state outside a call, or none inside one")
        self.check_ext(state)
        return state

    def check_ext(self, state: ToolStreamState) -> None:
        """Family hook: reject a restored state whose extension contradicts its phase."""

    def _done(self, run: Run[Any]) -> tuple[ToolStreamState, list[Event]]:
        state = run.to_state()
        held = len(state.pending) + self.held_chars(state)
        if held > self.call_limit:
            raise LimitExceededError(
                f"{self.name}: a tool call's text exceeds the limit of {self.call_limit} "
                "characters (--max-tool-call-chars)"
            )
        return state, run.events

    def held_chars(self, state: ToolStreamState) -> int:
        """Characters of model text the state holds (bounded by the tool-call limit)."""
        call = state.call
        if call is None:
            return 0
        return len(call.name) + len(call.raw) + (args_held(call.args) if call.args else 0)


def args_held(args: JsonState) -> int:
    """Held characters of an argument format's state (formats expose `held_chars()`)."""
    held = getattr(args, "held_chars", None)
    return held() if callable(held) else 0
