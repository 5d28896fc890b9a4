"""Chat render: a chat request -> one vLLM `GenerateRequest` (`ServingRender.render_chat_request`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from render_service.config import ServiceConfig
from render_service.errors import BadRequestError
from render_service.model import ModelBundle
from render_service.protocol import ChatCompletionRequest, parse_request
from render_service.render.chat_prompt import (
    ChatPrompt,
    check_mm_kwargs,
    check_template_trust,
    check_tool_choice_gate,
    merge_kwargs,
    render_chat_prompt,
    request_template_kwargs,
)
from render_service.render.context import RenderContext
from render_service.render.generate_request import generate_request, sampling_inputs
from render_service.render.harmony import harmony_prompt_ids
from render_service.render.messages import count_history_tool_calls
from render_service.render.mistral import check_mistral_request, mistral_prompt_ids
from render_service.render.prompt_limits import TokenizeLimits, max_tokens_for
from render_service.render.sampling import SamplingInputs, build_sampling_params

__all__ = ["render_chat", "render_chat_request"]


def render_chat(
    ctx: RenderContext,
    body: object,
    request_id_header: str | None,
    fetched_media: Mapping[str, bytes] | None = None,
) -> dict[str, Any]:
    return render_chat_request(ctx, parse_request(ChatCompletionRequest, body), request_id_header, fetched_media)


def render_chat_request(
    ctx: RenderContext,
    request: ChatCompletionRequest,
    request_id_header: str | None,
    fetched_media: Mapping[str, bytes] | None = None,
    *,
    output_tokens_param: str | None = None,
    responses: bool = False,
    responses_harmony_ids: list[int] | None = None,
    tool_constraints: bool = True,
) -> dict[str, Any]:
    """A validated chat request (also the converted Messages request) -> GenerateRequest.

    `responses`: the request is a converted Responses request (the mistral tool parser
    adjusts those apart); `responses_harmony_ids`: its prompt on a gpt_oss model, rendered from
    the Responses items (checked against the Responses token limits here); `tool_constraints`
    False: tool_choice "auto" stands for a Responses choice that constrains nothing (such as
    allowed_tools): tools shown and special tokens kept as for "auto", no tool-call grammar."""
    ctx.check_model(request.model)
    if request.use_beam_search:
        raise BadRequestError("Beam search is not supported by the render endpoint")
    config, bundle = ctx.config, ctx.bundle
    _check_sizes(request, config)
    if bundle.is_mistral:  # mistral-common renders; no tool-choice gate, no template
        check_mistral_request(request)
        check_mm_kwargs(request, config.trust_request_mm_kwargs)
    elif not bundle.is_harmony:  # vLLM's Harmony path has no tool-choice gate and no template
        if not responses:  # nor has its Responses render
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
    tool_dicts = _tool_dicts(request, config)
    if responses_harmony_ids is not None:
        limits = _chat_limits(bundle, request, output_tokens_param)
        prompt = ChatPrompt(limits.check_tokens(responses_harmony_ids, counted_whole=True), None)
    elif bundle.is_harmony:
        prompt = ChatPrompt(harmony_prompt_ids(bundle, config, request, tool_dicts), None)
    elif bundle.is_mistral:
        limits = _chat_limits(bundle, request, output_tokens_param)
        prompt = ChatPrompt(mistral_prompt_ids(bundle, request, tool_dicts, limits), None)
    else:
        prompt = render_chat_prompt(
            bundle,
            config,
            request,
            tool_dicts=tool_dicts,
            request_kwargs=request_kwargs,
            tokenize_limits=_chat_limits(bundle, request, output_tokens_param),
            add_special_tokens=request.add_special_tokens,
            want_offsets=bool(request.return_token_offsets),
            images=ctx.images,
            fetched_media=fetched_media,
        )
    if bundle.is_harmony:
        for name, value in ctx.parsers.adjust_harmony_request(request, tool_constraints=tool_constraints).items():
            setattr(request, name, value)
    elif ctx.parsers.has_parser:
        changes = ctx.parsers.adjust_request(request, responses=responses, tool_constraints=tool_constraints)
        for name, value in changes.items():
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
    sampling = build_sampling_params(_sampling_inputs(request, max_tokens, bundle.sampling_defaults))
    reasoning_ended, reasoning_kwargs = _reasoning_fields(ctx, request, prompt.token_ids, effective_kwargs)
    base_id = request_id_header if request_id_header is not None else request.request_id
    return generate_request(
        request,
        request_id=f"chatcmpl-{base_id}",
        token_ids=prompt.token_ids,
        offsets=prompt.token_offsets,
        sampling=sampling,
        reasoning_ended=reasoning_ended,
        reasoning_kwargs=reasoning_kwargs,
        # Harmony output is parsed without template kwargs (vLLM's parse_context).
        parse_context=_parse_context(request, {} if bundle.is_harmony else effective_kwargs),
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
    # The mistral grammar already allows an optional think section (vLLM's comment).
    constrained_from_start = not request.include_reasoning or request._grammar_from_parser
    if ctx.parsers.reasoning_parser is None:
        return (True if constrained_from_start else None), None
    reasoning_kwargs = {"chat_template_kwargs": kwargs}
    if constrained_from_start:
        return True, reasoning_kwargs
    return ctx.parsers.is_reasoning_end(prompt_ids, kwargs), reasoning_kwargs


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


def _chat_limits(bundle: ModelBundle, request: ChatCompletionRequest, param_name: str | None) -> TokenizeLimits:
    output: int | None
    if request.max_completion_tokens is not None:
        output, param = request.max_completion_tokens, "max_completion_tokens"
    else:
        output, param = request.max_tokens, "max_tokens"
    param = param_name or param  # the caller's own name for the field (Responses: max_output_tokens)
    return TokenizeLimits(
        max_total_tokens=bundle.max_model_len,
        max_output_tokens=output,
        truncate_prompt_tokens=request.truncate_prompt_tokens,
        truncation_side=request.truncation_side,
        max_output_tokens_param=param,
        max_chars_per_token=bundle.max_chars_per_token,
        tokenizer_truncation_side=bundle.truncation_side,
    )


def _sampling_inputs(request: ChatCompletionRequest, max_tokens: int, defaults: dict[str, Any]) -> SamplingInputs:
    prompt_logprobs = request.prompt_logprobs
    if prompt_logprobs is None and request.echo:
        prompt_logprobs = request.top_logprobs
    logprobs = request.top_logprobs if request.logprobs and not request.logprob_token_ids else None
    return sampling_inputs(
        request, defaults, max_tokens=max_tokens, logprobs=logprobs, prompt_logprobs=prompt_logprobs
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
