"""K2 Horizon IFM tool calls (vLLM 0.33 `k2_horizon`: `K2HorizonToolParser`).

    <ifm|tool_calls><ifm|tool_call>get_weather<ifm|arg_key>city</ifm|arg_key>
    <ifm|arg_value>Tokyo</ifm|arg_value></ifm|tool_call></ifm|tool_calls>

The call format follows the chat template kwarg `tool_call_format`: "xml" (default), "xml_typed"
(each argument also carries `<ifm|arg_type>T</ifm|arg_type>`) or "json" (each call body is
`{"name": ..., "arguments": {...}}`); any other value is refused, as upstream.

Batch (vLLM's `extract_tool_calls`): the first `<ifm|tool_calls>` group decides, all or
nothing: it must be closed by `</ifm|tool_calls>`, hold only `<ifm|tool_call>` blocks (and
whitespace), and every call must parse: a name without whitespace (declared, when the request
has tools), well-formed arguments (no repeats, types present exactly in "xml_typed"), values
coerced as vLLM's `_coerce_xml_value` / `_coerce_json_value` do and serialisable without NaN.
Then the content is the text before the group plus the text after it; otherwise the whole
output is content. Content that is only whitespace is None. tool_choice="none": all content.

Streaming: content streams (a whitespace-only start is held). In the group, an xml call is
sent once its first value opens (its name, first key and type tag checked; a call without
arguments at its end), then its arguments stream a pair at a time: a value whose target
types are only "string" (or "any") streams as read, any other value is held to its
`</ifm|arg_value>` and coerced. A json call body is held to its
`</ifm|tool_call>` (decided whole, as vLLM's JSON reading needs). Until the first call is
sent the group's raw text is held (`pending`): a fault there makes the whole output content,
as in vLLM. State: the pending head, the open pair's key, type and held value, the keys
written; never argument text already sent.

Divergences from vLLM's batch (stream == our batch instead; tests `test_k2_horizon_*`), each
because a call had already streamed when later text made vLLM's batch take the group back: the
calls sent stay calls; at the fault, the open call keeps the arguments it has (a streaming
value is closed, a held pair dropped) and the text from the fault on (the held pair's text
included; whitespace before it between calls or pairs is dropped) is content; a group the
output cuts keeps its calls (an open call closes as above,
an unsent one is dropped).

Gap: a named tool_choice (vLLM also requires the name to be the named tool) is not checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias

from parsers._base import Vocab
from parsers._errors import ParserConfigError
from parsers._state import JsonState
from parsers.tools._args import json_string_body
from parsers.tools._k2_horizon_rules import (
    ARG_MARKERS,
    CALL_END,
    CALL_START,
    FORMATS,
    GAP,
    GROUP_END,
    GROUP_START,
    KEY_END,
    KEY_START,
    TYPE_END,
    TYPE_START,
    VALUE_END,
    VALUE_START,
    Malformed,
    call_name,
    call_properties,
    dumps,
    json_call,
    may_be_name,
    value_streams,
    xml_value,
)
from parsers.tools._machine import (
    ANY_MARKER,
    EOS,
    TEXT,
    CallState,
    Run,
    Step,
    Table,
    TableToolParser,
    ToolStreamState,
)

__all__ = ["K2HorizonToolParser"]

# -- the machine ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class K2Ext(JsonState):
    """seen: non-whitespace content was sent. ws: whitespace content held before that."""

    seen: bool = False
    ws: str = ""


@dataclass(frozen=True, slots=True)
class K2Call(CallState):
    """The call being read. name: its name text (until sent), then its name. raw: a json
    call's body. The open pair (xml): key (read so far; stripped once its value opens), gap
    (the whitespace after `</ifm|arg_key>`), kind (its type text; None: no type tag), tgap (the
    whitespace after `</ifm|arg_type>`), stream (its value streams), value (a held value).
    keys: the keys written (vLLM refuses a repeat). opened: the `{` was written."""

    key: str = ""
    gap: str = ""
    kind: str | None = None
    tgap: str = ""
    stream: bool = False
    value: str = ""
    keys: tuple[str, ...] = ()
    opened: bool = False


@dataclass(frozen=True, slots=True)
class K2State(ToolStreamState):
    call: K2Call | None = None
    ext: K2Ext = K2Ext()


K2Run: TypeAlias = Run["K2HorizonToolParser"]


def _content(run: K2Run, text: str) -> None:
    ext: K2Ext = run.ext
    if ext.seen:
        run.content(text)
    elif (ext.ws + text).strip():
        run.content(ext.ws + text)
        run.ext = K2Ext(seen=True)
    else:
        run.ext = ext.replace(ws=ext.ws + text)


def _any_content(run: K2Run, text: str) -> None:
    _content(run, text)


def _nothing(run: K2Run, text: str) -> None:
    """End of the output: held whitespace-only content is None (dropped)."""


def _open_group(run: K2Run, marker: str) -> None:
    if run.suppress:
        _content(run, marker)
        return
    run.phase = "group"
    run.pending = marker


def _held_text(run: K2Run) -> str:
    """The raw text of what the open call holds (nothing of a value that streamed)."""
    call: K2Call | None = run.call
    if call is None:
        return ""
    head = "" if call.started else CALL_START + call.name + call.raw
    if run.phase not in ("key", "gap", "type", "tgap", "value") or call.stream:
        return head
    text = head + KEY_START + call.key
    if run.phase != "key":
        text += KEY_END + call.gap
    if call.kind is not None:
        text += TYPE_START + call.kind + (TYPE_END + call.tgap if run.phase != "type" else "")
    return text + (VALUE_START + call.value if run.phase == "value" else "")


def _close_args(run: K2Run) -> None:
    """The sent call ends where it is: a streaming value is closed, a held pair dropped."""
    call: K2Call | None = run.call
    if call is not None and call.started:
        quote = '"' if run.phase == "value" and call.stream else ""
        run.args(quote + ("}" if call.opened else "{}"))
    run.call = None


def _broken(run: K2Run, text: str) -> None:
    """The group is not vLLM's call list. Before a call was sent: the whole output is content
    (what the group held, then everything after). After: see the module docstring."""
    if run.n_calls == 0:
        raw, run.pending = run.pending + text, ""
    else:
        # Whitespace between calls or pairs was dropped as it came: so is the fault's.
        raw = _held_text(run) + (text.lstrip() if run.phase in ("group", "pairs") else text)
        _close_args(run)
    run.call = None
    run.phase = "after"
    _content(run, raw)


def _group_text(run: K2Run, text: str) -> None:
    if text.strip():
        _broken(run, text)
    else:
        run.keep_raw(text)


def _close_group(run: K2Run, marker: str) -> None:
    if run.n_calls == 0:  # no call in it: vLLM's `not matches`
        _broken(run, marker)
    else:
        run.phase = "after"


def _cut(run: K2Run, text: str) -> None:
    """The output ends inside the group: with no call sent it is content, as in vLLM; else
    the calls sent stay (documented)."""
    if run.n_calls == 0:
        _content(run, run.pending)
        run.pending = ""
    _close_args(run)


def _open_call(run: K2Run, marker: str) -> None:
    run.keep_raw(marker)
    run.call = K2Call()
    run.phase = "body" if run.parser.tool_format == "json" else "name"


def _name_text(run: K2Run, text: str) -> None:
    call: K2Call = run.call
    run.keep_raw(text)
    run.call = call.replace(name=call.name + text)
    if not may_be_name(call.name + text, run.parser.tools):
        _broken(run, "")


def _valid_name(run: K2Run) -> bool:
    call: K2Call = run.call
    try:
        call_name(call.name.strip(), run.parser.tools)
    except Malformed:
        return False
    return True


def _commit(run: K2Run) -> K2Call:
    """Send the call: its name and first pair's tags (or its end) were read and are valid, so
    only later text can still break the group (module docstring)."""
    call: K2Call = run.call
    if not call.started:
        run.call = call.replace(name=call.name.strip())
        run.start_call(run.call.name)
    committed: K2Call = run.call
    return committed


def _keep(run: K2Run, text: str) -> None:
    """Raw text of a call not sent yet: the whole output's content if the group breaks."""
    if not run.call.started:
        run.keep_raw(text)


def _first_key(run: K2Run, marker: str) -> None:
    if _valid_name(run):
        run.keep_raw(marker)
        run.phase = "key"
    else:
        _broken(run, marker)


def _name_only(run: K2Run, marker: str) -> None:
    call: K2Call = run.call
    if any(tag in call.name for tag in ARG_MARKERS) or not _valid_name(run):
        _broken(run, marker)
        return
    _commit(run)
    run.args("{}")
    run.call, run.phase = None, "group"


def _body_text(run: K2Run, text: str) -> None:
    call: K2Call = run.call
    run.keep_raw(text)
    run.call = call.replace(raw=call.raw + text)


def _json_end(run: K2Run, marker: str) -> None:
    call: K2Call = run.call
    try:
        name, arguments = json_call(call.raw, run.parser.tools)
        dumped = dumps(arguments)
    except Malformed:
        _broken(run, marker)
        return
    run.emit_call(name, dumped)
    run.call, run.phase = None, "group"


def _key_text(run: K2Run, text: str) -> None:
    _keep(run, text)
    call: K2Call = run.call
    run.call = call.replace(key=call.key + text)


def _key_end(run: K2Run, marker: str) -> None:
    _keep(run, marker)
    call: K2Call = run.call
    run.call, run.phase = call.replace(gap=""), "gap"


def _gap_text(run: K2Run, text: str) -> str | None:
    call: K2Call = run.call
    found = GAP.match(text)
    end = found.end() if found is not None else 0
    _keep(run, text[:end])
    run.call = call.replace(gap=call.gap + text[:end])
    if end == len(text):
        return None
    _run_on(run, "")  # not a pair yet: vLLM's lazy key runs on through this `</ifm|arg_key>`
    return text[end:]


def _run_on(run: K2Run, marker: str) -> None:
    _keep(run, marker)
    call: K2Call = run.call
    run.call, run.phase = call.replace(key=call.key + KEY_END + call.gap + marker, gap=""), "key"


def _gap_key_end(run: K2Run, marker: str) -> None:
    """A second `</ifm|arg_key>`: the lazy key may end here instead."""
    _keep(run, marker)
    call: K2Call = run.call
    run.call = call.replace(key=call.key + KEY_END + call.gap, gap="")


def _type_start(run: K2Run, marker: str) -> None:
    if run.parser.tool_format != "xml_typed":  # vLLM: a type tag where the format has none
        _broken(run, marker)
        return
    _keep(run, marker)
    call: K2Call = run.call
    run.call, run.phase = call.replace(kind=""), "type"


def _type_text(run: K2Run, text: str) -> None:
    _keep(run, text)
    call: K2Call = run.call
    run.call = call.replace(kind=(call.kind or "") + text)


def _type_end(run: K2Run, marker: str) -> None:
    _keep(run, marker)
    call: K2Call = run.call
    run.call, run.phase = call.replace(tgap=""), "tgap"


def _tgap_text(run: K2Run, text: str) -> None:
    call: K2Call = run.call
    if GAP.fullmatch(text):
        _keep(run, text)
        run.call = call.replace(tgap=call.tgap + text)
    else:
        _broken(run, text)


def _value_start(run: K2Run, marker: str) -> None:
    call: K2Call = run.call
    key = call.key.strip()
    explicit = call.kind.strip() if call.kind is not None else None
    typed = run.parser.tool_format == "xml_typed"
    if not key or key in call.keys or (typed and not explicit):
        _broken(run, marker)
        return
    call = _commit(run)
    schema = call_properties(run.parser.tools, call.name).get(key)
    stream = value_streams(schema, explicit)
    if stream:
        run.args(_member(call, key) + '"')
    run.call = call.replace(key=key, stream=stream, value="", opened=call.opened or stream)
    run.phase = "value"


def _member(call: K2Call, key: str) -> str:
    return ("{" if not call.opened else ", ") + dumps(key) + ": "


def _value_text(run: K2Run, text: str) -> None:
    call: K2Call = run.call
    if call.stream:
        run.args(json_string_body(text))
    else:
        run.call = call.replace(value=call.value + text)


def _value_end(run: K2Run, marker: str) -> None:
    call: K2Call = run.call
    if call.stream:
        run.args('"')
    else:
        explicit = call.kind.strip() if call.kind is not None else None
        schema = call_properties(run.parser.tools, call.name).get(call.key)
        try:
            written = dumps(xml_value(call.value, schema, explicit))
        except Malformed:
            _broken(run, marker)
            return
        run.args(_member(call, call.key) + written)
    run.call = call.replace(key="", gap="", kind=None, tgap="", stream=False, value="",
                            keys=(*call.keys, call.key), opened=True)  # fmt: skip
    run.phase = "pairs"


def _pairs_text(run: K2Run, text: str) -> None:
    if text.strip():
        _broken(run, text)


def _next_key(run: K2Run, marker: str) -> None:
    run.phase = "key"


def _call_end(run: K2Run, marker: str) -> None:
    _close_args(run)
    run.phase = "group"


_CUT = Step(_cut)
_BROKEN = Step(_broken)
TABLE = Table(
    ("content", "group", "name", "body", "key", "gap", "type", "tgap", "value", "pairs", "after"),
    (GROUP_START, GROUP_END, CALL_START, CALL_END, *ARG_MARKERS),
    {
        ("content", TEXT): Step(_any_content),
        ("content", GROUP_START): Step(_open_group),
        ("content", EOS): Step(_nothing),
        ("group", TEXT): Step(_group_text),
        ("group", CALL_START): Step(_open_call),
        ("group", GROUP_END): Step(_close_group),
        ("group", ANY_MARKER): _BROKEN,
        ("group", EOS): _CUT,
        ("name", TEXT): Step(_name_text),
        ("name", KEY_START): Step(_first_key),
        ("name", CALL_END): Step(_name_only),
        ("name", GROUP_END): _BROKEN,
        ("name", EOS): _CUT,
        ("body", TEXT): Step(_body_text),
        ("body", CALL_END): Step(_json_end),
        ("body", GROUP_END): _BROKEN,
        ("body", EOS): _CUT,
        ("key", TEXT): Step(_key_text),
        ("key", KEY_END): Step(_key_end),
        ("key", CALL_END): _BROKEN,
        ("key", GROUP_END): _BROKEN,
        ("key", EOS): _CUT,
        ("gap", TEXT): Step(_gap_text),
        ("gap", KEY_END): Step(_gap_key_end),
        ("gap", TYPE_START): Step(_type_start),
        ("gap", VALUE_START): Step(_value_start),
        ("gap", CALL_END): _BROKEN,
        ("gap", GROUP_END): _BROKEN,
        ("gap", ANY_MARKER): Step(_run_on),
        ("gap", EOS): _CUT,
        ("type", TEXT): Step(_type_text),
        ("type", TYPE_END): Step(_type_end),
        ("type", CALL_END): _BROKEN,
        ("type", GROUP_END): _BROKEN,
        ("type", EOS): _CUT,
        ("tgap", TEXT): Step(_tgap_text),
        ("tgap", VALUE_START): Step(_value_start),
        ("tgap", ANY_MARKER): _BROKEN,
        ("tgap", EOS): _CUT,
        ("value", TEXT): Step(_value_text),
        ("value", VALUE_END): Step(_value_end),
        ("value", CALL_END): _BROKEN,
        ("value", GROUP_END): _BROKEN,
        ("value", EOS): _CUT,
        ("pairs", TEXT): Step(_pairs_text),
        ("pairs", KEY_START): Step(_next_key),
        ("pairs", CALL_END): Step(_call_end),
        ("pairs", ANY_MARKER): _BROKEN,
        ("pairs", EOS): _CUT,
        ("after", TEXT): Step(_any_content),
        ("after", ANY_MARKER): Step(_any_content),
        ("after", EOS): Step(_nothing),
    },
)


class K2HorizonToolParser(TableToolParser):
    name: ClassVar[str] = "k2_horizon"
    table = TABLE
    initial_phase = "content"
    state_class = K2State
    call_phases = frozenset({"name", "body", "key", "gap", "type", "tgap", "value", "pairs"})

    def __init__(
        self,
        vocab: Vocab | None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        max_call_chars: int | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(vocab, tools, max_call_chars=max_call_chars)
        fmt = (chat_template_kwargs or {}).get("tool_call_format", "xml")
        if not isinstance(fmt, str) or fmt not in FORMATS:
            raise ParserConfigError(
                f"Unsupported tool_call_format {fmt!r}. Supported values: {', '.join(sorted(FORMATS))}."
            )
        self.tool_format = fmt

    @property
    def state_tag(self) -> str:
        return f"k2_horizon/{self.tool_format}"

    def held_chars(self, state: ToolStreamState) -> int:
        ext, call = state.ext, state.call
        held = len(ext.ws) if isinstance(ext, K2Ext) else 0
        if isinstance(call, K2Call):
            held += len(call.name) + len(call.raw) + len(call.key) + len(call.kind or "") + len(call.value)
        return held

    def tool_choice_none_content(self, text: str, request_id: str) -> str | None:
        return text if text.strip() else None
