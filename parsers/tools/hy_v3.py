"""Hy3 (HunYuan v3) tool calls, every marker carrying the checkpoint's `token_suffix`:

    <tool_calls>
    <tool_call>get_weather<tool_sep>
    <arg_key>city</arg_key>
    <arg_value>Tokyo</arg_value>
    </tool_call>
    </tool_calls>

vLLM 0.33 (`HYV3ToolParser`) batch semantics reproduced here:

* without `<tool_calls>` the output is content, verbatim; else the content is the text before
  it (None when empty);
* a call is `<tool_call>NAME<tool_sep>ARGS</tool_call>` (the last one may stop at the end of
  the output); the name is stripped; ARGS holds `<arg_key>K</arg_key>` + blanks +
  `<arg_value>V</arg_value>` pairs (K and V verbatim), written as `json.dumps` of the object;
* each value is read against the tool's schema types (`hy_value`: boolean, integer, number,
  JSON for other types, the string itself for strings; with no usable type JSON, then a
  Python literal, then the string).

The suffix is vLLM's `tokenizer.init_kwargs["token_suffix"]`; here it is read off the
vocabulary (`hy_suffix`): the one `<tool_calls...>` token it has.

Streaming: content streams until `<tool_calls>`; a call is sent at its `<tool_sep>` and its
pairs stream (glm47's `ArgPairs`: a string-only value as it is read, others when they close).

Divergences from vLLM's batch (stream == our batch instead; `DIVERGENCES` in the tests):
* `<tool_calls>` present but no call results: the output stays content (vLLM keeps only the
  text before `<tool_calls>`);
* a call before `<tool_calls>` is content only (vLLM also returns it as a call, after it had
  streamed as content);
* `ArgPairs`' own: a streamed value that never closes is kept, a repeated key is written twice;
* a value whose Python literal is not JSON (a set, bytes): the string itself (vLLM drops every
  call).

As in vLLM, a name runs (lazily) to the first `<tool_sep>`, whatever markers come first.
"""

from __future__ import annotations

import ast
import enum
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._base import Vocab
from parsers._errors import ParserConfigError, StateError
from parsers.tools._coerce import tool_properties
from parsers.tools._machine import (
    EOS,
    MAX_NAME_CHARS,
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
from parsers.tools.glm47 import ArgPairs, ArgPairsState

__all__ = ["HyV3ToolParser", "hy_suffix", "hy_types", "hy_value"]


def hy_suffix(vocab: Vocab | None, probe: str = "<tool_calls") -> str:
    """The marker suffix of a Hy vocabulary: "" when `<tool_calls>` is a token, else the tail
    of the one `<tool_calls...>` token (looked up among the added tokens, where markers are,
    before the whole vocabulary)."""
    if vocab is None or vocab.token_to_id(probe + ">") is not None:
        return ""
    for source in ("get_added_tokens_decoder", "get_vocab"):
        lookup = getattr(vocab, source, None)
        if not callable(lookup):
            continue
        found = lookup()
        tokens = (str(getattr(t, "content", t)) for t in found.values()) if source != "get_vocab" else found
        suffixes = sorted(
            tok[len(probe):-1] for tok in tokens
            if tok.startswith(probe) and tok.endswith(">") and tok[len(probe)] not in "_>"
            and not tok[len(probe)].isalnum()
        )
        if suffixes:
            return suffixes[0]
    return ""


# -- values --------------------------------------------------------------------------------

_ALIASES = {"str": "string", "text": "string", "varchar": "string", "char": "string",
            "enum": "string", "bool": "boolean", "binary": "boolean", "int": "integer",
            "float": "number", "double": "number", "list": "array", "dict": "object",
            "map": "object"}  # fmt: skip


def _normalize(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    exact = _ALIASES.get(raw)
    if exact is not None:
        return exact
    lower = raw.lower()
    if lower.startswith(("int", "uint", "long", "short", "unsigned")):
        return "integer"
    if lower.startswith(("num", "float")):
        return "number"
    return raw


def hy_types(schema: Any) -> frozenset[Any]:
    """vLLM's `_get_types`: the normalised non-null types a property schema allows."""
    if not isinstance(schema, dict):
        schema = {}
    if "type" in schema:
        kind = schema["type"]
        options: Any = [{"type": t} for t in kind] if isinstance(kind, list) else [schema]
    elif "anyOf" in schema:
        options = schema["anyOf"]
    elif "oneOf" in schema:
        options = schema["oneOf"]
    else:
        options = [{"type": "string"}]
    types = {_normalize(o.get("type", "string")) for o in options if isinstance(o, dict)}
    return frozenset(t for t in types if t != "null" and isinstance(t, str))


def _number(value: str) -> int | float | None:
    try:
        return float(value) if "." in value or "e" in value or "E" in value else int(value)
    except ValueError:
        return None


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def hy_value(value: str, types: frozenset[Any]) -> Any:
    """vLLM's `_parse_value` for one raw value."""
    if "boolean" in types and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if "integer" in types:
        try:
            return int(value)
        except ValueError:
            pass
    if "number" in types:
        number = _number(value)
        if number is not None:
            return number
    if types - {"string", "boolean", "integer", "number"}:
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            pass
    if "string" in types:
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        pass
    try:
        literal = ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return value
    return literal if _jsonable(literal) else value  # documented divergence


# -- the parser ----------------------------------------------------------------------------


class P(enum.StrEnum):
    CONTENT = "content"
    BLOCK = "block"  # after <tool_calls>: text is dropped
    NAME = "name"  # after <tool_call>: the name until <tool_sep>
    ARGS = "args"  # the call's pairs until </tool_call>


@dataclass(frozen=True, slots=True)
class HyCall(CallState):
    args: ArgPairsState | None = None


@dataclass(frozen=True, slots=True)
class HyState(ToolStreamState):
    call: HyCall | None = None


@functools.cache
def _markers(suffix: str) -> dict[str, str]:
    names = ("tool_calls", "/tool_calls", "tool_call", "/tool_call", "tool_sep", "arg_key",
             "/arg_key", "arg_value", "/arg_value")
    return {name: f"<{name}{suffix}>" for name in names}


class HyV3ToolParser(TableToolParser):
    name: ClassVar[str] = "hy_v3"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = HyState
    call_phases = frozenset({P.NAME, P.ARGS})

    def __init__(
        self,
        vocab: Vocab,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        max_call_chars: int | None = None,
    ) -> None:
        super().__init__(vocab, tools, max_call_chars=max_call_chars)
        self.suffix = hy_suffix(vocab)
        self.table = self._build_table(self.suffix)  # the markers carry the suffix
        if vocab is not None and any(
            vocab.token_to_id(self.markers[m]) is None for m in ("tool_calls", "/tool_calls")
        ):
            raise ParserConfigError(f"{self.name}: could not locate tool call start/end tokens")

    def _build_table(self, suffix: str) -> Table:
        self.markers = _markers(suffix)
        return _table(suffix)

    @property
    def state_tag(self) -> str:
        return f"{self.name}{self.suffix}"

    def arg_format(self, name: str) -> ArgPairs:
        m = self.markers
        props = tool_properties(self.tools, name) if self.tools and name else {}
        props = props if isinstance(props, Mapping) else {}
        return ArgPairs(
            props, tags=(m["arg_key"], m["/arg_key"], m["arg_value"], m["/arg_value"]),
            convert=lambda key, value: hy_value(value, hy_types(props.get(key))),
            streams=lambda key: hy_types(props.get(key)) == {"string"}, strip_keys=False,
        )  # fmt: skip

    def check_ext(self, state: ToolStreamState) -> None:
        call = state.call
        if call is not None and (call.args is None) != (state.phase == P.NAME):
            raise StateError(f"{self.name}: a call's argument state does not fit its phase")


def _parser(run: Run) -> HyV3ToolParser:
    parser = run.parser
    assert isinstance(parser, HyV3ToolParser)
    return parser


def _open_block(run: Run, marker: str) -> None:
    run.open_call_raw(marker)


def _open_call(run: Run, marker: str) -> None:
    run.keep_raw(marker)
    run.call = HyCall()


def _name(run: Run, text: str) -> None:
    name = run.call.name + text
    if len(name) > MAX_NAME_CHARS:  # no name is this long: not a call
        run.keep_raw(name)
        run.call = None
        run.phase = P.BLOCK
        return
    run.call = run.call.replace(name=name)


def _sep(run: Run, marker: str) -> None:
    name = run.call.name.strip()
    fmt = _parser(run).arg_format(name)
    run.call = run.call.replace(name=name, args=fmt.start(name))
    run.start_call(name)


def _drop_call(run: Run, marker: str) -> None:
    run.keep_raw(run.call.name + marker)
    run.call = None


def _args(run: Run, text: str) -> None:
    call: HyCall = run.call
    assert call.args is not None
    args, out, _ = _parser(run).arg_format(call.name).feed(call.args, text)
    run.call = call.replace(args=args)
    run.args(out)


def _end_call(run: Run, marker: str) -> None:
    call: HyCall = run.call
    assert call.args is not None
    _, out = _parser(run).arg_format(call.name).end(call.args)
    run.args(out)
    run.call = None


def _flush(run: Run, text: str) -> None:
    if run.n_calls == 0:  # no call: the whole output is content (see the divergences)
        run.content(run.pending)
        run.pending = ""


def _name_eos(run: Run, text: str) -> None:
    _drop_call(run, "")
    _flush(run, text)


def _args_eos(run: Run, text: str) -> None:
    _end_call(run, "")


@functools.cache
def _table(suffix: str) -> Table:
    m = _markers(suffix)
    return Table(
        phases=tuple(P),
        markers=tuple(m.values()),
        steps={
            (P.CONTENT, TEXT): Step(to_content),
            (P.CONTENT, m["tool_calls"]): Step(_open_block, P.BLOCK),
            (P.CONTENT, EOS): Step(nothing),
            (P.BLOCK, TEXT): Step(drop),
            (P.BLOCK, m["tool_call"]): Step(_open_call, P.NAME),
            (P.BLOCK, EOS): Step(_flush),
            (P.NAME, TEXT): Step(_name),
            (P.NAME, m["tool_sep"]): Step(_sep, P.ARGS),
            (P.NAME, EOS): Step(_name_eos, P.BLOCK),
            (P.ARGS, TEXT): Step(_args),
            (P.ARGS, m["/tool_call"]): Step(_end_call, P.BLOCK),
            (P.ARGS, EOS): Step(_args_eos, P.BLOCK),
        },
    )


HyV3ToolParser.table = _table("")
