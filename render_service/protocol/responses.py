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

__all__ = ["NAMED_CHOICE_TYPES", "NAMESPACE_SEPARATOR", "ResponsesRequest"]

NAMESPACE_SEPARATOR = "__"  # a namespace's function is the function NAMESPACE__NAME
NAMED_CHOICE_TYPES = ("function", "custom")
# The other tool_choice objects of the OpenAI SDK's ToolChoice union (they constrain nothing).
_OTHER_CHOICE_TYPES = frozenset({
    "allowed_tools", "mcp", "apply_patch", "shell", "programmatic_tool_calling", "file_search",
    "web_search_preview", "web_search_preview_2025_03_11", "computer", "computer_use_preview",
    "computer_use", "image_generation", "code_interpreter",
})  # fmt: skip


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
        if isinstance(value, str):
            if value not in ("none", "auto", "required"):
                raise ValueError("Input should be 'none', 'auto' or 'required'")
            return value
        kind = value.get("type")
        if kind in NAMED_CHOICE_TYPES and not isinstance(value.get("name"), str):
            raise ValueError(f"tool_choice of type {kind!r} needs a string 'name'")
        if kind == "mcp" and not isinstance(value.get("server_label"), str):
            raise ValueError("tool_choice of type 'mcp' needs a string 'server_label'")
        if kind == "allowed_tools" and (value.get("mode") not in ("auto", "required") or not isinstance(value.get("tools"), list)):
            raise ValueError("tool_choice of type 'allowed_tools' needs a mode ('auto' or 'required') and a tools list")
        if kind not in NAMED_CHOICE_TYPES and kind not in _OTHER_CHOICE_TYPES:
            raise ValueError(f"Unknown tool_choice type: {kind!r}")
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
    def _custom_tool_format(cls, data: Any) -> Any:
        tools = data.get("tools") if isinstance(data, dict) else None
        for tool in tools if isinstance(tools, list) else []:
            tool_format = tool.get("format") if isinstance(tool, dict) else None
            if tool.get("type") == "custom" and isinstance(tool_format, dict) and tool_format.get("type") == "grammar":
                raise VLLMValidationError(
                    "Custom tools with a grammar format are not supported; only free-form text custom tools are accepted.",
                    parameter="tools",
                )
        return data

    @model_validator(mode="before")
    @classmethod
    def _tool_usage(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        tools = data.get("tools")
        choice = data.get("tool_choice", "auto")
        named = isinstance(choice, dict) and choice.get("type") in NAMED_CHOICE_TYPES
        if tools is not None and len(tools) > 0:
            if named and isinstance(choice, dict):
                if not choice.get("name"):
                    raise _choice_not_found()
                resolved = _resolve_named_choice(choice["name"], tools)
                if resolved != choice["name"]:
                    data["tool_choice"] = {**choice, "name": resolved}
            return data
        if choice in ("auto", "none"):
            data["tool_choice"] = "none"
        elif choice == "required":
            raise VLLMValidationError(
                "Tool choice 'required' must be specified with 'tools' parameter.", parameter="tool_choice"
            )
        elif named:
            raise _choice_not_found()
        return data

    def include_output_logprobs(self) -> bool:
        return isinstance(self.include, list) and "message.output_text.logprobs" in self.include


def _choice_not_found() -> VLLMValidationError:
    return VLLMValidationError("Tool choice 'function' not found in 'tools' parameter.", parameter="tool_choice")


def _resolve_named_choice(name: str, tools: list[Any]) -> str:
    """vLLM `_resolve_named_tool_choice`: a tool's exact name, else the one namespace function
    with that local name (as `NAMESPACE__NAME`)."""
    exact: set[str] = set()
    local: dict[str, list[str]] = {}
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") != "namespace":
            if isinstance(tool.get("name"), str):
                exact.add(tool["name"])
            continue
        namespace, inner = tool.get("name"), tool.get("tools")
        if not isinstance(inner, list) or not isinstance(namespace, str):
            return name
        for function in inner:
            local_name = function.get("name") if isinstance(function, dict) else None
            if isinstance(local_name, str):
                flat = f"{namespace}{NAMESPACE_SEPARATOR}{local_name}"
                exact.add(flat)
                local.setdefault(local_name, []).append(flat)
    if name in exact:
        return name
    candidates = local.get(name, [])
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        raise VLLMValidationError(
            f"Tool choice '{name}' is ambiguous: it is defined in more than one namespace "
            f"({', '.join(candidates)}). Select it by its full '<namespace>__<name>' name.",
            parameter="tool_choice",
        )
    raise _choice_not_found()
