"""Pythonic tool calls: `[get_weather(city='Paris'), search(query="x")]` (Llama 3.2/4, ToolACE).

vLLM 0.33 (`PythonicToolParser`; `Llama4PythonicToolParser` for `llama4_pythonic`) batch
semantics reproduced here:

* the *whole* output must match vLLM's TOOL_CALL_REGEX at its start and parse (`ast.parse`)
  as a module whose first statement is a list of calls; otherwise the whole output is
  content;
* a call's name is a name or dotted name; keyword values must be literals (constants,
  dicts with constant keys, lists/tuples/sets, placeholder-free f-strings, `null`/`true`/
  `false`, signed numbers); arguments are `json.dumps({kw: value}, ensure_ascii=False)`;
  positional arguments are ignored; content is None when calls are returned;
* llama4_pythonic first strips a leading `<|python_start|>` and removes every
  `<|python_end|>` (and then returns that stripped text as content on failure).

Streaming: the decision needs the whole output, so an output that starts like a call list
(`[` + identifier + `(`) is held (bounded by MAX_TOOL_CALL_CHARS) and decided at the end;
any other output streams as content from its first characters. The regex runs with vLLM's
1 s timeout (a timeout means content, as upstream); it runs only on text that already
parses as a call list, where it cannot backtrack badly.
"""

from __future__ import annotations

import ast
import re
from typing import Any, ClassVar

import regex

from parsers.tools._base import Phase, Run, StreamingToolParser, json_dumps

__all__ = ["PythonicToolParser", "Llama4PythonicToolParser", "pythonic_calls"]

# vLLM's pattern, verbatim in meaning (tools_parsers/pythonic_tool_parser.py).
TOOL_CALL_REGEX = regex.compile(
    r"\[([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s)?\),\s*)*"
    r"([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s*)?\)\s*)+\]",
    regex.DOTALL,
)
REGEX_TIMEOUT_S = 1.0  # vLLM's VLLM_TOOL_PARSE_REGEX_TIMEOUT_SECONDS default
# Every regex match starts like this; anything else is known to be content early.
_HEAD = re.compile(r"\[[a-zA-Z]\w*")
_JSON_NAMES = {"null": None, "true": True, "false": False}


class _NotLiteral(Exception):
    """A call argument vLLM refuses (the whole output becomes content)."""


def _value(node: ast.expr) -> Any:  # noqa: C901 - one branch per accepted literal kind
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, str | int | float):
            return node.value
        raise _NotLiteral
    if isinstance(node, ast.Dict):
        if not all(isinstance(k, ast.Constant) for k in node.keys):
            raise _NotLiteral
        return {k.value: _value(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[union-attr]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.JoinedStr) and all(isinstance(p, ast.Constant) for p in node.values):
        return "".join(str(p.value) for p in node.values)  # type: ignore[attr-defined]
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _value(node.operand)
        if isinstance(operand, int | float) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    raise _NotLiteral


def _dotted(node: ast.expr) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise _NotLiteral
    parts.append(node.id)
    return ".".join(reversed(parts))


def _call(node: ast.Call) -> tuple[str, str]:
    if not isinstance(node.func, ast.Name | ast.Attribute):
        raise _NotLiteral
    name = _dotted(node.func)
    arguments = {kw.arg: _value(kw.value) for kw in node.keywords}
    return name, json_dumps(arguments)


def pythonic_calls(text: str) -> list[tuple[str, str]] | None:
    """The calls vLLM extracts from a whole output, or None (the output is content)."""
    try:
        module = ast.parse(text)
        parsed = getattr(module.body[0], "value", None) if module.body else None
        if not isinstance(parsed, ast.List) or not all(isinstance(e, ast.Call) for e in parsed.elts):
            return None
        calls = [_call(e) for e in parsed.elts]  # type: ignore[arg-type]
    # What ast.parse / json.dumps raise on text vLLM then returns as content: syntax errors,
    # NUL bytes and over-long ints (ValueError), unserialisable keys (TypeError), deep nesting.
    except (_NotLiteral, SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None
    try:
        if TOOL_CALL_REGEX.match(text, timeout=REGEX_TIMEOUT_S) is None:
            return None
    except TimeoutError:
        return None
    return calls


class PythonicToolParser(StreamingToolParser):
    name: ClassVar[str] = "pythonic"
    initial_phase: ClassVar[Phase] = Phase.LEAD
    # llama4_pythonic: a leading marker that is stripped, and an end marker that is removed.
    start_marker: ClassVar[str | None] = None
    end_marker: ClassVar[str | None] = None

    def _lead(self, run: Run) -> bool:
        marker = self.start_marker
        if marker is not None and run.buf.startswith(marker):
            run.open_call(run.take(len(marker)))
            run.flag = True  # `flag`: the output started with the start marker
            run.phase = Phase.CALL
            return True
        if marker is not None and marker.startswith(run.buf) and not run.eos:
            return False
        if run.buf in ("", "[") and not run.eos:
            return False
        head = _HEAD.match(run.buf)
        if head is not None and head.end() == len(run.buf) and not run.eos:
            return False  # "[name" may still become "[name("
        is_call_list = head is not None and run.buf[head.end() : head.end() + 1] == "("
        run.phase = Phase.CALL if is_call_list else Phase.VERBATIM
        return True

    def _call(self, run: Run) -> bool:
        if not run.eos:
            return False
        text = run.take(len(run.buf))
        if run.flag and self.end_marker is not None:
            text = text.replace(self.end_marker, "")
        calls = pythonic_calls(text)
        if calls is None:
            run.content(text)  # llama4: the stripped text, as upstream returns it
        else:
            for name, arguments in calls:
                run.emit_call(name, arguments)
        run.pending = ""
        run.phase = Phase.VERBATIM
        return True

    handlers: ClassVar = {
        Phase.LEAD: _lead,
        Phase.CALL: _call,
        Phase.VERBATIM: StreamingToolParser.verbatim,
    }


class Llama4PythonicToolParser(PythonicToolParser):
    name: ClassVar[str] = "llama4_pythonic"
    start_marker: ClassVar[str | None] = "<|python_start|>"
    end_marker: ClassVar[str | None] = "<|python_end|>"
