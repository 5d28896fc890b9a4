"""One argument value read as JSON if it is JSON, else as text, streamed with a bounded state.

Families that tag each argument value separately (Muse's ATEM `<atem:parameter>`, Kimi K3's
`<|open|>argument`) decode a non-string value with vLLM's rule

    value = json.loads(raw)  (falling back to raw, the text itself, when it is not JSON)

and write it with `json.dumps(value, ensure_ascii=False)`. `JsonValue` computes the same text
from the value's raw text in pieces (`start` / `feed` / `end`, the caller finds the close
marker), holding only a bounded prefix:

* hold: the first HOLD_CHARS characters are held while they may still be JSON, so a short
  value (numbers, literals, small objects) is decided at its end with `json.loads` itself,
  exactly as vLLM does (duplicate keys included);
* text: once the text cannot be JSON (the scanner of `_json_scan.py` refused it, or a
  token is no prefix of a number or literal), it is a string: `"` and the text escaped as
  it arrives;
* json: a value still possibly JSON past HOLD_CHARS streams through the canonical JSON
  writer (`JsonArgs`, VALUE root), which holds only an escape, a number token or a key.

Divergence (stream == our batch; families name it): a value over HOLD_CHARS that stops being
JSON after that (text after its end, a fault inside it, or its close marker cutting it) keeps
its canonical text up to the fault followed by its raw text from there, where vLLM would write
the whole raw text as one JSON string; a repeated key in such a value is written twice
(`json.loads` keeps the last, at the first position).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._errors import LimitExceededError
from parsers._state import JsonState
from parsers.tools._args import json_string_body
from parsers.tools._base import json_dumps
from parsers.tools._json_args import DONE, ERROR, MORE, JsonArgs, JsonArgsState

__all__ = ["HOLD_CHARS", "JsonValue", "JsonValueState"]

# A value this short is held and decided whole (exact): scalars and small objects. 256
# characters keeps a state under 2 KB even when every held character is JSON-escaped.
HOLD_CHARS = 256
# Whitespace after a JSON value that ended, kept so a value that goes on after it keeps it.
_MAX_GAP = 256
_JSON_WS = " \t\n\r"
_HOLD, _TEXT, _JSON, _RAW = "hold", "text", "json", "raw"
# Prefix-closed supersets of JSON's number and literal tokens: a token outside them can never
# complete to one (a token inside them is decided by `json.loads` once it ends).
_NUMBER_PREFIX = re.compile(r"-?(?:0|[1-9][0-9]*)?(?:\.[0-9]*)?(?:[eE][-+]?[0-9]*)?")
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")


@dataclass(frozen=True, slots=True)
class JsonValueState(JsonState):
    """mode: hold / text / json / raw (module docstring). held: hold: the raw text so far.
    json: the writer (json mode). gap: json mode after the value ended: whitespace since."""

    VERSION: ClassVar[int] = 1

    mode: str = _HOLD
    held: str = ""
    json: JsonArgsState | None = None
    gap: str = ""

    def __post_init__(self) -> None:
        if self.mode not in (_HOLD, _TEXT, _JSON, _RAW) or (self.json is None) == (self.mode == _JSON):
            raise ValueError("bad value mode")
        if len(self.held) > HOLD_CHARS or (self.held and self.mode != _HOLD):
            raise ValueError("held value text over its bound")
        if len(self.gap) > _MAX_GAP or set(self.gap) - set(_JSON_WS):
            raise ValueError("bad value gap")

    def held_chars(self) -> int:
        return len(self.held) + len(self.gap) + (self.json.held_chars() if self.json else 0)

    @property
    def holding(self) -> bool:
        """Nothing of the value is written yet (it is held whole, to be decided at its end)."""
        return self.mode == _HOLD


class JsonValue:
    """The value writer (module docstring). `limit`: the longest token it may hold."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.writer = JsonArgs(limit=limit)

    def start(self) -> JsonValueState:
        return JsonValueState()

    def feed(self, state: JsonValueState, text: str) -> tuple[JsonValueState, str]:
        if not text:
            return state, ""
        mode = state.mode
        if mode == _TEXT:
            return state, json_string_body(text)
        if mode == _RAW:
            return state, text
        if state.json is not None:
            return self._json(state.json, state.gap, text)
        held = state.held + text
        if not self._may_be_json(held[:HOLD_CHARS]):
            return JsonValueState(_TEXT), '"' + json_string_body(held)
        if len(held) <= HOLD_CHARS:
            return state.replace(held=held), ""
        return self._json(self.writer.start(), "", held)

    def end(self, state: JsonValueState) -> tuple[JsonValueState, str]:
        """The close marker came: the rest of the value's text."""
        mode, done = state.mode, JsonValueState(_RAW)
        if mode == _HOLD:
            return done, json_dumps(_decode(state.held))
        if mode == _TEXT:
            return done, '"'
        if mode == _RAW or state.json is None:
            return done, ""
        js, out = self.writer.end(state.json)
        if js.status != DONE:  # cut by its close marker: the raw text it held
            out += self.writer.held_raw(js)
        return done, out

    def _json(self, js: JsonArgsState, gap: str, text: str) -> tuple[JsonValueState, str]:
        out = ""
        if js.status == MORE:
            js, out, rest = self.writer.feed(js, text)
            if js.status == ERROR or (js.status == MORE and not _token_ok(js.scan.tok)):
                return JsonValueState(_RAW), out + self.writer.held_raw(js) + (rest or "")
            if len(js.scan.tok) > self.limit:
                raise LimitExceededError(f"an argument value's number exceeds {self.limit} characters")
            if js.status == MORE:
                return JsonValueState(_JSON, json=js), out
            text = rest or ""
        # After the value's end: whitespace is kept for a value that goes on, anything else
        # makes it text that is not JSON (the raw text from here).
        body = text.lstrip(_JSON_WS)
        gap = (gap + text[: len(text) - len(body)])[-_MAX_GAP:]
        if body:
            return JsonValueState(_RAW), out + gap + body
        return JsonValueState(_JSON, json=js, gap=gap), out

    def _may_be_json(self, text: str) -> bool:
        """Can `text` still begin a JSON document? (False is final: no extension is.)"""
        js, _, rest = self.writer.feed(self.writer.start(), text)
        if js.status == ERROR:
            return False
        if js.status == DONE:
            return not (rest or "").strip(_JSON_WS)
        return _token_ok(js.scan.tok)


def _token_ok(token: str) -> bool:
    return not token or bool(_NUMBER_PREFIX.fullmatch(token)) or any(w.startswith(token) for w in _LITERALS)


def _decode(raw: str) -> Any:
    """vLLM's rule: the JSON value, else the text itself."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw
