"""`cohere_command3` / `cohere_command4` reasoning (vLLM 0.33 `CohereCommand3/4ReasoningParser`).

vLLM's classes only name a `cohere_melody` preset and answer `is_reasoning_end`;
`CohereCommandParser` parses the output (`parsers.cohere`, run once by the chat parser for
both names). `is_reasoning_end` reads the prompt backwards: a `<|START_THINKING|>` ends the
search (reasoning ended iff an `<|END_THINKING|>` came after it), `<|CHATBOT_TOKEN|>` means
not ended.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import Vocab
from parsers._whole_output import WholeOutputReasoningParser
from parsers.cohere import CHATBOT_TOKEN, END_THINKING, START_THINKING, CohereMachine, CohereState

__all__ = ["CohereCommand3ReasoningParser", "CohereCommand4ReasoningParser"]


class CohereCommand3ReasoningParser(WholeOutputReasoningParser):
    name: ClassVar[str] = "cohere_command3"
    preset: ClassVar[str] = "cmd3"

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        self.machine = CohereMachine(self.preset)
        self.start_id = vocab.token_to_id(START_THINKING)
        self.end_id = vocab.token_to_id(END_THINKING)
        self.chatbot_id = vocab.token_to_id(CHATBOT_TOKEN)

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        has_end = False
        for token_id in reversed(token_ids):
            if token_id == self.start_id:
                return has_end
            if token_id == self.chatbot_id:
                return False
            if token_id == self.end_id:
                has_end = True
        return has_end

    @classmethod
    def state_type(cls) -> type[CohereState]:
        return CohereState


class CohereCommand4ReasoningParser(CohereCommand3ReasoningParser):
    name: ClassVar[str] = "cohere_command4"
    preset: ClassVar[str] = "cmd4"

