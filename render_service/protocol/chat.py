"""vLLM 0.33's chat completion request schema and its "before" validators."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import PrivateAttr, model_validator

from render_service.protocol.common import (
    ChatCompletionNamedToolChoiceParam,
    ChatCompletionToolsParam,
    ReasoningEffort,
    SharedRequestFields,
    TopLogprobsParam,
    alias_return_mm_kwargs,
    check_cache_salt,
    check_logprob_fields,
    check_response_format,
    check_stream_options,
)
from render_service.protocol.content import has_non_text_content
from render_service.protocol.validation import VLLMValidationError

__all__ = ["ChatCompletionRequest"]


class ChatCompletionRequest(SharedRequestFields):
    # vLLM 0.33's ChatCompletionRequest (`vllm/entrypoints/openai/chat_completion/protocol.py`).
    # No docstring: it would become the published JSON schema's description.

    VLLM_FIELD_ORDER: ClassVar[tuple[str, ...]] = tuple(
        "messages model frequency_penalty logit_bias logprobs top_logprobs max_tokens "
        "max_completion_tokens n presence_penalty response_format seed stop stream "
        "stream_options temperature top_p tools tool_choice reasoning_effort "
        "thinking_token_budget include_reasoning parallel_tool_calls user use_beam_search "
        "top_k min_p repetition_penalty watermarking length_penalty stop_token_ids "
        "include_stop_str_in_output ignore_eos min_tokens skip_special_tokens "
        "spaces_between_special_tokens truncate_prompt_tokens truncation_side prompt_logprobs "
        "logprob_token_ids allowed_token_ids bad_words echo add_generation_prompt "
        "continue_final_message add_special_tokens documents chat_template "
        "chat_template_kwargs media_io_kwargs mm_processor_kwargs structured_outputs priority "
        "request_id session_id return_tokens_as_token_ids return_token_ids "
        "return_weight_versions routed_experts_prompt_start return_token_offsets "
        "return_prompt_text mm_payload return_mm_kwargs cache_salt kv_transfer_params "
        "ec_transfer_params vllm_xargs repetition_detection stream_interval"
        .split()
    )

    messages: list[dict[str, Any]]
    logprobs: bool | None = False
    top_logprobs: TopLogprobsParam = 0
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = 1
    tools: list[ChatCompletionToolsParam] | None = None
    tool_choice: (
        Literal["none"] | Literal["auto"] | Literal["required"] | ChatCompletionNamedToolChoiceParam | None
    ) = "none"
    reasoning_effort: ReasoningEffort | None = None
    include_reasoning: bool = True
    # Set by the mistral tool parser's grammar (vLLM's `_grammar_from_parser`; not on the wire).
    _grammar_from_parser: bool = PrivateAttr(default=False)
    parallel_tool_calls: bool | None = True
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    documents: list[dict[str, str]] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    return_prompt_text: bool | None = None

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
    def _normalize_messages_before(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            return data
        for msg in data["messages"]:
            if not isinstance(msg, dict):
                continue
            reasoning_content = msg.pop("reasoning_content", None)
            if reasoning_content is not None and msg.get("reasoning") is None:
                msg["reasoning"] = reasoning_content
        return data

    @model_validator(mode="before")
    @classmethod
    def validate_response_format(cls, data: Any) -> Any:
        return check_response_format(data)

    @model_validator(mode="before")
    @classmethod
    def validate_stream_options(cls, data: Any) -> Any:
        return check_stream_options(data)

    @model_validator(mode="before")
    @classmethod
    def check_logprobs(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("logprob_token_ids") and data.get("use_beam_search"):
            raise VLLMValidationError(
                "`logprob_token_ids` is not supported with beam search.", parameter="logprob_token_ids"
            )
        if data.get("logprob_token_ids") and not data.get("logprobs"):
            raise VLLMValidationError(
                "when using `logprob_token_ids`, `logprobs` must be set to true.",
                parameter="logprob_token_ids",
            )
        check_logprob_fields(data, ("prompt_logprobs", "top_logprobs"))
        top_logprobs = data.get("top_logprobs")
        if top_logprobs is not None:
            if top_logprobs < 0 and top_logprobs != -1:
                raise VLLMValidationError(
                    "`top_logprobs` must be a positive value or -1.",
                    parameter="top_logprobs",
                    value=top_logprobs,
                )
            if (top_logprobs == -1 or top_logprobs > 0) and not data.get("logprobs"):
                raise VLLMValidationError(
                    "when using `top_logprobs`, `logprobs` must be set to true.",
                    parameter="top_logprobs",
                )
        return data

    @model_validator(mode="before")
    @classmethod
    def check_structured_outputs_count(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("structured_outputs"), dict):
            return data
        kwargs = data["structured_outputs"]
        count = sum(kwargs.get(k) is not None for k in ("json", "regex", "choice"))
        if count > 1:
            raise VLLMValidationError(
                "You can only use one kind of constraints for structured outputs "
                "('json', 'regex' or 'choice')."
            )
        if count > 0 and data.get("tool_choice", "none") not in ("none", "auto", "required"):
            raise VLLMValidationError(
                "You can only either use constraints for structured outputs or tools, not both."
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def check_tool_usage(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return _check_tool_usage(data)

    @model_validator(mode="before")
    @classmethod
    def check_generation_prompt(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("continue_final_message") and data.get("add_generation_prompt"):
            raise VLLMValidationError(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def drop_prompt_token_ids_with_media(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        kv = data.get("kv_transfer_params")
        if isinstance(kv, dict) and kv.get("prompt_token_ids") is not None:
            if has_non_text_content(data.get("messages")):
                kv.pop("prompt_token_ids")
        return data


def _check_tool_usage(data: dict[str, Any]) -> dict[str, Any]:
    if data.get("tools") == []:
        raise VLLMValidationError(
            "`tools` must not be an empty array. Either provide at least one tool or omit the "
            "field entirely.",
            parameter="tools",
        )
    if "tool_choice" not in data and data.get("tools"):
        data["tool_choice"] = "auto"
    choice = data.get("tool_choice")
    if "tool_choice" not in data or choice == "none" or choice is None:
        return data
    if data.get("tools") is None:
        raise VLLMValidationError(
            "When using `tool_choice`, `tools` must be set.", parameter="tool_choice"
        )
    if choice not in ("auto", "required") and not isinstance(choice, dict):
        raise VLLMValidationError(
            f"Invalid value for `tool_choice`: {choice}! "
            'Only named tools, "none", "auto" or "required" are supported.',
            parameter="tool_choice",
        )
    if isinstance(choice, dict):
        _check_named_tool_choice(choice, data["tools"])
    return data


def _check_named_tool_choice(choice: dict[str, Any], tools: Any) -> None:
    usage = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'
    function = choice.get("function")
    if not isinstance(function, dict):
        raise VLLMValidationError(
            f"Invalid value for `function`: `{function}` in `tool_choice`! {usage}",
            parameter="tool_choice.function",
        )
    if "name" not in function:
        raise VLLMValidationError(
            f"Expected field `name` in `function` in `tool_choice`! {usage}",
            parameter="tool_choice.function.name",
        )
    name = function["name"]
    if not isinstance(name, str) or len(name) == 0:
        raise VLLMValidationError(
            f"Invalid `name` in `function`: `{name}` in `tool_choice`! {usage}",
            parameter="tool_choice.function.name",
        )
    for tool in tools:
        if tool["function"]["name"] == name:
            return
    raise VLLMValidationError(
        "The tool specified in `tool_choice` does not match any of the specified `tools`",
        parameter="tool_choice",
    )
