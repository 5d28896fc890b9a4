"""Decode streams -> the SSE response a `vllm serve` client reads (batch: see batch.py).

`open_stream` starts every leg's engine stream and waits for the first event of each *before*
the HTTP response starts, so anything that fails before a token exists (engine 4xx, every
retry exhausted, first-token deadline) is a plain HTTP error, like vLLM's own validation
errors. After that, `sse()` yields serve-formatted chunks (serve_format); a failure ends the
stream with an OpenAI error event and `data: [DONE]`. The per-choice derender state, the stop
strings and the early abort live in leg_stream; `ServeOptions` (echo, usage stats) and the
system fingerprint are applied here, as vLLM's serving layer applies them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from render_service.errors import EngineError, RenderServiceError
from render_service.gateway.codec import Codec
from render_service.gateway.context import Leg, RequestContext
from render_service.gateway.leg_stream import ChoiceState, LegStream, StepDerenderer
from render_service.gateway.metrics import GATEWAY_METRICS
from render_service.gateway.reasoning_usage import ReasoningUsage
from render_service.gateway.serve_format import (
    ChunkExtras,
    StreamIdentity,
    chat_content_chunk,
    chat_echo_chunk,
    chat_role_chunk,
    completion_chunk,
    completion_error_event,
    running_usage,
    usage_chunk,
)
from render_service.gateway.serve_options import completion_prompts
from render_service.gateway.sse import DONE_EVENT, encode_error_event, encode_event
from render_service.gateway.stages import DecodeStage

__all__ = ["OpenStream", "Responders", "open_legs"]

log = logging.getLogger(__name__)


@dataclass
class OpenStream:
    """Engine streams whose first events arrived; `Responders.sse` turns them into bytes."""

    ctx: RequestContext
    legs: list[LegStream]
    reasoning: ReasoningUsage | None = None  # chat with a reasoning parser, usage shown

    async def aclose(self) -> None:
        for leg_stream in self.legs:
            await leg_stream.events.aclose()


async def open_legs(decode: DecodeStage, ctx: RequestContext) -> OpenStream:
    """Every leg's decode stream, each past its first event (or the first failure raised)."""
    opened = await asyncio.gather(*(_open_leg(decode, ctx, leg) for leg in ctx.legs),
                                  return_exceptions=True)
    streams = [s for s in opened if isinstance(s, LegStream)]
    errors = [e for e in opened if isinstance(e, BaseException)]
    if errors:
        for stream in streams:
            stream.leg.close_reason = "sibling_failed"
            await stream.events.aclose()
        raise errors[0]
    return OpenStream(ctx, streams)


async def _open_leg(decode: DecodeStage, ctx: RequestContext, leg: Leg) -> LegStream:
    events = decode.events(ctx, leg)
    try:
        first = await anext(events)
    except StopAsyncIteration:
        raise EngineError(f"engine ended request {leg.request_id} without output") from None
    return LegStream(leg, events, first, [ChoiceState() for _ in range(leg.n)])


class Responders:
    def __init__(self, codec: Codec, decode: DecodeStage, model_name: str,
                 system_fingerprint: str | None = None) -> None:
        self.codec = codec
        self.decode = decode
        self.model_name = model_name
        self.system_fingerprint = system_fingerprint
        self.steps = StepDerenderer(codec, model_name)

    async def open_stream(self, ctx: RequestContext) -> OpenStream:
        return await open_legs(self.decode, ctx)

    async def sse(self, opened: OpenStream) -> AsyncGenerator[bytes, None]:
        ctx = opened.ctx
        clock = _ClientClock(ctx)
        try:
            ident = self._identity(ctx)
            self._count_reasoning(opened)
            for chunk in self._opening_chunks(ctx, ident, opened.reasoning is not None):
                yield clock.sent(encode_event(chunk))
            async with aclosing(_merged(opened.legs)) as merged:
                async for leg_stream, event in merged:
                    out = self._stream_event(ctx, ident, leg_stream, event)
                    if out is not None:
                        yield clock.sent(encode_event(out))
            if ctx.options.include_usage:
                yield encode_event(self._usage(ident, opened))
            yield DONE_EVENT
            clock.finish("ok")
        except RenderServiceError as exc:
            log.warning("stream %s failed: %s", ctx.response_id(), exc.message)
            yield self._error_event(ctx, exc.message, exc.error_type, exc.status)
            yield DONE_EVENT
            clock.finish("error")
        except Exception:  # a bug must still end the client's stream cleanly; it is logged
            log.exception("stream %s failed", ctx.response_id())
            GATEWAY_METRICS.errors.labels("internal").inc()
            yield self._error_event(ctx, "Internal server error", "InternalServerError", 500)
            yield DONE_EVENT
            clock.finish("error")
        finally:
            for leg_stream in opened.legs:
                if not leg_stream.done():
                    leg_stream.leg.close_reason = "client_gone"
            await opened.aclose()

    def _opening_chunks(self, ctx: RequestContext, ident: StreamIdentity, counted: bool
                        ) -> list[dict[str, Any]]:
        """Chat: one role chunk per choice, then one echo chunk per choice (when echoing)."""
        if ctx.endpoint != "chat":
            return []
        leg, options = ctx.legs[0], ctx.options
        extras = ChunkExtras(running_usage(len(leg.token_ids), 0, chat=True,
                                           reasoning_tokens=0 if counted else None)
                             if options.continuous_usage else None)
        prompt_ids = leg.token_ids if options.return_token_ids else None
        chunks = [chat_role_chunk(ident, i, prompt_ids, role=options.response_role, extras=extras)
                  for i in range(leg.n)]
        if options.chat_echo:
            chunks += [chat_echo_chunk(ident, i, options.chat_echo, extras=extras)
                       for i in range(leg.n)]
        return chunks

    def _error_event(self, ctx: RequestContext, message: str, error_type: str, status: int
                     ) -> bytes:
        if ctx.endpoint == "completion":
            return completion_error_event(message, error_type, status)
        return encode_error_event(message, error_type, status)

    def _stream_event(self, ctx: RequestContext, ident: StreamIdentity, leg_stream: LegStream,
                      event: dict[str, Any]) -> dict[str, Any] | None:
        found = leg_stream.choice(event)
        if found is None:
            return None  # the engine's usage chunk: usage is counted here instead
        engine_choice, state = found
        if state.finished:
            return None  # tokens after a stop-string match, before the abort landed
        leg = leg_stream.leg
        out = self.steps.step(ctx, leg, event, state)
        if state.reasoning is not None:  # vLLM counts every step, sent or not
            state.reasoning.step(
                engine_choice.get("token_ids") or [],
                finish_reason="stop" if state.stop_hit else engine_choice.get("finish_reason"),
                stop_reason=state.stop_reason if state.stop_hit
                else engine_choice.get("stop_reason"))
        if out is None:
            return None
        extras = self._extras(ctx, leg, state, out)
        options = ctx.options
        if ctx.endpoint == "chat":
            return chat_content_chunk(
                ident, out, index=engine_choice["index"], has_parser=self.codec.has_parser,
                return_token_ids=options.return_token_ids,
                had_tokens=bool(engine_choice.get("token_ids")),
                tool_parser=self.codec.tool_parser, extras=extras)
        first, state.first_sent = not state.first_sent, True
        echo = self._completion_echo(ctx, leg) if first and options.echo else ""
        if options.echo_only:
            out = {**out, "text": ""}
        prompt_ids = leg.token_ids if first and (options.echo or options.return_token_ids) else None
        return completion_chunk(ident, out, index=leg.prompt_index * leg.n + engine_choice["index"],
                                prompt_token_ids=prompt_ids,
                                return_token_ids=options.return_token_ids, echo=echo, extras=extras)

    def _extras(self, ctx: RequestContext, leg: Leg, state: ChoiceState, out: dict[str, Any]
                ) -> ChunkExtras:
        options = ctx.options
        reasoning = state.reasoning.count if state.reasoning is not None else None
        usage = (running_usage(len(leg.token_ids), state.tokens, chat=ctx.endpoint == "chat",
                               reasoning_tokens=reasoning)
                 if options.continuous_usage else None)
        terminal = out.get("finish_reason") is not None
        fingerprint = self.system_fingerprint if terminal and not options.include_usage else None
        return ChunkExtras(usage, fingerprint)

    def _completion_echo(self, ctx: RequestContext, leg: Leg) -> str:
        if ctx.options.return_token_ids:
            return ""  # vLLM: echo with return_token_ids sends the ids, not the text
        return completion_prompt_text(self.codec, ctx, leg)

    def _usage(self, ident: StreamIdentity, opened: OpenStream) -> dict[str, Any]:
        prompt = sum(len(s.leg.token_ids) for s in opened.legs)
        choices = [c for s in opened.legs for c in s.choices]
        completion = sum(c.tokens for c in choices)
        reasoning = (sum(c.reasoning.count for c in choices if c.reasoning is not None)
                     if opened.reasoning is not None else None)
        return usage_chunk(ident, prompt, completion, self.system_fingerprint,
                           reasoning_tokens=reasoning)

    def _count_reasoning(self, opened: OpenStream) -> None:
        """Give each chat choice its reasoning-token count when a usage will show it."""
        ctx = opened.ctx
        shown = ctx.options.include_usage or ctx.options.continuous_usage
        if ctx.endpoint != "chat" or not shown:
            return  # vLLM counts in chat only; without a usage nobody sees the count
        opened.reasoning = usage = self.codec.reasoning_usage(ctx.body)
        if usage is None:
            return
        for leg_stream in opened.legs:
            for choice in leg_stream.choices:
                choice.reasoning = usage.choice(leg_stream.leg.rendered, ctx.stop_strings)

    def _identity(self, ctx: RequestContext) -> StreamIdentity:
        obj = "chat.completion.chunk" if ctx.endpoint == "chat" else "text_completion"
        return StreamIdentity(ctx.response_id(), ctx.created, self.model_name, obj)


def completion_prompt_text(codec: Codec, ctx: RequestContext, leg: Leg) -> str:
    """What completions `echo` shows for a leg's prompt: the text as sent, else decoded ids."""
    prompts = completion_prompts(ctx.body)
    prompt = prompts[leg.prompt_index] if leg.prompt_index < len(prompts) else leg.token_ids
    return prompt if isinstance(prompt, str) else codec.prompt_text(leg.token_ids)


async def _merged(legs: list[LegStream]) -> AsyncGenerator[tuple[LegStream, dict[str, Any]], None]:
    """Events of every leg as they come; one leg is iterated directly (the common case)."""
    if len(legs) == 1:
        async with aclosing(legs[0].iterate()) as events:
            async for event in events:
                yield legs[0], event
        return
    queue: asyncio.Queue[tuple[LegStream | None, Any]] = asyncio.Queue()

    async def pump(leg_stream: LegStream) -> None:
        try:
            async with aclosing(leg_stream.iterate()) as events:
                async for event in events:
                    await queue.put((leg_stream, event))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            await queue.put((None, exc))
            raise
        await queue.put((None, None))

    tasks = [asyncio.ensure_future(pump(s)) for s in legs]
    remaining = len(tasks)
    try:
        while remaining:
            leg_stream, item = await queue.get()
            if leg_stream is None:
                if isinstance(item, BaseException):
                    raise item
                remaining -= 1
                continue
            yield leg_stream, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _ClientClock:
    """TTFT / ITL / e2e as the client sees them."""

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self.last: float | None = None

    def sent(self, data: bytes) -> bytes:
        now = time.perf_counter()
        if self.last is None:
            GATEWAY_METRICS.ttft.labels(self.ctx.endpoint).observe(now - self.ctx.received_at)
        else:
            GATEWAY_METRICS.itl.labels(self.ctx.endpoint).observe(now - self.last)
        self.last = now
        return data

    def finish(self, outcome: str) -> None:
        GATEWAY_METRICS.e2e.labels(self.ctx.endpoint, outcome).observe(
            time.perf_counter() - self.ctx.received_at)
        derender = self.ctx.phases.get("derender")
        if derender is not None:
            GATEWAY_METRICS.phase.labels("derender").observe(derender)
