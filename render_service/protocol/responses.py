"""vLLM 0.33's Responses request (`vllm/entrypoints/openai/responses/protocol.py`), the part
render reads.

Scalar fields, defaults, bounds and the "before" validators are vLLM's. `input` items, `tools`
and `tool_choice` are taken as JSON objects here and checked by the conversion
(`render_service.render.responses`): vLLM validates them against the OpenAI SDK's item unions,
whose (hundreds of) union-member errors we do not reproduce, only their 400.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from render_service.protocol.common import (
    INT64_MAX,
    INT64_MIN,
    MMPayload,
    OpenAIBaseModel,
    StopParam,
    TopLogprobsParam,
    alias_return_mm_kwargs,
    check_cache_salt,
)
from render_service.protocol.validation import VLLMValidationError, random_uuid

__all__ = ["ResponsesRequest"]


class ResponsesReasoning(OpenAIBaseModel):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: str | None = None


class PromptCacheOptions(OpenAIBaseModel):
    """Accepted and echoed (without the request-only `prewarm`); vLLM does not act on it."""

    mode: Literal["implicit", "explicit"] = "implicit"
    ttl: Literal["30m"] = "30m"
    comparison_response_id: str | None = None
    prewarm: bool | None = None


class ResponsesTextConfig(OpenAIBaseModel):
    format: dict[str, Any] | None = None


class ResponsesRequest(OpenAIBaseModel):
    background: bool | None = False
    include: list[str] | None = None
    input: str | list[Any]
    instructions: str | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    metadata: dict[str, str] | None = None
    model: str | None = None
    logit_bias: dict[str, float] | None = None
    parallel_tool_calls: bool | None = True
    previous_response_id: str | None = None
    prompt: dict[str, Any] | None = None
    # Echoed in the response; vLLM does not act on them.
    prompt_cache_key: str | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: str | None = None
    reasoning: ResponsesReasoning | None = None
    include_reasoning: bool = True
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] = "auto"
    store: bool | None = True
    stream: bool | None = False
    temperature: float | None = None
    text: ResponsesTextConfig | None = None
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    top_logprobs: TopLogprobsParam = 0
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    truncation: Literal["auto", "disabled"] | None = "disabled"
    user: str | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    watermarking: bool | None = None
    request_id: str = Field(default_factory=lambda: f"resp_{random_uuid()}")
    session_id: str | None = None
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    priority: int = Field(default=0, ge=INT64_MIN, le=INT64_MAX)
    mm_payload: MMPayload = "tensors"
    return_mm_kwargs: bool | None = None
    cache_salt: str | None = Field(default=None, min_length=1, max_length=1024)
    # Harmony history (Harmony or chat message dicts), read by the gpt_oss render only.
    previous_input_messages: list[dict[str, Any]] | None = None
    structured_outputs: dict[str, Any] | None = None
    repetition_penalty: float | None = None
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    stop: StopParam = []
    stop_token_ids: list[int] | None = []
    ignore_eos: bool = False
    vllm_xargs: dict[str, str | int | float | list[str | int | float]] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    @field_validator("prompt_cache_retention", mode="before")
    @classmethod
    def _retention_spelling(cls, value: object) -> object:
        return "in_memory" if value == "in-memory" else value  # older SDKs' spelling

    @field_validator("tool_choice")
    @classmethod
    def _known_choice(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, str) and value not in ("none", "auto", "required"):
            raise ValueError("Input should be 'none', 'auto' or 'required'")
        return value

    @model_validator(mode="before")
    @classmethod
    def _alias_mm_kwargs(cls, data: Any) -> Any:
        return alias_return_mm_kwargs(data)

    @model_validator(mode="before")
    @classmethod
    def _cache_salt(cls, data: Any) -> Any:
        return check_cache_salt(data)

    @model_validator(mode="before")
    @classmethod
    def _background(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("background") and not data.get("store", True):
            raise VLLMValidationError("background can only be used when `store` is true", parameter="background")
        return data

    @model_validator(mode="before")
    @classmethod
    def _prompt(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("prompt") is not None:
            raise VLLMValidationError("prompt template is not supported", parameter="prompt")
        return data

    @model_validator(mode="before")
    @classmethod
    def _tool_usage(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        tools = data.get("tools")
        choice = data.get("tool_choice", "auto")
        if tools is not None and len(tools) > 0:
            if isinstance(choice, dict) and choice.get("type") in ("function", "custom"):
                names = {t.get("name") for t in tools if isinstance(t, dict) and t.get("type") != "namespace"}
                has_namespace = any(isinstance(t, dict) and t.get("type") == "namespace" for t in tools)
                if not choice.get("name") or (choice["name"] not in names and not has_namespace):
                    raise VLLMValidationError(
                        "Tool choice 'function' not found in 'tools' parameter.", parameter="tool_choice"
                    )
            return data
        if choice in ("auto", "none"):
            data["tool_choice"] = "none"
        elif choice == "required":
            raise VLLMValidationError(
                "Tool choice 'required' must be specified with 'tools' parameter.", parameter="tool_choice"
            )
        elif isinstance(choice, dict) and choice.get("type") in ("function", "custom"):
            raise VLLMValidationError("Tool choice 'function' not found in 'tools' parameter.", parameter="tool_choice")
        return data

    def include_output_logprobs(self) -> bool:
        return isinstance(self.include, list) and "message.output_text.logprobs" in self.include
