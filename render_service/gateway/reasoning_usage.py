"""`usage.completion_tokens_details.reasoning_tokens`, as `vllm serve` 0.33 reports it in chat.

vLLM's chat serving sets `completion_tokens_details = {"reasoning_tokens": N}` on every usage
it writes when a reasoning parser is configured (null otherwise): the non-streamed response
(the sum over choices), the final usage chunk (`include_usage`, the sum), and with
`continuous_usage_stats` every chunk, each with its own choice's running count (the role and
echo chunks: 0). N is `parser.count_reasoning_tokens(generated ids)`; parsers.reasoning_tokens
holds each family's semantics as a fold.

The parser-engine families count from the text `vllm serve` streamed at each step, so a
stream needs that text: `ServeDeltaText` rebuilds it per choice as vLLM's output processor
does (vllm/v1/engine/detokenizer.py): the incremental decode, minus the last
(longest stop string - 1) characters while the output runs when stop strings are set, the
stop string cut off at the end, and a final EOS / stop token left undecoded. It only runs
while the counter reads text (`needs_text`), so other families and ended reasoning cost
nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from parsers.detokenizer import IncrementalDetokenizer
from parsers.reasoning_tokens import ReasoningCount, ReasoningTokenCounter

__all__ = ["ReasoningUsage", "ChoiceReasoning", "ServeDeltaText"]


@dataclass(frozen=True)
class ReasoningUsage:
    """One chat request's counter and how to decode its output as serve does."""

    counter: ReasoningTokenCounter
    detokenizer: Callable[[bool], IncrementalDetokenizer]  # by skip_special_tokens

    def batch_count(self, choices: Sequence[dict[str, Any]], prompt_token_ids: Sequence[int]
                    ) -> int:
        """The non-streamed response's count: the sum over its choices."""
        return sum(self.counter.count(c.get("token_ids") or [], prompt_token_ids)
                   for c in choices)

    def choice(self, rendered: dict[str, Any], stop_strings: Sequence[str]) -> ChoiceReasoning:
        """A streamed choice's running count (one per choice)."""
        prompt = rendered["token_ids"]
        state = self.counter.start(prompt, streaming=True)
        text = None
        if self.counter.needs_text(state):
            sampling = rendered.get("sampling_params") or {}
            # SamplingParams JSON omits defaults: absent skip_special_tokens is True.
            detok = self.detokenizer(bool(sampling.get("skip_special_tokens", True)))
            text = ServeDeltaText(detok, prompt, stop_strings,
                                  include_stop=bool(sampling.get("include_stop_str_in_output")))
        return ChoiceReasoning(self.counter, state, text)


class ChoiceReasoning:
    def __init__(self, counter: ReasoningTokenCounter, state: ReasoningCount,
                 text: ServeDeltaText | None) -> None:
        self.counter = counter
        self.state = state
        self.text = text

    @property
    def count(self) -> int:
        return self.state.count

    def step(self, token_ids: Sequence[int], *, finish_reason: str | None, stop_reason: Any
             ) -> None:
        """One engine step of this choice (after which vLLM reads the count)."""
        finished = finish_reason is not None
        delta = ""
        if self.text is not None:
            delta = self.text.step(token_ids, finished=finished,
                                   stop_terminated=finished and finish_reason == "stop"
                                   and not isinstance(stop_reason, str),
                                   stop_string=stop_reason if isinstance(stop_reason, str) else None)
        self.state = self.counter.fold(self.state, token_ids, delta)
        if finished:
            self.state = self.counter.finish(self.state)
        if self.text is not None and not self.counter.needs_text(self.state):
            self.text = None  # reasoning ended: no more text is read


class ServeDeltaText:
    """The text of each step of a `vllm serve` stream (see the module docstring)."""

    def __init__(self, detok: IncrementalDetokenizer, prompt_token_ids: Sequence[int],
                 stop_strings: Sequence[str], *, include_stop: bool) -> None:
        self.detok = detok
        self.state = detok.initial_state(prompt_token_ids)
        self.hold = max((len(s) for s in stop_strings), default=1) - 1 if not include_stop else 0
        self.include_stop = include_stop
        self.pending = ""  # decoded, not yet sent

    def step(self, token_ids: Sequence[int], *, finished: bool, stop_terminated: bool = False,
             stop_string: str | None = None) -> str:
        ids = list(token_ids)
        if stop_terminated and ids and not self.include_stop:
            ids = ids[:-1]  # vLLM does not decode the token that stopped the request
        self.state, text = self.detok.feed(self.state, ids)
        self.pending += text
        if finished:
            out = self.pending
            if stop_string and not self.include_stop:
                at = out.find(stop_string)
                out = out if at < 0 else out[:at]
            self.pending = ""
            return out
        cut = max(len(self.pending) - self.hold, 0)
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out
