"""MiniMax-M2 / M2.5 XML tool calls (vLLM name `minimax_m2`), on vLLM's parser engine:

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>

Spec: vLLM 0.33 `minimax_m2_config` (`vllm/parser/minimax_m2.py`), run by `_engine` as its tool
adapter does. `<minimax:tool_call>` opens the block (text in it outside an invoke is dropped);
`<invoke name="` (or `'`, or unquoted) opens a call, even outside a block; the name runs to
`">` / `'>` / `>`; with request tools, an undeclared name drops the call; `</invoke>` closes
it; `</minimax:tool_call>` ends the block (anywhere but inside a call's arguments, where it is
argument text). `<think>` in content is text, `</think>` is dropped.

Arguments (`_minimax_m2_arg_converter`, then `_fix_arg_types`): every
`<parameter name="NAME">VALUE` (quoted either way or bare; whitespace allowed inside the
tags) ended by `</parameter>` or by the next `<parameter name=`; NAME stripped (an empty one
drops the parameter), VALUE verbatim; the object is `json.dumps`ed and values are coerced to
the tool's schema types. Streaming: `qwen3_coder.ParamArgs` with this syntax (string values
stream, others are held until they end).

Divergences from vLLM's batch (stream == our batch instead; tests `test_minimax_m2_*`): a
streamed value that never ends is kept (vLLM drops the parameter); a repeated parameter is
written twice (`json.loads` gives vLLM's object); the engine's leading-whitespace rule.
"""

from __future__ import annotations

from typing import ClassVar

import regex

from parsers._state import JsonState
from parsers.tools._engine import WS, EngineSpec, EngineToolParser, Ev, S, Tr
from parsers.tools.qwen3_coder import ParamArgs, ParamState, ParamSyntax

__all__ = ["MinimaxM2ToolParser", "MINIMAX_M2_SPEC", "MINIMAX_PARAMS"]

_INVOKES = ("INVOKE_DQ", "INVOKE_SQ", "INVOKE_BARE")
_NAME_ENDS = ("NAME_END_DQ", "NAME_END_SQ", "NAME_END_BARE")

MINIMAX_M2_SPEC = EngineSpec(
    terminals={
        "THINK_START": "<think>", "THINK_END": "</think>",
        "TOOL_START": "<minimax:tool_call>", "TOOL_END": "</minimax:tool_call>",
        "PARAM_START": "<parameter name=", "PARAM_END": "</parameter>",
        "INVOKE_DQ": '<invoke name="', "INVOKE_SQ": "<invoke name='", "INVOKE_BARE": "<invoke name=",
        "INVOKE_END": "</invoke>",
        "NAME_END_DQ": '">', "NAME_END_SQ": "'>", "NAME_END_BARE": ">",
    },
    transitions={
        (S.REASONING, "THINK_START"): Tr(S.REASONING),
        (S.REASONING, "THINK_END"): Tr(S.CONTENT, (Ev.REASONING_END,)),
        (S.CONTENT, "THINK_END"): Tr(S.CONTENT),
        (S.REASONING, "TOOL_START"): Tr(S.PREAMBLE, (Ev.REASONING_END,)),
        (S.CONTENT, "TOOL_START"): Tr(S.PREAMBLE),
        (S.ARGS, "PARAM_START"): Tr(S.ARGS, (Ev.ARG,)),
        (S.ARGS, "PARAM_END"): Tr(S.ARGS, (Ev.ARG,)),
        (S.PREAMBLE, "TOOL_END"): Tr(S.CONTENT),
        (S.BETWEEN, "TOOL_END"): Tr(S.CONTENT),
        (S.CONTENT, "TOOL_END"): Tr(S.CONTENT),
        (S.ARGS, "INVOKE_END"): Tr(S.BETWEEN, (Ev.CALL_END,)),
        **{(state, invoke): Tr(S.NAME, (Ev.CALL_START,))
           for state in (S.CONTENT, S.PREAMBLE, S.BETWEEN) for invoke in _INVOKES},
        **{(S.NAME, end): Tr(S.ARGS) for end in _NAME_ENDS},
    },
    validate_tool_names=True,
)  # fmt: skip

_NAME = r"""(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[^>\s]+))"""
MINIMAX_PARAMS = ParamSyntax(
    header=regex.compile(rf"<{WS}parameter\s+name{WS}={WS}{_NAME}{WS}>"),
    value_end=regex.compile(rf"<{WS}/{WS}parameter{WS}>"),
    next_header=regex.compile(rf"<{WS}parameter\s+name{WS}="),
    name=lambda m: (m.group("dq") or m.group("sq") or m.group("bare") or "").strip(),
    trim_newline=False,
    skip_empty=True,
    preferred=regex.compile(rf"""<{WS}parameter\s+name{WS}={WS}(?:"[^"]*"|'[^']*'){WS}>"""),
)


class MinimaxM2ToolParser(EngineToolParser):
    name: ClassVar[str] = "minimax_m2"
    spec = MINIMAX_M2_SPEC
    args_state: ClassVar[type[JsonState]] = ParamState

    def arg_format(self, name: str) -> ParamArgs:
        return ParamArgs(self.tool_properties(name), MINIMAX_PARAMS)
