"""Wire schemas of the derender endpoints (vLLM 0.33 `DerenderChatRequest` & co.).

Only what derender reads is modelled; unknown keys are ignored as vLLM's plain `BaseModel`s
do. `chat_request` / `completion_request` stay raw dicts here: they are validated by
`render_service.protocol` (the same models `/render` uses) once the body is known to be valid.
Validation failures become vLLM's request-validation 400 (type "Bad Request", never FastAPI's
422).

One path takes two bodies, declared in vLLM as a plain union (`DerenderChatRequest |
DerenderChatStreamRequest`): the form `stream` points at is tried first; when neither form
validates, the errors of both are listed in declaration order (batch, then stream), each
location carrying the vLLM model name (`body.DerenderChatRequest.generate_response`), as
FastAPI reports a failed union body (`vllm_name`; None where vLLM's label is dropped).

Logprob token ids are checked here, before any work: an id must fit the tokenizer's 32-bit
id type (vLLM 0.33 answers others with a 400 from the tokenizer, "number too large to fit in
target type"); an id inside that range but outside the vocabulary is valid and decodes to ""
as in vLLM. The same bound applies to the older `"token": "token_id:N"` form (which vLLM 0.33
no longer accepts at all).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, TypeVar
from uuid import uuid4

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from render_service.protocol import request_validation_error

__all__ = [
    "LogProbEntry",
    "LogProbsIn",
    "ChoiceIn",
    "StreamChoiceIn",
    "GenerateResponseIn",
    "GenerateChunkIn",
    "ChatBatchBody",
    "ChatStreamBody",
    "CompletionBatchBody",
    "CompletionStreamBody",
    "parse_body",
]

# Tokenizer ids are Rust u32s: HF `tokenizers` raises OverflowError outside 0..2**32-1.
MAX_TOKEN_ID = 2**32 - 1
# The older engines' placeholder; ASCII digits only (str.isdigit accepts "²", int() does not).
_PLACEHOLDER = re.compile(r"token_id:([0-9]+)", re.ASCII)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


def _placeholder_in_range(token: str) -> None:
    match = _PLACEHOLDER.fullmatch(token)
    if match is None:
        raise ValueError(
            "logprobs entries need an integer 'token_id' (or the older 'token': 'token_id:N' "
            f"placeholder form); got token {token[:40]!r}"
        )
    digits = match.group(1).lstrip("0")
    # Compare as text first: never int() an arbitrarily long digit string.
    if len(digits) > len(str(MAX_TOKEN_ID)) or int(digits or "0") > MAX_TOKEN_ID:
        raise ValueError(
            f"placeholder {token[:40]!r} is out of range: token ids are 0..{MAX_TOKEN_ID}"
        )


class LogProbCandidate(_Model):
    """One candidate: integer `token_id` (vLLM 0.33) or the older `"token_id:N"` `token`.

    The bound on `token_id` is a schema constraint (checked in pydantic-core: a candidate
    list can hold max_model_len x (max_logprobs + 1) entries, so no Python hook per entry);
    the placeholder is checked only when it is what carries the id."""

    token_id: Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)] | None = None
    token: str | None = None
    logprob: float
    rank: int | None = None

    @field_validator("token")
    @classmethod
    def _placeholder_if_no_id(cls, token: str | None, info: ValidationInfo) -> str | None:
        if token is not None and info.data.get("token_id") is None:
            _placeholder_in_range(token)
        return token


class LogProbEntry(LogProbCandidate):
    top_logprobs: list[LogProbCandidate] = Field(default_factory=list)


class LogProbsIn(_Model):
    content: list[LogProbEntry] | None = None


class _ChoiceBase(_Model):
    index: NonNegativeInt
    stop_reason: int | str | None = None
    token_ids: list[NonNegativeInt] | None = None
    routed_experts: str | None = None
    sampling_mask: list[list[int]] | None = None
    weight_versions: list[dict[str, Any]] | None = None
    logprobs: LogProbsIn | None = None


class ChoiceIn(_ChoiceBase):
    finish_reason: str | None = "stop"  # OpenAI's default for a complete choice


class StreamChoiceIn(_ChoiceBase):
    finish_reason: str | None = None


class GenerateResponseIn(_Model):
    request_id: str = Field(default_factory=lambda: str(uuid4()))
    model: str | None = None
    created: int | None = None
    usage: dict[str, Any] | None = None
    prompt_logprobs: list[dict[str, Any] | None] | None = None
    prompt_token_ids: list[NonNegativeInt] | None = None
    metrics: dict[str, Any] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    output_mode: Literal["tokens"] = "tokens"
    choices: list[ChoiceIn]


class GenerateChunkIn(_Model):
    request_id: str = Field(default_factory=lambda: str(uuid4()))
    usage: dict[str, Any] | None = None
    prompt_token_ids: list[NonNegativeInt] | None = None
    metrics: dict[str, Any] | None = None
    output_mode: Literal["tokens"] = "tokens"
    choices: list[StreamChoiceIn]


class _DerenderBody(_Model):
    model: str | None = None
    # Ours: the fingerprint render stamped into parse_context; checked when present.
    render_fingerprint: str | None = None


class ChatBatchBody(_DerenderBody):
    vllm_name: ClassVar[str | None] = "DerenderChatRequest"

    stream: Literal[False] = False
    generate_response: GenerateResponseIn
    prompt_tokens: int | None = None
    prompt_token_ids: list[NonNegativeInt] | None = None
    chat_request: dict[str, Any] | None = None


class ChatStreamBody(_DerenderBody):
    vllm_name: ClassVar[str | None] = "DerenderChatStreamRequest"

    stream: Literal[True]
    generate_chunk: GenerateChunkIn
    stream_state: Any = None
    prompt_tokens: int | None = None
    prompt_token_ids: list[NonNegativeInt] | None = None
    chat_request: dict[str, Any] | None = None


class CompletionBatchBody(_DerenderBody):
    # vLLM's model has an after-validator: pydantic labels that union member
    # "function-after[...]", which vLLM drops from error locations.
    vllm_name: ClassVar[str | None] = None

    stream: Literal[False] = False
    generate_responses: list[GenerateResponseIn]
    prompt_tokens: list[int] | None = None
    prompt_token_ids: list[list[NonNegativeInt] | None] | None = None
    completion_request: dict[str, Any] | None = None


class CompletionStreamBody(_DerenderBody):
    vllm_name: ClassVar[str | None] = "DerenderCompletionStreamRequest"

    stream: Literal[True]
    generate_chunk: GenerateChunkIn
    stream_state: Any = None
    prompt_tokens: int | None = None
    prompt_token_ids: list[NonNegativeInt] | None = None
    completion_request: dict[str, Any] | None = None


B = TypeVar("B", bound="_DerenderBody")
S = TypeVar("S", bound="_DerenderBody")


def parse_body(body: dict[str, Any], batch: type[B], stream: type[S]) -> B | S:
    """Validate a derender body as vLLM's batch | stream union (the `stream` form first).

    The original body is validated (error inputs summarize it, so it must not grow a key);
    the fingerprint is lifted once the body is known to be valid.
    """
    members: tuple[type[_DerenderBody], ...] = (batch, stream)
    order = (stream, batch) if body.get("stream") is True else members
    failures: dict[type[_DerenderBody], ValidationError] = {}
    for member in order:
        try:
            # FastAPI validates bodies with from_attributes=True: a nested model given a
            # non-object fails with `model_attributes_type`, not `model_type`.
            parsed = member.model_validate(body, from_attributes=True)
            return _with_fingerprint(parsed, body)  # type: ignore[return-value]
        except ValidationError as exc:
            failures[member] = exc
    raise request_validation_error(
        [
            {**err, "loc": ("body", *_union_label(member), *err.get("loc", ()))}
            for member in members
            for err in failures[member].errors(include_url=False)
        ]
    ) from None


def _union_label(member: type[BaseModel]) -> tuple[str, ...]:
    name = getattr(member, "vllm_name", member.__name__)
    return () if name is None else (name,)


def _with_fingerprint(parsed: _DerenderBody, body: dict[str, Any]) -> _DerenderBody:
    """Lift a `parse_context.render_fingerprint` (top level or in the request) to the top."""
    if parsed.render_fingerprint is not None:
        return parsed
    for holder in (body, body.get("chat_request"), body.get("completion_request")):
        context = holder.get("parse_context") if isinstance(holder, dict) else None
        fingerprint = context.get("render_fingerprint") if isinstance(context, dict) else None
        if fingerprint is None:
            continue
        if not isinstance(fingerprint, str):
            raise request_validation_error(
                [
                    {
                        "type": "string_type",
                        "loc": ("body", "render_fingerprint"),
                        "msg": "Input should be a valid string",
                        "input": fingerprint,
                    }
                ]
            )
        parsed.render_fingerprint = fingerprint
        return parsed
    return parsed
