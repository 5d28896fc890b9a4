"""Prompt length rules of vLLM's `TokenizeParams` and `get_max_tokens`, with vLLM's messages.

Order (as in `BaseRenderer._tokenize_singleton_prompt`): parameter checks at construction,
a character-count bound before tokenizing, truncation, then the token-count bound. Finally
`max_tokens = min(max_model_len - prompt_len, requested or generation default, override)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from render_service.protocol import vllm_validation_error

__all__ = ["TokenizeLimits", "max_tokens_for"]


@dataclass(frozen=True, slots=True)
class TokenizeLimits:
    """vLLM TokenizeParams for one prompt (max_total_tokens = max_model_len)."""

    max_total_tokens: int | None
    max_output_tokens: int | None
    truncate_prompt_tokens: int | None
    truncation_side: str | None
    max_output_tokens_param: str
    max_chars_per_token: int
    tokenizer_truncation_side: str

    def __post_init__(self) -> None:
        total, output = self.max_total_tokens, self.max_output_tokens
        if output is not None and total is not None and output > total:
            raise vllm_validation_error(
                f"{self.max_output_tokens_param}={output} cannot be greater than "
                f"max_model_len={total}. Please request fewer output tokens.",
                parameter=self.max_output_tokens_param,
                value=output,
            )
        truncate = self.truncate_prompt_tokens
        if total is not None and truncate is not None and truncate > total:
            raise vllm_validation_error(
                f"truncate_prompt_tokens={truncate} cannot be greater than max_model_len "
                f"= {total}. Please request a smaller truncation size.",
                parameter="truncate_prompt_tokens",
                value=truncate,
            )

    def check_text(self, text: str) -> str:
        """The character bound (or pre-trim with an explicit truncation side)."""
        if self.max_total_tokens is None:
            return text
        max_chars = self.max_total_tokens * self.max_chars_per_token
        if len(text) <= max_chars:
            return text
        if self.truncate_prompt_tokens is None:
            raise vllm_validation_error(
                f"This model's maximum context length is {self.max_total_tokens} tokens. "
                f"However, your prompt contains {len(text)} characters (more than {max_chars} "
                f"characters, which is the upper bound for {self.max_total_tokens} input "
                "tokens). Please reduce the length of the input prompt.",
                parameter="input_text",
                value=len(text),
            )
        if self.truncation_side == "left":
            return text[-max_chars:]
        if self.truncation_side == "right":
            return text[:max_chars]
        return text

    def check_tokens(self, ids: list[int], *, counted_whole: bool = False) -> list[int]:
        """Truncation, then the token bound (vLLM reports 'at least N+1' past the limit when
        it tokenized with max_length; `counted_whole`: ids it did not tokenize so, e.g.
        embeddings or a template that tokenized, are reported by their exact count)."""
        ids = self._truncate(ids)
        total = self.max_total_tokens
        if total is None or len(ids) <= total:
            return ids
        # vLLM tokenizes with max_length = max_model_len + 1, so it sees at most that many.
        count = total + 1 if self.truncate_prompt_tokens is None and not counted_whole else len(ids)
        raise self._too_long(count, at_least=count == total + 1 and not counted_whole)

    def check_count(self, length: int) -> tuple[int, int]:
        """`check_tokens(ids, counted_whole=True)` for a prompt known by its length only (so
        embeddings are never materialised): the [start, end) that truncation keeps."""
        start, end = self.kept_span(length)
        total = self.max_total_tokens
        if total is not None and end - start > total:
            raise self._too_long(end - start, at_least=False)
        return start, end

    def _too_long(self, count: int, *, at_least: bool) -> Exception:
        total = self.max_total_tokens
        qualifier = "at least " if at_least else ""
        return vllm_validation_error(
            f"This model's maximum context length is {total} tokens. However, your prompt "
            f"contains {qualifier}{count} input tokens, which exceeds this limit even without "
            "any output tokens. Please reduce the length of the input prompt.",
            parameter="input_tokens",
            value=count,
        )

    def tokenizer_max_length(self) -> int | None:
        """The `max_length` vLLM's `get_encode_kwargs` has the tokenizer truncate to, when
        truncate_prompt_tokens is set without an explicit side (None: no such cut)."""
        keep = self.truncate_prompt_tokens
        if keep is None or self.truncation_side is not None:
            return None
        return self._max_truncation_tokens() if keep < 0 else keep

    def kept_span(self, length: int) -> tuple[int, int]:
        """The [start, end) of a `length`-token prompt that truncate_prompt_tokens keeps."""
        keep = self.truncate_prompt_tokens
        if keep is not None and keep < 0:
            keep = self._max_truncation_tokens()
        if keep is None or keep >= length:
            return 0, length
        side = self.truncation_side or self.tokenizer_truncation_side
        return (length - keep, length) if side == "left" and keep else (0, keep)

    def _truncate(self, ids: list[int]) -> list[int]:
        start, end = self.kept_span(len(ids))
        return ids if (start, end) == (0, len(ids)) else ids[start:end]

    def _max_truncation_tokens(self) -> int | None:
        if self.max_total_tokens is None:
            return None
        if self.max_output_tokens == 0:
            return self.max_total_tokens
        return max(0, self.max_total_tokens - 1)


def max_tokens_for(
    max_model_len: int,
    requested: int | None,
    prompt_len: int,
    defaults: dict[str, Any],
    override: int | None,
    truncate_prompt_tokens: int | None,
) -> int:
    """vLLM `get_max_tokens` (no platform cap on CPU/GPU builds)."""
    if truncate_prompt_tokens is not None:
        limit = max_model_len if truncate_prompt_tokens == -1 else truncate_prompt_tokens
        prompt_len = min(prompt_len, limit)
    if max_model_len < prompt_len:
        raise vllm_validation_error(
            f"Input length ({prompt_len}) exceeds model's maximum context length ({max_model_len})."
        )
    fallback = requested if requested is not None else defaults.get("max_tokens")
    candidates = [max_model_len - prompt_len, fallback, override]
    return min(value for value in candidates if value is not None)
