"""What every derender step needs from the server, built once per worker (immutable)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from render_service.derender.decoding import Decoders, EosIds
from render_service.derender.logprobs import TokenDecoder
from render_service.derender.parsing import ParserFactory
from render_service.derender.state import LocalStateEnvelope, StateEnvelope
from render_service.errors import BadRequestError

__all__ = ["DerenderContext", "HfTokenDecoder"]


class HfTokenDecoder:
    """`TokenDecoder` over a transformers tokenizer, decoding as vLLM's `decode_token_ids`.

    An id the tokenizer cannot even look up (outside its 32-bit id type) is a 400, as in
    vLLM; the request schema rejects such logprob ids first, so this guards the remaining
    path (U+FFFD repair context built from a chunk's `token_ids`, which vLLM also accepts
    unbounded). An id inside the range but outside the vocabulary decodes to None ("")."""

    def __init__(self, hf_tokenizer: Any, leading_space_marker: str | None) -> None:
        self._tok = hf_tokenizer
        self._marker = leading_space_marker

    def decode_ids(self, ids: Sequence[int]) -> str:
        try:
            text: str = self._tok.decode(list(ids))
        except OverflowError as exc:
            raise _out_of_range(ids) from exc
        return text

    def token_string(self, token_id: int) -> str | None:
        try:
            piece = self._tok.convert_ids_to_tokens(token_id)
        except OverflowError as exc:
            raise _out_of_range([token_id]) from exc
        if piece is None:
            return None
        text = self._tok.decode([token_id]) or ""
        if self._marker is None:
            return text
        # SentencePiece: decode() strips the leading-space marker; restore those spaces.
        markers = len(piece) - len(piece.lstrip(self._marker))
        missing = markers - (len(text) - len(text.lstrip(" ")))
        return " " * missing + text if missing > 0 else text


def _out_of_range(ids: Sequence[int]) -> BadRequestError:
    shown = ", ".join(str(i) for i in list(ids)[:8])
    return BadRequestError(
        f"token id out of range for the tokenizer (ids are 32-bit, 0..{2**32 - 1}); got {shown}"
    )


@dataclass(frozen=True)
class DerenderContext:
    served_model_names: tuple[str, ...]
    max_model_len: int
    max_logprobs: int
    fingerprint: str
    decoders: Decoders
    token_decoder: TokenDecoder
    eos: EosIds
    parsers: ParserFactory
    envelope: StateEnvelope | LocalStateEnvelope
    # chat request -> effective chat_template_kwargs (server defaults < request, effort map)
    resolve_kwargs: Callable[[Any], dict[str, Any]]

    @property
    def model_name(self) -> str:
        return self.served_model_names[0]
