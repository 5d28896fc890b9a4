"""Checkpoint `response_template` metadata (vLLM 0.33 `hf` / `beam`) as a sans-IO machine.

A template names fields (`thinking`, `content`, `tool_calls`), each opened and closed by a
literal or a regex; the one field without an opener is the implicit sink. The machine routes
text to the open field, holding back only text that may still become a delimiter (regex
partial matching, as vLLM's `ResponseParser._scan`). Its state is that held text and the open
field: a tool region streams as `Opened`, its text as chunks, then `Closed`, for the tool
parser to turn into a call as it comes (parsers/_response_template_args.py). Only with
`whole_regions` (a tool field whose dialect does not stream) does the state keep a tool
region's body, parsed at its close as vLLM does (`Region`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import regex

from parsers._errors import LimitExceededError, ParserConfigError
from parsers._state import JsonState

THINKING, CONTENT, TOOLS = "thinking", "content", "tool_calls"
_FIELDS = frozenset({THINKING, CONTENT, TOOLS})
# A tool region's body is parsed whole at its close; bound it.
MAX_TOOL_REGION_CHARS = 1 << 20
PLACEHOLDER = regex.compile(r"\{(\w+(?:\.\w+)*)\}")


@dataclass(frozen=True)
class Delim:
    pattern: Any  # compiled `regex` pattern
    literals: tuple[str, ...] | None
    can_extend: bool


@dataclass(frozen=True)
class Field:
    name: str
    open: Delim | None
    close: Delim | None
    content: str
    content_args: Mapping[str, Any]
    transform: Any


def _delim(scope: str, spec: Mapping[str, Any], literal_key: str, pattern_key: str) -> Delim | None:
    if literal_key in spec and pattern_key in spec:
        raise ParserConfigError(f"{scope}: both {literal_key!r} and {pattern_key!r}")
    if pattern_key in spec:
        return Delim(regex.compile(spec[pattern_key], regex.DOTALL), None, False)
    if literal_key not in spec:
        return None
    raw = spec[literal_key]
    literals = [raw] if isinstance(raw, str) else list(dict.fromkeys(raw))
    if not literals or not all(isinstance(s, str) and s for s in literals):
        raise ParserConfigError(f"{scope}: {literal_key!r} needs non-empty strings")
    ordered = sorted(literals, key=len, reverse=True)  # longest alternative first
    can_extend = any(a != b and a.startswith(b) for a in literals for b in literals)
    pattern = regex.compile("|".join(regex.escape(s) for s in ordered), regex.DOTALL)
    return Delim(pattern, tuple(literals), can_extend)


@dataclass(frozen=True)
class Template:
    fields: Mapping[str, Field]
    implicit: str | None
    anchor: Delim

    @classmethod
    def load(cls, spec: Mapping[str, Any]) -> Template:
        """vLLM's `_serving_template`: validated, with an implicit content field added when
        every field has an opener."""
        if not isinstance(spec, Mapping) or spec.get("version", 1) != 1:
            raise ParserConfigError("response_template must be a version 1 dict")
        raw_fields = dict(spec.get("fields") or {})
        if not raw_fields or set(raw_fields) - _FIELDS or set(spec.get("defaults") or {}) - {"role"}:
            raise ParserConfigError(f"response_template fields must be among {sorted(_FIELDS)}")
        if CONTENT not in raw_fields and all(
            "open" in f or "open_pattern" in f for f in raw_fields.values()
        ):
            raw_fields[CONTENT] = {}
        fields = {name: _field(name, f) for name, f in raw_fields.items()}
        implicit = [n for n, f in fields.items() if f.open is None]
        if len(implicit) > 1:
            raise ParserConfigError(f"response_template: several implicit fields {implicit}")
        anchor = _delim("response_template", spec, "start_anchor", "start_anchor_pattern")
        if anchor is None:
            raise ParserConfigError("response_template needs start_anchor(_pattern)")
        return cls(fields, implicit[0] if implicit else None, anchor)


def _field(name: str, spec: Mapping[str, Any]) -> Field:
    content = spec.get("content", "text")
    if name != TOOLS and (content != "text" or "transform" in spec or "join" in spec):
        raise ParserConfigError(f"response_template field {name!r} cannot be streamed")
    if content not in ("text", "json"):
        raise ParserConfigError(f"response_template: content parser {content!r} not supported")
    return Field(
        name,
        _delim(name, spec, "open", "open_pattern"),
        _delim(name, spec, "close", "close_pattern"),
        content,
        dict(spec.get("content_args") or {}),
        spec.get("transform"),
    )


@dataclass(frozen=True, slots=True)
class RTState(JsonState):
    held: str = ""  # unconsumed text (a possible delimiter)
    field: str | None = None  # the open field; None: the implicit one
    opened: bool = False
    captures: tuple[tuple[str, str], ...] = ()
    body: str = ""  # whole_regions: a tool region's text, parsed at its close
    opener: str = ""  # whole_regions: the tool region's opener, for its passthrough as content
    calls: int = 0  # tool calls emitted so far (their indexes)


@dataclass(frozen=True, slots=True)
class Chunk:
    field: str
    text: str


@dataclass(frozen=True, slots=True)
class Region:
    """A tool region ended: its parsed value (None: malformed) and its raw text."""

    value: Any
    raw: str


@dataclass(frozen=True, slots=True)
class Opened:
    """A tool region opened (streamed regions): its opener's captures and text."""

    captures: tuple[tuple[str, str], ...]
    raw: str


@dataclass(frozen=True, slots=True)
class Closed:
    """The open tool region ended: its closer's text ("" at the end of the output)."""

    raw: str


Out = Chunk | Region | Opened | Closed


class Machine:
    """Routes text to template fields; a tool region streams (`Opened`, chunks, `Closed`),
    or with `whole_regions` comes out whole at its close (`Region`)."""

    def __init__(self, template: Template, *, whole_regions: bool = False) -> None:
        self.t = template
        self.whole_regions = whole_regions

    def initial_state(self) -> RTState:
        return RTState(field=None)

    def _current(self, state: RTState) -> str | None:
        return state.field if state.field is not None else self.t.implicit

    def _watch(self, state: RTState) -> list[tuple[str, Field, Delim]]:
        if state.field is not None:
            f = self.t.fields[state.field]
            return [("close", f, f.close)] if f.close is not None else []
        out = [("open", f, f.open) for f in self.t.fields.values() if f.open is not None]
        if self.t.implicit is not None:
            imp = self.t.fields[self.t.implicit]
            if imp.close is not None:
                out.append(("close", imp, imp.close))
        return out

    def _scan(self, state: RTState, buf: str, pos: int, eos: bool) -> tuple[Any, int]:
        best_key: tuple[Any, ...] | None = None
        best = None
        hold = len(buf)
        for kind, f, d in self._watch(state):
            m = d.pattern.search(buf, pos) if eos else d.pattern.search(buf, pos, partial=True)
            if m is None:
                continue
            if not eos and (m.partial or _can_grow(d, m, len(buf))):
                hold = min(hold, m.start())
                continue
            key = (m.start(), m.start() - m.end(), 0 if kind == "open" else 1, f.name)
            if best_key is None or key < best_key:
                best_key, best = key, (kind, f, m)
        if best is not None and best[2].start() >= hold:
            best = None
        return best, hold

    def run(self, state: RTState, text: str, *, eos: bool) -> tuple[RTState, list[Out]]:
        buf, pos = state.held + text, 0
        out: list[Out] = []
        while True:
            best, hold = self._scan(state, buf, pos, eos)
            if best is not None:
                kind, f, m = best
                state = self._accumulate(state, buf[pos : m.start()], out)
                pos = m.end()
                if kind == "open":
                    state = self._close(state, "", out)
                    caps = tuple((k, v) for k, v in m.groupdict().items() if v is not None)
                    whole = f.name == TOOLS and self.whole_regions
                    state = dataclasses.replace(
                        state, field=f.name, opened=True, captures=caps if whole else (),
                        body="", opener=m.group(0) if whole else "",
                    )
                    if f.name == TOOLS and not whole:
                        out.append(Opened(caps, m.group(0)))
                    continue
                had = state.opened
                state = self._close(state, m.group(0), out)
                if not had and m.start() == m.end():
                    break
                continue
            if eos:
                state = self._accumulate(state, buf[pos:], out)
                state = self._close(state, "", out)
                return dataclasses.replace(state, held=""), out
            state = self._accumulate(state, buf[pos:hold], out)
            pos = max(pos, hold)
            break
        held = buf[pos:]
        if len(held) > 4 * 4096:
            raise LimitExceededError("response_template: held text over 16 KiB")
        return dataclasses.replace(state, held=held), out

    def _accumulate(self, state: RTState, text: str, out: list[Out]) -> RTState:
        name = self._current(state)
        if not text or name is None:
            return state
        if name == TOOLS and not self.whole_regions:
            if not state.opened:  # an implicit tool region opens at its first text
                out.append(Opened((), ""))
            out.append(Chunk(name, text))
            return dataclasses.replace(state, opened=True) if not state.opened else state
        if name == TOOLS:
            body = state.body + text
            if len(body) > MAX_TOOL_REGION_CHARS:
                raise LimitExceededError("response_template: tool region too long")
            return dataclasses.replace(state, body=body, opened=True)
        out.append(Chunk(name, text))
        return dataclasses.replace(state, opened=True) if not state.opened else state

    def _close(self, state: RTState, closer: str, out: list[Out]) -> RTState:
        name = self._current(state)
        if name == TOOLS and state.opened and not self.whole_regions:
            out.append(Closed(closer))
        elif name == TOOLS and state.opened:
            value = parse_region(state.body, self.t.fields[TOOLS], dict(state.captures))
            out.append(Region(value, state.opener + state.body + closer))
        return dataclasses.replace(
            state, field=None, opened=False, captures=(), body="", opener=""
        )

    def closer_rest(self, state: RTState) -> str:
        """vLLM's `_closer_rest`: what completes a closer the output stopped inside, when
        that closer ends with a message start anchor (the next turn's start is missing)."""
        name = state.field
        if name is None or not state.opened:
            return ""
        f = self.t.fields[name]
        anchors = self.t.anchor.literals or ()
        for closer in (f.close.literals if f.close else None) or ():
            for anchor in anchors:
                if not closer.endswith(anchor) or closer == anchor:
                    continue
                for cut in range(len(closer) - 1, len(closer) - len(anchor) - 1, -1):
                    if state.held.endswith(closer[:cut]):
                        return closer[cut:]
        return ""


def _can_grow(d: Delim, m: Any, end: int) -> bool:
    if m.end() != end:
        return False
    if m.start() == m.end():
        return True
    return d.literals is None or d.can_extend


# -- tool region values (vLLM's content_parsers._json and _apply_transform) ----------------

_SENT_OPEN, _SENT_CLOSE = "\x01", "\x02"


def _lax_json(text: str, args: Mapping[str, Any]) -> Any:
    delims = args.get("string_delims") or []
    if delims and (_SENT_OPEN in text or _SENT_CLOSE in text):
        raise ValueError("reserved sentinel characters")
    captured: list[str] = []
    working = text
    for open_d, close_d in delims:
        def keep(m: Any) -> str:
            captured.append(m.group(1))
            return f"{_SENT_OPEN}{len(captured) - 1}{_SENT_CLOSE}"

        pattern = regex.escape(open_d) + r"(.*?)" + regex.escape(close_d)
        working = regex.sub(pattern, keep, working, flags=regex.DOTALL)
    if args.get("unquoted_keys"):
        working = regex.sub(r"(?<=[{,])(\w+):", r'"\1":', working)
    for i, s in enumerate(captured):
        working = working.replace(f"{_SENT_OPEN}{i}{_SENT_CLOSE}", json.dumps(s))
    try:
        return json.loads(working)
    except json.JSONDecodeError:
        if args.get("allow_non_json"):
            return text.strip() if args.get("strip", True) else text
        raise


def transform_value(transform: Any, scope: Mapping[str, Any]) -> Any:
    if isinstance(transform, dict):
        return {k: transform_value(v, scope) for k, v in transform.items()}
    if isinstance(transform, list):
        return [transform_value(v, scope) for v in transform]
    whole = PLACEHOLDER.fullmatch(transform) if isinstance(transform, str) else None
    if whole is None:
        return transform
    root, *keys = whole.group(1).split(".")
    value = scope[root]
    for key in keys:
        if not isinstance(value, dict):
            raise ValueError(f"cannot index {type(value).__name__}")
        value = value[key]
    return value


def parse_region(body: str, f: Field, captures: Mapping[str, str]) -> Any:
    """The region's value, or None when vLLM reports it malformed."""
    try:
        if f.content == "json":
            value = _lax_json(body, f.content_args)
        else:
            value = body.strip() if f.content_args.get("strip", True) else body
        if f.transform is None:
            return value
        return transform_value(f.transform, {**captures, "content": value})
    except (KeyError, TypeError, ValueError):
        return None


def region_calls(value: Any) -> list[tuple[str, Any]]:
    """vLLM's `_to_tool_calls` before serialising: (name, arguments) of each call, or none
    when one is incomplete."""
    items = value if isinstance(value, list) else [value]
    calls: list[tuple[str, Any]] = []
    for item in items:
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict):
            return []
        name, arguments = function.get("name"), function.get("arguments")
        if not isinstance(name, str) or not name or arguments is None:
            return []
        calls.append((name, arguments))
    return calls


def tool_properties(tools: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        fn = tool.get("function", tool)
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            props = params.get("properties") if isinstance(params, Mapping) else None
            out[fn["name"]] = dict(props) if isinstance(props, Mapping) else {}
    return out


# -- argument coercion by the tool's schema (vLLM's ResponseParser._coerce_tool_calls) ------


def schema_types(schema: Any) -> tuple[str, ...]:
    if not isinstance(schema, Mapping):
        return ()
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else []
    if isinstance(declared, list):
        types += [t for t in declared if isinstance(t, str)]
    for union in ("anyOf", "oneOf"):
        for choice in schema.get(union) or []:
            types += schema_types(choice)
    if schema.get("nullable") and "null" not in types:
        types.append("null")
    return tuple(types)


def _coerce_one(raw: str, kind: str) -> tuple[bool, Any]:
    """(converted, value) for one schema type; a failed cast is (False, None)."""
    try:
        if kind == "integer":
            try:
                return True, int(raw)
            except ValueError:
                number = float(raw)
                return (True, int(number)) if number.is_integer() else (False, None)
        if kind == "number":
            number = float(raw)
            if number != number or number in (float("inf"), float("-inf")):
                return False, None
            return True, int(number) if number.is_integer() and "." not in raw else number
        if kind == "boolean" and raw.strip().lower() in ("true", "1", "false", "0"):
            return True, raw.strip().lower() in ("true", "1")
        if kind == "null" and raw.strip() in ("null", "None"):
            return True, None
        if kind in ("object", "array"):
            decoded = json.loads(raw)
            if isinstance(decoded, dict if kind == "object" else list):
                return True, decoded
    except ValueError:
        pass
    return False, None


def coerce_text(raw: str, types: tuple[str, ...]) -> Any:
    for kind in types:
        done, value = _coerce_one(raw, kind)
        if done:
            return value
    return raw


def coerce_arguments(arguments: dict[str, Any], properties: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(arguments)
    for key, value in arguments.items():
        types = schema_types(properties.get(key)) if key in properties else ()
        if not types:
            continue
        if isinstance(value, str):
            out[key] = coerce_text(value, types)
        elif isinstance(value, list) and "array" not in types:
            out[key] = [coerce_text(v, types) if isinstance(v, str) else v for v in value]
    return out


def template_of(tokenizer: object) -> dict[str, Any] | None:
    """The tokenizer's `response_template` metadata (vLLM's `resolve_response_template`)."""
    template = getattr(tokenizer, "response_template", None)
    if not isinstance(template, dict):
        init_kwargs = getattr(tokenizer, "init_kwargs", None) or {}
        template = init_kwargs.get("response_template") if isinstance(init_kwargs, dict) else None
    return template if isinstance(template, dict) else None
