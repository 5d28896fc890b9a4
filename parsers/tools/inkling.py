"""Inkling tool calls (vLLM name `inkling`, `InklingEngineToolParser` over vllm/parser/inkling.py):

    <|message_model|>[name]<|content_invoke_tool_json|>{"name": "f", "args": {...}}<|end_message|>

Spec: `inkling_config` run by `_engine` (the tool pass starts in content). Typed blocks may
repeat in any order: `<|message_model|>` opens a header whose text (an optional function
name) is dropped when a block kind follows, and is content when the block ends right away
(or at the end of the output); `<|content_thinking|>` opens reasoning (dropped here),
`<|content_text|>` / `<|content_invoke_tool_text|>` / `<|content_tool_error|>` visible text,
`<|content_invoke_tool_json|>` a call; `<|end_message|>` or `<|content_model_end_sampling|>`
ends any block. A call's name is the first `"name": "..."` of its body (the engine's
fallback: no name markup); its arguments (`GraniteArgs` on the `args` member: vLLM's
`_inkling_arg_converter`) are the raw text of the `args` object, else the engine's JSON
fallback (`args`, `arguments`, `parameters`); values coerced to the tool's schema types.
Content after calls stays content (vLLM's flush of the engine's deferred content); content
whitespace is not stripped, a whitespace-only content with calls is dropped.

Divergence (stream == our batch; DIVERGENCES in tests/parsers/tools/test_tool_inkling.py): a
coerced value after non-canonical text is written coerced within the model's text (vLLM
re-serialises the object; the two are JSON-equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._state import JsonState
from parsers.tools._engine import (
    EngineExt,
    EngineSpec,
    EngineToolParser,
    Ev,
    S,
    Tr,
    emit_event,
    name_and_args_from_json,
)
from parsers.tools._machine import EOS, TEXT, Run, Step, Table
from parsers.tools.granite import GraniteArgs, GraniteArgsState

__all__ = ["InklingToolParser", "INKLING_SPEC"]

MESSAGE_MODEL = "<|message_model|>"
CONTENT_TEXT = "<|content_text|>"
CONTENT_THINKING = "<|content_thinking|>"
CONTENT_INVOKE_TOOL_JSON = "<|content_invoke_tool_json|>"
CONTENT_INVOKE_TOOL_TEXT = "<|content_invoke_tool_text|>"
CONTENT_TOOL_ERROR = "<|content_tool_error|>"
CONTENT_MODEL_END_SAMPLING = "<|content_model_end_sampling|>"
END_MESSAGE = "<|end_message|>"
ARGS_KEYS = ("args", "arguments", "parameters")
ENDS = ("THINK_END", "END_SAMPLING")


def _spec() -> EngineSpec:
    terminals: dict[str, str | tuple[str, ...]] = {
        "MSG_MODEL": MESSAGE_MODEL, "TEXT_START": CONTENT_TEXT, "THINK_START": CONTENT_THINKING,
        "THINK_END": END_MESSAGE, "END_SAMPLING": CONTENT_MODEL_END_SAMPLING,
        "TOOL_START": CONTENT_INVOKE_TOOL_JSON, "TOOL_TEXT": CONTENT_INVOKE_TOOL_TEXT,
        "TOOL_ERROR": CONTENT_TOOL_ERROR,
    }  # fmt: skip
    call = Tr(S.ARGS, (Ev.REASONING_END, Ev.CALL_START))
    visible = Tr(S.CONTENT, (Ev.REASONING_END,))
    transitions: dict[tuple[S, str], Tr] = {
        (S.REASONING, "THINK_START"): Tr(S.REASONING),
        (S.REASONING, "TOOL_START"): call,
        (S.CONTENT, "MSG_MODEL"): Tr(S.HEADER),
        (S.HEADER, "MSG_MODEL"): Tr(S.HEADER),
    }
    for state in (S.CONTENT, S.HEADER):
        transitions |= {
            (state, "TEXT_START"): visible,
            (state, "THINK_START"): Tr(S.REASONING, (Ev.REASONING_START,)),
            (state, "TOOL_START"): call,
            (state, "TOOL_TEXT"): visible,
            (state, "TOOL_ERROR"): visible,
        }
    for end in ENDS:
        transitions |= {
            (S.CONTENT, end): Tr(S.CONTENT),
            (S.REASONING, end): Tr(S.CONTENT, () if end == "THINK_END" else (Ev.REASONING_END,)),
            (S.ARGS, end): Tr(S.CONTENT, (Ev.CALL_END,)),
            (S.HEADER, end): Tr(S.CONTENT, (Ev.TEXT,)),  # the header's text is content
        }
    return EngineSpec(
        terminals=terminals,
        transitions=transitions,
        strip_content_ws_with_tools=False,
        drop_ws_only_content_before_tools=True,
        keeps_content_after_tools=True,
    )


INKLING_SPEC = _spec()


@dataclass(frozen=True, slots=True)
class InklingExt(EngineExt):
    """header: the text of an open message header (vLLM's `_message_header_buffer`)."""

    header: str = ""

    def held_chars(self) -> int:
        return EngineExt.held_chars(self) + len(self.header)


def _header_text(run: Run[Any], text: str) -> None:
    run.ext = run.ext.replace(header=run.ext.header + text)


def _leave_header(action: Any, header_is_text: bool) -> Any:
    """A transition out of the header: its text is content (an end marker) or dropped."""

    def leave(run: Run[Any], literal: str) -> str | None:
        header = run.ext.header
        run.ext = run.ext.replace(header="")
        if header_is_text:
            run.phase = S.CONTENT
            emit_event(run, Ev.TEXT, header)
            return None
        result: str | None = action(run, literal)
        return result

    return leave


def _header_end(action: Any) -> Any:
    """End of output in a header: vLLM's `finish()` flushes its text as content."""

    def end(run: Run[Any], text: str) -> str | None:
        header = run.ext.header
        run.ext = run.ext.replace(header="")
        run.phase = S.CONTENT
        emit_event(run, Ev.TEXT, header)
        result: str | None = action(run, text)
        return result

    return end


class InklingToolParser(EngineToolParser):
    name: ClassVar[str] = "inkling"
    spec = INKLING_SPEC
    args_state: ClassVar[type[JsonState]] = GraniteArgsState
    ext_class: ClassVar[type[EngineExt]] = InklingExt

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        steps = dict(self.table.steps)
        end_literals = {END_MESSAGE, CONTENT_MODEL_END_SAMPLING}
        for (phase, kind), step in list(steps.items()):
            if phase != S.HEADER:
                continue
            if kind == TEXT:
                steps[(phase, kind)] = Step(_header_text)
            elif kind == EOS:
                steps[(phase, kind)] = Step(_header_end(step.action))
            elif (S.HEADER, self.spec.literal_terminals().get(kind, "")) in self.spec.transitions:
                steps[(phase, kind)] = Step(_leave_header(step.action, kind in end_literals), step.next)
        self.table = Table(self.table.phases, self.table.markers, steps)

    def arg_format(self, name: str) -> GraniteArgs:
        return GraniteArgs(name, self.tool_properties(name), self.call_limit, self.coerce,
                           key="args", fallback=self.body_name_and_args)  # fmt: skip

    def body_name_and_args(self, raw: str) -> tuple[Any, str]:
        return name_and_args_from_json(raw, ARGS_KEYS)
