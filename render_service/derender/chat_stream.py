"""Streaming chat derender: one engine chunk + our stream_state -> one chat chunk + new state.

Theory of operation
-------------------
vLLM 0.33 rebuilds a parser and replays every earlier chunk on each call (O(n) bytes and
O(n^2) work per chunk). Here the complete progress of a choice is a `ChoiceState` value: the
detokenizer window, the chat parser's state, the stop-string scan, the logprob context, a few
flags, and the compact request settings. A step is

    state = open(stream_state)             # MAC check, bound to request id + choice + config
    text  = detokenize(delta ids)          # O(delta); the stop token is dropped on the finish
    text  = stop_scan(text)                # hold back only a possible stop-string prefix
    events = parser.feed(text) [+ finish]  # O(delta) amortised
    chunk = build(events, logprobs)        # role once, tool-call filters, finish_reason
    return chunk, seal(state')

On a stop-string match the choice ends at once (finish_reason "stop", stop_reason = the
string) and the response carries `"abort_engine_request": true`: the caller should abort
the engine request; chunks that still arrive for the choice are answered with no choices.

The first call needs the request settings (from `chat_request`) and, with a parser, the prompt
ids; later calls may omit both. When both a state and a `chat_request` arrive, the state's
settings win: the parser must keep the configuration it started with.
"""

from __future__ import annotations

from typing import Any

from render_service.derender import bounds, responses
from render_service.derender.assembly import DeltaParts, delta_parts, resolve_finish_reason
from render_service.derender.chat import PARSER_NEEDS_REQUEST
from render_service.derender.context import DerenderContext
from render_service.derender.decoding import stream_text_step
from render_service.derender.logprobs import chat_logprobs, context_tail, normalize_logprobs
from render_service.derender.parser_errors import engine_output_errors
from render_service.derender.schemas import ChatStreamBody, StreamChoiceIn
from render_service.derender.settings import ChatSettings
from render_service.derender.state import ChoiceState, read_settings, resume_or_start
from render_service.derender.stops import StopScan, drop_stop_token
from render_service.errors import BadRequestError

__all__ = ["derender_chat_stream", "PROMPT_IDS_REQUIRED", "scanner_for"]

PROMPT_IDS_REQUIRED = (
    "prompt_token_ids is required when a tool or reasoning parser is configured. Without it "
    "parse_delta cannot tell whether the prompt left reasoning open (e.g. a chat template that "
    "pre-opens <think>) and would misclassify reasoning content as plain content."
)


def scanner_for(settings: ChatSettings | Any) -> StopScan | None:
    if not settings.stop:
        return None
    return StopScan(settings.stop, settings.include_stop_str_in_output, settings.min_tokens)


def _first_state(
    ctx: DerenderContext, body: ChatStreamBody, settings: ChatSettings | None, index: int
) -> ChoiceState:
    has_parser = ctx.parsers.configured
    if has_parser and settings is None:
        raise BadRequestError(PARSER_NEEDS_REQUEST)
    prompt_ids = body.prompt_token_ids
    if prompt_ids is None:
        prompt_ids = body.generate_chunk.prompt_token_ids
    if has_parser and prompt_ids is None:
        raise BadRequestError(PROMPT_IDS_REQUIRED)
    common = settings or ChatSettings()
    detok = ctx.decoders.get(common.skip_special(preserve_special=has_parser))
    parser_state = None
    if has_parser:
        assert settings is not None
        parser_state = ctx.parsers.get(settings).initial_state(prompt_ids or ()).to_json()
    scanner = scanner_for(common)
    return ChoiceState(
        kind="chat",
        index=index,
        settings=common.to_json(),
        detok=detok.initial_state(prompt_ids),
        parser=parser_state,
        stop=scanner.initial_state() if scanner else None,
        prompt_len=len(prompt_ids or ()),
    )


def _settings_of(state: ChoiceState) -> ChatSettings:
    return read_settings(state, ChatSettings.from_json)


def derender_chat_stream(
    ctx: DerenderContext, body: ChatStreamBody, settings: ChatSettings | None
) -> dict[str, Any]:
    chunk_in = body.generate_chunk
    request_id = chunk_in.request_id
    with engine_output_errors("generate_chunk"):
        state, choice = resume_or_start(
            ctx.envelope, "chat", body, lambda index: _first_state(ctx, body, settings, index)
        )
    prior = state.n_tokens if state else 0
    prompt_len = state.prompt_len if state else len(body.prompt_token_ids or ())
    bounds.check_chunk(chunk_in, "chat", prompt_len, prior, ctx.max_model_len, ctx.max_logprobs)
    out_choices: list[dict[str, Any]] = []
    abort = bool(state and state.done)
    if choice is not None and state is not None and not state.done:
        with engine_output_errors("generate_chunk"):
            state, out_choice = _step(ctx, state, choice, request_id)
        out_choices.append(out_choice)
        abort = state.done
    s = _settings_of(state) if state else (settings or ChatSettings())
    chunk = responses.chat_chunk(
        request_id,
        body.model or ctx.model_name,
        out_choices,
        responses.usage_from_chunk(chunk_in.usage, body.prompt_tokens),
        prompt_token_ids=chunk_in.prompt_token_ids if s.return_token_ids else None,
        metrics=chunk_in.metrics,
    )
    result: dict[str, Any] = {
        "chunk": chunk,
        "stream_state": ctx.envelope.seal(state, request_id) if state else None,
    }
    if abort:
        result["abort_engine_request"] = True
    return result


def _step(
    ctx: DerenderContext, state: ChoiceState, choice: StreamChoiceIn, request_id: str
) -> tuple[ChoiceState, dict[str, Any]]:
    settings = _settings_of(state)
    has_parser = state.parser is not None
    hide_metadata = has_parser and not settings.include_reasoning
    delta_ids = choice.token_ids or []
    text_ids, stop_reason = drop_stop_token(
        delta_ids,
        choice.finish_reason,
        choice.stop_reason,
        settings.stop_rules,
        ctx.eos.primary,
        ctx.eos.all,
    )
    detok = ctx.decoders.get(settings.skip_special(preserve_special=has_parser))
    finishing = choice.finish_reason is not None
    step = stream_text_step(
        detok, state.detok, scanner_for(settings), state.stop, text_ids, finishing
    )
    finish_reason = choice.finish_reason
    if step.stop is not None:
        finish_reason, stop_reason = "stop", step.stop
    ending = finish_reason is not None
    parts, parser_json, tools_now = _parse(ctx, state, settings, step.text, ending, request_id)
    tools_streamed = state.tools_streamed or tools_now
    logprobs = None
    if choice.logprobs is not None and not hide_metadata:
        positions = normalize_logprobs(choice.logprobs.content, f"choice {choice.index}")
        logprobs = chat_logprobs(
            positions, ctx.token_decoder, top_limit=settings.top_limit, context=state.lp_context
        )
    delta = responses.delta_message(
        None if state.role_sent else "assistant", parts.content, parts.reasoning, parts.tool_calls
    )
    out = responses.chat_stream_choice(
        choice.index,
        delta,
        logprobs,
        resolve_finish_reason(finish_reason, settings, tools_streamed) if ending else None,
        stop_reason,
        choice.token_ids if settings.return_token_ids and not hide_metadata else None,
    )
    new_state = state.replace(
        detok=step.detok,
        stop=step.scan,
        parser=parser_json,
        role_sent=True,
        lp_context=tuple(context_tail(state.lp_context, delta_ids)),
        tools_streamed=tools_streamed,
        n_tokens=state.n_tokens + len(delta_ids),
        done=step.stop is not None,
    )
    return new_state, out


def _parse(
    ctx: DerenderContext,
    state: ChoiceState,
    settings: ChatSettings,
    text: str,
    ending: bool,
    request_id: str,
) -> tuple[DeltaParts, dict[str, Any] | None, bool]:
    """Feed released text to the parser (flushing it at the end); the delta's parts."""
    if state.parser is None:
        return DeltaParts(content=text or None), None, False
    parser = ctx.parsers.get(settings)
    pstate = parser.state_type().from_json(state.parser)
    events = []
    if text:
        pstate, events = parser.feed(pstate, text, request_id)
    if ending:
        pstate, tail = parser.finish(pstate, request_id)
        events = [*events, *tail]
    parts = delta_parts(events, settings, parser.keep_tool_calls)
    return parts, pstate.to_json(), parts.has_tool_calls
