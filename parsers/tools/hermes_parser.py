"""Hermes / Qwen JSON tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

vLLM 0.33 (`Hermes2ProToolParser`, also `qwen3_json`) batch semantics reproduced here:

* content is the text before the first `<tool_call>` (None when empty); text between and
  after calls is dropped;
* a call's body runs to the next `</tool_call>`, or to the end of the output when it never
  closes; the body must be a JSON object with a string `name` and an `arguments` key, whose
  value becomes `json.dumps(arguments, ensure_ascii=False)`;
* any malformed call makes the whole output content.

Streaming: content streams as it arrives, holding back only a possible `<tool_call>` start.
A call is sent (id and name) once its body has shown its name and then the start of its
`arguments` value; the arguments then stream as canonical JSON (`_json_args`, ENVELOPE).
Until then the body is held (a few dozen characters), so a body that is not a call still
becomes content as vLLM's batch makes it. A body that names its arguments before its name is
held whole and decided at its end.

Divergences from vLLM's batch (stream == our batch instead; tests `test_hermes_divergence_*`),
each because a call had been sent before the rest of its text could be known:
* a call after an emitted one that is malformed before it commits: its raw text (markers
  included) becomes content and the earlier calls stay (vLLM: the whole output is content);
* a call whose arguments turn out not to be JSON after they started (a syntax error, a raw
  newline inside a string, a call cut by `</tool_call>` or by the end of the output): it
  stays, its arguments are the canonical text up to the fault followed by the body's raw text
  from there (vLLM: all output content); text after a complete `arguments` value that makes
  the body invalid becomes content;
* duplicate `name` / `arguments` members: the first ones count (json takes the last).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._errors import StateError
from parsers.tools._base import is_json, json_dumps, json_loads
from parsers.tools._json_args import DONE, ERROR, MORE, JsonArgs, JsonArgsState, Root
from parsers.tools._machine import (
    EOS,
    TEXT,
    CallState,
    Run,
    Step,
    Table,
    TableToolParser,
    ToolStreamState,
    drop,
    nothing,
    to_content,
)

__all__ = ["HermesToolParser", "hermes_call"]

START = "<tool_call>"
END = "</tool_call>"


def hermes_call(body: str) -> tuple[str, str] | None:
    """(name, arguments) of a `{"name", "arguments"}` JSON body, or None if vLLM rejects it."""
    obj: Any = json_loads(body)
    if not is_json(obj) or not isinstance(obj, dict) or "arguments" not in obj:
        return None
    name = obj.get("name")
    if not isinstance(name, str):
        return None
    return name, json_dumps(obj["arguments"])


class P(enum.StrEnum):
    CONTENT = "content"
    CALL = "call"  # inside <tool_call>: the body
    BETWEEN = "between"  # after a call: text is dropped
    VERBATIM = "verbatim"  # a rejected first call: everything is content


class Body(enum.StrEnum):
    READ = "read"  # before the commit: the body is held in `raw`
    HOLD = "hold"  # arguments before the name: held whole, decided at the end
    ARGS = "args"  # committed: the arguments stream
    RAW = "raw"  # committed, the arguments stopped being JSON: the body's text is argument text
    TAIL = "tail"  # committed, the arguments complete: what follows in the body is checked


@dataclass(frozen=True, slots=True)
class HermesCall(CallState):
    body: Body = Body.READ
    args: JsonArgsState | None = None


@dataclass(frozen=True, slots=True)
class HermesState(ToolStreamState):
    call: HermesCall | None = None


class HermesToolParser(TableToolParser):
    name: ClassVar[str] = "hermes"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = HermesState
    call_phases = frozenset({P.CALL})

    def check_ext(self, state: ToolStreamState) -> None:
        if state.call is not None and state.call.args is None:
            raise StateError(f"{self.name}: a call without its body state")

    @property
    def envelope(self) -> JsonArgs:
        return JsonArgs(root=Root.ENVELOPE, limit=self.call_limit)

    # -- actions ---------------------------------------------------------------------------

    def open_call(self, run: Run, marker: str) -> None:
        run.open_call_raw(marker)
        run.call = HermesCall(args=self.envelope.start())

    def body_text(self, run: Run, text: str) -> None:
        call: HermesCall = run.call
        if call.body in (Body.READ, Body.HOLD):
            call = call.replace(raw=call.raw + text)
            if call.body is Body.HOLD:
                run.call = call
                return
        if call.body is Body.RAW:
            run.args(text)
            return
        if call.body is Body.TAIL:
            self._tail(run, text)
            return
        args, out, rest = self.envelope.feed(call.args, text)
        run.call = call.replace(args=args)
        if call.body is Body.READ and args.started:
            self._maybe_commit(run)
        if run.call.body is Body.ARGS:
            run.args(out)
            if args.status == ERROR:
                self._args_broke(run, rest or "")
            elif args.status == DONE or args.where == "a":
                run.call = run.call.replace(body=Body.TAIL)
                if rest:
                    self._tail(run, rest)

    def _maybe_commit(self, run: Run) -> None:
        call: HermesCall = run.call
        if not call.args.ordered:  # the arguments came first: decide at the end
            run.call = call.replace(body=Body.HOLD)
            return
        run.call = call.replace(body=Body.ARGS, raw="")
        run.start_call(call.args.name)

    def _args_broke(self, run: Run, rest: str) -> None:
        """Documented: the arguments keep their canonical prefix, then the raw text."""
        run.args(self.envelope.held_raw(run.call.args) + rest)
        run.call = run.call.replace(body=Body.RAW)

    def _tail(self, run: Run, text: str) -> None:
        """Text in a committed body after its arguments: the rest of the envelope (validated),
        or text that makes it invalid, which is content (documented)."""
        call: HermesCall = run.call
        args = call.args
        if args.status == MORE:
            args, _, rest = self.envelope.feed(args, text)
            run.call = call.replace(args=args)
            if args.status == MORE:
                return
            text = rest or ""
        if args.status == DONE and not (call.raw + text).strip():
            run.call = run.call.replace(raw=call.raw + text)  # whitespace: held, may be last
            return
        run.content(call.raw + text)
        run.call = run.call.replace(raw="")

    def end_call(self, run: Run, marker: str) -> None:
        call: HermesCall = run.call
        if call.body is Body.ARGS:
            args, out = self.envelope.end(call.args)
            run.args(out)
            if args.status != DONE:
                run.args(self.envelope.held_raw(args))
        elif call.body is Body.TAIL and call.args.status == MORE:
            args, _ = self.envelope.end(call.args)
            if args.status != DONE:
                run.content(self.envelope.held_raw(args))
        elif call.body in (Body.READ, Body.HOLD):
            found = hermes_call(call.raw)
            if found is None:
                run.reject_call(call.raw + marker, P.VERBATIM, P.BETWEEN)
                return
            run.emit_call(*found)
        run.call = None

    def end_at_eos(self, run: Run, text: str) -> None:
        self.end_call(run, "")
        if run.phase == P.CALL:
            run.phase = P.BETWEEN


def _open(run: Run, marker: str) -> None:
    run.parser.open_call(run, marker)


def _body(run: Run, text: str) -> None:
    run.parser.body_text(run, text)


def _end(run: Run, marker: str) -> None:
    run.parser.end_call(run, marker)


def _eos(run: Run, text: str) -> None:
    run.parser.end_at_eos(run, text)


HermesToolParser.table = Table(
    phases=tuple(P),
    markers=(START, END),
    steps={
        (P.CONTENT, TEXT): Step(to_content),
        (P.CONTENT, START): Step(_open, P.CALL),
        (P.CONTENT, EOS): Step(nothing),
        (P.CALL, TEXT): Step(_body),
        (P.CALL, END): Step(_end, P.BETWEEN),
        (P.CALL, EOS): Step(_eos),
        (P.BETWEEN, TEXT): Step(drop),
        (P.BETWEEN, START): Step(_open, P.CALL),
        (P.BETWEEN, EOS): Step(nothing),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
