"""Streaming derender, chat and completion alike: one engine chunk + our stream_state -> one
chunk + the new state.

Theory of operation
-------------------
vLLM 0.33 rebuilds a parser and replays every earlier chunk on each call (O(n) bytes and
O(n^2) work per chunk). Here the complete progress of a choice is a `ChoiceState` value: the
detokenizer window, the chat parser's state, the stop-string scan, the logprob context, a few
flags, and the compact request settings. One step, for either endpoint, is

    state = open(stream_state)             # MAC check, bound to request id + choice + config
    text  = detokenize(delta ids)          # O(delta); the stop token is dropped on the finish
    text  = stop_scan(text)                # hold back only a possible stop-string prefix
    choice, state' = kind.emit(text, ...)  # chat: parser.feed [+ finish], role, tool filters;
                                           # completion: text + logprob text offsets
    return chunk, seal(state')

`derender_stream` is that driver, written once; `StreamKind` is the small per-endpoint
strategy (`stream_kinds.CHAT_STREAM`, `stream_kinds.COMPLETION_STREAM`). `step` is a pure
function of the immutable context, the state and the chunk.

On a stop-string match the choice ends at once (finish_reason "stop", stop_reason = the
string) and the response carries `"abort_engine_request": true`: the caller should abort
the engine request; chunks that still arrive for the choice are answered with no choices.

The first call needs the request settings and, for chat with a parser, the prompt ids; later
calls may omit both. When both a state and a request arrive, the state's settings win: the
parser must keep the configuration it started with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from parsers import DetokState
from render_service.derender import bounds
from render_service.derender.context import DerenderContext
from render_service.derender.decoding import stream_text_step
from render_service.derender.logprobs import context_tail
from render_service.derender.parser_errors import engine_output_errors
from render_service.derender.schemas import ChatStreamBody, CompletionStreamBody, StreamChoiceIn
from render_service.derender.settings import ChatSettings, CompletionSettings
from render_service.derender.state import ChoiceKind, ChoiceState, SettingsT, resume_or_start
from render_service.derender.stops import StopScan, StopScanState, drop_stop_token

__all__ = ["Released", "StreamBody", "StreamKind", "derender_stream", "scanner_for", "step"]

StreamBody = ChatStreamBody | CompletionStreamBody


@dataclass(frozen=True, slots=True)
class Released:
    """One chunk of one choice after the detokenizer and the stop-string scan."""

    text: str  # released to the parser (chat) or the client (completion)
    detok: DetokState
    scan: StopScanState | None
    finish_reason: str | None  # "stop" when a stop string matched in this chunk
    stop_reason: int | str | None
    stopped: bool  # a stop string ended the choice in this chunk

    @property
    def ending(self) -> bool:
        return self.finish_reason is not None


class StreamKind(Protocol[SettingsT]):
    """What differs between chat and completion streams."""

    kind: ChoiceKind
    settings_type: type[SettingsT]

    def first_state(
        self, ctx: DerenderContext, body: StreamBody, settings: SettingsT | None, index: int
    ) -> ChoiceState[SettingsT]: ...

    def check_body(self, ctx: DerenderContext, body: StreamBody) -> None: ...

    def preserves_special(self, state: ChoiceState[SettingsT]) -> bool: ...

    def emit(
        self,
        ctx: DerenderContext,
        state: ChoiceState[SettingsT],
        choice: StreamChoiceIn,
        released: Released,
        body: StreamBody,
    ) -> tuple[ChoiceState[SettingsT], dict[str, Any]]: ...

    def chunk(
        self, ctx: DerenderContext, body: StreamBody, settings: SettingsT, choices: list[dict[str, Any]]
    ) -> dict[str, Any]: ...


def scanner_for(settings: ChatSettings | CompletionSettings) -> StopScan | None:
    if not settings.stop:
        return None
    return StopScan(settings.stop, settings.include_stop_str_in_output, settings.min_tokens)


def derender_stream(
    ctx: DerenderContext, body: StreamBody, settings: SettingsT | None, kind: StreamKind[SettingsT]
) -> dict[str, Any]:
    """One stream step of either endpoint: `{"chunk", "stream_state"[, "abort_engine_request"]}`."""
    chunk_in = body.generate_chunk
    request_id = chunk_in.request_id
    with engine_output_errors("generate_chunk"):
        state, choice = resume_or_start(
            ctx.envelope, kind.kind, kind.settings_type, body.stream_state, request_id,
            chunk_in.choices, lambda index: kind.first_state(ctx, body, settings, index),
        )  # fmt: skip
    kind.check_body(ctx, body)
    prior = state.n_tokens if state else 0
    prompt_len = state.prompt_len if state else len(body.prompt_token_ids or ())
    bounds.check_chunk(
        chunk_in, kind.kind.value, prompt_len, prior, ctx.max_model_len, ctx.max_logprobs
    )
    out_choices: list[dict[str, Any]] = []
    abort = bool(state and state.done)
    if choice is not None and state is not None and not state.done:
        with engine_output_errors("generate_chunk"):
            state, out_choice = step(ctx, kind, state, choice, body)
        out_choices.append(out_choice)
        abort = state.done
    effective = state.settings if state else (settings or kind.settings_type())
    result: dict[str, Any] = {
        "chunk": kind.chunk(ctx, body, effective, out_choices),
        "stream_state": ctx.envelope.seal(state, request_id) if state else None,
    }
    if abort:
        result["abort_engine_request"] = True
    return result


def step(
    ctx: DerenderContext,
    kind: StreamKind[SettingsT],
    state: ChoiceState[SettingsT],
    choice: StreamChoiceIn,
    body: StreamBody,
) -> tuple[ChoiceState[SettingsT], dict[str, Any]]:
    """Advance one choice by one engine chunk (pure: the context and the state are immutable)."""
    released = release_text(ctx, state, choice, preserve_special=kind.preserves_special(state))
    return kind.emit(ctx, state, choice, released, body)


def release_text(
    ctx: DerenderContext, state: ChoiceState[SettingsT], choice: StreamChoiceIn, *, preserve_special: bool
) -> Released:
    """Detokenize the chunk's ids (stop token dropped) and run the stop-string scan."""
    settings = state.settings
    text_ids, stop_reason = drop_stop_token(
        choice.token_ids or [], choice.finish_reason, choice.stop_reason, settings.stop_rules,
        ctx.eos.primary, ctx.eos.all,
    )  # fmt: skip
    detok = ctx.decoders.get(settings.skip_special(preserve_special=preserve_special))
    text = stream_text_step(
        detok, state.detok, scanner_for(settings), state.stop, text_ids,
        choice.finish_reason is not None,
    )  # fmt: skip
    finish_reason = choice.finish_reason
    if text.stop is not None:
        finish_reason, stop_reason = "stop", text.stop
    return Released(text.text, text.detok, text.scan, finish_reason, stop_reason, text.stop is not None)


def advanced(
    state: ChoiceState[SettingsT], released: Released, delta_ids: Sequence[int], **changes: Any
) -> ChoiceState[SettingsT]:
    """The state after a chunk: what every kind updates, plus the kind's own `changes`."""
    return state.replace(
        detok=released.detok,
        stop=released.scan,
        lp_context=tuple(context_tail(state.lp_context, delta_ids)),
        n_tokens=state.n_tokens + len(delta_ids),
        done=released.stopped,
        **changes,
    )
