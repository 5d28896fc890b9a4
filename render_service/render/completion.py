"""Completion render: a completion request -> one vLLM `GenerateRequest` per prompt
(`ServingRender.render_completion_request`)."""

from __future__ import annotations

from typing import Any

from render_service.errors import BadRequestError
from render_service.model import ModelBundle
from render_service.protocol import CompletionRequest, parse_request, vllm_validation_error
from render_service.render.chat_prompt import check_mm_kwargs
from render_service.render.context import RenderContext
from render_service.render.generate_request import generate_request, sampling_inputs
from render_service.render.messages import PROMPT_EMBEDS_DISABLED
from render_service.render.mistral import mistral_encode
from render_service.render.prompt_embeds import embeds_spec, embeds_token_count
from render_service.render.prompt_limits import TokenizeLimits, max_tokens_for
from render_service.render.sampling import SamplingInputs, build_sampling_params

__all__ = ["render_completion"]


def render_completion(ctx: RenderContext, body: object, request_id_header: str | None) -> list[dict[str, Any]]:
    request = parse_request(CompletionRequest, body)
    ctx.check_model(request.model)
    if request.use_beam_search:
        raise BadRequestError("Beam search is not supported by the render endpoint")
    _check_completion_inputs(request)
    bundle = ctx.bundle
    check_mm_kwargs(request, ctx.config.trust_request_mm_kwargs)
    limits = _completion_limits(bundle, request)
    if request.prompt_embeds is not None:
        _check_prompt_embeds(ctx, request, limits)
    prompts = _completion_prompts(bundle, request, limits)
    if request.prompt_embeds is not None:
        # vLLM renders embeddings first (they take priority over `prompt`) into an engine input
        # with no token ids, which its render server refuses.
        raise BadRequestError("No token_ids rendered")
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
        sampling = build_sampling_params(_sampling_inputs(request, max_tokens, bundle.sampling_defaults))
        request_id = base_id if len(prompts) == 1 else f"{base_id}-{index}"
        out.append(
            generate_request(request, request_id=request_id, token_ids=token_ids, offsets=offsets, sampling=sampling)
        )
    return out


def _check_completion_inputs(request: CompletionRequest) -> None:
    """vLLM's online_renderer.render_completion refusals, in its order."""
    embeds = request.prompt_embeds is not None
    if request.suffix is not None:
        if request.echo:
            raise BadRequestError("Echo is unsupported with suffix.", param="suffix")
        if embeds:
            raise BadRequestError("suffix is not supported with prompt_embeds", param="suffix")
        raise BadRequestError(
            "suffix is only supported for models with FIM completion rendering", param="suffix"
        )
    if embeds and request.echo:
        raise BadRequestError("Echo is unsupported with prompt embeds.")
    if embeds and request.prompt_logprobs is not None:
        raise BadRequestError("prompt_logprobs is not compatible with prompt embeds.")


def _check_prompt_embeds(ctx: RenderContext, request: CompletionRequest, limits: TokenizeLimits) -> None:
    """Validate each embedding as vLLM does; rendering stops after (see render_completion)."""
    if not ctx.config.enable_prompt_embeds:
        raise vllm_validation_error(PROMPT_EMBEDS_DISABLED + ".", parameter="prompt_embeds")
    items = request.prompt_embeds if isinstance(request.prompt_embeds, list) else [request.prompt_embeds]
    spec = embeds_spec(ctx.bundle)
    counts = [embeds_token_count(item, spec) for item in items if item is not None]  # all load first
    for count in counts:
        limits.check_count(count)  # embeddings count as tokens


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
    if bundle.is_mistral:  # mistral-common encodes (token offsets are not built in this mode yet)
        ids = mistral_encode(
            bundle, text, add_special_tokens=request.add_special_tokens, max_length=limits.tokenizer_max_length()
        )
        return limits.check_tokens(ids), None
    if request.return_token_offsets:
        ids, offsets = bundle.encoder.encode_with_offsets(text, add_special_tokens=request.add_special_tokens)
        checked = limits.check_tokens(ids)
        return checked, offsets[: len(checked)] if len(checked) == len(ids) else None
    ids = bundle.encoder.encode_full(text, add_special_tokens=request.add_special_tokens)
    return limits.check_tokens(ids), None


def _sampling_inputs(request: CompletionRequest, max_tokens: int, defaults: dict[str, Any]) -> SamplingInputs:
    prompt_logprobs = request.prompt_logprobs
    if prompt_logprobs is None and request.echo:
        prompt_logprobs = request.logprobs
    echo_only = bool(request.echo) and request.max_tokens == 0
    return sampling_inputs(
        request,
        defaults,
        max_tokens=1 if echo_only else max_tokens,
        logprobs=None if request.logprob_token_ids else request.logprobs,
        prompt_logprobs=prompt_logprobs,
    )
