"""JSON tool-call arguments as a stream: the scanner's events in, the arguments string out.

`JsonArgs` is an `ArgFormat` (see `_args.py`) over the raw text of a JSON body. What it writes
concatenates, over any split, to what vLLM's batch rule computes from the whole body:

* canonical output is `json.dumps(value, ensure_ascii=False)` (vLLM's legacy parsers write
  `json.dumps(obj["arguments"])`), with the tool's schema coercion when a schema is given
  (vLLM's `_fix_arg_types`, which re-serialises with the same `json.dumps`);
* raw output (`raw=True`) is the model's exact text, as vLLM keeps it where it takes the
  argument text as is (Granite's `"arguments"` member, Mistral v11), except that a coercion
  that changes a value makes vLLM re-serialise the whole object: followed when the raw text
  so far is canonical anyway (then the rest is written canonically), reported as `diverged`
  otherwise.

Which part of the body is the output (`Root`):

* VALUE: the whole body;
* ENVELOPE: a `{"name": ..., "arguments": ...}` object (legacy JSON families): the output is
  the value of the first of `args_keys` met; the name member is captured (`name`, `named`);
  other members are skipped (validated, not written). `started` is the family's commit point.
* ENGINE: vLLM's `ParserEngine._extract_args_json`: the object without its `name` member, or
  the value of `arguments` / `parameters` when one comes first. A body that is not an object
  is an ERROR here (the family falls back to the raw text).

Exactness holds back only a number or literal until its token ends, an escape, and a string
the schema may coerce (until it closes); other strings stream as they are decoded. The state
is the scanner's plus the open containers and a few flags.

`diverged` reports where a stream cannot follow vLLM's batch (the caller documents it): in
ENGINE, an `arguments` / `parameters` member after other members were written (vLLM would
return only its value, or the later `arguments` over an earlier `parameters`); in raw mode, a
coerced value after non-canonical raw text. Duplicate keys are written as they come (json
keeps the last value at the first position).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._errors import LimitExceededError
from parsers._state import JsonState
from parsers.tools._coerce import coerce_value as _coerce
from parsers.tools._engine import string_only_schema
from parsers.tools._json_scan import DONE, ERROR, MORE, TRUNCATED, Ev, ScanState, scan, scan_end

__all__ = ["Root", "SchemaTable", "JsonArgsState", "JsonArgs", "DONE", "ERROR", "MORE", "TRUNCATED"]


class Root(enum.StrEnum):
    VALUE = "value"
    ENVELOPE = "envelope"
    ENGINE = "engine"


NO_NODE = -1
WHOLE = -2  # ENGINE: an unwrapped string value, which vLLM returns verbatim unless coerced
# Dispositions of a document value: W written, S skipped, B the ENVELOPE/ENGINE body object
# (its members are routed), N the envelope's name (captured), H a string held for coercion,
# V a root string written verbatim (decoded: `string_verbatim`).
W, S, B, N, H, V = "W", "S", "B", "N", "H", "V"


class SchemaTable:
    """A tool's parameter schema as numbered nodes (built once per tool, never in a state).

    Node 0 is the arguments object, whose members follow the tool's `properties`. A node has
    its schema, whether coercion never changes a string under it, its members' nodes (when
    its `properties` is an object) and its items' node (when `items` is an object)."""

    def __init__(self, properties: Mapping[str, Any] | None) -> None:
        self.schemas: list[Any] = []
        self.members: list[dict[str, int] | None] = []
        self.items: list[int] = []
        self.string_only: list[bool] = []
        if properties:
            self._add({"properties": dict(properties)})

    def _add(self, schema: Any) -> int:
        node = len(self.schemas)
        self.schemas.append(schema)
        self.members.append(None)
        self.items.append(NO_NODE)
        self.string_only.append(string_only_schema(schema))
        props = schema.get("properties") if isinstance(schema, dict) else None
        if isinstance(props, dict):
            self.members[node] = {k: self._add(v) for k, v in props.items() if isinstance(v, dict)}
        items = schema.get("items") if isinstance(schema, dict) else None
        if isinstance(items, dict):
            self.items[node] = self._add(items)
        return node

    def root(self) -> int:
        return 0 if self.schemas else NO_NODE

    def member(self, node: int, key: str) -> int:
        members = self.members[node] if node != NO_NODE else None
        return members.get(key, NO_NODE) if members else NO_NODE

    def item(self, node: int) -> int:
        return self.items[node] if node != NO_NODE else NO_NODE


@dataclass(frozen=True, slots=True)
class JsonArgsState(JsonState):
    """scan: the scanner. disp: the disposition of each open document container. next: the
    disposition of the value about to start ("" inherits). sdisp: the open string's. out:
    the output's open containers ("{" / "[" before their first member, "}" / "]" after).
    nodes: their schema nodes. node: the node of the value about to start. held: a held
    string (decoded; its raw text in raw mode). where: "" the root is not reached, "r" in
    it, "a" after it. name / named: the envelope's name. ordered: it came before the
    arguments. members: ENGINE: the body is the output (a member was written); unwrapped:
    the member whose value is the output instead. canonical:
    raw mode writes canonically from here on. lag: raw mode: (raw, canonical) text not yet
    known to agree; None once they disagreed. gap: canonical mode: the whitespace read since
    the last thing written (kept only so a body that breaks there keeps its text; bounded).
    kind: ENVELOPE: the first token of the arguments value ("{", "[", '"' or "s" for a scalar;
    "" before it), so a family can refuse a type before it commits. status: MORE / DONE /
    ERROR / TRUNCATED."""

    VERSION: ClassVar[int] = 2

    scan: ScanState = ScanState()
    disp: str = ""
    next: str = ""
    sdisp: str = ""
    out: str = ""
    nodes: tuple[int, ...] = ()
    node: int = NO_NODE
    held: str = ""
    where: str = ""
    name: str = ""
    named: bool = False
    ordered: bool = False
    members: bool = False
    unwrapped: str = ""
    canonical: bool = False
    lag: tuple[str, ...] | None = ("", "")
    diverged: bool = False
    gap: str = ""
    kind: str = ""
    status: str = MORE

    def __post_init__(self) -> None:
        # An ERROR state is final (the writer stopped mid-way): only its shape is checked.
        if self.status != ERROR and len(self.disp) != len(self.scan.doc):
            raise ValueError("dispositions do not match the open containers")
        if set(self.disp) - {W, S, B}:
            raise ValueError("dispositions do not match the open containers")
        if len(self.out) != len(self.nodes) or set(self.out) - set("{}[]"):
            raise ValueError("bad output containers")
        if self.next not in ("", W, S, N) or self.sdisp not in ("", W, S, N, H, V):
            raise ValueError("bad disposition")
        if self.kind not in ("", "{", "[", '"', "s"):
            raise ValueError("bad arguments kind")
        if self.where not in ("", "r", "a") or self.status not in (MORE, DONE, ERROR, TRUNCATED):
            raise ValueError("bad progress")
        if self.lag is not None and len(self.lag) != 2:
            raise ValueError("bad lag")

    def held_chars(self) -> int:
        lag = sum(map(len, self.lag)) if self.lag else 0
        return self.scan.held_chars() + len(self.held) + len(self.name) + lag + len(self.gap)

    @property
    def started(self) -> bool:
        return self.where in ("r", "a")


class JsonArgs:
    """An `ArgFormat` over a JSON body (module docstring). `limit`: the longest value it may
    hold (the tool-call limit)."""

    def __init__(
        self,
        *,
        root: Root = Root.VALUE,
        schema: SchemaTable | None = None,
        raw: bool = False,
        args_keys: tuple[str, ...] | None = None,
        name_key: str = "name",
        string_verbatim: bool = False,
        limit: int = 512 * 1024,
        ascii_only: bool = False,
    ) -> None:
        """`string_verbatim`: a root value that is a string is the arguments themselves (its
        decoded text), as vLLM's Mistral pre-v11 path keeps string arguments. `ascii_only`:
        canonical output is `json.dumps(value)` (ensure_ascii=True), as vLLM's Harmony parser
        writes it."""
        self.root, self.raw, self.limit = root, raw, limit
        self.ascii_only = ascii_only
        self.string_verbatim = string_verbatim
        self.schema = schema or SchemaTable(None)
        if args_keys is None:  # vLLM's engine reads both; legacy envelopes name theirs
            args_keys = ("arguments", "parameters") if root is Root.ENGINE else ("arguments",)
        self.args_keys, self.name_key = args_keys, name_key

    def start(self, name: str = "") -> JsonArgsState:
        return JsonArgsState(node=self.schema.root())

    def dumps(self, value: Any) -> str:
        return json.dumps(value, ensure_ascii=self.ascii_only)

    def string_body(self, text: str) -> str:
        """`text` inside a JSON string as `dumps` escapes it (character by character)."""
        return json.dumps(text, ensure_ascii=self.ascii_only)[1:-1]

    def feed(self, state: JsonArgsState, text: str) -> tuple[JsonArgsState, str, str | None]:
        """(state, output, rest): `rest` is the text after the body's value once it ended
        (or from the offending character on an ERROR)."""
        if state.status != MORE:
            return state, "", text
        scanned, events, end, status = scan(state.scan, text)
        state, out = self._apply(state, scanned, events, status)
        return state, out, (text[end:] if state.status != MORE else None)

    def end(self, state: JsonArgsState) -> tuple[JsonArgsState, str]:
        """The body ended: a pending number completes; TRUNCATED / ERROR land in `status`."""
        if state.status != MORE:
            return state, ""
        scanned, events, status = scan_end(state.scan)
        return self._apply(state, scanned, events, status)

    def held_raw(self, state: JsonArgsState) -> str:
        """The raw text the state holds unwritten (a held string, an unfinished key, escape
        or token): what a caller writes raw when the body turns out not to be JSON."""
        scan_state = state.scan
        held = '"' + state.held if state.held or state.sdisp == H else ""
        key = '"' + scan_state.kraw if scan_state.inside == "k" else ""
        return state.gap + held + key + scan_state.esc + scan_state.tok

    def _apply(
        self, state: JsonArgsState, scanned: ScanState, events: list[Ev], status: str
    ) -> tuple[JsonArgsState, str]:
        writer = _Writer(self, state)
        for event in events:
            writer.event(event)
            if writer.f["status"] == ERROR:
                break
        if writer.f["status"] == MORE:
            writer.f["status"] = status
        new = state.replace(scan=scanned, **writer.f)
        if len(new.held) > self.limit:
            raise LimitExceededError(f"a held argument value exceeds {self.limit} characters")
        return new, "".join(writer.parts)


# Whitespace kept for a body that breaks after it (more is whitespace the model repeated).
_MAX_GAP = 256

_FIELDS = ("disp", "next", "sdisp", "out", "nodes", "node", "held", "where", "name", "named",
           "ordered", "members", "unwrapped", "canonical", "lag", "diverged", "gap", "kind", "status")  # fmt: skip


class _Writer:
    """Applies scanner events to the writer fields (`f`) of one JsonArgsState."""

    def __init__(self, fmt: JsonArgs, state: JsonArgsState) -> None:
        self.fmt, self.table = fmt, fmt.schema
        self.f: dict[str, Any] = {name: getattr(state, name) for name in _FIELDS}
        self.parts: list[str] = []

    # -- dispositions --------------------------------------------------------------------

    def _start(self, token: str) -> str:
        """The disposition of a value starting now (`token`: its first token's kind)."""
        f = self.f
        parent = f["disp"][-1] if f["disp"] else ""
        if parent in (W, S):
            return parent
        chosen, f["next"] = f["next"], ""
        if parent == B:
            if chosen == W and not f["kind"] and self.fmt.root is Root.ENVELOPE:
                f["kind"] = token
            return chosen or S
        # the document's own value
        if self.fmt.root is Root.VALUE:
            f["where"] = "r"
            return W
        return B

    def event(self, ev: Ev) -> None:
        kind = ev.kind
        if kind == "ws":
            if self.f["disp"] and self.f["disp"][-1] == W:
                self._out(ev.raw, "")
                if not self.fmt.raw:
                    self.f["gap"] = (self.f["gap"] + ev.raw)[-_MAX_GAP:]
            return
        self.f["gap"] = ""
        if kind in ("{", "["):
            self._open(ev, self._start(ev.kind))
        elif kind in ("}", "]"):
            self._close(ev)
        elif kind == "key":
            self._key(ev)
        elif kind == "str":
            self._string_start(ev, self._start('"'))
        elif kind == "chars":
            self._chars(ev)
        elif kind == "end":
            self._string_end(ev)
        elif kind == "scalar":
            self._scalar(ev, self._start("s"))

    # -- containers ------------------------------------------------------------------------

    def _open(self, ev: Ev, disp: str) -> None:
        f = self.f
        if disp == B and ev.kind != "{":
            f["status"] = ERROR  # the body must be an object
            return
        if disp == N:
            f["status"] = ERROR  # the name must be a string
            return
        f["disp"] += disp
        if disp == W:
            node = self._item_start()
            f["out"] += ev.kind
            f["nodes"] = (*f["nodes"], node)
            self._out(ev.raw, ev.kind)

    def _close(self, ev: Ev) -> None:
        f = self.f
        disp, f["disp"] = f["disp"][-1], f["disp"][:-1]
        if disp == W:
            f["out"] = f["out"][:-1]
            f["nodes"] = f["nodes"][:-1]
            self._out(ev.raw, ev.kind)
            self._maybe_root_done()
        elif disp == B:
            self._body_closed()

    def _item_start(self) -> int:
        """Separator and schema node for a written value: an array item, or a member/root."""
        f = self.f
        out = f["out"]
        if out and out[-1] in "[]":
            if out[-1] == "]":
                self._out("", ", ")
            f["out"] = out[:-1] + "]"
            return self.table.item(f["nodes"][-1])
        node: int = f["node"]
        return node

    def _maybe_root_done(self) -> None:
        f = self.f
        if not f["out"] and f["where"] == "r" and self.fmt.root is not Root.VALUE:
            f["where"] = "a"

    # -- keys and the body's members ------------------------------------------------------------

    def _key(self, ev: Ev) -> None:
        f = self.f
        parent = f["disp"][-1]
        if parent == W:
            first = f["out"][-1] == "{"
            f["out"] = f["out"][:-1] + "}"
            self._out(ev.raw, ("" if first else ", ") + self.fmt.dumps(ev.value) + ": ")
            f["node"] = self.table.member(f["nodes"][-1], ev.value)
        elif parent == B:
            f["next"] = self._route(ev)

    def _route(self, ev: Ev) -> str:
        """The disposition of a body member's value."""
        fmt, f, key = self.fmt, self.f, ev.value
        if fmt.root is Root.ENVELOPE:
            if key in fmt.args_keys and f["where"] == "":
                f["where"], f["ordered"] = "r", f["named"]
                f["node"] = self.table.root()
                return W
            if key == fmt.name_key and not f["named"]:
                return N
            return S
        return self._route_engine(ev)

    def _route_engine(self, ev: Ev) -> str:
        f, key = self.f, ev.value
        if key == self.fmt.name_key:
            return S
        if f["where"] == "" and key in self.fmt.args_keys:
            f["where"], f["unwrapped"] = "r", key  # the output is this member's value
            f["node"] = self.table.root()
            return W
        if f["unwrapped"]:
            if key == "arguments" and f["unwrapped"] == "parameters":
                f["diverged"] = True  # vLLM prefers `arguments` wherever it is
            return S
        if key in self.fmt.args_keys:
            f["diverged"] = True  # too late: members were written already
        if not f["members"]:  # the body is the output: it opens now
            f["members"], f["where"] = True, "r"
            f["out"], f["nodes"] = "{", (self.table.root(),)
            self._out("", "{")
        first = f["out"][-1] == "{"
        f["out"] = f["out"][:-1] + "}"
        self._out("", ("" if first else ", ") + self.fmt.dumps(key) + ": ")
        f["node"] = self.table.member(f["nodes"][-1], key)
        return W

    def _body_closed(self) -> None:
        f = self.f
        if f["members"]:
            f["out"], f["nodes"] = "", ()
            self._out("", "}")
        elif self.fmt.root is Root.ENGINE and f["where"] == "":
            self._out("", "{}")  # `{}` or only a name: the object without it
        f["where"] = "a"

    # -- strings and scalars -----------------------------------------------------------------

    def _string_start(self, ev: Ev, disp: str) -> None:
        f = self.f
        if disp == B:
            f["status"] = ERROR
            return
        if disp == W and not f["out"] and self.fmt.string_verbatim and not self.table.schemas:
            disp = V
        elif disp == W and not f["out"] and (f["unwrapped"] or self.fmt.string_verbatim):
            disp, f["node"], f["held"] = H, WHOLE, ""
        elif disp == W:
            node = self._item_start()
            if node == NO_NODE or self.table.string_only[node]:
                self._out(ev.raw, '"')
            else:
                disp, f["node"], f["held"] = H, node, ""
        elif disp == N:
            f["name"] = ""
        f["sdisp"] = disp

    def _chars(self, ev: Ev) -> None:
        f = self.f
        disp = f["sdisp"]
        if disp == W:
            self._out(ev.raw, self.fmt.string_body(ev.value))
        elif disp == V:
            self._out(ev.raw, ev.value)
        elif disp == H:
            f["held"] += ev.raw
        elif disp == N:
            f["name"] += ev.value

    def _string_end(self, ev: Ev) -> None:
        f = self.f
        disp, f["sdisp"] = f["sdisp"], ""
        if disp == W:
            self._out(ev.raw, '"')
        elif disp == H:
            held, f["held"] = f["held"], ""
            raw = '"' + held + '"'  # the raw text: decoded now, as json would
            value = json.loads(raw)
            raw = raw if self.fmt.raw else None
            if f["node"] == WHOLE:
                self._out("", self._whole_string(value))
            else:
                self._coerced(value, f["node"], raw)
        elif disp == N:
            f["named"] = True
        if disp in (W, H, V):
            self._maybe_root_done()

    def _scalar(self, ev: Ev, disp: str) -> None:
        f = self.f
        if disp in (B, N):
            f["status"] = ERROR
            return
        if disp == W:
            self._coerced(ev.value, self._item_start(), ev.raw)
            self._maybe_root_done()

    def _whole_string(self, text: str) -> str:
        """`_fix_arg_types` on an arguments string: coerced (re-serialised) only if it is an
        object whose values the schema changes."""
        if not self.table.schemas:
            return text
        try:
            args = json.loads(text)
        except (ValueError, RecursionError):
            return text
        if not isinstance(args, dict):
            return text
        result, changed = _coerce(args, self.table.schemas[0])
        return self.fmt.dumps(result) if changed else text

    def _coerced(self, value: Any, node: int, raw: str | None) -> None:
        if node == NO_NODE:
            self._out(raw or "", self.fmt.dumps(value))
            return
        result, changed = _coerce(value, self.table.schemas[node])
        if changed and self.fmt.raw and not self.f["canonical"]:
            self._switch_to_canonical()
        self._out(raw if raw is not None and not changed else self.fmt.dumps(result), self.fmt.dumps(result))

    # -- output ------------------------------------------------------------------------------

    def _out(self, raw: str, canonical: str) -> None:
        """Write `canonical`, or in raw mode `raw` while tracking whether they agree."""
        f = self.f
        if not self.fmt.raw or f["canonical"]:
            if canonical:
                self.parts.append(canonical)
            return
        if raw:
            self.parts.append(raw)
        lag = f["lag"]
        if lag is None:
            return
        a, b = lag[0] + raw, lag[1] + canonical
        common = min(len(a), len(b))
        if a[:common] != b[:common]:
            f["lag"] = None
        else:
            f["lag"] = (a[common:], b[common:])

    def _switch_to_canonical(self) -> None:
        """vLLM re-serialises the whole object: possible from here only if the raw text
        written so far is exactly the canonical text so far."""
        f = self.f
        if f["lag"] == ("", ""):
            f["canonical"] = True
        else:
            f["diverged"] = True


# -- vLLM's parser engine with JSON arguments -----------------------------------------------


@dataclass(frozen=True, slots=True)
class EngineJsonState(JsonState):
    """json: the JSON writer. raw: the body stopped being JSON (or never was an object): its
    text is written as it is. ws: raw mode: trailing whitespace held (vLLM strips the body).
    wrote: something was written."""

    json: JsonArgsState = JsonArgsState()
    raw: bool = False
    ws: str = ""
    wrote: bool = False
    pre: str = ""  # the body read while nothing was written (vLLM may return it raw)

    def held_chars(self) -> int:
        return self.json.held_chars() + len(self.ws) + len(self.pre)


class EngineJsonArgs:
    """The `ArgFormat` of vLLM parser-engine families with JSON arguments (`tool_args_json`,
    no converter): `_extract_args_json` + `_fix_arg_types` (ENGINE root, schema-coerced).

    A blank body is "{}"; a body that is not an object is its raw text, stripped (as vLLM).
    Divergence (stream == our batch; families name it): a body that stops being JSON after
    its object began keeps the canonical text so far followed by its raw text from the fault
    (vLLM returns the whole raw body, stripped)."""

    def __init__(self, properties: Mapping[str, Any] | None, limit: int) -> None:
        self.json = JsonArgs(root=Root.ENGINE, schema=SchemaTable(properties), limit=limit)

    def start(self, name: str = "") -> EngineJsonState:
        return EngineJsonState(json=self.json.start(name))

    def feed(self, state: EngineJsonState, text: str) -> tuple[EngineJsonState, str, None]:
        if state.raw:
            return self._raw(state, text)
        js, out, rest = self.json.feed(state.json, text)
        if not state.wrote and not out and js.status == ERROR:  # not JSON at all: all raw
            return self._raw(state.replace(json=js, raw=True, pre=""), state.pre + text)
        consumed = text if rest is None else text[: len(text) - len(rest)]
        pre = "" if (state.wrote or out) else state.pre + consumed
        state = state.replace(json=js, wrote=state.wrote or bool(out), pre=pre)
        if js.status == DONE and rest and not rest.strip():
            # Held: it is the raw text's if other text follows, else stripped as vLLM does.
            return state.replace(ws=state.ws + rest), out, None
        if js.status == ERROR or (js.status == DONE and rest and rest.strip()):
            broken = self.json.held_raw(js) if js.status == ERROR else ""
            state, tail, _ = self._raw(state.replace(raw=True, pre=""), broken + (rest or ""))
            return state, out + tail, None
        return state, out, None

    def _raw(self, state: EngineJsonState, text: str) -> tuple[EngineJsonState, str, None]:
        body = state.ws + text
        if not state.wrote:
            body = body.lstrip()
        kept = body.rstrip()
        return state.replace(ws=body[len(kept) :], wrote=state.wrote or bool(kept)), kept, None

    def end(self, state: EngineJsonState) -> tuple[EngineJsonState, str]:
        if state.raw:
            return state, "" if state.wrote else "{}"
        js, out = self.json.end(state.json)
        if js.status != DONE and not state.wrote and not out and state.pre.strip():
            return state.replace(json=js, pre=""), state.pre.strip()  # never JSON: raw
        if js.status != DONE:
            out += self.json.held_raw(js)
        if not state.wrote and not out:
            out = "{}"
        return state.replace(json=js, pre=""), out
