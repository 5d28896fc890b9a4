"""`plamo3` reasoning (vLLM 0.33 `Plamo3ParserReasoningAdapter` over vllm/parser/plamo3.py).

* Thinking on (unless `enable_thinking` is falsy): starts in reasoning; the think markers are
  dropped; `<|plamo:end_think:plamo|>` ends reasoning, `<|plamo:begin_think:plamo|>` in the
  content re-opens it; `<|plamo:begin_tool_requests:plamo|>` ends it and stays content.
  Thinking off: everything is content (the think markers are text), not verbatim: EOT and
  the tokenizer's other special tokens are still dropped.
* `<|plamo:tag|>` (EOT) ends reasoning and is dropped, except inside a tool block the
  reasoning pass forwards as text (vLLM's skip_tool_parsing span), where it is content.
  Gap: a think block opened inside such a span ends at EOT without the EOT (vLLM: EOT is
  content there).
* A trailing unfinished marker is cut from the reasoning (`_strip_unfinished_marker`, see
  parsers/tools/plamo3.py); reasoning whitespace is kept.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from parsers._base import ReasoningResult, Vocab
from parsers._events import ContentDelta, ReasoningDelta
from parsers._state import JsonState
from parsers.reasoning._engine import (
    Action,
    EngineReasoningParser,
    EngineReasoningState,
    EngineSpec,
    Phase,
)
from parsers.tools.plamo3 import (
    BEGIN_THINK,
    BEGIN_TOOL_REQUESTS,
    END_THINK,
    END_TOOL_REQUESTS,
    EOT,
    marker_cut_prefixes,
    plamo3_spec,
    unfinished_marker_at,
)

__all__ = ["Plamo3ReasoningParser", "plamo3_reasoning_spec"]

R, C = Phase.REASONING, Phase.CONTENT


@functools.cache
def plamo3_reasoning_spec(thinking: bool) -> EngineSpec:
    markers = tuple(plamo3_spec(thinking).literal_terminals())
    # EOT has a content transition and leaves the tool states: dropped, or text inside the
    # tool span the reasoning pass forwards (vLLM's skip_tool_parsing).
    actions = {(R, EOT): Action.TO_CONTENT, (C, EOT): Action.CLOSE, (C, BEGIN_TOOL_REQUESTS): Action.OPEN}
    if thinking:
        actions |= {
            (R, BEGIN_THINK): Action.DROP,
            (C, BEGIN_THINK): Action.TO_REASONING,
            (R, END_THINK): Action.TO_CONTENT,
            (C, END_THINK): Action.DROP,
            (R, BEGIN_TOOL_REQUESTS): Action.KEEP_TO_CONTENT,
        }
    return EngineSpec(
        markers=markers,
        actions=actions,
        strip_trailing_reasoning_ws=False,
        start_marker=BEGIN_THINK if thinking else None,
        end_markers=((END_THINK, True),) if thinking else (),
        turn_boundaries=(EOT,),
        tool_exits=frozenset({END_TOOL_REQUESTS, EOT}),
    )


class Plamo3ReasoningParser(EngineReasoningParser):
    name = "plamo3"
    spec = plamo3_reasoning_spec(True)

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        self.enable = bool((chat_template_kwargs or {}).get("enable_thinking", True))
        self.spec = plamo3_reasoning_spec(self.enable)  # per instance: the request decides
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        self._cuts = marker_cut_prefixes(vocab, self.spec.markers)

    def _starts_in_reasoning(self) -> bool:
        return self.enable

    def _waits_for_reasoning(self) -> bool:
        return self.enable

    def finish(self, state: JsonState) -> tuple[EngineReasoningState, list[Any]]:
        own = self._check(state)
        if own.phase is Phase.REASONING:  # the output ends in an unfinished marker: cut
            own = own.replace(held=own.held[: unfinished_marker_at(own.held, self._cuts)])
        return super().finish(own)

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        state, events = self.feed(self._start_state(prompt_token_ids), text)
        _, tail = self.finish(state)
        events += tail
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        return ReasoningResult(reasoning or None, content or None)
