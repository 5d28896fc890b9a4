"""Shared streaming machinery of the tool-call parser families.

Theory of operation
-------------------
A family is a small phase machine over the (post-reasoning) content text. Its whole progress is
one `ToolStreamState` value; `feed` runs the family's phase handlers over `state.buf + delta`
until no handler can move without more input, and `finish` runs them once more with
`eos=True`, when every handler must consume what is left. `parse` (the batch result) is the
same machine over the whole text followed by `finish`, so batch and stream agree by
construction on any split; the tests check that the machine itself is split-invariant and the
differential tests check that the batch result equals vLLM 0.33's `extract_tool_calls`.

Every handler sees a `_Run` (a mutable scratch value living for one call) and either makes
progress (consumes text from the front of `run.buf`, or changes phase) and returns True, or
returns False to wait for more input. What stays in `buf` between calls is only:

* text that may be the start of a marker (bounded by `MAX_HELD_CHARS`), or
* the text of a tool call still being generated (bounded by `MAX_TOOL_CALL_CHARS`, together
  with `pending`, `head` and `deferred`, what a family sets aside).

Tool calls are emitted whole: when a call's text is complete and valid the family emits
`ToolCallStart` and the canonical arguments string in one `ToolArgsDelta`. A call cannot be
taken back once sent, so emitting earlier would break "stream == batch" whenever the rest of
the call later turns out malformed (upstream's stream then drops text, see issue 3).

vLLM turns *all* output into content when the first call is malformed. To reproduce that,
raw text consumed after the first call marker is kept in `pending` until the first call is
accepted; a rejected first call flushes `pending` plus the call as content and switches to
the VERBATIM phase (everything else is content). Once a call has been emitted this is no
longer possible; families then return the malformed call's raw text as content (documented
per family as a divergence from vLLM's batch, which would turn the earlier calls into content
too).

Cost model: each feed is O(len(delta)) amortised, except that a family may re-examine the
in-flight call text when a candidate end marker arrives (O(call) per end marker). State size
is O(held marker prefix + in-flight call), independent of the content already emitted.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._base import MAX_HELD_CHARS, ToolParser, ToolParseResult, make_tool_call_id
from parsers._errors import LimitExceededError, ParseError, StateError
from parsers._events import ContentDelta, Event, ToolArgsDelta, ToolCall, ToolCallStart
from parsers._state import JsonState

__all__ = [
    "MAX_TOOL_CALL_CHARS",
    "Phase",
    "ToolStreamState",
    "StreamingToolParser",
    "Run",
    "Handler",
    "find_marker",
    "marker_prefix_len",
    "json_dumps",
    "json_loads",
    "json_raw_decode",
    "is_json",
    "assemble",
    "JsonEndScanner",
]

# The text of one tool call still being generated (plus the raw text since the first call
# marker, kept for the "malformed first call" fallback). Tool calls carrying whole files as
# arguments reach tens of thousands of tokens (~4 chars each); 512 Ki chars leaves room for
# a 128k-token call while keeping the echoed state far below request-body limits.
MAX_TOOL_CALL_CHARS = 512 * 1024


class Phase(enum.StrEnum):
    """Every phase any family uses; each family's handler table says which are legal for it."""

    LEAD = "lead"  # output start: deciding whether this output is a tool-call output at all
    CONTENT = "content"  # before the first call: text is content, markers are watched
    CALL = "call"  # inside a tool call: text is buffered until the call is complete
    BLOCK = "block"  # inside a tool-call block, between calls: text is dropped
    BETWEEN = "between"  # after a call: text is dropped, markers are watched
    AFTER = "after"  # after the tool-call block: text is content, no markers
    VERBATIM = "verbatim"  # everything is content (malformed first call, or not a tool output)
    REASONING = "reasoning"  # a reasoning span inside the content: text is dropped
    ARGS = "args"  # inside a tool call, past its name: reading JSON arguments
    RAW_ARGS = "raw_args"  # inside a tool call, past its name: arguments that are not JSON


@dataclass(frozen=True, slots=True)
class ToolStreamState(JsonState):
    """Complete streaming progress of one tool parser over one choice.

    parser:   family name, so a state of another parser is rejected.
    phase:    current phase (legal phases depend on the family).
    buf:      unconsumed text (a possible marker start, or the in-flight call).
    pending:  raw text since the first call marker, until the first call is accepted.
    n_calls:  calls emitted so far (the next call's index).
    scan:     how far into `buf` the family already searched (resumes searches).
    depth, in_string, escaped: resumable JSON scanner (families that delimit calls by JSON).
    flag:     one bit of family-specific memory (documented by the family that uses it).
    head:     family-specific text set aside from `buf` (mistral v11: the name of the call
              whose arguments are being read); counts towards MAX_TOOL_CALL_CHARS.
    deferred, announced: content held after the first tool event, and whether a call slot
              was announced (families on vLLM's parser engine, see `_engine.ContentHold`).
    """

    # 2: `head`, `deferred`, `announced` added; `parser` may carry a format tag
    # (see StreamingToolParser.state_tag).
    VERSION: ClassVar[int] = 2

    parser: str
    phase: Phase
    buf: str = ""
    pending: str = ""
    n_calls: int = 0
    scan: int = 0
    depth: int = 0
    in_string: bool = False
    escaped: bool = False
    flag: bool = False
    head: str = ""
    deferred: str = ""
    announced: bool = False

    def __post_init__(self) -> None:
        if self.n_calls < 0 or self.depth < 0:
            raise ValueError("negative counter")
        if not 0 <= self.scan <= len(self.buf):
            raise ValueError("scan outside buf")
        held = len(self.buf) + len(self.pending) + len(self.head) + len(self.deferred)
        if held > MAX_TOOL_CALL_CHARS:
            raise ValueError("buffer over MAX_TOOL_CALL_CHARS")


class Run:
    """Scratch space of one feed/finish call: the state's fields plus the events emitted."""

    __slots__ = (
        "buf", "pending", "phase", "n_calls", "scan", "depth", "in_string", "escaped", "flag",
        "head", "deferred", "announced", "events", "eos", "request_id", "_parser",
    )  # fmt: skip

    def __init__(
        self, parser: StreamingToolParser, state: ToolStreamState, request_id: str, eos: bool
    ):
        self._parser = parser
        self.buf = state.buf
        self.pending = state.pending
        self.phase = state.phase
        self.n_calls = state.n_calls
        self.scan = state.scan
        self.depth = state.depth
        self.in_string = state.in_string
        self.escaped = state.escaped
        self.flag = state.flag
        self.head = state.head
        self.deferred = state.deferred
        self.announced = state.announced
        self.events: list[Event] = []
        self.eos = eos
        self.request_id = request_id

    def take(self, n: int) -> str:
        """Remove and return the first `n` chars of `buf` (resets the search cursor)."""
        text, self.buf = self.buf[:n], self.buf[n:]
        self.scan = 0
        return text

    def content(self, text: str) -> None:
        if not text:
            return
        last = self.events[-1] if self.events else None
        if isinstance(last, ContentDelta):
            self.events[-1] = ContentDelta(last.text + text)
        else:
            self.events.append(ContentDelta(text))

    def drop(self, text: str) -> None:
        """Text the format discards; kept while the first call may still turn it into content."""
        if self.n_calls == 0:
            self.pending += text

    def open_call(self, marker: str) -> None:
        """A call marker was consumed: it belongs to the call's raw text."""
        self.pending = self.pending + marker if self.n_calls == 0 else marker

    @property
    def suppress(self) -> bool:
        """tool_choice="none" on vLLM's engine: calls are parsed but never emitted."""
        return self._parser.suppress_calls

    def emit_call(self, name: str, arguments: str) -> None:
        index = self.n_calls
        if not self.suppress:
            call_id = self._parser.call_id(self.request_id, index)
            self.events.append(ToolCallStart(index, call_id, name))
            if arguments:
                self.events.append(ToolArgsDelta(index, arguments))
        self.n_calls += 1
        self.pending = self.deferred = ""

    def reject_call(self, raw: str, resume: Phase) -> None:
        """A malformed call: the first one turns all output into content (as vLLM does);
        after calls were emitted only its own raw text becomes content and parsing goes on
        in `resume`."""
        self.content(self.pending + raw)
        self.pending = ""
        self.phase = Phase.VERBATIM if self.n_calls == 0 else resume

    def to_state(self) -> ToolStreamState:
        return ToolStreamState(
            parser=self._parser.state_tag,
            phase=self.phase,
            buf=self.buf,
            pending=self.pending,
            n_calls=self.n_calls,
            scan=self.scan,
            depth=self.depth,
            in_string=self.in_string,
            escaped=self.escaped,
            flag=self.flag,
            head=self.head,
            deferred=self.deferred,
            announced=self.announced,
        )


Handler = Callable[[Any, Run], bool]


class StreamingToolParser(ToolParser):
    """A `ToolParser` driven by a table of phase handlers (see the module docstring).

    Subclasses set `name`, `initial_phase` and `handlers` ({Phase: method}); `handlers` is the
    family's total transition table: a state whose phase is not a key is rejected.
    """

    initial_phase: ClassVar[Phase] = Phase.CONTENT
    handlers: ClassVar[Mapping[Phase, Handler]]

    def call_id(self, request_id: str, index: int) -> str:
        return make_tool_call_id(request_id, index)

    @property
    def state_tag(self) -> str:
        """What states record as their `parser`: a state of another parser (or of another
        output format of the same family) is rejected."""
        return self.name

    def initial_state(self) -> ToolStreamState:
        return ToolStreamState(parser=self.state_tag, phase=self.initial_phase)

    @classmethod
    def state_type(cls) -> type[ToolStreamState]:
        return ToolStreamState

    def feed(
        self, state: ToolStreamState, text: str, request_id: str
    ) -> tuple[ToolStreamState, list[Event]]:
        self._check_state(state)
        if not isinstance(text, str):
            raise ParseError("delta text must be a string")
        run = Run(self, state, request_id, eos=False)
        run.buf += text
        return self._drive(run)

    def finish(
        self, state: ToolStreamState, request_id: str
    ) -> tuple[ToolStreamState, list[Event]]:
        self._check_state(state)
        run = Run(self, state, request_id, eos=True)
        state, events = self._drive(run)
        if state.buf:  # every handler must consume everything at the end of the output
            raise ParseError(f"{self.name}: unconsumed text at end of output")
        return state, events

    def parse(self, text: str, request_id: str) -> ToolParseResult:
        state, events = self.feed(self.initial_state(), text, request_id)
        _, tail = self.finish(state, request_id)
        return assemble(events + tail)

    def _check_state(self, state: object) -> None:
        if not isinstance(state, ToolStreamState):
            raise StateError(f"{self.name}: not a tool parser state")
        if state.parser != self.state_tag:
            raise StateError(f"{self.name}: state belongs to parser {state.parser!r}")
        if state.phase not in self.handlers:
            raise StateError(f"{self.name}: phase {state.phase.value!r} is not legal here")

    def _drive(self, run: Run) -> tuple[ToolStreamState, list[Event]]:
        while True:
            before = self._progress(run)
            if not self.handlers[run.phase](self, run):
                break
            if before == self._progress(run):
                raise ParseError(f"{self.name}: internal error, phase {run.phase} made no progress")
        limit = min(self.max_call_chars or MAX_TOOL_CALL_CHARS, MAX_TOOL_CALL_CHARS)
        if len(run.buf) + len(run.pending) + len(run.head) + len(run.deferred) > limit:
            raise LimitExceededError(
                f"{self.name}: a tool call's text exceeds the limit of {limit} characters "
                "(--max-tool-call-chars)"
            )
        return run.to_state(), run.events

    @staticmethod
    def _progress(run: Run) -> tuple:
        """What a handler returning True must have changed."""
        return (len(run.buf), run.phase, run.n_calls, len(run.events), len(run.pending),
                len(run.head), len(run.deferred), run.announced)  # fmt: skip

    # -- helpers shared by the families' handlers ------------------------------------------

    def hold_or_content(self, run: Run, markers: tuple[str, ...], on_marker: Phase) -> bool:
        """Emit content up to the first of `markers`, consume it and enter `on_marker`.

        Without a marker, emits all but a possible marker start (or everything at the end)."""
        return self._scan_text(run, markers, on_marker, run.content)

    def hold_or_drop(self, run: Run, markers: tuple[str, ...], on_marker: Phase) -> bool:
        """Like `hold_or_content`, but the text outside markers is discarded."""
        return self._scan_text(run, markers, on_marker, run.drop)

    def _scan_text(
        self,
        run: Run,
        markers: tuple[str, ...],
        on_marker: Phase,
        sink: Callable[[str], None],
    ) -> bool:
        at, marker = find_marker(run.buf, markers)
        if marker is not None:
            sink(run.take(at))
            run.open_call(run.take(len(marker)))
            run.phase = on_marker
            return True
        keep = 0 if run.eos else marker_prefix_len(run.buf, markers)
        sink(run.take(len(run.buf) - keep))
        return False

    def verbatim(self, run: Run) -> bool:
        run.content(run.take(len(run.buf)))
        return False


def assemble(events: list[Event]) -> ToolParseResult:
    """Batch result from a complete event list (content None when empty, as vLLM)."""
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    heads: dict[int, ToolCallStart] = {}
    for event in events:
        if isinstance(event, ContentDelta):
            content.append(event.text)
        elif isinstance(event, ToolCallStart):
            heads[event.index] = event
            calls[event.index] = []
        elif isinstance(event, ToolArgsDelta):
            calls[event.index].append(event.text)
    text = "".join(content)
    return ToolParseResult(
        content=text or None,
        tool_calls=tuple(
            ToolCall(id=heads[i].id, name=heads[i].name, arguments="".join(calls[i]))
            for i in sorted(heads)
        ),
    )


def find_marker(text: str, markers: tuple[str, ...], start: int = 0) -> tuple[int, str | None]:
    """Earliest occurrence of any marker at or after `start` (longest wins a tie)."""
    best, found = -1, None
    for marker in markers:
        at = text.find(marker, start)
        if at != -1 and (best == -1 or at < best or (at == best and len(marker) > len(found or ""))):
            best, found = at, marker
    return best, found


def marker_prefix_len(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some marker."""
    best = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:k]):
                best = k
                break
    return best


def json_dumps(value: Any) -> str:
    """vLLM's canonical arguments string: `json.dumps(value, ensure_ascii=False)`."""
    return json.dumps(value, ensure_ascii=False)


_NOT_JSON = object()


def json_loads(text: str) -> Any:
    """`json.loads`, or `_NOT_JSON` for anything Python's json rejects (vLLM catches all of
    these and falls back to content). RecursionError: deeply nested input."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON


def json_raw_decode(text: str) -> tuple[Any, int]:
    """`JSONDecoder.raw_decode`, or (_NOT_JSON, 0)."""
    try:
        return json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return _NOT_JSON, 0


def is_json(value: Any) -> bool:
    return value is not _NOT_JSON


class JsonEndScanner:
    """Resumable scan for the end of the JSON value that starts at `run.buf[0]` ({ or [).

    Tracks bracket depth outside strings; the value ends where depth returns to 0. Used only
    to know *when* to try `json.loads`; validity is always decided by Python's json.
    """

    @staticmethod
    def maybe_end(run: Run) -> int | None:
        """Index just past the value's end, or None (needs more text; state kept in `run`)."""
        buf = run.buf
        i = run.scan
        depth, in_string, escaped = run.depth, run.in_string, run.escaped
        n = len(buf)
        while i < n:
            c = buf[i]
            i += 1
            if in_string:
                if escaped:
                    escaped = False
                elif c == "\\":
                    escaped = True
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth <= 0:
                    JsonEndScanner.reset(run)
                    return i
        run.scan, run.depth, run.in_string, run.escaped = i, depth, in_string, escaped
        return None

    @staticmethod
    def reset(run: Run) -> None:
        run.scan, run.depth, run.in_string, run.escaped = 0, 0, False, False
