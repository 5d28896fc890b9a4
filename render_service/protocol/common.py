"""Field types, base models and "before" validators the request schemas share.

Field names, types and defaults mirror vLLM 0.33's protocol modules; unknown fields are
accepted and ignored. The validators reproduce vLLM's (same order, same messages), so a bad
body fails with the same text.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_serializer,
    model_validator,
)

from render_service.protocol.validation import VLLMValidationError, random_uuid

__all__ = [
    "ChatCompletionNamedFunction",
    "ChatCompletionNamedToolChoiceParam",
    "ChatCompletionToolsParam",
    "FunctionDefinition",
    "INT64_MAX",
    "INT64_MIN",
    "MMPayload",
    "OpenAIBaseModel",
    "ReasoningEffort",
    "SharedRequestFields",
    "StopParam",
    "StreamOptions",
    "ThinkingTokenBudget",
    "TopLogprobsParam",
    "alias_return_mm_kwargs",
    "check_cache_salt",
    "check_logprob_fields",
    "check_response_format",
    "check_stream_options",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_MAX_STOP_STRINGS = 4  # VLLM_MAX_STOP_STRINGS default
_CACHE_SALT_FORBIDDEN_CHARS = frozenset("@/\\\x00")
_MAX_CACHE_SALT_LENGTH = 128

# -- shared field types ----------------------------------------------------------------------

StopParam = str | Annotated[list[str], Field(max_length=_MAX_STOP_STRINGS)] | None
TopLogprobsParam = Annotated[int, BeforeValidator(lambda v: 0 if v is None else v)]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
MMPayload = Literal["tensors", "none"]


def _validate_thinking_token_budget(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, (bool, float)) or not isinstance(value, int) or (value < 0 and value != -1):
        raise VLLMValidationError(
            "`thinking_token_budget` must be a non-negative integer or -1 for unlimited.",
            parameter="thinking_token_budget",
            value=value,
        )
    return None if value == -1 else value


ThinkingTokenBudget = Annotated[int | None, BeforeValidator(_validate_thinking_token_budget)]


def _properties_in_vllm_order(schema: dict[str, Any], model_cls: type[BaseModel]) -> None:
    order: tuple[str, ...] = getattr(model_cls, "VLLM_FIELD_ORDER", ())
    properties = schema.get("properties")
    if order and isinstance(properties, dict):
        schema["properties"] = {name: properties[name] for name in order if name in properties}


class OpenAIBaseModel(BaseModel):
    """Extra fields are allowed (and ignored), like vLLM's OpenAIBaseModel.

    `VLLM_FIELD_ORDER` (empty: the declaration order) is the order vLLM declares a model's
    fields in, for models that take shared fields from a base class: validation errors are
    listed in it (`validation.parse_request`) and the JSON schema's properties follow it.
    """

    model_config = ConfigDict(extra="allow", json_schema_extra=_properties_in_vllm_order)
    VLLM_FIELD_ORDER: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        order = cls.__dict__.get("VLLM_FIELD_ORDER")
        if order is not None and sorted(order) != sorted(cls.model_fields):
            # A field added without a place in vLLM's order would be listed last: refuse.
            raise TypeError(f"{cls.__name__}.VLLM_FIELD_ORDER must list every field once")


class StreamOptions(OpenAIBaseModel):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class FunctionDefinition(OpenAIBaseModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: bool | None = None

    @model_serializer(mode="wrap")
    def _serialize(self, handler: Any) -> dict[str, Any]:
        data = {k: v for k, v in handler(self).items() if k in type(self).model_fields}
        if self.strict is None:
            data.pop("strict", None)
        if self.defer_loading is None:
            data.pop("defer_loading", None)
        return data


class ChatCompletionToolsParam(OpenAIBaseModel):
    type: Literal["function"] = "function"
    function: FunctionDefinition
    defer_loading: bool | None = None

    @model_validator(mode="after")
    def _propagate_defer_loading(self) -> ChatCompletionToolsParam:
        if self.defer_loading is not None and self.function.defer_loading is None:
            self.function.defer_loading = self.defer_loading
        return self

    @model_serializer(mode="wrap")
    def _serialize(self, handler: Any) -> dict[str, Any]:
        data = {k: v for k, v in handler(self).items() if k in type(self).model_fields}
        if self.defer_loading is None:
            data.pop("defer_loading", None)
        return data


class ChatCompletionNamedFunction(OpenAIBaseModel):
    name: str


class ChatCompletionNamedToolChoiceParam(OpenAIBaseModel):
    function: ChatCompletionNamedFunction
    type: Literal["function"] = "function"


class SharedRequestFields(OpenAIBaseModel):
    """The fields chat and completion requests share (sampling, output, routing and transfer
    options), declared once with vLLM's types and defaults. Each request adds its own fields
    and states vLLM's order of all of them in `VLLM_FIELD_ORDER`."""

    model: str | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    presence_penalty: float | None = None
    response_format: dict[str, Any] | None = None
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    stop: StopParam = []
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    thinking_token_budget: ThinkingTokenBudget = None
    user: str | None = None
    use_beam_search: bool = False
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    watermarking: bool | None = None
    length_penalty: float = 1.0
    stop_token_ids: list[int] | None = []
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: Annotated[int, Field(ge=-1, le=INT64_MAX)] | None = None
    truncation_side: Literal["left", "right"] | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] = Field(default_factory=list)
    structured_outputs: dict[str, Any] | None = None
    priority: int = Field(default=0, ge=INT64_MIN, le=INT64_MAX)
    request_id: str = Field(default_factory=random_uuid)
    session_id: str | None = None
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    return_weight_versions: bool = False
    routed_experts_prompt_start: int = Field(default=0, ge=0)
    return_token_offsets: bool | None = False
    mm_payload: MMPayload = "tensors"
    return_mm_kwargs: bool | None = None
    cache_salt: str | None = Field(default=None, min_length=1, max_length=1024)
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, str | int | float | list[str | int | float]] | None = None
    repetition_detection: dict[str, Any] | None = None
    stream_interval: Annotated[int, Field(ge=1)] | None = None


# -- shared "before" validators (vLLM's, in vLLM's order) -------------------------------------


def check_cache_salt(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    salt = data.get("cache_salt")
    if salt is None:
        return data
    if not isinstance(salt, str) or not salt:
        raise VLLMValidationError(
            "Parameter 'cache_salt' must be a non-empty string if provided.", parameter="cache_salt"
        )
    if len(salt) > _MAX_CACHE_SALT_LENGTH or any(c in _CACHE_SALT_FORBIDDEN_CHARS for c in salt):
        raise VLLMValidationError(
            "Parameter 'cache_salt' must be at most 128 characters and must not contain "
            "'@', '/', '\\\\', or NUL.",
            parameter="cache_salt",
        )
    return data


def alias_return_mm_kwargs(data: Any) -> Any:
    if isinstance(data, dict) and data.get("return_mm_kwargs") is False and "mm_payload" not in data:
        return {**data, "mm_payload": "none"}
    return data


def check_response_format(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    response_format = data.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        if response_format.get("json_schema") is None:
            raise VLLMValidationError(
                "When response_format type is 'json_schema', the 'json_schema' field must be "
                "provided.",
                parameter="response_format",
            )
    return data


def check_logprob_fields(data: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        value = data.get(name)
        if value is not None and not isinstance(value, (int, float)):
            raise VLLMValidationError(f"`{name}` must be an integer.", parameter=name, value=value)
    prompt_logprobs = data.get("prompt_logprobs")
    if prompt_logprobs is not None:
        if data.get("stream") and (prompt_logprobs > 0 or prompt_logprobs == -1):
            raise VLLMValidationError(
                "`prompt_logprobs` are not available when `stream=True`.",
                parameter="prompt_logprobs",
            )
        if prompt_logprobs < 0 and prompt_logprobs != -1:
            raise VLLMValidationError(
                "`prompt_logprobs` must be a positive value or -1.",
                parameter="prompt_logprobs",
                value=prompt_logprobs,
            )


def check_stream_options(data: Any) -> Any:
    if isinstance(data, dict) and data.get("stream_options") and not data.get("stream"):
        raise VLLMValidationError(
            "Stream options can only be defined when `stream=True`.", parameter="stream_options"
        )
    return data
