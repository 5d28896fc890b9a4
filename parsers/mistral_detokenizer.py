"""vLLM 0.33's derender decoding for a mistral-mode SentencePiece tokenizer (v3 and older).

Same incremental algorithm and state as `parsers.detokenizer` (vLLM's `detokenize_incrementally`
over a token-string window), with vLLM's MistralTokenizer for the two tokenizer calls:

* `convert_ids_to_tokens`: one SentencePiece piece per id; when skipping special tokens, control
  ids are dropped except `[TOOL_CALLS]` (and `[ARGS]`, `[THINK]`, `[/THINK]` where the vocabulary
  has them as control tokens), which the mistral tool and reasoning parsers need;
* `convert_tokens_to_string`: those four pieces stay literal text, and each run of other pieces
  between them is decoded by SentencePiece on its own (so a run's leading "▁" is dropped).

`spm` is mistral-common's `SentencePieceTokenizer` (no render_service import here).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parsers._errors import StateError
from parsers.detokenizer import DetokState, IncrementalDetokenizer

__all__ = ["MistralSpmDetokenizer"]

# vLLM's `to_decode_special_tokens` (SpecialTokens.tool_calls, args, begin_think, end_think).
_LITERAL_PIECES = ("[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]")


class MistralSpmDetokenizer(IncrementalDetokenizer):
    """IncrementalDetokenizer whose token strings and decoding are mistral-common's."""

    def __init__(self, spm: Any, *, skip_special_tokens: bool = True) -> None:
        # The parent's state handling is reused; its HF-tokenizer fields are not set.
        self._spm = spm
        self._model = spm._model  # the sentencepiece processor: decodes piece strings
        self._vocab_size = int(spm.n_words)
        self._special_ids = frozenset(i for i in range(self._vocab_size) if spm.is_special(i))
        self._kept_ids = frozenset(i for i in self._special_ids if spm.id_to_piece(i) in _LITERAL_PIECES)
        self._pieces = {spm.id_to_piece(i) for i in range(self._vocab_size)}
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = True

    def _check_state(self, state: object) -> None:
        if not isinstance(state, DetokState):
            raise StateError(f"expected DetokState, got {type(state).__name__}")
        if any(token and token not in self._pieces for token in state.prev_tokens):
            raise StateError("detokenizer state holds a token that is not in the vocabulary")

    def _ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        out = []
        for token_id in ids:
            if self.skip_special_tokens and token_id in self._special_ids and token_id not in self._kept_ids:
                continue
            out.append(str(self._spm.id_to_piece(token_id)) if 0 <= token_id < self._vocab_size else "")
        return out

    def _decode(self, tokens: list[str]) -> str:
        parts: list[str] = []
        run: list[str] = []
        for token in tokens:
            if token in _LITERAL_PIECES:
                if run:
                    parts.append(str(self._model.decode(run)))
                    run = []
                parts.append(token)
            elif token:
                run.append(token)
        if run:
            parts.append(str(self._model.decode(run)))
        return "".join(parts)
