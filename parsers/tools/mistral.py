"""Mistral tool calls (vLLM name `mistral`), in the format the tokenizer selects.

vLLM 0.33 (`MistralToolParser` over `vllm/parser/mistral.py`) picks the format from the
vocabulary, and so does this parser: with `[ARGS]` (v11+ tokenizers) calls are
`[TOOL_CALLS]name[ARGS]{...}` on vLLM's parser engine (this module); without it (v1-v3) they
are `[TOOL_CALLS][{"name": ..., "arguments": {...}}]` (`mistral_pre_v11`). Both need
`[TOOL_CALLS]` in the vocabulary, as upstream. Ids are Mistral-shaped (9 alphanumerics);
vLLM draws them at random, ours derive from the request id and index.

v11+ (`mistral_config`, run by `_engine`): `[TOOL_CALLS]` opens a call (and implicitly ends
reasoning); the name runs to `[ARGS]` (dropped) or `{` (the arguments' first character);
the arguments run to the next `[TOOL_CALLS]` or the end of the output. Reasoning markers are
`[THINK]`/`[/THINK]` when the vocabulary has `[THINK]`, `<think>`/`</think>` for mistral-common
tokenizers that support grammars, none otherwise. Every name is accepted, an empty one too;
a slot with neither name nor arguments is dropped; there is no JSON-name fallback. The
arguments (`MistralArgs`, vLLM's `_extract_args_json` + `_fix_arg_types`) are "{}" when blank,
else the exact text of the first JSON value (trailing text dropped), or the stripped text when
it does not start with one; then values are coerced to the tool's schema types.

Streaming: the arguments stream as the model wrote them (raw), holding back only values the
schema may coerce; a coercion that changes a value re-serialises the object as vLLM does,
which a stream can follow only when the text so far was canonical (`_json_args` raw mode).
Divergences (stream == our batch; tests `test_mistral_v11_divergence_*`): the engine's
leading-whitespace rule (`_engine`); a coerced value after non-canonical text is written
coerced within the model's text (vLLM re-serialises the whole object; the objects are
JSON-equal).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._base import Vocab
from parsers._errors import ParserConfigError
from parsers._state import JsonState
from parsers.tools._engine import EngineSpec, EngineToolParser, Ev, S, Tr
from parsers.tools._json_args import DONE, ERROR, JsonArgs, JsonArgsState, SchemaTable
from parsers.tools.mistral_pre_v11 import BOT, MistralPreV11ToolParser, mistral_tool_call_id

__all__ = ["MistralToolParser", "mistral_tool_call_id", "MISTRAL_SPECS"]

THINK_MARKERS = {"special_token": ("[THINK]", "[/THINK]"), "text": ("<think>", "</think>")}


def _spec(encoding: str) -> EngineSpec:
    think = THINK_MARKERS.get(encoding)
    terminals: dict[str, str | tuple[str, ...]] = {"TOOL_CALLS": BOT, "ARGS": "[ARGS]", "OPEN_BRACE": "{"}
    transitions = {
        (S.CONTENT, "TOOL_CALLS"): Tr(S.NAME, (Ev.REASONING_END, Ev.CALL_START) if think else (Ev.CALL_START,)),
        (S.NAME, "ARGS"): Tr(S.ARGS),
        (S.NAME, "OPEN_BRACE"): Tr(S.ARGS, (Ev.ARG,)),
        (S.ARGS, "TOOL_CALLS"): Tr(S.NAME, (Ev.CALL_END, Ev.CALL_START)),
    }
    if think:
        terminals |= {"THINK_START": think[0], "THINK_END": think[1]}
        transitions |= {
            (S.CONTENT, "THINK_START"): Tr(S.REASONING),
            (S.REASONING, "THINK_START"): Tr(S.REASONING),
            (S.REASONING, "THINK_END"): Tr(S.CONTENT, (Ev.REASONING_END,)),
            (S.CONTENT, "THINK_END"): Tr(S.CONTENT),
            (S.REASONING, "TOOL_CALLS"): Tr(S.NAME, (Ev.REASONING_END, Ev.CALL_START)),
        }
    return EngineSpec(terminals=terminals, transitions=transitions)


MISTRAL_SPECS = {encoding: _spec(encoding) for encoding in ("special_token", "text", "none")}


@dataclass(frozen=True, slots=True)
class MistralArgsState(JsonState):
    """json: the raw JSON writer. raw: the arguments do not start with a JSON value: their
    text, stripped. ws: raw mode: trailing whitespace held. wrote: something was written.
    done: the first value ended (the rest is dropped)."""

    json: JsonArgsState = JsonArgsState()
    raw: bool = False
    ws: str = ""
    wrote: bool = False
    done: bool = False

    def held_chars(self) -> int:
        return self.json.held_chars() + len(self.ws)


class MistralArgs:
    """vLLM's Mistral `_extract_args_json` + `_fix_arg_types` as a stream (module docstring)."""

    def __init__(self, properties: Mapping[str, Any], limit: int) -> None:
        self.json = JsonArgs(raw=True, schema=SchemaTable(properties), limit=limit)

    def start(self, name: str = "") -> MistralArgsState:
        return MistralArgsState(json=self.json.start(name))

    def feed(self, state: MistralArgsState, text: str) -> tuple[MistralArgsState, str, None]:
        if state.done:
            return state, "", None
        if state.raw:
            return self._write(state, text)
        js, out, rest = self.json.feed(state.json, text)
        state = state.replace(json=js)
        if js.status == ERROR:
            # Not JSON after all: vLLM returns the stripped text, which raw mode has written
            # so far (trailing whitespace held); the rest follows raw.
            out += self.json.held_raw(js) + (rest or "")
            return self._write(state.replace(raw=True), out)
        if js.status == DONE:
            state, written, _ = self._write(state, out)
            return state.replace(done=True, ws=""), written + state.ws, None
        return self._write(state, out)

    def _write(self, state: MistralArgsState, text: str) -> tuple[MistralArgsState, str, None]:
        """Raw output, holding back trailing whitespace: vLLM strips an argument text that
        turns out not to be one JSON value (a complete value ends in no whitespace)."""
        body = state.ws + text
        if not state.wrote:
            body = body.lstrip()
        kept = body.rstrip()
        return state.replace(ws=body[len(kept) :], wrote=state.wrote or bool(kept)), kept, None

    def end(self, state: MistralArgsState) -> tuple[MistralArgsState, str]:
        if state.done or state.raw:
            return state.replace(ws=""), "" if state.wrote else "{}"
        js, out = self.json.end(state.json)
        if js.status != DONE:
            out += self.json.held_raw(js)
        state, written, _ = self._write(state.replace(json=js), out)
        if js.status == DONE:
            written += state.ws
        return state.replace(ws=""), written or ("" if state.wrote else "{}")


class MistralV11ToolParser(EngineToolParser):
    name: ClassVar[str] = "mistral"
    args_state: ClassVar[type[JsonState]] = MistralArgsState
    spec = MISTRAL_SPECS["none"]

    def __init__(self, vocab: Vocab | None, tools: Sequence[Mapping[str, Any]] | None = None,
                 *, encoding: str = "none", **kwargs: Any) -> None:  # fmt: skip
        self.spec = MISTRAL_SPECS[encoding]  # per instance: the vocabulary decides
        self.encoding = encoding
        super().__init__(vocab, tools, **kwargs)

    @property
    def state_tag(self) -> str:
        return "mistral/v11"

    def call_id(self, request_id: str, index: int) -> str:
        return mistral_tool_call_id(request_id, index)

    def arg_format(self, name: str) -> MistralArgs:
        return MistralArgs(self.tool_properties(name), self.call_limit)

    def accepts(self, name: str) -> bool:
        return True  # vLLM: once the slot left its name, that name is final, "" included

    def closes_unnamed(self, raw_name: str) -> bool:
        return bool(raw_name)  # a slot with neither name nor arguments is dropped


def _has_token(vocab: Any, token: str) -> bool:
    """`token` is in the vocabulary (a `Vocab`, or a plain token -> id mapping)."""
    if isinstance(vocab, Mapping):
        return token in vocab
    return vocab.token_to_id(token) is not None


class MistralToolParser(MistralPreV11ToolParser):
    """The registered class: building it gives the format the vocabulary selects."""

    def __new__(
        cls,
        vocab: Vocab | None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        max_call_chars: int | None = None,
        special_tokens: Iterable[str] = (),
        supports_grammar: bool = False,
        skip_reasoning_parsing: bool = False,
    ) -> Any:
        """`special_tokens` (v11+): the tokenizer's `all_special_tokens`, dropped from text
        like vLLM's engine drops them; `supports_grammar`: a mistral-common tokenizer that
        supports grammars (selects the `<think>` markers when the vocabulary has no
        `[THINK]`); `skip_reasoning_parsing`: reasoning markers are text, as vLLM's serving
        layer sets without a reasoning parser."""
        if vocab is not None and not _has_token(vocab, BOT):
            raise ParserConfigError(
                "mistral tool parser could not locate the tool call token in the tokenizer"
            )
        if vocab is None or not _has_token(vocab, "[ARGS]"):
            parser = object.__new__(MistralPreV11ToolParser)
            MistralPreV11ToolParser.__init__(parser, vocab, tools, max_call_chars=max_call_chars)
            return parser
        encoding = ("special_token" if _has_token(vocab, "[THINK]")
                    else "text" if supports_grammar else "none")  # fmt: skip
        return MistralV11ToolParser(
            vocab, tools, encoding=encoding, max_call_chars=max_call_chars,
            special_tokens=special_tokens, skip_reasoning_parsing=skip_reasoning_parsing,
        )  # fmt: skip
