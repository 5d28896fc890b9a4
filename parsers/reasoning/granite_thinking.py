"""`granite_thinking_parser` reasoning (vLLM 0.33 `GraniteThinkingParserReasoningAdapter`,
vllm/parser/granite_thinking.py): Granite 4.2, the Nemotron V3 format.

* The nemotron_v3 grammar (the qwen3 one with trailing reasoning whitespace stripped);
  thinking is on unless `enable_thinking` is falsy (off: the output is content, verbatim).
* Leading newlines of the content are stripped (the template writes `\\n</think>\\n`); a
  content of newlines only is None.
* The swap (`enable_thinking` False or `force_nonempty_content` True): only when the output
  has no content at all (content that strips to nothing does not swap), reasoning and content
  trade places.

Streaming: content's leading newlines are dropped until its first other character; while the
swap may still happen the reasoning is held, and any content settles it. Divergence (named in
the tests, as nemotron_v3): the held reasoning is bounded by MAX_SWAP_HELD_CHARS; past it the
reasoning streams and the swap is off, in batch too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from parsers._base import ReasoningResult, Vocab
from parsers._errors import StateError
from parsers._events import ContentDelta, Event, ReasoningDelta
from parsers._state import JsonState
from parsers.reasoning import nemotron_v3
from parsers.reasoning._engine import EngineReasoningParser, EngineReasoningState
from parsers.reasoning.nemotron_v3 import NEMOTRON_V3_SPEC

__all__ = ["GraniteThinkingReasoningParser"]


@dataclass(frozen=True, slots=True)
class GraniteThinkingState(JsonState):
    """engine: the grammar's state. settled: the swap can no longer happen (or is off).
    reasoning: held while it can. started: the content's first non-newline was sent."""

    engine: EngineReasoningState = EngineReasoningState()
    settled: bool = True
    reasoning: str = ""
    started: bool = False

    def __post_init__(self) -> None:
        if self.settled and self.reasoning:
            raise ValueError("a settled state holds text")


class GraniteThinkingReasoningParser(EngineReasoningParser):
    name = "granite_thinking_parser"
    spec = NEMOTRON_V3_SPEC

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        kwargs = self.chat_template_kwargs
        # vLLM's _should_force_content: identity checks, not truthiness.
        self.force = kwargs.get("enable_thinking") is False or kwargs.get("force_nonempty_content") is True

    def _thinking_enabled(self) -> bool:
        return bool(self.chat_template_kwargs.get("enable_thinking", True))

    @classmethod
    def state_type(cls) -> type[GraniteThinkingState]:  # type: ignore[override]
        return GraniteThinkingState

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> GraniteThinkingState:  # type: ignore[override]
        return GraniteThinkingState(self._start_state(prompt_token_ids), settled=not self.force)

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        result = super().parse(text, prompt_token_ids)
        reasoning, content = result.reasoning, result.content
        absent = content is None
        content = content.lstrip("\n") or None if content is not None else None
        if self.force and absent and len(reasoning or "") <= nemotron_v3.MAX_SWAP_HELD_CHARS:
            return ReasoningResult(content, reasoning)
        return ReasoningResult(reasoning, content)

    # The grammar's state is wrapped, so these narrow the engine's signatures differently.
    def feed(self, state: JsonState, text: str) -> tuple[GraniteThinkingState, list[Event]]:  # type: ignore[override]
        own = self._own(state)
        engine, events = super().feed(own.engine, text)
        return self._apply(own.replace(engine=engine), events, final=False)

    def finish(self, state: JsonState) -> tuple[GraniteThinkingState, list[Event]]:  # type: ignore[override]
        own = self._own(state)
        engine, events = super().finish(own.engine)
        return self._apply(own.replace(engine=engine), events, final=True)

    def _own(self, state: JsonState) -> GraniteThinkingState:
        if not isinstance(state, GraniteThinkingState):
            raise StateError(f"{self.name}: expected GraniteThinkingState")
        if not state.settled and not self.force:
            raise StateError(f"{self.name}: a held swap without the force switch")
        return state

    def _apply(
        self, state: GraniteThinkingState, events: list[Event], *, final: bool
    ) -> tuple[GraniteThinkingState, list[Event]]:
        settled, held, started = state.settled, state.reasoning, state.started
        out: list[Event] = []
        for event in events:
            if isinstance(event, ReasoningDelta):
                if settled:
                    out.append(event)
                    continue
                held += event.text
                if len(held) > nemotron_v3.MAX_SWAP_HELD_CHARS:
                    out.append(ReasoningDelta(held))
                    settled, held = True, ""
            elif isinstance(event, ContentDelta):
                if not settled:  # content exists: no swap
                    if held:
                        out.append(ReasoningDelta(held))
                    settled, held = True, ""
                text = event.text if started else event.text.lstrip("\n")
                if text:
                    started = True
                    out.append(ContentDelta(text))
            else:
                out.append(event)
        if final and not settled:  # no content at all: the swap
            if held:
                out.append(ContentDelta(held))
            settled, held = True, ""
        return state.replace(settled=settled, reasoning=held, started=started), out
