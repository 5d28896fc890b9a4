"""Batch chat derender: a complete engine response -> `ChatCompletionResponse` (vLLM 0.33).

Per choice: drop the stop token, decode (seeded from the prompt tail; special tokens kept
when a parser runs), cut at the stop string, split with the chat parser into reasoning /
content / tool calls, assemble the message by the request's tool settings, resolve the
finish_reason, convert logprobs. All bounds are checked before any decoding.
"""

from __future__ import annotations

from typing import Any

from render_service.derender import bounds, responses
from render_service.derender.assembly import resolve_finish_reason
from render_service.derender.context import DerenderContext
from render_service.derender.decoding import decode_batch
from render_service.derender.logprobs import chat_logprobs, normalize_logprobs
from render_service.derender.parser_errors import engine_output_errors
from render_service.derender.schemas import ChatBatchBody, ChoiceIn, GenerateResponseIn
from render_service.derender.settings import ChatSettings
from render_service.errors import BadRequestError

__all__ = ["derender_chat_batch", "PARSER_NEEDS_REQUEST"]

PARSER_NEEDS_REQUEST = (
    "chat_request is required when a tool or reasoning parser is configured because plain "
    "detokenization would leak raw parser markup into content."
)


def derender_chat_batch(
    ctx: DerenderContext, body: ChatBatchBody, settings: ChatSettings | None
) -> dict[str, Any]:
    gen = body.generate_response
    bounds.check_responses([gen], ctx.max_model_len, ctx.max_logprobs)
    bounds.check_prompt_ids([body.prompt_token_ids], ctx.max_model_len)
    if ctx.parsers.configured and settings is None:
        raise BadRequestError(PARSER_NEEDS_REQUEST)
    bounds.check_empty_choices([gen], with_request_id=False)
    with engine_output_errors("generate_response"):
        choices = [
            _choice(ctx, gen, choice, body.prompt_token_ids, settings) for choice in gen.choices
        ]
    prompt_tokens = body.prompt_tokens if body.prompt_tokens is not None else 0
    completion_tokens = sum(len(c.token_ids or ()) for c in gen.choices)
    return responses.chat_response(
        gen.request_id,
        body.model or ctx.model_name,
        choices,
        responses.usage(prompt_tokens, completion_tokens),
        prompt_logprobs=gen.prompt_logprobs,
        prompt_token_ids=(
            gen.prompt_token_ids if settings is not None and settings.return_token_ids else None
        ),
        kv_transfer_params=gen.kv_transfer_params,
        metrics=gen.metrics,
    )


def _choice(
    ctx: DerenderContext,
    gen: GenerateResponseIn,
    choice: ChoiceIn,
    prompt_token_ids: list[int] | None,
    settings: ChatSettings | None,
) -> dict[str, Any]:
    has_parser = ctx.parsers.configured and settings is not None
    hide_metadata = has_parser and settings is not None and not settings.include_reasoning
    common = settings or ChatSettings()
    logprobs = None
    if choice.logprobs is not None and not hide_metadata:
        positions = normalize_logprobs(choice.logprobs.content, f"choice {choice.index}")
        logprobs = chat_logprobs(positions, ctx.token_decoder, top_limit=common.top_limit)
    detok = ctx.decoders.get(common.skip_special(preserve_special=has_parser))
    seed_ids = prompt_token_ids if prompt_token_ids is not None else gen.prompt_token_ids
    text, stop_reason = decode_batch(
        detok,
        detok.initial_state(seed_ids),
        choice.token_ids or [],
        choice.finish_reason,
        choice.stop_reason,
        common.stop_rules,
        ctx.eos,
    )
    if has_parser:
        assert settings is not None
        # The parser applies vLLM's message assembly (include_reasoning, which calls are kept,
        # content "" when a tool is forced, parallel_tool_calls). Like vLLM, its prompt ids
        # are the generate response's (present only when render asked for return_token_ids).
        parsed = ctx.parsers.get(settings).parse(text, gen.request_id, gen.prompt_token_ids or ())
        calls = list(parsed.tool_calls)
        message = responses.chat_message(parsed.content, parsed.reasoning, calls)
    else:
        calls = []
        message = responses.chat_message(text)
    return responses.chat_choice(
        choice.index,
        message,
        logprobs,
        resolve_finish_reason(choice.finish_reason, settings, bool(calls)),
        stop_reason,
        choice.token_ids if common.return_token_ids and not hide_metadata else None,
    )
