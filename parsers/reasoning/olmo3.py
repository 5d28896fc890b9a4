"""`olmo3` reasoning (vLLM 0.33 `Olmo3ReasoningParser`; `<think>`/`</think>` are plain text).

Upstream batch: `^(?:<think>)?(.*?)</think>(.*)$`: an optional leading `<think>` is dropped,
reasoning runs to the first `</think>`, the rest is content (empty parts -> None); with no
`</think>` the whole output is content, verbatim.

Which of those a stream is in cannot be known before `</think>` (or the end) arrives, and
holding the output until then is unbounded. The two Olmo 3 templates tell it apart: the Think
template's generation prompt ends with `<think>` (the model then writes reasoning, `</think>`,
the answer), the Instruct template's does not (the model answers directly). So:

* START: text that may still be a leading `<think>` is held. A leading `<think>` is dropped
  and opens REASONING; otherwise the output is REASONING when the prompt ends with `<think>`,
  else CONTENT.
* REASONING: text is reasoning (a later `<think>` too) until the first `</think>`.
* CONTENT: everything verbatim, markers included.

Documented divergences from upstream's batch (both need the whole output before the first
character could be sent): reasoning opened but no `</think>` follows -> reasoning here (upstream
batch: all content; upstream's stream: reasoning, as here); no `<think>` in prompt or at the
start but a `</think>` later -> content here (upstream batch: the text before it is reasoning).

`is_reasoning_end` is upstream's: `</` (or `Ġ</`) followed by `think`, `>` in the ids, which
must all be vocabulary tokens (upstream: KeyError; here ParserConfigError).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import ReasoningParser, ReasoningResult, Vocab
from parsers._errors import ParserConfigError, StateError
from parsers._events import ContentDelta, Event, ReasoningDelta
from parsers._state import JsonState
from parsers._text import MarkerSet
from parsers.reasoning._engine import EventSink

__all__ = ["Olmo3ReasoningParser", "Olmo3State", "Olmo3Phase"]

THINK_START = "<think>"
THINK_END = "</think>"
_END_MARKER = MarkerSet((THINK_END,))
# How the pre-tokenizer splits `</think>` (first piece with or without a leading space).
_END_FIRST_PIECES = ("Ġ</", "</")
_END_REST_PIECES = ("think", ">")
# `<think>` at the end of a prompt: one token (tokenizers that have it) or its BPE pieces.
_START_PIECES = (("<think>",), ("<", "think", ">"))


class Olmo3Phase(str, enum.Enum):
    START = "start"
    REASONING = "reasoning"
    CONTENT = "content"


@dataclasses.dataclass(frozen=True, slots=True)
class Olmo3State(JsonState):
    VERSION = 1

    phase: Olmo3Phase = Olmo3Phase.START
    held: str = ""  # START: a prefix of `<think>`; REASONING: a prefix of `</think>`
    prompt_opened: bool = False  # the prompt ends with `<think>`

    def __post_init__(self) -> None:
        if not isinstance(self.phase, Olmo3Phase):
            raise ValueError("unknown phase")
        if len(self.held) >= len(THINK_END) or (self.held and self.phase is Olmo3Phase.CONTENT):
            raise ValueError("held text is not a marker prefix")


class Olmo3ReasoningParser(ReasoningParser):
    name: ClassVar[str] = "olmo3"

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        self._end_first = frozenset(self._required_id(t) for t in _END_FIRST_PIECES)
        self._end_rest = tuple(self._required_id(t) for t in _END_REST_PIECES)
        starts = []
        for pieces in _START_PIECES:
            ids = [vocab.token_to_id(p) for p in pieces]
            if all(i is not None for i in ids):
                starts.append(tuple(i for i in ids if i is not None))
        self._start_seqs = tuple(starts)

    def _required_id(self, token: str) -> int:
        token_id = self.vocab.token_to_id(token)
        if token_id is None:
            raise ParserConfigError(f"olmo3 reasoning parser: {token!r} is not in the vocabulary")
        return token_id

    @classmethod
    def state_type(cls) -> type[Olmo3State]:
        return Olmo3State

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        rest = self._end_rest
        ids = list(token_ids)
        return any(
            ids[i] in self._end_first and tuple(ids[i + 1 : i + 1 + len(rest)]) == rest
            for i in range(len(ids) - len(rest) - 1, -1, -1)
        )

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> Olmo3State:
        ids = tuple(prompt_token_ids)
        opened = any(len(ids) >= len(s) and ids[len(ids) - len(s) :] == s for s in self._start_seqs)
        return Olmo3State(prompt_opened=opened)

    def feed(self, state: JsonState, text: str) -> tuple[Olmo3State, list[Event]]:
        return self._run(self._check(state), text, final=False)

    def finish(self, state: JsonState) -> tuple[Olmo3State, list[Event]]:
        return self._run(self._check(state), "", final=True)

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        state = self.initial_state(prompt_token_ids)
        if not state.prompt_opened and not text.startswith(THINK_START):
            return ReasoningResult(None, text)  # no reasoning: verbatim, "" included
        _, events = self._run(state, text, final=True)
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        return ReasoningResult(reasoning or None, content or None)

    def _check(self, state: JsonState) -> Olmo3State:
        if not isinstance(state, Olmo3State):
            raise StateError(f"{type(self).__name__}: expected Olmo3State")
        return state

    def _run(self, state: Olmo3State, text: str, *, final: bool) -> tuple[Olmo3State, list[Event]]:
        sink = EventSink()
        phase, buffer = state.phase, state.held + text
        if phase is Olmo3Phase.START:
            if buffer.startswith(THINK_START):
                phase, buffer = Olmo3Phase.REASONING, buffer[len(THINK_START) :]
            elif not final and THINK_START.startswith(buffer):
                return state.replace(held=buffer), sink.events
            else:
                phase = Olmo3Phase.REASONING if state.prompt_opened else Olmo3Phase.CONTENT
        held = ""
        if phase is Olmo3Phase.REASONING:
            segments, held = _END_MARKER.split(buffer, final=final)
            for index, (segment, is_marker) in enumerate(segments):
                if is_marker:
                    sink.content("".join(s for s, _ in segments[index + 1 :]) + held)
                    return state.replace(phase=Olmo3Phase.CONTENT, held=""), sink.events
                sink.reasoning(segment)
        else:
            sink.content(buffer)
        return state.replace(phase=phase, held=held), sink.events
