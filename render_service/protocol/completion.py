"""vLLM 0.33's completion request schema and its "before" validators."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator

from render_service.protocol.common import (
    SharedRequestFields,
    alias_return_mm_kwargs,
    check_cache_salt,
    check_logprob_fields,
    check_response_format,
    check_stream_options,
)
from render_service.protocol.validation import VLLMValidationError

__all__ = ["CompletionRequest"]

_MAX_COMPLETION_PROMPTS = 1024  # VLLM_MAX_COMPLETION_PROMPTS default


class CompletionRequest(SharedRequestFields):
    # vLLM 0.33's CompletionRequest (`vllm/entrypoints/openai/completion/protocol.py`).
    # No docstring: it would become the published JSON schema's description.

    VLLM_FIELD_ORDER: ClassVar[tuple[str, ...]] = tuple(
        "model prompt echo frequency_penalty logit_bias logprobs max_tokens n "
        "presence_penalty seed stop stream stream_options suffix temperature top_p user "
        "use_beam_search top_k min_p repetition_penalty watermarking length_penalty "
        "stop_token_ids include_stop_str_in_output ignore_eos min_tokens skip_special_tokens "
        "spaces_between_special_tokens truncate_prompt_tokens truncation_side "
        "allowed_token_ids prompt_logprobs logprob_token_ids bad_words prompt_embeds "
        "add_special_tokens response_format structured_outputs priority request_id session_id "
        "return_tokens_as_token_ids return_token_ids return_weight_versions "
        "routed_experts_prompt_start return_token_offsets mm_payload return_mm_kwargs "
        "cache_salt kv_transfer_params ec_transfer_params vllm_xargs repetition_detection "
        "thinking_token_budget stream_interval"
        .split()
    )

    prompt: (
        list[Annotated[int, Field(ge=0)]] | list[list[Annotated[int, Field(ge=0)]]] | str | list[str] | None
    ) = None
    echo: bool | None = False
    logprobs: int | None = None
    max_tokens: int | None = 16
    n: int = 1
    suffix: str | None = None
    prompt_embeds: bytes | list[bytes] | None = None
    add_special_tokens: bool = True

    @model_validator(mode="before")
    @classmethod
    def apply_return_mm_kwargs_alias(cls, data: Any) -> Any:
        return alias_return_mm_kwargs(data)

    @model_validator(mode="before")
    @classmethod
    def check_cache_salt_support(cls, data: Any) -> Any:
        return check_cache_salt(data)

    @model_validator(mode="before")
    @classmethod
    def normalize_null_max_tokens(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("max_tokens") is None:
            data = {**data, "max_tokens": 16}
        return data

    @model_validator(mode="before")
    @classmethod
    def validate_response_format(cls, data: Any) -> Any:
        return check_response_format(data)

    @model_validator(mode="before")
    @classmethod
    def check_structured_outputs_count(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("structured_outputs"), dict):
            return data
        kwargs = data["structured_outputs"]
        if sum(kwargs.get(k) is not None for k in ("json", "regex", "choice")) > 1:
            raise VLLMValidationError(
                "You can only use one kind of constraints for structured outputs "
                "('json', 'regex' or 'choice').",
                parameter="structured_outputs",
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def check_logprobs(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("logprob_token_ids") and data.get("use_beam_search"):
            raise VLLMValidationError(
                "`logprob_token_ids` is not supported with beam search.", parameter="logprob_token_ids"
            )
        if data.get("use_beam_search") and data.get("echo") and data.get("logprobs") is not None:
            raise VLLMValidationError(
                "`echo` with `logprobs` is not supported with beam search because beam search "
                "does not compute prompt logprobs.",
                parameter="echo",
            )
        if data.get("logprob_token_ids") and data.get("echo") and data.get("max_tokens") == 0:
            raise VLLMValidationError(
                "`logprob_token_ids` is not supported when `echo=True` and `max_tokens=0` "
                "because no output tokens are generated.",
                parameter="logprob_token_ids",
            )
        if data.get("logprob_token_ids") and data.get("logprobs") is None:
            raise VLLMValidationError(
                "when using `logprob_token_ids`, `logprobs` must be set.", parameter="logprob_token_ids"
            )
        check_logprob_fields(data, ("prompt_logprobs", "logprobs"))
        logprobs = data.get("logprobs")
        if logprobs is not None and logprobs < 0 and logprobs != -1:
            raise VLLMValidationError(
                "`logprobs` must be a positive value or -1.", parameter="logprobs", value=logprobs
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def validate_stream_options(cls, data: Any) -> Any:
        return check_stream_options(data)

    @model_validator(mode="before")
    @classmethod
    def validate_prompt_and_prompt_embeds(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        prompt = data.get("prompt")
        prompt_embeds = data.get("prompt_embeds")
        prompt_is_empty = prompt is None or (isinstance(prompt, str) and prompt == "")
        embeds_is_empty = prompt_embeds is None or (
            isinstance(prompt_embeds, list) and len(prompt_embeds) == 0
        )
        if prompt_is_empty and embeds_is_empty:
            raise VLLMValidationError(
                "Either prompt or prompt_embeds must be provided and non-empty.", parameter="prompt"
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def validate_prompt_list_length(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        prompt = data.get("prompt")
        if (
            isinstance(prompt, list)
            and prompt
            and not all(isinstance(p, int) for p in prompt)
            and len(prompt) > _MAX_COMPLETION_PROMPTS
        ):
            raise VLLMValidationError(
                f"prompt list length {len(prompt)} exceeds the maximum allowed count of "
                f"{_MAX_COMPLETION_PROMPTS}. To increase this limit, set the "
                "VLLM_MAX_COMPLETION_PROMPTS environment variable.",
                parameter="prompt",
            )
        return data
