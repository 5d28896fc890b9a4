"""Validated requests -> vLLM `GenerateRequest` dicts (the render endpoints' response bodies).

`render_chat` follows `ServingRender.render_chat_request` and `render_completion` follows
`render_completion_request` (vLLM 0.33). The dicts have `GenerateRequest`'s field order with
nulls, so `orjson.dumps` of them is byte-compatible with vLLM's response.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from render_service.render.chat_prompt import (
    ChatPrompt,
    check_mm_kwargs,
    check_template_trust,
    check_tool_choice_gate,
    merge_kwargs,
    render_chat_prompt,
    request_template_kwargs,
    server_template_kwargs,
)
from render_service.config import ServiceConfig
from render_service.errors import BadRequestError, NotFoundError, NotImplementedFeatureError
from render_service.render.messages import count_history_tool_calls
from render_service.mm.pipeline import ImagePipeline
from render_service.model import ModelBundle
from render_service.render.parser_support import ParserSupport, extract_structured_outputs
from render_service.render.prompt_limits import TokenizeLimits, max_tokens_for
from render_service.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    parse_request,
    vllm_validation_error,
)
from render_service.render.sampling import (
    OPENAI_DEFAULTS,
    OUTPUT_KIND_DELTA,
    OUTPUT_KIND_FINAL_ONLY,
    SamplingInputs,
    build_sampling_params,
)

__all__ = ["RenderContext", "render_chat", "render_completion"]


@dataclass(frozen=True)
class RenderContext:
    """Everything per worker that rendering reads (immutable)."""

    bundle: ModelBundle
    config: ServiceConfig
    parsers: ParserSupport
    images: ImagePipeline | None = None  # None: the model takes no images

    @property
    def server_template_kwargs(self) -> dict[str, Any]:
        """--default-chat-template-kwargs plus vLLM's `cohere_format` default ("cmd4")."""
        return server_template_kwargs(self.config)

    @property
    def override_max_tokens(self) -> int | None:
        if self.config.generation_config not in ("auto", "vllm"):
            return self.bundle.sampling_defaults.get("max_tokens")
        return None

    def check_model(self, name: str | None) -> None:
        """404 for a model name that is not served; omitted or empty is accepted."""
        if not name or name in self.bundle.served_model_names:
            return
        raise NotFoundError(
            f"The model `{name}` does not exist. "
            f"Valid aliases: {', '.join(self.bundle.served_model_names)}.",
            param="model",
        )


def render_chat(
    ctx: RenderContext,
    body: Any,
    request_id_header: str | None,
    fetched_media: Mapping[str, bytes] | None = None,
) -> dict[str, Any]:
    request = parse_request(ChatCompletionRequest, body)
    ctx.check_model(request.model)
    if request.use_beam_search:
        raise BadRequestError("Beam search is not supported by the render endpoint")
    config, bundle = ctx.config, ctx.bundle
    _check_sizes(request, config)
    check_tool_choice_gate(
        request,
        has_tool_parser=ctx.parsers.tool_parser is not None,
        auto_tools=config.enable_auto_tool_choice,
    )
    check_template_trust(request.chat_template, request.chat_template_kwargs, config.trust_request_chat_template)
    check_mm_kwargs(request, config.trust_request_mm_kwargs)
    request_kwargs = request_template_kwargs(
        config,
        chat_template_kwargs=request.chat_template_kwargs,
        add_generation_prompt=request.add_generation_prompt,
        continue_final_message=request.continue_final_message,
        documents=request.documents,
        reasoning_effort=request.reasoning_effort,
    )
    effective_kwargs = merge_kwargs(ctx.server_template_kwargs, request_kwargs)
    prompt = render_chat_prompt(
        bundle,
        config,
        request,
        tool_dicts=_tool_dicts(request, config),
        request_kwargs=request_kwargs,
        tokenize_limits=_chat_limits(bundle, request),
        add_special_tokens=request.add_special_tokens,
        want_offsets=bool(request.return_token_offsets),
        images=ctx.images,
        fetched_media=fetched_media,
    )
    if ctx.parsers.has_parser:
        for name, value in ctx.parsers.adjust_request(request).items():
            setattr(request, name, value)
    if not prompt.token_ids:
        raise BadRequestError("No token_ids rendered")
    requested = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    max_tokens = max_tokens_for(
        bundle.max_model_len,
        requested,
        len(prompt.token_ids),
        bundle.sampling_defaults,
        ctx.override_max_tokens,
        request.truncate_prompt_tokens,
    )
    sampling = build_sampling_params(_chat_sampling_inputs(request, max_tokens, bundle.sampling_defaults))
    reasoning_ended, reasoning_kwargs = _reasoning_fields(ctx, request, prompt.token_ids, effective_kwargs)
    base_id = request_id_header if request_id_header is not None else request.request_id
    return _generate_request(
        request,
        request_id=f"chatcmpl-{base_id}",
        token_ids=prompt.token_ids,
        offsets=prompt.token_offsets,
        sampling=sampling,
        reasoning_ended=reasoning_ended,
        reasoning_kwargs=reasoning_kwargs,
        parse_context=_parse_context(request, effective_kwargs),
        features=_features(ctx, prompt, request.mm_payload),
        render_fingerprint=bundle.fingerprint,
    )


def _features(ctx: RenderContext, prompt: ChatPrompt, mm_payload: str) -> dict[str, Any] | None:
    """vLLM's `features` (null for text-only prompts); "none" keeps hashes and placeholders."""
    if prompt.images is None or ctx.images is None or prompt.placeholders is None:
        return None
    return ctx.images.features(prompt.images, prompt.placeholders, with_tensors=mm_payload != "none")


def _reasoning_fields(
    ctx: RenderContext, request: ChatCompletionRequest, prompt_ids: list[int], kwargs: dict[str, Any]
) -> tuple[bool | None, dict[str, Any] | None]:
    """reasoning_ended / reasoning_parser_kwargs (vLLM resolve_reasoning_ended)."""
    if ctx.parsers.reasoning_parser is None:
        return (None if request.include_reasoning else True), None
    reasoning_kwargs = {"chat_template_kwargs": kwargs}
    if not request.include_reasoning:
        return True, reasoning_kwargs
    return ctx.parsers.is_reasoning_end(prompt_ids, kwargs), reasoning_kwargs


def _generate_request(
    request: Any,
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


def render_completion(ctx: RenderContext, body: Any, request_id_header: str | None) -> list[dict[str, Any]]:
    request = parse_request(CompletionRequest, body)
    ctx.check_model(request.model)
    if request.use_beam_search:
        raise BadRequestError("Beam search is not supported by the render endpoint")
    _check_completion_inputs(request)
    bundle = ctx.bundle
    check_mm_kwargs(request, ctx.config.trust_request_mm_kwargs)
    limits = _completion_limits(bundle, request)
    prompts = _completion_prompts(bundle, request, limits)
    base_id = f"cmpl-{request_id_header if request_id_header is not None else request.request_id}"
    out = []
    for index, (token_ids, offsets) in enumerate(prompts):
        if not token_ids:
            raise BadRequestError("No token_ids rendered")
        max_tokens = max_tokens_for(
            bundle.max_model_len,
            request.max_tokens,
            len(token_ids),
            bundle.sampling_defaults,
            ctx.override_max_tokens,
            request.truncate_prompt_tokens,
        )
        sampling = build_sampling_params(_completion_sampling_inputs(request, max_tokens, bundle.sampling_defaults))
        request_id = base_id if len(prompts) == 1 else f"{base_id}-{index}"
        out.append(
            _generate_request(request, request_id=request_id, token_ids=token_ids, offsets=offsets, sampling=sampling)
        )
    return out


# -- chat helpers -----------------------------------------------------------------------------


def _check_sizes(request: ChatCompletionRequest, config: ServiceConfig) -> None:
    """Our limits on untrusted input (vLLM has none; see config.Limits)."""
    limits = config.limits
    if len(request.messages) > limits.max_messages:
        raise BadRequestError(
            f"Too many messages: {len(request.messages)} > {limits.max_messages} (limits.max_messages).",
            param="messages",
        )
    if request.tools is not None and len(request.tools) > limits.max_tools:
        raise BadRequestError(
            f"Too many tools: {len(request.tools)} > {limits.max_tools} (limits.max_tools).", param="tools"
        )


def _tool_dicts(request: ChatCompletionRequest, config: ServiceConfig) -> list[dict[str, Any]] | None:
    if request.tools is None or (request.tool_choice == "none" and config.exclude_tools_when_tool_choice_none):
        return None
    return [tool.model_dump() for tool in request.tools]


def _chat_limits(bundle: ModelBundle, request: ChatCompletionRequest) -> TokenizeLimits:
    if request.max_completion_tokens is not None:
        output, param = request.max_completion_tokens, "max_completion_tokens"
    else:
        output, param = request.max_tokens, "max_tokens"
    return TokenizeLimits(
        max_total_tokens=bundle.max_model_len,
        max_output_tokens=output,
        truncate_prompt_tokens=request.truncate_prompt_tokens,
        truncation_side=request.truncation_side,
        max_output_tokens_param=param,
        max_chars_per_token=bundle.max_chars_per_token,
        tokenizer_truncation_side=bundle.truncation_side,
    )


def _pick(request: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """Request value, else the generation-config default, else the OpenAI default."""
    picked = {}
    for name, fallback in OPENAI_DEFAULTS.items():
        value = getattr(request, name)
        picked[name] = value if value is not None else defaults.get(name, fallback)
    return picked


def _skip_special_tokens(request: Any, defaults: dict[str, Any]) -> bool:
    value = request.skip_special_tokens
    return value if value is not None else defaults.get("skip_special_tokens", True)


def _extra_args(request: Any) -> dict[str, Any] | None:
    extra: dict[str, Any] = dict(request.vllm_xargs) if request.vllm_xargs else {}
    if request.kv_transfer_params:
        extra["kv_transfer_params"] = request.kv_transfer_params
    if request.ec_transfer_params:
        extra["ec_transfer_params"] = request.ec_transfer_params
    return extra or None


def _structured_outputs(request: Any) -> dict[str, Any] | None:
    return extract_structured_outputs(request.structured_outputs, request.response_format)


def _chat_sampling_inputs(request: ChatCompletionRequest, max_tokens: int, defaults: dict[str, Any]) -> SamplingInputs:
    prompt_logprobs = request.prompt_logprobs
    if prompt_logprobs is None and request.echo:
        prompt_logprobs = request.top_logprobs
    return SamplingInputs(
        n=request.n,
        **_pick(request, defaults),
        watermarking=request.watermarking,
        seed=request.seed,
        stop=request.stop,
        stop_token_ids=request.stop_token_ids,
        logprobs=request.top_logprobs if request.logprobs and not request.logprob_token_ids else None,
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
        structured_outputs=_structured_outputs(request),
        logit_bias=request.logit_bias,
        bad_words=request.bad_words,
        thinking_token_budget=request.thinking_token_budget,
        allowed_token_ids=request.allowed_token_ids,
        extra_args=_extra_args(request),
        skip_clone=True,
        repetition_detection=request.repetition_detection,
        routed_experts_prompt_start=request.routed_experts_prompt_start,
    )


def _parse_context(request: ChatCompletionRequest, kwargs: dict[str, Any]) -> dict[str, Any]:
    """vLLM's ParseContext, exactly (unknown keys are refused by engines in derender mode)."""
    choice = request.tool_choice
    return {
        "tools": [tool.model_dump() for tool in request.tools] if request.tools is not None else None,
        "tool_choice": choice if isinstance(choice, str) or choice is None else choice.model_dump(),
        "parallel_tool_calls": request.parallel_tool_calls,
        "include_reasoning": request.include_reasoning,
        "chat_template_kwargs": kwargs,
        "history_tool_call_cnt": count_history_tool_calls(request.messages),
    }


# -- completion helpers -----------------------------------------------------------------------


def _check_completion_inputs(request: CompletionRequest) -> None:
    if request.suffix is not None:
        if request.echo:
            raise BadRequestError("Echo is unsupported with suffix.", param="suffix")
        raise BadRequestError(
            "suffix is only supported for models with FIM completion rendering", param="suffix"
        )
    if request.prompt_embeds is not None:
        raise NotImplementedFeatureError("prompt_embeds are not supported by this render service")


def _completion_limits(bundle: ModelBundle, request: CompletionRequest) -> TokenizeLimits:
    return TokenizeLimits(
        max_total_tokens=bundle.max_model_len,
        max_output_tokens=request.max_tokens or 0,
        truncate_prompt_tokens=request.truncate_prompt_tokens,
        truncation_side=request.truncation_side,
        max_output_tokens_param="max_tokens",
        max_chars_per_token=bundle.max_chars_per_token,
        tokenizer_truncation_side=bundle.truncation_side,
    )


def _completion_prompts(
    bundle: ModelBundle, request: CompletionRequest, limits: TokenizeLimits
) -> list[tuple[list[int], list[tuple[int, int]] | None]]:
    prompt = request.prompt
    if isinstance(prompt, str):
        items: list[Any] = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        items = [prompt]
    else:
        items = list(prompt or [])
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(_tokenize_text_prompt(bundle, request, limits, item))
        else:
            ids = list(item)
            if ids and max(ids) > bundle.max_token_id:
                raise vllm_validation_error(f"Token id {max(ids)} is out of vocabulary", parameter="prompt")
            out.append((limits.check_tokens(ids), None))
    return out


def _tokenize_text_prompt(
    bundle: ModelBundle, request: CompletionRequest, limits: TokenizeLimits, text: str
) -> tuple[list[int], list[tuple[int, int]] | None]:
    text = limits.check_text(text)
    if request.return_token_offsets:
        ids, offsets = bundle.encoder.encode_with_offsets(text, add_special_tokens=request.add_special_tokens)
        checked = limits.check_tokens(ids)
        return checked, offsets[: len(checked)] if len(checked) == len(ids) else None
    ids = bundle.encoder.encode_full(text, add_special_tokens=request.add_special_tokens)
    return limits.check_tokens(ids), None


def _completion_sampling_inputs(request: CompletionRequest, max_tokens: int, defaults: dict[str, Any]) -> SamplingInputs:
    prompt_logprobs = request.prompt_logprobs
    if prompt_logprobs is None and request.echo:
        prompt_logprobs = request.logprobs
    echo_only = bool(request.echo) and request.max_tokens == 0
    return SamplingInputs(
        n=request.n,
        **_pick(request, defaults),
        watermarking=request.watermarking,
        seed=request.seed,
        stop=request.stop,
        stop_token_ids=request.stop_token_ids,
        logprobs=None if request.logprob_token_ids else request.logprobs,
        ignore_eos=request.ignore_eos,
        max_tokens=1 if echo_only else max_tokens,
        min_tokens=request.min_tokens,
        prompt_logprobs=prompt_logprobs,
        logprob_token_ids=request.logprob_token_ids or None,
        skip_special_tokens=_skip_special_tokens(request, defaults),
        spaces_between_special_tokens=request.spaces_between_special_tokens,
        include_stop_str_in_output=request.include_stop_str_in_output,
        output_kind=OUTPUT_KIND_DELTA if request.stream else OUTPUT_KIND_FINAL_ONLY,
        stream_interval=request.stream_interval,
        structured_outputs=_structured_outputs(request),
        logit_bias=request.logit_bias,
        allowed_token_ids=request.allowed_token_ids,
        bad_words=request.bad_words,
        extra_args=_extra_args(request),
        skip_clone=True,
        repetition_detection=request.repetition_detection,
        thinking_token_budget=request.thinking_token_budget,
        routed_experts_prompt_start=request.routed_experts_prompt_start,
    )


# -- shared ----------------------------------------------------------------------------------


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


def _stream_options(request: Any) -> dict[str, Any] | None:
    if not request.stream or request.stream_options is None:
        return None
    return request.stream_options.model_dump()


def _offsets(offsets: list[tuple[int, int]] | None) -> list[list[int]] | None:
    return None if offsets is None else [[start, end] for start, end in offsets]
