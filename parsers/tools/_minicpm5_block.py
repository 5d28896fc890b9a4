"""One MiniCPM5 `<function name="...">` block streamed as its call (parsers/tools/minicpm5.py).

vLLM reads a closed block as XML (ElementTree) and, when that fails, by regex. The readings
differ: XML keeps a value's edge blanks, decodes entity references and CDATA sections and
turns `\\r\\n` into `\\n`; the regex strips a value, keeps entities as written and unwraps only
a value that is one CDATA section. Which one applies is known only at `</function>`, so this
reads the block as XML while it stays in the plain form models write (`<param name="k">`
items holding text, entity references and CDATA sections; blanks, text and `<arguments>`
tags between them) and as the regex does from the first character that leaves that form (a
bare `&` or `<`, `]]>` outside CDATA, a character XML refuses, any other tag). What streamed
before keeps its reading (README "Known differences").

Arguments are written as vLLM writes the dict it builds (`json.dumps(ensure_ascii=False)`, in
the order of the keys): a `"type": "string"` value streams as JSON string fragments; any
other value, and a `properties` / `arguments` wrapper the tool does not declare, is held to
its `</param>` (vLLM decodes it whole: JSON, else a Python literal); keys the tool does not
declare are skipped. The state holds that value, the current key and a short undecided tail
(a partial marker, a `<param ...>` tag, an entity): never the streamed text.

The call is sent from its `<function ...>` tag, so where vLLM drops it (a required key
missing, a repeated, nameless or unreadable parameter, a wrapper without a known key, the
output ending inside the block) ours keeps what streamed: a repeated key is written twice.
"""

from __future__ import annotations

import ast
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import regex

from parsers._base import MAX_HELD_CHARS
from parsers._errors import LimitExceededError
from parsers._state import JsonState
from parsers._text import partial_marker_len

__all__ = ["BlockReader", "BlockState", "Tools", "decode_or", "open_tag_name"]

CLOSE, PARAM_CLOSE, PARAM_OPEN = "</function>", "</param>", "<param"
CDATA_OPEN, CDATA_CLOSE = "<![CDATA[", "]]>"
_ARGUMENT_TAGS = ("<arguments>", "</arguments>")  # ElementTree reads params inside them too
_BETWEEN_MARKERS = (CLOSE, PARAM_OPEN, *_ARGUMENT_TAGS)
_VALUE_MARKERS = (PARAM_CLOSE, CLOSE, CDATA_OPEN)
_MAX_TAG = 1024  # a `<param ...>` tag longer than this is text (names are short)

# Plain-form tags: one double- or single-quoted name without blanks, markup or controls.
_XML_FUNCTION = regex.compile(r"<function[ \t\n]+name=([\"'])([^\"'<&\s\x00-\x1f]+)\1[ \t\n]*>")
_XML_PARAM = regex.compile(r"<param[ \t\n]+name=([\"'])([^\"'<&\s\x00-\x1f]+)\1[ \t\n]*>")
_REGEX_PARAM = regex.compile(r"<param\s+name=['\"]([^'\"]+)['\"]>")  # vLLM's regex reading
# Characters that matter to the XML reading of text (the rest is plain).
_XML_SPECIAL = regex.compile(r"[<&\]\r\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_ENTITY = regex.compile(r"&(?:#[0-9]+|#x[0-9a-fA-F]+|[A-Za-z_][\w.\-]*);")
_ENTITY_START = regex.compile(r"&(?:#x?[0-9a-fA-F]*|[A-Za-z_][\w.\-]*)?")
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
_BETWEEN, _PTAG, _VALUE, _CDATA, _DONE = "between", "ptag", "value", "cdata", "done"


def decode_or(text: str, failed: Any) -> Any:
    """vLLM's `_parse_arguments`: JSON, else a Python literal, else `failed`."""
    try:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SyntaxWarning)
                return ast.literal_eval(text)
    except Exception:  # noqa: BLE001 - vLLM keeps the text on any failure
        return failed


class Tools:
    """What vLLM's `_build_tool_maps` reads of the request's tools (later tools win)."""

    def __init__(self, tools: list[dict[str, Any]]) -> None:
        self.props: dict[str, dict[str, Any]] = {}
        self.required: dict[str, set[Any]] = {}
        for tool in tools:
            function = tool.get("function")
            if not isinstance(function, Mapping) or not function.get("name"):
                continue
            name = str(function["name"])
            params = function.get("parameters") or {}
            props = params.get("properties", {}) if isinstance(params, Mapping) else {}
            self.props[name] = dict(props) if isinstance(props, Mapping) else {}
            required = params.get("required", []) if isinstance(params, Mapping) else []
            try:
                self.required[name] = set(required)
            except TypeError:
                self.required[name] = set()

    def is_string(self, name: str, key: str) -> bool:
        schema = self.props.get(name, {}).get(key)
        return isinstance(schema, Mapping) and schema.get("type") == "string"

    def coerce(self, name: str, key: str, value: Any) -> Any:
        """vLLM's `_coerce_argument_value`."""
        if self.is_string(name, key):
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return decode_or(value, value) if isinstance(value, str) else value


def open_tag_name(tag: str, tools: Tools) -> str | None:
    """The tool a plain-form `<function name="...">` tag calls, when the tool is the
    request's (an alias or unknown name needs the whole block: vLLM may rename or drop it)."""
    found = _XML_FUNCTION.fullmatch(tag.replace("<functionname=", "<function name="))
    name = found.group(2) if found else None
    return name if name in tools.props else None


@dataclass(frozen=True, slots=True)
class BlockState(JsonState):
    """`phase`: between items, in a `<param` tag (held in `tail`), a value, a CDATA section.
    `xml`: the XML reading still holds. `key` / `sink`: the open value's key and its fate
    ("s" streamed string, "h" held value, "w" held wrapper, "x" skipped). Regex reading of a
    value: `fresh` nothing read yet, `begun` text past its leading blanks, `ws` blanks at its
    end so far, `cdata` it opened with `<![CDATA[` (held whole). `wrote`: a member is out."""

    VERSION: ClassVar[int] = 1

    name: str
    phase: str = _BETWEEN
    xml: bool = True
    tail: str = ""
    key: str = ""
    sink: str = ""
    held: str = ""
    fresh: bool = False
    begun: bool = False
    ws: str = ""
    cdata: bool = False
    wrote: bool = False

    def __post_init__(self) -> None:
        if self.phase not in (_BETWEEN, _PTAG, _VALUE, _CDATA) or self.sink not in (
            "",
            "s",
            "h",
            "w",
            "x",
        ):
            raise ValueError("bad block phase")
        if len(self.tail) > _MAX_TAG + len(CLOSE) or len(self.ws) > MAX_HELD_CHARS:
            raise ValueError("held block text over its bound")


class BlockReader:
    """Streams a block's arguments (module docstring); `limit` bounds a held value."""

    def __init__(self, tools: Tools, limit: int) -> None:
        self.tools, self.limit = tools, limit

    def feed(self, state: BlockState, text: str) -> tuple[BlockState | None, str, str | None]:
        """(state, arguments text, rest): the state is None and `rest` the text after
        `</function>` once the block ended."""
        run = _Run(self, state)
        rest = run.read(text)
        if len(run.held) > self.limit:
            raise LimitExceededError(
                f"minicpm5: a held argument value over {self.limit} characters"
            )
        if len(run.ws) > MAX_HELD_CHARS:  # a blank run too long to hold for the strip: kept
            run.piece(run.ws)
            run.ws = ""
        return (None if run.phase == _DONE else run.state()), "".join(run.out), rest


class _Run:
    """One `feed` on a mutable copy of the state."""

    def __init__(self, reader: BlockReader, state: BlockState) -> None:
        self.tools, self.base = reader.tools, state
        self.name = state.name
        self.phase, self.xml, self.tail, self.key = state.phase, state.xml, state.tail, state.key
        self.sink, self.held, self.fresh, self.begun = (
            state.sink,
            state.held,
            state.fresh,
            state.begun,
        )
        self.ws, self.cdata, self.wrote = state.ws, state.cdata, state.wrote
        self.out: list[str] = []

    def state(self) -> BlockState:
        return BlockState(self.name, self.phase, self.xml, self.tail, self.key, self.sink,
                          self.held, self.fresh, self.begun, self.ws, self.cdata, self.wrote)  # fmt: skip

    def read(self, text: str) -> str | None:
        buf, self.tail = self.tail + text, ""
        i = 0
        while i < len(buf):
            if self.phase == _DONE:
                return buf[i:]
            step = {_BETWEEN: self._between, _PTAG: self._ptag, _VALUE: self._value,
                    _CDATA: self._cdata}[self.phase]  # fmt: skip
            i = step(buf, i)
        return "" if self.phase == _DONE else None

    # -- output ---------------------------------------------------------------------------

    def _member(self, key: str) -> str:
        sep, self.wrote = (", " if self.wrote else "{"), True
        return sep + json.dumps(key, ensure_ascii=False) + ": "

    def _dumps(self, value: Any) -> str:
        try:
            return json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):  # a set or bytes literal: its text (vLLM: all content)
            return json.dumps(str(value), ensure_ascii=False)

    def write_string(self, text: str) -> None:
        if text:
            self.out.append(json.dumps(text, ensure_ascii=False)[1:-1])

    def _emit(self, text: str) -> None:
        """A piece of the open value, as its reading gives it."""
        if not text:
            return
        if self.cdata:
            self.held += text
        elif not self.xml:  # the regex reading strips the value
            if not self.begun:
                text = text.lstrip()
                if not text:
                    return
            body = text.rstrip()
            if body:
                self.piece(self.ws + body)
                self.ws = ""
            self.ws += text[len(body) :]
        elif not self.begun:  # leading blanks wait: a bare `&` or `<` next means the regex strip
            lead = len(text) - len(text.lstrip())
            self.ws += text[:lead]
            if lead == len(text):
                return
            self.piece(self.ws + text[lead:])
            self.ws = ""
        else:
            self.piece(text)
        self.begun = True

    def _leave_xml(self) -> None:
        """The block is not XML: the regex reading from here (it strips the open value)."""
        self.xml = False
        if not self.begun:
            self.ws = ""

    def piece(self, text: str) -> None:
        if self.sink == "s":
            self.write_string(text)
        elif self.sink in ("h", "w"):
            self.held += text

    # -- between items ----------------------------------------------------------------------

    def _hold(self, buf: str, i: int, markers: tuple[str, ...]) -> bool:
        rest = buf[i:]
        if any(len(rest) < len(m) and m.startswith(rest) for m in markers):
            self.tail = rest
            return True
        return False

    def _between(self, buf: str, i: int) -> int:
        special = _XML_SPECIAL.search(buf, i) if self.xml else None
        at = buf.find("<", i) if not self.xml else (special.start() if special else -1)
        if at < 0:
            return len(buf)
        ch = buf[at]
        if ch == "&":
            return self._entity(buf, at, write=False)
        if ch == "]":
            return self._brackets(buf, at, write=False)
        if ch != "<":  # `\r` is fine between items; a character XML refuses is not
            self.xml = self.xml and ch == "\r"
            return at + 1
        if buf.startswith(CLOSE, at):
            self._block_end()
            return at + len(CLOSE)
        if buf.startswith(PARAM_OPEN, at):
            self.phase = _PTAG
            return at
        if self.xml and buf.startswith(_ARGUMENT_TAGS, at):
            return at + buf[at:].index(">") + 1
        if self._hold(buf, at, _BETWEEN_MARKERS):
            return len(buf)
        self.xml = False  # another tag or markup: the regex reading
        return at + 1

    def _ptag(self, buf: str, i: int) -> int:
        end = buf.find(">", i)
        if end < 0:
            if len(buf) - i <= _MAX_TAG:
                self.tail = buf[i:]
                return len(buf)
            self.xml, self.phase = False, _BETWEEN  # no tag: text
            return i + len(PARAM_OPEN)
        close = buf.find(CLOSE, i, end + 1)
        if close >= 0:  # vLLM's block ends inside the tag
            self.xml, self.phase = False, _BETWEEN
            return close
        tag = buf[i : end + 1].replace("<paramname=", "<param name=")
        found = _XML_PARAM.fullmatch(tag) if self.xml else None
        key = found.group(2) if found else None
        if found is None:
            self.xml = False
            regex_found = _REGEX_PARAM.fullmatch(tag)
            key = regex_found.group(1).strip() if regex_found else None
        if key is None:  # not a parameter the reading sees
            self.phase = _BETWEEN
            return end + 1
        self._open_value(key)
        return end + 1

    def _open_value(self, key: str) -> None:
        allowed = self.tools.props.get(self.name, {})
        if key in ("properties", "arguments") and allowed and key not in allowed:
            sink = "w"
        elif allowed and key not in allowed:
            sink = "x"
        elif self.tools.is_string(self.name, key):
            sink = "s"
            self.out.append(self._member(key) + '"')
        else:
            sink = "h"
        self.phase, self.key, self.sink, self.held = _VALUE, key, sink, ""
        self.fresh, self.begun, self.ws, self.cdata = True, False, "", False

    # -- a value -------------------------------------------------------------------------

    def _value(self, buf: str, i: int) -> int:
        if not self.xml and self.fresh:  # the regex reading unwraps a value that is one CDATA
            if self._hold(buf, i, (CDATA_OPEN,)):
                return len(buf)
            self.fresh = False
            self.cdata = buf.startswith(CDATA_OPEN, i)
        self.fresh = False
        if not self.xml:
            return self._regex_value(buf, i)
        special = _XML_SPECIAL.search(buf, i)
        at = special.start() if special else len(buf)
        self._emit(buf[i:at])
        if special is None:
            return at
        ch = buf[at]
        if ch == "&":
            return self._entity(buf, at, write=True)
        if ch == "]":
            return self._brackets(buf, at, write=True)
        if ch == "\r":  # XML's end-of-line handling
            if at + 1 == len(buf):
                self.tail = "\r"
                return len(buf)
            if buf[at + 1] != "\n":
                self._emit("\n")
            return at + 1
        if ch != "<":  # a character XML refuses
            self._leave_xml()
            return at
        if buf.startswith(PARAM_CLOSE, at):
            self._close_value()
            return at + len(PARAM_CLOSE)
        if buf.startswith(CLOSE, at):
            self._block_end()
            return at + len(CLOSE)
        if buf.startswith(CDATA_OPEN, at):
            self.phase = _CDATA
            return at + len(CDATA_OPEN)
        if self._hold(buf, at, _VALUE_MARKERS):
            return len(buf)
        self._leave_xml()  # markup in a value: read as text from here (the regex reading)
        return at

    def _text_until(self, buf: str, i: int, markers: tuple[str, str]) -> tuple[int, str | None]:
        """Value text up to the first of `markers` (held while partial): (end, marker)."""
        ends = [(at, m) for m in markers if (at := buf.find(m, i)) >= 0]
        if not ends:
            keep = partial_marker_len(buf[i:], markers)
            self._emit(buf[i : len(buf) - keep])
            self.tail = buf[len(buf) - keep :]
            return len(buf), None
        at, marker = min(ends)
        self._emit(buf[i:at])
        return at + len(marker), marker

    def _regex_value(self, buf: str, i: int) -> int:
        end, marker = self._text_until(buf, i, (PARAM_CLOSE, CLOSE))
        if marker == PARAM_CLOSE:
            self._close_value()
        elif marker == CLOSE:
            self._block_end()
        return end

    def _cdata(self, buf: str, i: int) -> int:
        end, marker = self._text_until(buf, i, (CDATA_CLOSE, CLOSE))
        if marker == CLOSE:  # vLLM's block ends inside the section: not XML
            self._leave_xml()
            self._block_end()
        elif marker == CDATA_CLOSE:
            self.phase = _VALUE
        return end

    def _entity(self, buf: str, at: int, *, write: bool) -> int:
        """An entity reference (XML reading): decoded, held while partial; a bare `&`
        ends the XML reading."""
        found = _ENTITY.match(buf, at)
        if found is None:
            partial = _ENTITY_START.fullmatch(buf, at)
            if partial is not None and len(buf) - at < 32:
                self.tail = buf[at:]
                return len(buf)
            self._leave_xml()
            if write:
                self._emit("&")
            return at + 1
        char = _entity_char(found.group()[1:-1])
        if char is None:
            self._leave_xml()
            if write:
                self._emit("&")
            return at + 1
        if write:
            self._emit(char)
        return found.end()

    def _brackets(self, buf: str, at: int, *, write: bool) -> int:
        if self._hold(buf, at, (CDATA_CLOSE,)):
            return len(buf)
        if buf.startswith(CDATA_CLOSE, at):
            self._leave_xml()  # `]]>` outside CDATA is not XML
        if write:
            self._emit("]")
        return at + 1

    def _close_value(self) -> None:
        if self.xml and self.ws:  # a blank value: XML keeps it
            self.piece(self.ws)
        value = self.held
        if self.cdata:
            inner = value[len(CDATA_OPEN) : -len(CDATA_CLOSE)]
            value = inner if value.endswith(CDATA_CLOSE) and len(value) >= 12 else value.strip()
            if self.sink == "s":
                self.write_string(value)
        if self.sink == "s":
            self.out.append('"')
        elif self.sink == "h":
            self.out.append(
                self._member(self.key) + self._dumps(self.tools.coerce(self.name, self.key, value))
            )
        elif self.sink == "w":
            wrapped = decode_or(value, None)
            allowed = self.tools.props.get(self.name, {})
            for inner_key, inner in wrapped.items() if isinstance(wrapped, dict) else ():
                if inner_key in allowed:
                    coerced = self.tools.coerce(self.name, inner_key, inner)
                    self.out.append(self._member(inner_key) + self._dumps(coerced))
        self.phase, self.key, self.sink, self.held = _BETWEEN, "", "", ""
        self.fresh, self.begun, self.ws, self.cdata = False, False, "", False

    def _block_end(self) -> None:
        if self.phase in (_VALUE, _CDATA):  # a value `</function>` cut: kept as read
            self._close_value()
        self.out.append("}" if self.wrote else "{}")
        self.phase = _DONE


def _entity_char(body: str) -> str | None:
    if body in _NAMED:
        return _NAMED[body]
    if not body.startswith("#"):
        return None  # undefined: no DTD ever declares one
    code = int(body[2:], 16) if body.startswith("#x") else int(body[1:])
    if (
        code in (0x9, 0xA, 0xD)
        or 0x20 <= code <= 0xD7FF
        or 0xE000 <= code <= 0xFFFD
        or 0x10000 <= code <= 0x10FFFF
    ):
        return chr(code)
    return None
