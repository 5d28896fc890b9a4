"""vLLM 0.33's derender decoding for a mistral-mode tokenizer: SentencePiece (v3 and older) and Tekken.

Same incremental algorithm and state as `parsers.detokenizer` (vLLM's `detokenize_incrementally`
over a token-string window), with vLLM's MistralTokenizer for the two tokenizer calls:

* `convert_ids_to_tokens`: one SentencePiece piece per id; when skipping special tokens, control
  ids are dropped except `[TOOL_CALLS]` (and `[ARGS]`, `[THINK]`, `[/THINK]` where the vocabulary
  has them as control tokens), which the mistral tool and reasoning parsers need;
* `convert_tokens_to_string`: those four pieces stay literal text, and each run of other pieces
  between them is decoded by SentencePiece on its own (so a run's leading "▁" is dropped).

`spm` is mistral-common's `SentencePieceTokenizer` (no render_service import here).

Tekken (`MistralTekkenDetokenizer`, vLLM's `tekken_convert_ids_to_tokens` and
`tekken_convert_tokens_to_string` paths):

* `convert_ids_to_tokens`: one piece per id; when skipping special tokens the same four are
  kept, and if a call's pieces hold U+FFFD (part of a UTF-8 character) the call's ordinary ids
  become their raw bytes (specials stay text). Without skipping, pieces stay text, U+FFFD too;
* `convert_tokens_to_string`: every special piece but those four is dropped (also when not
  skipping); with any bytes piece the rest is turned back into ids and decoded together,
  else the pieces are joined.

A bytes piece lives in the JSON state as `_BYTES_MARK` + hex (no vocabulary piece starts so).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parsers._errors import StateError
from parsers.detokenizer import DetokState, IncrementalDetokenizer

__all__ = ["MistralSpmDetokenizer", "MistralTekkenDetokenizer"]

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


_REPLACEMENT_CHAR = "\ufffd"
_BYTES_MARK = "\ufffe"  # a noncharacter: starts no Tekken piece (checked at construction)


class MistralTekkenDetokenizer(IncrementalDetokenizer):
    """IncrementalDetokenizer with vLLM's MistralTokenizer calls for a Tekken tokenizer."""

    def __init__(self, tekken: Any, *, skip_special_tokens: bool = True) -> None:
        # The parent's state handling is reused; its HF-tokenizer fields are not set.
        self._tekken = tekken
        self._vocab_size = int(tekken.n_words)
        self._num_special = int(tekken.num_special_tokens)
        self._special_pieces = frozenset(tekken.id_to_piece(i) for i in range(self._num_special))
        self._kept_ids = frozenset(i for i in range(self._num_special) if tekken.id_to_piece(i) in _LITERAL_PIECES)
        self._pieces = {tekken.id_to_piece(i) for i in range(self._vocab_size)}
        if any(piece.startswith(_BYTES_MARK) for piece in self._pieces):
            raise ValueError("a Tekken piece starts with the state's bytes marker")
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = True

    def _check_state(self, state: object) -> None:
        if not isinstance(state, DetokState):
            raise StateError(f"expected DetokState, got {type(state).__name__}")
        for token in state.prev_tokens:
            if token.startswith(_BYTES_MARK):
                valid = self._bytes_id(token) is not None
            else:
                valid = not token or token in self._pieces
            if not valid:
                raise StateError("detokenizer state holds a token that is not in the vocabulary")

    def _ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        tekken = self._tekken
        pieces = [(i, tekken.id_to_piece(i) if 0 <= i < self._vocab_size else "") for i in ids]
        if not self.skip_special_tokens:
            return [piece for _, piece in pieces]
        kept = [(i, piece) for i, piece in pieces if i >= self._num_special or i in self._kept_ids]
        if not any(_REPLACEMENT_CHAR in piece for _, piece in kept):
            return [piece for _, piece in kept]
        return [piece if i < self._num_special else _BYTES_MARK + bytes(tekken.id_to_byte_piece(i)).hex()
                for i, piece in kept]  # fmt: skip

    def _decode(self, tokens: list[str]) -> str:
        tokens = [t for t in tokens if t in _LITERAL_PIECES or t not in self._special_pieces]
        if not any(t.startswith(_BYTES_MARK) for t in tokens):
            return "".join(tokens)
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

        ids = [self._token_id(t) for t in tokens if t]  # "": an id outside the vocabulary
        return str(self._tekken.decode(ids, SpecialTokenPolicy.KEEP))

    def _bytes_id(self, token: str) -> int | None:
        try:
            raw = bytes.fromhex(token[len(_BYTES_MARK) :])
        except ValueError:
            return None
        rank = self._tekken._tekken_token2id_nospecial.get(raw)
        return None if rank is None else int(rank) + self._num_special

    def _token_id(self, token: str) -> int:
        """vLLM's `_tekken_token_to_id`: bytes, else the piece's UTF-8, else a special, else unk."""
        if token.startswith(_BYTES_MARK):
            found = self._bytes_id(token)
        else:
            rank = self._tekken._tekken_token2id_nospecial.get(token.encode("utf-8"))
            found = int(rank) + self._num_special if rank is not None else None
            if found is None:
                found = self._tekken._special_tokens_reverse_vocab.get(token)
        return int(self._tekken.unk_id) if found is None else int(found)
