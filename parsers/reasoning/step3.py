"""`step3` reasoning (vLLM 0.33 `Step3ReasoningParser`).

Batch upstream: everything before the first `</think>` is reasoning (possibly ""), the rest is
content (empty -> None); with no `</think>` the whole output is reasoning. `<think>` is never
stripped: Step3's template opens reasoning itself, a `<think>` the model writes is reasoning
text. `is_reasoning_end` is "`</think>` anywhere in the ids". Upstream requires `</think>` to
be a vocabulary token (RuntimeError); here that is a ParserConfigError.

That is the `deepseek_r1` machine started in REASONING with its first `<think>` already
consumed, so later `<think>` markers stay text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import Vocab
from parsers._errors import ParserConfigError
from parsers.reasoning.deepseek_r1 import DeepSeekR1ReasoningParser, ThinkPhase, ThinkState

__all__ = ["Step3ReasoningParser"]


class Step3ReasoningParser(DeepSeekR1ReasoningParser):
    name: ClassVar[str] = "step3"

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        if self.end_token_id is None:
            raise ParserConfigError(
                "Step3 reasoning parser could not locate think end token in the tokenizer"
            )

    def _needs_think_tokens(self) -> bool:
        return False  # only </think> is required, checked above

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        return self.end_token_id in token_ids

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> ThinkState:
        return ThinkState(phase=ThinkPhase.REASONING, think_seen=True)
