"""What chat and completion render share: the `GenerateRequest` dict and its sampling inputs.

The dicts have `GenerateRequest`'s field order with nulls, so `orjson.dumps` of them is
byte-compatible with vLLM's render response.
"""

from __future__ import annotations

from typing import Any

from render_service.protocol import ChatCompletionRequest, CompletionRequest, SharedRequestFields
from render_service.render.parser_support import extract_structured_outputs
from render_service.render.sampling import (
    OPENAI_DEFAULTS,
    OUTPUT_KIND_DELTA,
    OUTPUT_KIND_FINAL_ONLY,
    SamplingInputs,
)

__all__ = ["generate_request", "sampling_inputs"]


def generate_request(
    request: ChatCompletionRequest | CompletionRequest,
    *,
    request_id: str,
    token_ids: list[int],
    offsets: list[tuple[int, int]] | None,
    sampling: dict[str, Any],
    reasoning_ended: bool | None = None,
    reasoning_kwargs: dict[str, Any] | None = None,
    parse_context: dict[str, Any] | None = None,
    features: dict[str, Any] | None = None,
    render_fingerprint: str | None = None,
) -> dict[str, Any]:
    """A GenerateRequest dict: vLLM's field order, nulls included, kv/ec hoisted.

    Chat adds one key of ours at the end, `render_fingerprint`, which derender checks so a
    stream split by other model/template/parser settings fails loudly. It sits at the top level
    because vLLM's GenerateRequest ignores unknown top-level keys, while an unknown
    `parse_context` key is a 400 on engines run with `output_mode="derender"`.
    """
    kv, ec = _hoist_transfer_params(sampling)
    generate_request = {
        "request_id": request_id,
        "token_ids": token_ids,
        "token_offsets": _offsets(offsets),
        "features": features,
        "content_parts": None,
        "sampling_params": sampling,
        "model": request.model,
        "reasoning_ended": reasoning_ended,
        "reasoning_parser_kwargs": reasoning_kwargs,
        "return_token_ids": request.return_token_ids,
        "output_mode": "tokens",
        "parse_context": parse_context,
        "stream": bool(request.stream),
        "stream_options": _stream_options(request),
        "cache_salt": request.cache_salt,
        "priority": request.priority,
        "kv_transfer_params": kv,
        "ec_transfer_params": ec,
    }
    if render_fingerprint is not None:
        generate_request["render_fingerprint"] = render_fingerprint
    return generate_request


def sampling_inputs(
    request: ChatCompletionRequest | CompletionRequest,
    defaults: dict[str, Any],
    *,
    max_tokens: int,
    logprobs: int | None,
    prompt_logprobs: int | None,
) -> SamplingInputs:
    """`SamplingParams.from_optional` arguments as vLLM's `to_sampling_params` passes them; the
    callers decide the three fields chat and completion read differently."""
    return SamplingInputs(
        n=request.n,
        **_pick(request, defaults),
        watermarking=request.watermarking,
        seed=request.seed,
        stop=request.stop,
        stop_token_ids=request.stop_token_ids,
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
        logprob_token_ids=request.logprob_token_ids or None,
        ignore_eos=request.ignore_eos,
        max_tokens=max_tokens,
        min_tokens=request.min_tokens,
        skip_special_tokens=_skip_special_tokens(request, defaults),
        spaces_between_special_tokens=request.spaces_between_special_tokens,
        include_stop_str_in_output=request.include_stop_str_in_output,
        output_kind=OUTPUT_KIND_DELTA if request.stream else OUTPUT_KIND_FINAL_ONLY,
        stream_interval=request.stream_interval,
        structured_outputs=extract_structured_outputs(request.structured_outputs, request.response_format),
        logit_bias=request.logit_bias,
        bad_words=request.bad_words,
        thinking_token_budget=request.thinking_token_budget,
        allowed_token_ids=request.allowed_token_ids,
        extra_args=_extra_args(request),
        skip_clone=True,
        repetition_detection=request.repetition_detection,
        routed_experts_prompt_start=request.routed_experts_prompt_start,
    )


def _pick(request: SharedRequestFields, defaults: dict[str, Any]) -> dict[str, Any]:
    """Request value, else the generation-config default, else the OpenAI default."""
    picked = {}
    for name, fallback in OPENAI_DEFAULTS.items():
        value = getattr(request, name)
        picked[name] = value if value is not None else defaults.get(name, fallback)
    return picked


def _skip_special_tokens(request: SharedRequestFields, defaults: dict[str, Any]) -> bool:
    value = request.skip_special_tokens
    return value if value is not None else defaults.get("skip_special_tokens", True)


def _extra_args(request: SharedRequestFields) -> dict[str, Any] | None:
    extra: dict[str, Any] = dict(request.vllm_xargs) if request.vllm_xargs else {}
    if request.kv_transfer_params:
        extra["kv_transfer_params"] = request.kv_transfer_params
    if request.ec_transfer_params:
        extra["ec_transfer_params"] = request.ec_transfer_params
    return extra or None


def _hoist_transfer_params(sampling: dict[str, Any]) -> tuple[Any, Any]:
    """Move kv/ec transfer params out of extra_args to top-level GenerateRequest fields."""
    extra = sampling.get("extra_args")
    if not extra:
        return None, None
    extra = dict(extra)
    kv = extra.pop("kv_transfer_params", None)
    ec = extra.pop("ec_transfer_params", None)
    if extra:
        sampling["extra_args"] = extra
    else:
        sampling.pop("extra_args")
    return kv, ec


def _stream_options(request: ChatCompletionRequest | CompletionRequest) -> dict[str, Any] | None:
    if not request.stream or request.stream_options is None:
        return None
    return request.stream_options.model_dump()


def _offsets(offsets: list[tuple[int, int]] | None) -> list[list[int]] | None:
    return None if offsets is None else [[start, end] for start, end in offsets]
