"""`mistral` reasoning (vLLM 0.33 `MistralParserReasoningAdapter` over `vllm/parser/mistral.py`).

The reasoning encoding is picked from the tokenizer as upstream does:

* `[THINK]` in the vocabulary (v13+ tokenizers): `[THINK]` / `[/THINK]` special tokens;
* else, a tokenizer that supports grammars (mistral-common v11, `supports_grammar=True` here):
  plain-text `<think>` / `</think>`;
* else no reasoning: the output is content, verbatim.

Output starts in content; `[THINK]` opens reasoning, `[/THINK]` closes it (a stray one in
content is absorbed), `[TOOL_CALLS]` ends reasoning and stays in the content. Non-marker
special tokens are dropped; trailing reasoning whitespace is stripped. Like upstream, the
tokenizer must have `[TOOL_CALLS]`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from parsers._base import Vocab
from parsers._errors import ParserConfigError
from parsers.reasoning._engine import Action, EngineReasoningParser, EngineSpec, Phase

__all__ = ["MistralReasoningParser"]

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
OPEN_BRACE = "{"

Encoding = Literal["special_token", "text", "none"]


def _spec(encoding: Encoding) -> EngineSpec:
    start, end = ("[THINK]", "[/THINK]") if encoding == "special_token" else ("<think>", "</think>")
    actions = {
        (Phase.CONTENT, start): Action.TO_REASONING,
        (Phase.REASONING, start): Action.DROP,
        (Phase.REASONING, end): Action.TO_CONTENT,
        (Phase.CONTENT, end): Action.DROP,
        (Phase.REASONING, TOOL_CALLS): Action.KEEP_TO_CONTENT,
    }
    return EngineSpec(
        markers=(start, end, TOOL_CALLS, ARGS, OPEN_BRACE),
        actions=actions,
        strip_trailing_reasoning_ws=True,
        # Text-mode think markers are not token-id terminals upstream: no start id, and a
        # content-leading end without an id empties the end-id set.
        start_marker=start if encoding == "special_token" else None,
        end_markers=((end, True), (TOOL_CALLS, False)),
    )


_SPECS = {enc: _spec(enc) for enc in ("special_token", "text")}


class MistralReasoningParser(EngineReasoningParser):
    name = "mistral"

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
        supports_grammar: bool = False,
    ) -> None:
        if vocab.token_to_id(TOOL_CALLS) is None:
            raise ParserConfigError(
                "mistral reasoning parser could not locate the tool call token in the tokenizer"
            )
        if vocab.token_to_id("[THINK]") is not None:
            self.encoding: Encoding = "special_token"
        elif supports_grammar:
            self.encoding = "text"
        else:
            self.encoding = "none"
        self.spec = _SPECS.get(self.encoding, _SPECS["special_token"])
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)

    def _thinking_enabled(self) -> bool:
        return self.encoding != "none"

    def _starts_in_reasoning(self) -> bool:
        return False

    def _reasoning_end_ids(self) -> frozenset[int]:
        if self.encoding == "text":
            return frozenset()
        return super()._reasoning_end_ids()
