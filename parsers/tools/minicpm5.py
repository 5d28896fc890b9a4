"""MiniCPM5 XML tool calls (vLLM 0.33 `MiniCPM5XMLToolParser`, `--tool-call-parser minicpm5`):

    <function name="get_weather"><param name="city">Tokyo</param></function>

vLLM's batch, reproduced:

* the output is first normalised: `Ġ` -> space, `Ċ` -> newline, `<functionname=` /
  `<paramname=` -> `<function name=` / `<param name=`;
* a block runs from `<function` to the next `</function>`. It is read as XML (the element
  `function`, or a `function` child of the root; its `param` children, or those of an
  `arguments` child), else by regex (`<function name="..."` and `<param name="...">...</param>`,
  stripped unless one CDATA section). A `param` without a name, a repeated key, or a wrapper
  (`properties` / `arguments` holding an object, when the tool has no such property) whose
  keys repeat or hold no known key drops the call; unknown keys are ignored when the tool
  declares properties. MiniCPM5's alias names (`get_details_by_phone`, `enable_roaming`...)
  map to the request's tools; a call to an unknown tool, or missing a `required` key, is
  dropped. A dropped call's block is content;
* values are text for `"type": "string"` properties, else `json.loads`, else
  `ast.literal_eval`, else the text;
* content: what is not a call, stripped when a `<function` occurs (verbatim otherwise), then
  only what follows `</think>`; None when a call is returned.

Streaming: a block whose `<function name="...">` tag is plain and names one of the request's
tools streams as its call from that tag (parsers/tools/_minicpm5_block.py: string values as
fragments, typed values and wrappers held to their `</param>`, the XML reading while the
block stays in the plain form); any other block (an alias or unknown name, an unusual tag) is
held to its `</function>` as vLLM reads it, bounded by the tool-call limit. Content streams; a
`<think>` opening the output is dropped up to its `</think>` (and the blanks after it); text
after the first call is dropped (vLLM's content is None then). Divergences from vLLM's batch
(tests name each), where it looks at the whole output: a streamed call stays a call where
vLLM drops it (a required key missing; a repeated, nameless or unknown-wrapped parameter; the
output ending in the block) and a repeated key is written twice; a value's XML reading stays
where the block later proves not XML, and markup inside a value is read as text; content sent
before the first call stays (`content_before_call`); leading blanks before text are kept when
a `<function` comes only later; an unclosed leading `<think>`, or one with nothing after it,
is dropped where vLLM returns it (it would have to be held); a blank run over MAX_HELD_CHARS
is sent, not held for stripping; a `</think>` not opening the output, or a second one, does not
take back the text before it; a value `json.dumps` refuses (a set, bytes) is written as its
text (a held block: its call is dropped) where vLLM returns the whole output as content. An
empty output has no content (None, vLLM '').

Composed without a call (vLLM's DelegatingParser keeps the raw output then), the chat parser
uses `with_raw_without_calls`: content is the text verbatim (no normalisation, thought or
stripping) until the first call, and dropped after it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any, ClassVar, Self

import regex

from parsers._base import MAX_HELD_CHARS, ToolParser, ToolParseResult, make_tool_call_id
from parsers._errors import LimitExceededError, StateError
from parsers._events import ContentDelta, Event, ToolArgsDelta, ToolCallStart
from parsers._state import JsonState
from parsers._text import partial_marker_len
from parsers.tools._base import MAX_TOOL_CALL_CHARS, assemble
from parsers.tools._minicpm5_block import BlockReader, BlockState, Tools, decode_or, open_tag_name

__all__ = ["MiniCPM5ToolParser", "MiniCPM5ToolState"]

_OPEN, _CLOSE = "<function", "</function>"
_THINK, _THINK_END = "<think>", "</think>"
_COLLAPSED_PARAM = "<paramname="
_MAX_TAG = 1024  # a `<function` tag longer than this is held whole with its block

_NAME = regex.compile(r"<function\s+name=['\"]([^'\"]+)['\"][^>]*>")
_PARAM = regex.compile(r"<param\s+name=['\"]([^'\"]+)['\"]>([\s\S]*?)</param>", regex.DOTALL)
_NAMELESS = regex.compile(r"<param(?![^>]*\bname=)[^>]*>", regex.DOTALL)
_CDATA = ("<![CDATA[", "]]>")

# Modes of the content stream.
_LEAD = "lead"  # nothing but blanks yet; a `<think>` here opens the thought
_HEAD = "head"  # nothing but blanks yet, no thought
_THOUGHT = "thought"  # inside the leading thought: content dropped
_AFTER_THOUGHT = "after_thought"  # after `</think>`: blanks dropped until text
_BODY = "body"  # text has been sent; blanks are held until more text
_MODES = (_LEAD, _HEAD, _THOUGHT, _AFTER_THOUGHT, _BODY)


@dataclasses.dataclass(frozen=True, slots=True)
class MiniCPM5ToolState(JsonState):
    VERSION = 2

    parser: str
    mode: str = _LEAD
    tail: str = ""  # undecided text: a possible start of a marker
    blanks: str = ""  # whitespace not yet sent (dropped if the output ends there)
    block: str = ""  # the open `<function...` tag, or (whole) block held to its `</function>`
    whole: bool = False  # the held block is parsed at its close (its tag is not streamed)
    call: BlockState | None = None  # the open block streamed as a call
    seen: bool = False  # a `<function` occurred (content is then stripped)
    n_calls: int = 0

    def __post_init__(self) -> None:
        if self.mode not in _MODES or self.n_calls < 0:
            raise ValueError("unknown mode or negative count")
        if self.block and not self.block.startswith(_OPEN):
            raise ValueError("a held block starts with <function")
        if self.call is not None and (self.block or self.whole or not self.n_calls):
            raise ValueError("a streamed call holds no block and is counted")


def _normalise(text: str) -> str:
    return text.replace("\u0120", " ").replace("\u010a", "\n")


class _Block:
    """One `<function ...>...</function>` block read as vLLM's `_parse_function_block`."""

    def __init__(self, tools: Tools) -> None:
        self.tools = tools
        self.name: str | None = None
        self.args: dict[str, Any] = {}

    def coerce(self, key: str, value: Any) -> Any:
        if self.tools.is_string(self.name or "", key):
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return decode_or(value, value) if isinstance(value, str) else value

    def add(self, key: str, text: str, seen: set[str]) -> bool:
        """One argument; False if the call is to be dropped."""
        allowed = set(self.tools.props.get(self.name or "", {}))
        if key in ("properties", "arguments") and allowed and key not in allowed:
            wrapped = decode_or(text, None)
            if not isinstance(wrapped, dict):
                return False
            added = False
            for inner, value in wrapped.items():
                if inner not in allowed:
                    continue
                if inner in seen:
                    return False
                seen.add(inner)
                self.args[inner] = self.coerce(inner, value)
                added = True
            return added
        if allowed and key not in allowed:
            return True
        if key in seen:
            return False
        seen.add(key)
        self.args[key] = self.coerce(key, text)
        return True

    def read_xml(self, block: str) -> tuple[bool, bool]:
        """(read, invalid): the XML reading; raises where the text is not XML."""
        parser = ET.XMLParser()  # no DTD can precede the root: no entity is ever declared
        parser.feed(block)
        root = parser.close()
        node = root if root.tag == "function" else root.find("function")
        if node is None:
            return False, False
        self.name = (node.attrib.get("name") or "").strip()
        params = list(node.findall("param"))
        arguments = node.find("arguments")
        if arguments is not None and not params:
            params = list(arguments.findall("param"))
        seen: set[str] = set()
        for param in params:
            key = param.attrib.get("name")
            if not key or not self.add(key, param.text or "", seen):
                self.args.clear()
                return bool(self.name), True
        return bool(self.name), False

    def read_regex(self, block: str) -> tuple[bool, bool]:
        found = _NAME.search(block)
        if found:
            self.name = (found.group(1) or "").strip()
        invalid = bool(_NAMELESS.search(block))
        seen: set[str] = set()
        for param in _PARAM.finditer(block):
            value = param.group(2) or ""
            if value.startswith(_CDATA[0]) and value.endswith(_CDATA[1]):
                value = value[len(_CDATA[0]) : -len(_CDATA[1])]
            else:
                value = value.strip()
            if not self.add(param.group(1).strip(), value, seen):
                invalid = True
                break
        if invalid:
            self.args.clear()
        return bool(self.name), invalid

    def read(self, block: str) -> tuple[str, dict[str, Any]] | None:
        read, invalid = False, False
        try:
            read, invalid = self.read_xml(block)
        except Exception:  # noqa: BLE001 - not XML (or a value json.dumps refuses): regex
            read = False
        if not read:
            try:
                read, invalid_regex = self.read_regex(block)
                invalid = invalid or invalid_regex
            except Exception:  # noqa: BLE001
                read = False
        if not self.name or invalid:
            return None
        name, args = _alias(self.name, self.args, set(self.tools.props))
        if name not in self.tools.props:
            return None
        required = self.tools.required.get(name, set())
        if required and not required.issubset(args.keys()):
            return None
        return (name, args) if read else None


def _first(args: Mapping[str, Any], *keys: str) -> Any:
    """`args.get(a) or args.get(b) or ...` (the last one when none is truthy)."""
    value = None
    for key in keys:
        value = args.get(key)
        if value:
            break
    return value


_ID_ALIASES = {"get_line_details": "line_id", "get_line_status": "line_id",
               "get_roaming_status": "line_id", "get_plan_details": "plan_id"}  # fmt: skip


def _alias(name: str, args: dict[str, Any], names: set[str]) -> tuple[str, dict[str, Any]]:
    """vLLM's `_normalize_alias_tool_call`: MiniCPM5's habitual names for tau-bench tools."""
    if name in names:
        return name, args
    if name == "get_details_by_phone" and "get_customer_by_phone" in names:
        phone = _first(args, "phone_number", "phone")
        if phone is not None:
            return "get_customer_by_phone", {"phone_number": phone}
    if name == "get_details_by_name" and "get_customer_by_name" in names:
        full_name, dob = _first(args, "full_name", "name"), _first(args, "date_of_birth", "dob")
        mapped: dict[str, Any] = {}
        if full_name is not None:
            mapped["full_name"] = full_name
        if dob is not None:
            mapped["date_of_birth"] = mapped["dob"] = dob
        if mapped:
            return "get_customer_by_name", mapped
    if name in _ID_ALIASES and "get_details_by_id" in names:
        detail = _first(args, _ID_ALIASES[name], "id")
        if detail is not None:
            return "get_details_by_id", {"id": detail}
    if name in ("enable_roaming", "disable_roaming") and "toggle_roaming" in names:
        line = _first(args, "line_id", "id")
        if line is not None:
            return "toggle_roaming", {"line_id": line, "enabled": name == "enable_roaming"}
    if name in ("add_refueled_data", "add_data_to_line") and "refuel_data" in names:
        line = _first(args, "line_id", "id")
        amount = _first(args, "amount_gb", "gb", "gb_amount", "amount")
        mapped = {}
        if "customer_id" in args:
            mapped["customer_id"] = args["customer_id"]
        if line is not None:
            mapped["line_id"] = line
        if amount is not None:
            mapped["amount_gb"] = amount
        if mapped:
            return "refuel_data", mapped
    return name, args


class MiniCPM5ToolParser(ToolParser):
    name: ClassVar[str] = "minicpm5"
    # DelegatingParser (no engine) keeps the raw output when no call is made: the chat parser
    # asks for that (`with_raw_without_calls`); content is then the text verbatim until a call.
    keeps_raw_without_calls: bool = False

    def with_raw_without_calls(self) -> Self:
        clone = copy.copy(self)
        clone.keeps_raw_without_calls = True
        return clone

    def __init__(self, vocab: Any, tools: Any = None, *, max_call_chars: int | None = None) -> None:
        super().__init__(vocab, tools, max_call_chars=max_call_chars)
        self._tools = Tools(self.tools)
        self._reader = BlockReader(self._tools, self.call_limit)

    @property
    def call_limit(self) -> int:
        return min(self.max_call_chars or MAX_TOOL_CALL_CHARS, MAX_TOOL_CALL_CHARS)

    def initial_state(self) -> MiniCPM5ToolState:
        return MiniCPM5ToolState(parser=self.name)

    @classmethod
    def state_type(cls) -> type[MiniCPM5ToolState]:
        return MiniCPM5ToolState

    def feed(self, state: JsonState, text: str, request_id: str) -> tuple[MiniCPM5ToolState, list[Event]]:
        text = text if self.keeps_raw_without_calls else _normalise(text)
        return _Run(self, self._check(state), request_id).run(text, final=False)

    def finish(self, state: JsonState, request_id: str) -> tuple[MiniCPM5ToolState, list[Event]]:
        return _Run(self, self._check(state), request_id).run("", final=True)

    def parse(self, text: str, request_id: str) -> ToolParseResult:
        state, events = self.feed(self.initial_state(), text, request_id)
        _, tail = self.finish(state, request_id)
        return assemble(events + tail)

    def _check(self, state: object) -> MiniCPM5ToolState:
        if not isinstance(state, MiniCPM5ToolState) or state.parser != self.name:
            raise StateError(f"{self.name}: not a state of this parser")
        if len(state.tail) + len(state.blanks) > MAX_HELD_CHARS or len(state.block) > self.call_limit:
            raise StateError(f"{self.name}: held text over its bound")
        return state

    def call_of(self, block: str) -> tuple[str, str] | None:
        """A closed block's call (name, arguments JSON), or None: the block is content."""
        found = _Block(self._tools).read(_normalise(block).replace("<functionname=", "<function name=")
                                         .replace(_COLLAPSED_PARAM, "<param name="))
        if found is None:
            return None
        try:
            return found[0], json.dumps(found[1], ensure_ascii=False)
        except (TypeError, ValueError):  # named divergence: vLLM makes all output content
            return None


class _Run:
    def __init__(self, parser: MiniCPM5ToolParser, state: MiniCPM5ToolState, request_id: str) -> None:
        self.parser = parser
        self.raw = parser.keeps_raw_without_calls
        self.request_id = request_id
        self.mode = state.mode
        self.blanks = state.blanks
        self.block = state.block
        self.whole = state.whole
        self.call = state.call
        self.seen = state.seen
        self.n_calls = state.n_calls
        self.tail = state.tail
        self.events: list[Event] = []

    def run(self, text: str, *, final: bool) -> tuple[MiniCPM5ToolState, list[Event]]:
        buf = self.tail + text
        self.tail = ""
        while buf:
            if self.call is not None:
                buf = self.in_call(buf)
            else:
                buf = self.in_block(buf) if self.block else self.in_content(buf, final)
        if final:
            self.end()
        state = MiniCPM5ToolState(self.parser.name, self.mode, self.tail, self.blanks, self.block,
                                  self.whole, self.call, self.seen, self.n_calls)  # fmt: skip
        if len(state.block) > self.parser.call_limit:
            raise LimitExceededError(f"{self.parser.name}: a tool call over {self.parser.call_limit} "
                                     "characters (--max-tool-call-chars)")  # fmt: skip
        if len(state.tail) + len(state.blanks) > MAX_HELD_CHARS:
            raise LimitExceededError(f"{self.parser.name}: held blanks over {MAX_HELD_CHARS} characters")
        return state, self.events

    def in_call(self, buf: str) -> str:
        assert self.call is not None
        self.call, text, rest = self.parser._reader.feed(self.call, _normalise(buf))
        if text:
            self.events.append(ToolArgsDelta(self.n_calls - 1, text))
        return rest or ""

    def in_block(self, buf: str) -> str:
        if not self.whole:  # the `<function ...>` tag decides: streamed, or held whole
            self.block += buf
            end = self.block.find(">")
            if end < 0:
                self.whole = len(self.block) > _MAX_TAG
                return ""
            tag, rest = self.block[: end + 1], self.block[end + 1 :]
            name = open_tag_name(_normalise(tag), self.parser._tools)
            if name is None:  # an alias or an unknown tool: vLLM reads the whole block
                self.whole, block, self.block = True, self.block, _OPEN
                return block[len(_OPEN) :]
            index = self.n_calls
            self.n_calls += 1
            self.events.append(ToolCallStart(index, make_tool_call_id(self.request_id, index), name))
            self.block, self.call = "", BlockState(name)
            return rest
        start = max(0, len(self.block) - len(_CLOSE) + 1)
        self.block += buf
        end = self.block.find(_CLOSE, start)
        if end < 0:
            return ""
        end += len(_CLOSE)
        block, rest = self.block[:end], self.block[end:]
        self.block, self.whole = "", False
        call = self.parser.call_of(block)
        if call is None:
            self.text(block)
        else:
            index = self.n_calls
            self.n_calls += 1
            self.events.append(ToolCallStart(index, make_tool_call_id(self.request_id, index), call[0]))
            self.events.append(ToolArgsDelta(index, call[1]))
        return rest

    def in_content(self, buf: str, final: bool) -> str:
        if self.raw:
            at = buf.find(_OPEN)
            keep = 0 if final or at >= 0 else partial_marker_len(buf, (_OPEN,))
            end = at if at >= 0 else len(buf) - keep
            self.text(buf[:end])
            self.tail = "" if at >= 0 else buf[end:]
            if at < 0:
                return ""
            self.seen, self.block = True, _OPEN
            return buf[at + len(_OPEN) :]
        if self.mode == _LEAD:
            body = buf.lstrip()
            self.text(buf[: len(buf) - len(body)])  # leading blanks are held
            buf = body
            if self.mode == _LEAD:  # (a blank run too long to hold ends it)
                if body.startswith(_THINK):
                    self.blanks = ""
                    self.mode = _THOUGHT
                    return body[len(_THINK) :]
                if not body or (not final and _THINK.startswith(body)):
                    self.tail = body  # a possible `<think>`
                    return ""
                self.mode = _HEAD
            if not buf:
                return ""
        markers = [_OPEN, _COLLAPSED_PARAM] + ([_THINK_END] if self.mode == _THOUGHT else [])
        hits = [(i, m) for m in markers if (i := buf.find(m)) >= 0]
        if not hits:
            keep = 0 if final else partial_marker_len(buf, markers)
            self.text(buf[: len(buf) - keep])
            self.tail = buf[len(buf) - keep :]
            return ""
        at, marker = min(hits)
        self.text(buf[:at])
        rest = buf[at + len(marker) :]
        if marker == _OPEN:
            self.seen = True
            self.block = _OPEN
            if self.mode in (_HEAD, _AFTER_THOUGHT):
                self.blanks = ""
        elif marker == _THINK_END:
            self.mode = _AFTER_THOUGHT
        else:
            self.text("<param name=")
        return rest

    def text(self, text: str) -> None:
        """Content (after normalisation), as vLLM's stripped, thought-free content."""
        if not text or self.mode == _THOUGHT or self.n_calls:
            return
        if self.raw:
            self.events.append(ContentDelta(text))
            return
        if self.mode == _AFTER_THOUGHT:
            text = text.lstrip()
            if not text:
                return
        body = text.rstrip()
        if body:
            self.events.append(ContentDelta(self.blanks + body))
            self.blanks = ""
            self.mode = _BODY
        self.blanks += text[len(body) :]
        while len(self.blanks) > MAX_HELD_CHARS:  # a blank run too long to hold: sent
            self.events.append(ContentDelta(self.blanks[:MAX_HELD_CHARS]))
            self.blanks = self.blanks[MAX_HELD_CHARS:]
            self.mode = _HEAD if self.mode == _LEAD else self.mode

    def end(self) -> None:
        self.call = None  # a streamed call the output cut keeps what it sent
        if self.block:  # a block the output cut: its text is content
            block, self.block, self.whole = self.block, "", False
            self.text(block)
        if self.tail:
            tail, self.tail = self.tail, ""
            self.text(tail)
        if self.blanks and not self.seen and self.mode in (_LEAD, _HEAD, _BODY) and not self.n_calls:
            self.events.append(ContentDelta(self.blanks))
        self.blanks = ""
