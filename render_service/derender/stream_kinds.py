"""The two `StreamKind`s: what chat and completion streams do differently in a step.

Chat runs the released text through the chat parser (reasoning, content, tool calls), sends the
role once and resolves `tool_calls` finishes; with a parser that hides reasoning it withholds
logprobs and token ids. Completion sends the text as is, with completion-form logprobs whose
text offsets continue across chunks. Everything else is the driver's (`stream.py`).
"""

from __future__ import annotations

from typing import Any

from parsers import Event
from parsers.chat import ChatState
from render_service.derender import bounds, responses
from render_service.derender.assembly import DeltaParts, delta_parts, resolve_finish_reason
from render_service.derender.chat_batch import PARSER_NEEDS_REQUEST
from render_service.derender.completion_batch import completion_choice_logprobs
from render_service.derender.context import DerenderContext
from render_service.derender.logprobs import chat_logprobs, normalize_logprobs
from render_service.derender.schemas import StreamChoiceIn
from render_service.derender.settings import ChatSettings, CompletionSettings
from render_service.derender.state import ChoiceKind, ChoiceState
from render_service.derender.stream import Released, StreamBody, StreamKind, advanced, scanner_for
from render_service.errors import BadRequestError

__all__ = ["CHAT_STREAM", "COMPLETION_STREAM", "PROMPT_IDS_REQUIRED"]

PROMPT_IDS_REQUIRED = (
    "prompt_token_ids is required when a tool or reasoning parser is configured. Without it "
    "parse_delta cannot tell whether the prompt left reasoning open (e.g. a chat template that "
    "pre-opens <think>) and would misclassify reasoning content as plain content."
)


def _prompt_ids(body: StreamBody) -> list[int] | None:
    if body.prompt_token_ids is not None:
        return body.prompt_token_ids
    return body.generate_chunk.prompt_token_ids


class ChatStream:
    kind = ChoiceKind.CHAT
    settings_type = ChatSettings

    def first_state(
        self, ctx: DerenderContext, body: StreamBody, settings: ChatSettings | None, index: int
    ) -> ChoiceState[ChatSettings]:
        has_parser = ctx.parsers.configured
        if has_parser and settings is None:
            raise BadRequestError(PARSER_NEEDS_REQUEST)
        prompt_ids = _prompt_ids(body)
        if has_parser and prompt_ids is None:
            raise BadRequestError(PROMPT_IDS_REQUIRED)
        common = settings or ChatSettings()
        detok = ctx.decoders.get(common.skip_special(preserve_special=has_parser))
        parser_state = None
        if has_parser:
            parser_state = ctx.parsers.get(common).initial_state(prompt_ids or ())
        scanner = scanner_for(common)
        return ChoiceState(
            kind=ChoiceKind.CHAT,
            index=index,
            settings=common,
            detok=detok.initial_state(prompt_ids),
            parser=parser_state,
            stop=scanner.initial_state() if scanner else None,
            prompt_len=len(prompt_ids or ()),
        )

    def check_body(self, ctx: DerenderContext, body: StreamBody) -> None:
        return None

    def preserves_special(self, state: ChoiceState[ChatSettings]) -> bool:
        return state.parser is not None

    def emit(
        self,
        ctx: DerenderContext,
        state: ChoiceState[ChatSettings],
        choice: StreamChoiceIn,
        released: Released,
        body: StreamBody,
    ) -> tuple[ChoiceState[ChatSettings], dict[str, Any]]:
        settings = state.settings
        request_id = body.generate_chunk.request_id
        hide_metadata = state.parser is not None and not settings.include_reasoning
        parts, parser_state = _parse(ctx, state, released.text, released.ending, request_id)
        tools_streamed = state.tools_streamed or parts.has_tool_calls
        logprobs = None
        if choice.logprobs is not None and not hide_metadata:
            positions = normalize_logprobs(choice.logprobs.content, f"choice {choice.index}")
            logprobs = chat_logprobs(
                positions, ctx.token_decoder, top_limit=settings.top_limit, context=state.lp_context
            )
        delta = responses.delta_message(
            None if state.role_sent else "assistant", parts.content, parts.reasoning, parts.tool_calls
        )
        finish = (
            resolve_finish_reason(released.finish_reason, settings, tools_streamed)
            if released.ending
            else None
        )
        out = responses.chat_stream_choice(
            choice.index,
            delta,
            logprobs,
            finish,
            released.stop_reason,
            choice.token_ids if settings.return_token_ids and not hide_metadata else None,
        )
        new_state = advanced(
            state, released, choice.token_ids or [],
            parser=parser_state, role_sent=True, tools_streamed=tools_streamed,
        )  # fmt: skip
        return new_state, out

    def chunk(
        self, ctx: DerenderContext, body: StreamBody, settings: ChatSettings, choices: list[dict[str, Any]]
    ) -> dict[str, Any]:
        chunk_in = body.generate_chunk
        return responses.chat_chunk(
            chunk_in.request_id,
            body.model or ctx.model_name,
            choices,
            responses.usage_from_chunk(chunk_in.usage, body.prompt_tokens),
            prompt_token_ids=chunk_in.prompt_token_ids if settings.return_token_ids else None,
            metrics=chunk_in.metrics,
        )


def _parse(
    ctx: DerenderContext, state: ChoiceState[ChatSettings], text: str, ending: bool, request_id: str
) -> tuple[DeltaParts, ChatState | None]:
    """Feed released text to the parser (flushing it at the end); the delta's parts."""
    if state.parser is None:
        return DeltaParts(content=text or None), None
    parser = ctx.parsers.get(state.settings)
    parser_state = state.parser
    events: list[Event] = []
    if text:
        parser_state, events = parser.feed(parser_state, text, request_id)
    if ending:
        parser_state, tail = parser.finish(parser_state, request_id)
        events = [*events, *tail]
    return delta_parts(events, state.settings, parser.keep_tool_calls), parser_state


class CompletionStream:
    kind = ChoiceKind.COMPLETION
    settings_type = CompletionSettings

    def first_state(
        self, ctx: DerenderContext, body: StreamBody, settings: CompletionSettings | None, index: int
    ) -> ChoiceState[CompletionSettings]:
        common = settings or CompletionSettings()
        prompt_ids = _prompt_ids(body)
        detok = ctx.decoders.get(common.skip_special(preserve_special=False))
        scanner = scanner_for(common)
        return ChoiceState(
            kind=ChoiceKind.COMPLETION,
            index=index,
            settings=common,
            detok=detok.initial_state(prompt_ids),
            stop=scanner.initial_state() if scanner else None,
            prompt_len=len(prompt_ids or ()),
        )

    def check_body(self, ctx: DerenderContext, body: StreamBody) -> None:
        bounds.check_prompt_ids([body.prompt_token_ids], ctx.max_model_len)

    def preserves_special(self, state: ChoiceState[CompletionSettings]) -> bool:
        return False

    def emit(
        self,
        ctx: DerenderContext,
        state: ChoiceState[CompletionSettings],
        choice: StreamChoiceIn,
        released: Released,
        body: StreamBody,
    ) -> tuple[ChoiceState[CompletionSettings], dict[str, Any]]:
        settings = state.settings
        logprobs = None
        next_offset = state.lp_text_offset + len(released.text)
        if choice.logprobs is not None:
            logprobs = completion_choice_logprobs(
                ctx, choice, settings, state.lp_context, state.lp_text_offset
            )
            if logprobs["tokens"]:
                next_offset = logprobs["text_offset"][-1] + len(logprobs["tokens"][-1])
        return_ids = settings.return_token_ids
        out = responses.completion_stream_choice(
            choice.index, released.text, logprobs, released.finish_reason, released.stop_reason,
            choice.token_ids if return_ids else None,
            body.generate_chunk.prompt_token_ids if return_ids else None,
        )  # fmt: skip
        return advanced(state, released, choice.token_ids or [], lp_text_offset=next_offset), out

    def chunk(
        self,
        ctx: DerenderContext,
        body: StreamBody,
        settings: CompletionSettings,
        choices: list[dict[str, Any]],
    ) -> dict[str, Any]:
        chunk_in = body.generate_chunk
        return responses.completion_chunk(
            chunk_in.request_id,
            body.model or ctx.model_name,
            choices,
            responses.usage_from_chunk(chunk_in.usage, body.prompt_tokens),
            metrics=chunk_in.metrics,
        )


CHAT_STREAM: StreamKind[ChatSettings] = ChatStream()
COMPLETION_STREAM: StreamKind[CompletionSettings] = CompletionStream()
