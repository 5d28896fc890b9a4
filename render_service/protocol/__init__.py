"""Request schemas of vLLM 0.33's render and tokenizer endpoints, and vLLM's 400 error shapes.

Field names, types and defaults mirror `vllm/entrypoints/openai/chat_completion/protocol.py`,
`.../completion/protocol.py` and `vllm/entrypoints/serve/tokenize/protocol.py`; unknown fields
are accepted and ignored. The `mode="before"` validators reproduce vLLM's (same order, same
messages), so a bad body fails with the same text.

`parse_request(model_cls, body)` is the one entry point: it validates and turns a pydantic
`ValidationError` into `RequestValidationError` (a 400 whose message is vLLM's
"N validation error(s):" listing and whose `param` is the dotted location, e.g. `body.prompt`).
Errors vLLM raises *outside* pydantic (`VLLMValidationError` -> "msg (parameter=x, value=y)")
are built with `vllm_validation_error`.

Messages are validated lightly here (a list of objects with a string `role`); their content
is normalised by `render_service.render.messages`.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_serializer, model_validator

from render_service.errors import BadRequestError

__all__ = [
    "RequestValidationError",
    "VLLMValidationError",
    "vllm_validation_error",
    "parse_request",
    "parse_union_request",
    "request_validation_error",
    "random_uuid",
    "FunctionDefinition",
    "ChatCompletionToolsParam",
    "ChatCompletionNamedToolChoiceParam",
    "StreamOptions",
    "ChatCompletionRequest",
    "CompletionRequest",
    "TokenizeCompletionRequest",
    "TokenizeChatRequest",
    "DetokenizeRequest",
]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_MAX_STOP_STRINGS = 4  # VLLM_MAX_STOP_STRINGS default
_MAX_COMPLETION_PROMPTS = 1024  # VLLM_MAX_COMPLETION_PROMPTS default
_CACHE_SALT_FORBIDDEN_CHARS = frozenset("@/\\\x00")
_MAX_CACHE_SALT_LENGTH = 128
_MAX_REPORTED_ERRORS = 10
_MAX_ERROR_INPUT_CHARS = 200
_MAX_ERROR_CHARS = 1000
_INTERNAL_LOC_MARKERS = frozenset(
    "function-wrap function-after function-before function-plain json-or-python "
    "lax-or-strict chain default nullable tagged-union union call arguments is-instance "
    "is-subclass callable str int float bool bytes bytearray list tuple dict set frozenset "
    "complex none nonetype".split()
)
_BRACKETED = re.compile(r"[\[\]{}()]")

ModelT = TypeVar("ModelT", bound=BaseModel)


def random_uuid() -> str:
    """16 hex chars, like vLLM's random_uuid."""
    return f"{uuid.uuid4().int & ((1 << 64) - 1):016x}"


class RequestValidationError(BadRequestError):
    """A body that failed schema validation; vLLM reports these with type "Bad Request"."""

    error_type = "Bad Request"


class VLLMValidationError(Exception):
    """Raised inside validators. Like vLLM's it is not a ValueError, so pydantic does not wrap
    it: it escapes validation and becomes a plain 400 "msg (parameter=x, value=y)"."""

    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None):
        super().__init__(message)
        self.parameter = parameter
        self.value = value

    def __str__(self) -> str:
        extras = []
        if self.parameter is not None:
            extras.append(f"parameter={self.parameter}")
        if self.value is not None:
            extras.append(f"value={self.value}")
        base = super().__str__()
        return f"{base} ({', '.join(extras)})" if extras else base


VLLMValidationError.__name__ = "VLLMValidationError"
VLLMValidationError.__qualname__ = "VLLMValidationError"


def vllm_validation_error(message: str, *, parameter: str | None = None, value: Any = None) -> BadRequestError:
    """The 400 vLLM returns for a VLLMValidationError raised while rendering."""
    text = str(VLLMValidationError(message, parameter=parameter, value=value))
    return BadRequestError(sanitize_message(text), param=parameter)


def sanitize_message(message: str) -> str:
    """vLLM's sanitize_message: drop memory addresses, tracebacks and file paths."""
    message = re.sub(r" at 0x[0-9a-fA-F]+>", ">", message)
    message = re.sub(r'\n?\s*File "[^"]+", line \d+, in \S+(\n\s+.*)?', "", message)
    message = re.sub(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+", "<path>", message)
    message = re.sub(r"(?:/[\w\-]+)+/[\w\-]+\.\w+", "<path>", message)
    return message.strip()


def parse_request(model_cls: type[ModelT], body: Any) -> ModelT:
    """Validate a JSON body into `model_cls`, raising vLLM-shaped 400s.

    Raises:
        RequestValidationError: the body does not match the schema or a validator refused it.
    """
    try:
        return model_cls.model_validate(body)
    except ValidationError as exc:
        raise _to_request_validation_error(exc) from None
    except VLLMValidationError as exc:
        raise BadRequestError(sanitize_message(str(exc)), param=exc.parameter) from None


def parse_union_request(members: tuple[type[BaseModel], ...], body: Any, *, first: type[BaseModel] | None = None) -> Any:
    """Validate `body` as vLLM's FastAPI does for a union body (e.g. TokenizeRequest).

    The first member that validates wins (`first` is tried before the others: the caller's
    cheap guess, e.g. the chat form when "messages" is present). When none does, the errors
    of every member are listed in declaration order, as pydantic's union does. vLLM's models
    carry a wrap validator, so no member name appears in the error locations.
    """
    order = sorted(members, key=lambda m: m is not first)
    failures: dict[type[BaseModel], ValidationError] = {}
    for member in order:
        try:
            return member.model_validate(body)
        except ValidationError as exc:
            failures[member] = exc
        except VLLMValidationError as exc:
            raise BadRequestError(sanitize_message(str(exc)), param=exc.parameter) from None
    errors = [err for member in members for err in failures[member].errors(include_url=False)]
    raise request_validation_error([{**err, "loc": ("body", *err.get("loc", ()))} for err in errors]) from None


def _to_request_validation_error(exc: ValidationError) -> RequestValidationError:
    errors = [{**err, "loc": ("body", *err.get("loc", ()))} for err in exc.errors(include_url=False)]
    return request_validation_error(errors)


def request_validation_error(errors: list[dict[str, Any] | str]) -> RequestValidationError:
    """vLLM's 400 for FastAPI request-validation errors (`loc` already starts with "body").

    An entry may be a bare string (vLLM raises the content-type check that way): it is listed
    as is and gives no `param`.
    """
    param = None
    for err in errors:
        ctx_error = (err.get("ctx") or {}).get("error") if isinstance(err, dict) else None
        if isinstance(ctx_error, VLLMValidationError):
            param = ctx_error.parameter
            break
    if param is None and errors and isinstance(errors[0], dict) and errors[0].get("loc"):
        param = _clean_loc(tuple(errors[0]["loc"]))
    label = "error" if len(errors) == 1 else "errors"
    message = f"{len(errors)} validation {label}:\n"
    message += "".join(f"  {_format_error(err)}\n" for err in errors[:_MAX_REPORTED_ERRORS])
    if len(errors) > _MAX_REPORTED_ERRORS:
        message += f"  ...and {len(errors) - _MAX_REPORTED_ERRORS} more {label}\n"
    return RequestValidationError(sanitize_message(message.rstrip()), param=param)


def _clean_loc(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if not _is_internal(str(p))]
    return ".".join(parts) if parts else ".".join(str(p) for p in loc)


def _is_internal(segment: str) -> bool:
    return bool(_BRACKETED.search(segment)) or segment.lower() in _INTERNAL_LOC_MARKERS


def _summarize(value: Any) -> Any:
    if isinstance(value, str):
        if len(value) > _MAX_ERROR_INPUT_CHARS:
            return value[:_MAX_ERROR_INPUT_CHARS] + "...[truncated]"
        return value
    if isinstance(value, (bytes, bytearray)):
        return f"<{type(value).__name__} of {len(value)} bytes>"
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        text = str(value)
    except ValueError:
        return f"<{type(value).__name__}>"
    return text[:_MAX_ERROR_INPUT_CHARS] + "...[truncated]" if len(text) > _MAX_ERROR_INPUT_CHARS else text


def _format_error(err: dict[str, Any] | str) -> str:
    if not isinstance(err, dict):
        return str(err)
    err = dict(err)
    if "input" in err:
        err["input"] = _summarize(err["input"])
    err["loc"] = _clean_loc(tuple(err["loc"]))
    text = str(err)
    return text[:_MAX_ERROR_CHARS] + "...[truncated]" if len(text) > _MAX_ERROR_CHARS else text


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


class OpenAIBaseModel(BaseModel):
    """Extra fields are allowed (and ignored), like vLLM's OpenAIBaseModel."""

    model_config = ConfigDict(extra="allow")


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


# -- shared "before" validators (vLLM's, in vLLM's order) -------------------------------------


def _check_cache_salt(data: Any) -> Any:
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


def _apply_return_mm_kwargs_alias(data: Any) -> Any:
    if isinstance(data, dict) and data.get("return_mm_kwargs") is False and "mm_payload" not in data:
        return {**data, "mm_payload": "none"}
    return data


def _check_response_format(data: Any) -> Any:
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


def _check_logprob_fields(data: dict[str, Any], names: tuple[str, ...]) -> None:
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


class ChatCompletionRequest(OpenAIBaseModel):
    messages: list[dict[str, Any]]
    model: str | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = False
    top_logprobs: TopLogprobsParam = 0
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = 1
    presence_penalty: float | None = None
    response_format: dict[str, Any] | None = None
    seed: int | None = Field(None, ge=_INT64_MIN, le=_INT64_MAX)
    stop: StopParam = []
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: list[ChatCompletionToolsParam] | None = None
    tool_choice: (
        Literal["none"] | Literal["auto"] | Literal["required"] | ChatCompletionNamedToolChoiceParam | None
    ) = "none"
    reasoning_effort: ReasoningEffort | None = None
    thinking_token_budget: ThinkingTokenBudget = None
    include_reasoning: bool = True
    parallel_tool_calls: bool | None = True
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
    truncate_prompt_tokens: Annotated[int, Field(ge=-1, le=_INT64_MAX)] | None = None
    truncation_side: Literal["left", "right"] | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] = Field(default_factory=list)
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    documents: list[dict[str, str]] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    priority: int = Field(default=0, ge=_INT64_MIN, le=_INT64_MAX)
    request_id: str = Field(default_factory=random_uuid)
    session_id: str | None = None
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    return_weight_versions: bool = False
    routed_experts_prompt_start: int = Field(default=0, ge=0)
    return_token_offsets: bool | None = False
    return_prompt_text: bool | None = None
    mm_payload: MMPayload = "tensors"
    return_mm_kwargs: bool | None = None
    cache_salt: str | None = Field(default=None, min_length=1, max_length=1024)
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, str | int | float | list[str | int | float]] | None = None
    repetition_detection: dict[str, Any] | None = None
    stream_interval: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="before")
    @classmethod
    def apply_return_mm_kwargs_alias(cls, data: Any) -> Any:
        return _apply_return_mm_kwargs_alias(data)

    @model_validator(mode="before")
    @classmethod
    def check_cache_salt_support(cls, data: Any) -> Any:
        return _check_cache_salt(data)

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
        return _check_response_format(data)

    @model_validator(mode="before")
    @classmethod
    def validate_stream_options(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("stream_options") and not data.get("stream"):
            raise VLLMValidationError(
                "Stream options can only be defined when `stream=True`.", parameter="stream_options"
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
        if data.get("logprob_token_ids") and not data.get("logprobs"):
            raise VLLMValidationError(
                "when using `logprob_token_ids`, `logprobs` must be set to true.",
                parameter="logprob_token_ids",
            )
        _check_logprob_fields(data, ("prompt_logprobs", "top_logprobs"))
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
            from render_service.render.messages import has_non_text_content

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


class CompletionRequest(OpenAIBaseModel):
    model: str | None = None
    prompt: (
        list[Annotated[int, Field(ge=0)]] | list[list[Annotated[int, Field(ge=0)]]] | str | list[str] | None
    ) = None
    echo: bool | None = False
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: int | None = None
    max_tokens: int | None = 16
    n: int = 1
    presence_penalty: float | None = None
    seed: int | None = Field(None, ge=_INT64_MIN, le=_INT64_MAX)
    stop: StopParam = []
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    suffix: str | None = None
    temperature: float | None = None
    top_p: float | None = None
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
    truncate_prompt_tokens: Annotated[int, Field(ge=-1, le=_INT64_MAX)] | None = None
    truncation_side: Literal["left", "right"] | None = None
    allowed_token_ids: list[int] | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None
    bad_words: list[str] = Field(default_factory=list)
    prompt_embeds: bytes | list[bytes] | None = None
    add_special_tokens: bool = True
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    priority: int = Field(default=0, ge=_INT64_MIN, le=_INT64_MAX)
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
    thinking_token_budget: ThinkingTokenBudget = None
    stream_interval: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="before")
    @classmethod
    def apply_return_mm_kwargs_alias(cls, data: Any) -> Any:
        return _apply_return_mm_kwargs_alias(data)

    @model_validator(mode="before")
    @classmethod
    def check_cache_salt_support(cls, data: Any) -> Any:
        return _check_cache_salt(data)

    @model_validator(mode="before")
    @classmethod
    def normalize_null_max_tokens(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("max_tokens") is None:
            data = {**data, "max_tokens": 16}
        return data

    @model_validator(mode="before")
    @classmethod
    def validate_response_format(cls, data: Any) -> Any:
        return _check_response_format(data)

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
        _check_logprob_fields(data, ("prompt_logprobs", "logprobs"))
        logprobs = data.get("logprobs")
        if logprobs is not None and logprobs < 0 and logprobs != -1:
            raise VLLMValidationError(
                "`logprobs` must be a positive value or -1.", parameter="logprobs", value=logprobs
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def validate_stream_options(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("stream_options") and not data.get("stream"):
            raise VLLMValidationError(
                "Stream options can only be defined when `stream=True`.", parameter="stream_options"
            )
        return data

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


class TokenizeCompletionRequest(OpenAIBaseModel):
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeChatRequest(OpenAIBaseModel):
    model: str | None = None
    messages: list[dict[str, Any]]
    add_generation_prompt: bool = True
    return_token_strs: bool | None = False
    continue_final_message: bool = False
    add_special_tokens: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    tools: list[ChatCompletionToolsParam] | None = None

    @model_validator(mode="before")
    @classmethod
    def check_generation_prompt(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("continue_final_message") and data.get("add_generation_prompt"):
            raise VLLMValidationError(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
            )
        return data


class DetokenizeRequest(OpenAIBaseModel):
    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0, le=2**63 - 1)]]
