"""Wire schemas of the derender endpoints (vLLM 0.33 `DerenderChatRequest` & co.).

Only what derender reads is modelled; unknown keys are ignored as vLLM's plain `BaseModel`s
do. `chat_request` / `completion_request` stay raw dicts here: they are validated by
`render_service.protocol` (the same models `/render` uses) once the body is known to be valid.
Validation failures become 400 `BadRequestError`s with pydantic's messages, shaped like the
HTTP layer's own validation errors (never FastAPI's 422).

One path takes two bodies: the `stream` literal discriminates them; a body without `stream`
is the batch form.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar
from uuid import uuid4

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError

from render_service.errors import BadRequestError

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
    "validation_error",
]

_MAX_LISTED_ERRORS = 10
_MAX_INPUT_CHARS = 200


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class LogProbCandidate(_Model):
    """One candidate: integer `token_id` (vLLM 0.33) or the older `"token_id:N"` `token`."""

    token_id: int | None = None
    token: str | None = None
    logprob: float
    rank: int | None = None


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
    stream: Literal[False] = False
    generate_response: GenerateResponseIn
    prompt_tokens: int | None = None
    prompt_token_ids: list[NonNegativeInt] | None = None
    chat_request: dict[str, Any] | None = None


class ChatStreamBody(_DerenderBody):
    stream: Literal[True]
    generate_chunk: GenerateChunkIn
    stream_state: Any = None
    prompt_tokens: int | None = None
    prompt_token_ids: list[NonNegativeInt] | None = None
    chat_request: dict[str, Any] | None = None


class CompletionBatchBody(_DerenderBody):
    stream: Literal[False] = False
    generate_responses: list[GenerateResponseIn]
    prompt_tokens: list[int] | None = None
    prompt_token_ids: list[list[NonNegativeInt] | None] | None = None
    completion_request: dict[str, Any] | None = None


class CompletionStreamBody(_DerenderBody):
    stream: Literal[True]
    generate_chunk: GenerateChunkIn
    stream_state: Any = None
    prompt_tokens: int | None = None
    prompt_token_ids: list[NonNegativeInt] | None = None
    completion_request: dict[str, Any] | None = None


B = TypeVar("B", bound=BaseModel)
S = TypeVar("S", bound=BaseModel)


def validation_error(exc: ValidationError) -> BadRequestError:
    """pydantic errors as a 400 with the HTTP layer's validation-message shape."""
    errors = exc.errors()
    lines = []
    for err in errors[:_MAX_LISTED_ERRORS]:
        entry = {k: err.get(k) for k in ("type", "loc", "msg")}
        entry["input"] = str(err.get("input"))[:_MAX_INPUT_CHARS]
        lines.append("  " + str(entry)[:1000])
    noun = "error" if len(errors) == 1 else "errors"
    loc = errors[0].get("loc", ()) if errors else ()
    param = ".".join(str(p) for p in loc) or None
    return BadRequestError(f"{len(errors)} validation {noun}:\n" + "\n".join(lines), param=param)


def parse_body(body: dict[str, Any], batch: type[B], stream: type[S]) -> B | S:
    """Validate a derender body as its batch or streaming form, picked by `stream`."""
    model: type[BaseModel] = stream if body.get("stream") is True else batch
    try:
        return model.model_validate(_with_fingerprint(body))  # type: ignore[return-value]
    except ValidationError as exc:
        raise validation_error(exc) from None


def _with_fingerprint(body: dict[str, Any]) -> dict[str, Any]:
    """Lift a `parse_context.render_fingerprint` (top level or in the request) to the top."""
    if body.get("render_fingerprint") is not None:
        return body
    for holder in (body, body.get("chat_request"), body.get("completion_request")):
        context = holder.get("parse_context") if isinstance(holder, dict) else None
        if isinstance(context, dict) and context.get("render_fingerprint") is not None:
            return {**body, "render_fingerprint": context["render_fingerprint"]}
    return body
