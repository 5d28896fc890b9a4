"""vLLM 0.33's Anthropic Messages request schema (`vllm/entrypoints/anthropic/protocol.py`).

Field names, types, defaults and validators (and so the 400 texts) are vLLM's. These are plain
pydantic models as in vLLM: unknown fields are ignored, not kept.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from render_service.protocol.common import MMPayload, alias_return_mm_kwargs

__all__ = [
    "AnthropicContentBlock",
    "AnthropicCountTokensRequest",
    "AnthropicMessage",
    "AnthropicMessagesRequest",
    "AnthropicTool",
    "AnthropicToolChangeDefinition",
    "AnthropicToolChoice",
    "AnthropicThinkingEnabled",
    "DisabledThinkingEffort",
    "EFFORTS",
]

AnthropicEffort = Literal["low", "medium", "high", "xhigh", "max"]
EFFORTS: tuple[str, ...] = ("low", "medium", "high", "xhigh", "max")
# What thinking.type=disabled sends to the template as reasoning_effort.
DisabledThinkingEffort = Literal["none", "low", "medium", "high", "xhigh", "max"]
_ThinkingDisplay = Literal["summarized", "omitted", "updates"]
_MAX_STOP_STRINGS = 4  # VLLM_MAX_STOP_STRINGS default


class AnthropicTool(BaseModel):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    strict: bool | None = None
    defer_loading: bool | None = None

    @field_validator("input_schema")
    @classmethod
    def _default_object_type(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "type" not in value:
            value["type"] = "object"
        return value


class AnthropicToolChangeReference(BaseModel):
    type: Literal["tool_reference"]
    name: str


class AnthropicToolChangeDefinition(BaseModel):
    type: Literal["tool_definition"]
    definition: AnthropicTool


AnthropicToolChange = Annotated[
    AnthropicToolChangeReference | AnthropicToolChangeDefinition, Field(discriminator="type")
]


class AnthropicContentBlock(BaseModel):
    type: Literal[
        "text", "image", "tool_use", "tool_result", "tool_reference", "thinking",
        "redacted_thinking", "tool_addition", "tool_removal",
    ]  # fmt: skip
    text: str | None = None
    source: dict[str, Any] | None = None
    id: str | None = None
    tool_use_id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None
    tool_name: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    tool: AnthropicToolChange | None = None

    @model_validator(mode="after")
    def _check_tool_change(self) -> AnthropicContentBlock:
        if self.type not in ("tool_addition", "tool_removal"):
            return self
        if self.tool is None:
            raise ValueError(f"tool is required for {self.type} blocks")
        if self.type == "tool_removal" and self.tool.type != "tool_reference":
            raise ValueError("tool_removal only accepts a tool_reference")
        return self


def _reject_tool_changes(content: str | list[AnthropicContentBlock] | None) -> None:
    if content is None or isinstance(content, str):
        return
    for block in content:
        if block.type in ("tool_addition", "tool_removal"):
            raise ValueError(f'{block.type} blocks are only allowed in messages with role "system"')


class AnthropicMessage(BaseModel):
    role: Literal["user", "assistant", "system"]
    content: str | list[AnthropicContentBlock]

    @model_validator(mode="after")
    def _check_role(self) -> AnthropicMessage:
        if self.role != "system":
            _reject_tool_changes(self.content)
        return self


class AnthropicToolChoice(BaseModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _name_for_tool(self) -> AnthropicToolChoice:
        if self.type == "tool" and not self.name:
            raise ValueError("tool_choice.name is required when type is 'tool'")
        return self


class AnthropicJsonOutputFormat(BaseModel):
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    type: Literal["json_schema"] = "json_schema"


class AnthropicOutputConfig(BaseModel):
    effort: AnthropicEffort | None = None
    format: AnthropicJsonOutputFormat | None = None


class AnthropicThinkingEnabled(BaseModel):
    type: Literal["enabled"]
    budget_tokens: int = Field(ge=1024)
    display: _ThinkingDisplay | None = None


class AnthropicThinkingDisabled(BaseModel):
    type: Literal["disabled"]


class AnthropicThinkingAdaptive(BaseModel):
    type: Literal["adaptive"]
    display: _ThinkingDisplay | None = None


AnthropicThinkingConfig = Annotated[
    AnthropicThinkingEnabled | AnthropicThinkingDisabled | AnthropicThinkingAdaptive,
    Field(discriminator="type"),
]


class AnthropicMessagesRequest(BaseModel):
    model: str
    messages: list[AnthropicMessage]
    max_tokens: int
    metadata: dict[str, Any] | None = None
    output_config: AnthropicOutputConfig | None = None
    thinking: AnthropicThinkingConfig | None = None
    stop_sequences: Annotated[list[str], Field(max_length=_MAX_STOP_STRINGS)] | None = None
    stream: bool | None = False
    system: str | list[AnthropicContentBlock] | None = None
    temperature: float | None = None
    tool_choice: AnthropicToolChoice | None = None
    tools: list[AnthropicTool] | None = None
    top_k: int | None = None
    top_p: float | None = None
    # vLLM's own fields
    mm_payload: MMPayload = "tensors"
    return_mm_kwargs: bool | None = None
    cache_salt: str | None = Field(default=None, min_length=1, max_length=1024)
    watermarking: bool | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, str | int | float | list[str | int | float]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    @field_validator("model")
    @classmethod
    def _model_required(cls, value: str) -> str:
        if not value:
            raise ValueError("Model is required")
        return value

    @field_validator("max_tokens")
    @classmethod
    def _positive_max_tokens(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("max_tokens must be positive")
        return value

    @field_validator("system")
    @classmethod
    def _system_tool_changes(
        cls, value: str | list[AnthropicContentBlock] | None
    ) -> str | list[AnthropicContentBlock] | None:
        _reject_tool_changes(value)
        return value

    @model_validator(mode="before")
    @classmethod
    def _alias_mm_kwargs(cls, data: Any) -> Any:
        return alias_return_mm_kwargs(data)

    @model_validator(mode="after")
    def _check_thinking_budget(self) -> AnthropicMessagesRequest:
        # P/D prefill legs carry max_tokens=1 and never decode.
        if self.kv_transfer_params and self.kv_transfer_params.get("do_remote_decode"):
            return self
        thinking = self.thinking
        if isinstance(thinking, AnthropicThinkingEnabled) and thinking.budget_tokens >= self.max_tokens:
            raise ValueError("thinking.budget_tokens must be less than max_tokens")
        return self


class AnthropicCountTokensRequest(BaseModel):
    model: str
    messages: list[AnthropicMessage]
    output_config: AnthropicOutputConfig | None = None
    system: str | list[AnthropicContentBlock] | None = None
    thinking: AnthropicThinkingConfig | None = None
    tool_choice: AnthropicToolChoice | None = None
    tools: list[AnthropicTool] | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    @field_validator("model")
    @classmethod
    def _model_required(cls, value: str) -> str:
        if not value:
            raise ValueError("Model is required")
        return value

    @field_validator("system")
    @classmethod
    def _system_tool_changes(
        cls, value: str | list[AnthropicContentBlock] | None
    ) -> str | list[AnthropicContentBlock] | None:
        _reject_tool_changes(value)
        return value
