"""Batch completions derender (vLLM 0.33 `/v1/completions/derender`; streaming: stream.py).

No parsers run here. One engine response per prompt; choices get a flat running index; usage
sums prompts and outputs; kv_transfer_params is kept only when all responses agree.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from render_service.derender import bounds, responses
from render_service.derender.context import DerenderContext
from render_service.derender.decoding import decode_batch
from render_service.derender.logprobs import chat_logprobs, completion_logprobs, normalize_logprobs
from render_service.derender.parser_errors import engine_output_errors
from render_service.derender.schemas import ChoiceIn, CompletionBatchBody, StreamChoiceIn
from render_service.derender.settings import CompletionSettings
from render_service.errors import BadRequestError

__all__ = ["completion_choice_logprobs", "derender_completion_batch"]

log = logging.getLogger(__name__)


def _check_lengths(body: CompletionBatchBody) -> None:
    n = len(body.generate_responses)
    if n == 0:
        raise BadRequestError("generate_responses must not be empty")
    for name in ("prompt_tokens", "prompt_token_ids"):
        values = getattr(body, name)
        if values is not None and len(values) != n:
            raise BadRequestError(
                f"{name} length ({len(values)}) must equal generate_responses length ({n})"
            )


def completion_choice_logprobs(
    ctx: DerenderContext,
    choice: ChoiceIn | StreamChoiceIn,
    settings: CompletionSettings,
    context: Sequence[int] = (),
    text_offset: int = 0,
) -> dict[str, Any]:
    """A choice's logprobs in the completions form (`text_offset` continues a stream's)."""
    assert choice.logprobs is not None
    positions = normalize_logprobs(choice.logprobs.content, f"choice {choice.index}")
    chat = chat_logprobs(
        positions, ctx.token_decoder, top_limit=settings.top_limit, context=context
    )
    return completion_logprobs(chat, positions, text_offset)


def derender_completion_batch(
    ctx: DerenderContext, body: CompletionBatchBody, settings: CompletionSettings | None
) -> dict[str, Any]:
    _check_lengths(body)
    gens = body.generate_responses
    bounds.check_responses(gens, ctx.max_model_len, ctx.max_logprobs)
    bounds.check_prompt_ids(body.prompt_token_ids or [], ctx.max_model_len)
    bounds.check_empty_choices(gens, with_request_id=True)
    common = settings or CompletionSettings()
    detok = ctx.decoders.get(common.skip_special(preserve_special=False))
    seeds = body.prompt_token_ids or [None] * len(gens)
    choices: list[dict[str, Any]] = []
    completion_tokens = 0
    for gen, seed in zip(gens, seeds):
        seed_state = detok.initial_state(seed if seed is not None else gen.prompt_token_ids)
        for choice in gen.choices:
            with engine_output_errors("generate_responses"):
                text, stop_reason = decode_batch(
                    detok, seed_state, choice.token_ids or [], choice.finish_reason,
                    choice.stop_reason, common.stop_rules, ctx.eos,
                )  # fmt: skip
            logprobs = completion_choice_logprobs(ctx, choice, common) if choice.logprobs is not None else None
            choices.append(
                responses.completion_choice(
                    len(choices), text, logprobs, choice.finish_reason, stop_reason,
                    choice.token_ids if common.return_token_ids else None,
                    gen.prompt_token_ids if common.return_token_ids else None,
                )  # fmt: skip
            )
            completion_tokens += len(choice.token_ids or ())
    first = gens[0]
    kv = first.kv_transfer_params
    if any(g.kv_transfer_params != kv for g in gens[1:]):
        log.warning("derender_completion: kv_transfer_params differ across responses; dropped")
        kv = None
    return responses.completion_response(
        first.request_id,
        body.model or ctx.model_name,
        choices,
        responses.usage(sum(body.prompt_tokens or ()), completion_tokens),
        kv_transfer_params=kv,
        metrics=first.metrics if len(gens) == 1 else None,
    )
