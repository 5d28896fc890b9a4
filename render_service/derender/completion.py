"""Completions derender, batch and streaming (vLLM 0.33 `/v1/completions/derender`).

No parsers run here. Batch: one engine response per prompt; choices get a flat running
index; usage sums prompts and outputs; kv_transfer_params is kept only when all responses
agree. Streaming uses the same `ChoiceState` machinery as chat (detokenizer window, stop
scan, logprob context and absolute logprob text_offset).
"""

from __future__ import annotations

import logging
from typing import Any

from render_service.derender import bounds, responses
from render_service.derender.chat_stream import scanner_for
from render_service.derender.context import DerenderContext
from render_service.derender.decoding import decode_batch, stream_text_step
from render_service.derender.logprobs import (
    chat_logprobs,
    completion_logprobs,
    context_tail,
    normalize_logprobs,
)
from render_service.derender.parser_errors import engine_output_errors
from render_service.derender.schemas import CompletionBatchBody, CompletionStreamBody
from render_service.derender.settings import CompletionSettings
from render_service.derender.state import ChoiceState, read_settings, resume_or_start
from render_service.derender.stops import drop_stop_token
from render_service.errors import BadRequestError

__all__ = ["derender_completion_batch", "derender_completion_stream"]

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


def _logprobs(ctx: DerenderContext, choice, settings, context=(), text_offset=0):  # noqa: ANN001,ANN202
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
            logprobs = _logprobs(ctx, choice, common) if choice.logprobs is not None else None
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


def _first_state(
    ctx: DerenderContext, body: CompletionStreamBody, settings: CompletionSettings | None, index: int
) -> ChoiceState:
    common = settings or CompletionSettings()
    prompt_ids = body.prompt_token_ids
    if prompt_ids is None:
        prompt_ids = body.generate_chunk.prompt_token_ids
    detok = ctx.decoders.get(common.skip_special(preserve_special=False))
    scanner = scanner_for(common)
    return ChoiceState(
        kind="completion",
        index=index,
        settings=common.to_json(),
        detok=detok.initial_state(prompt_ids),
        stop=scanner.initial_state() if scanner else None,
        prompt_len=len(prompt_ids or ()),
    )


def _settings_of(state: ChoiceState) -> CompletionSettings:
    return read_settings(state, CompletionSettings.from_json)


def derender_completion_stream(
    ctx: DerenderContext, body: CompletionStreamBody, settings: CompletionSettings | None
) -> dict[str, Any]:
    chunk_in = body.generate_chunk
    request_id = chunk_in.request_id
    with engine_output_errors("generate_chunk"):
        state, choice = resume_or_start(
            ctx.envelope, "completion", body, lambda index: _first_state(ctx, body, settings, index)
        )
    bounds.check_prompt_ids([body.prompt_token_ids], ctx.max_model_len)
    prior = state.n_tokens if state else 0
    prompt_len = state.prompt_len if state else len(body.prompt_token_ids or ())
    bounds.check_chunk(
        chunk_in, "completion", prompt_len, prior, ctx.max_model_len, ctx.max_logprobs
    )
    out_choices = []
    abort = bool(state and state.done)
    if choice is not None and state is not None and not state.done:
        with engine_output_errors("generate_chunk"):
            state, out = _step(ctx, state, choice, chunk_in.prompt_token_ids)
        out_choices.append(out)
        abort = state.done
    chunk = responses.completion_chunk(
        request_id,
        body.model or ctx.model_name,
        out_choices,
        responses.usage_from_chunk(chunk_in.usage, body.prompt_tokens),
        metrics=chunk_in.metrics,
    )
    result: dict[str, Any] = {
        "chunk": chunk,
        "stream_state": ctx.envelope.seal(state, request_id) if state else None,
    }
    if abort:
        result["abort_engine_request"] = True
    return result


def _step(ctx: DerenderContext, state: ChoiceState, choice, chunk_prompt_ids):  # noqa: ANN001,ANN202
    settings = _settings_of(state)
    delta_ids = choice.token_ids or []
    text_ids, stop_reason = drop_stop_token(
        delta_ids, choice.finish_reason, choice.stop_reason, settings.stop_rules,
        ctx.eos.primary, ctx.eos.all,
    )  # fmt: skip
    detok = ctx.decoders.get(settings.skip_special(preserve_special=False))
    step = stream_text_step(
        detok, state.detok, scanner_for(settings), state.stop, text_ids,
        choice.finish_reason is not None,
    )  # fmt: skip
    finish_reason = choice.finish_reason
    if step.stop is not None:
        finish_reason, stop_reason = "stop", step.stop
    logprobs = None
    next_offset = state.lp_text_offset + len(step.text)
    if choice.logprobs is not None:
        logprobs = _logprobs(ctx, choice, settings, state.lp_context, state.lp_text_offset)
        if logprobs["tokens"]:
            next_offset = logprobs["text_offset"][-1] + len(logprobs["tokens"][-1])
    out = responses.completion_stream_choice(
        choice.index, step.text, logprobs, finish_reason, stop_reason,
        choice.token_ids if settings.return_token_ids else None,
        chunk_prompt_ids if settings.return_token_ids else None,
    )  # fmt: skip
    new_state = state.replace(
        detok=step.detok,
        stop=step.scan,
        lp_context=tuple(context_tail(state.lp_context, delta_ids)),
        lp_text_offset=next_offset,
        n_tokens=state.n_tokens + len(delta_ids),
        done=step.stop is not None,
    )
    return new_state, out
