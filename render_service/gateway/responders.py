"""Decode results -> client responses: the derender step, streaming and not.

Streaming. `open_stream` starts every leg's engine stream and waits for the first event of
each *before* the HTTP response starts, so anything that fails before a token exists (engine
4xx, every retry exhausted, first-token deadline) is a plain HTTP error, like vLLM's own
validation errors. After that, `sse()` yields serve-formatted chunks; a failure ends the
stream with an OpenAI error event and `data: [DONE]`. Each engine event carries one choice;
its `stream_state` is kept per (leg, choice index) and threaded through the in-process
derenderer. When derender reports a stop-string match (`abort_engine_request`), that choice
is done; once every choice of a leg is done the engine stream is closed, which aborts the
engine request at once (stages.DecodeStage). Usage is counted here (tokens fed to derender
up to each choice's end), so it is exact even when the engine was cut short.

Non-streaming. Without stop strings: one JSON generate per leg, then batch derender. With stop
strings the engine is streamed anyway (so a match can stop it early), the streaming derender
is only used to find the match, and the collected tokens (cut at the matching chunk, finish
"stop", stop_reason = the string) go through batch derender, which cuts the text exactly.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from render_service.errors import EngineError, RenderServiceError
from render_service.gateway.codec import Codec
from render_service.gateway.context import Leg, RequestContext
from render_service.gateway.metrics import GATEWAY_METRICS
from render_service.gateway.serve_format import (
    StreamIdentity,
    chat_content_chunk,
    chat_role_chunk,
    completion_chunk,
    completion_error_event,
    usage_chunk,
)
from render_service.gateway.sse import DONE_EVENT, encode_error_event, encode_event
from render_service.gateway.stages import DecodeStage

__all__ = ["Responders", "OpenStream"]

log = logging.getLogger(__name__)


@dataclass
class _Choice:
    stream_state: Any = None
    tokens: int = 0
    finished: bool = False
    stop_hit: bool = False
    prompt_ids_sent: bool = False
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[Any] | None = None
    finish_reason: str | None = None
    stop_reason: Any = None


@dataclass
class _LegStream:
    leg: Leg
    events: AsyncIterator[dict[str, Any]]
    first: dict[str, Any]
    choices: list[_Choice]

    async def iterate(self) -> AsyncIterator[dict[str, Any]]:
        """The events; stops (closing the engine stream, which aborts it) once every choice is
        done and one of them hit a stop string. Finished naturally: read on to [DONE]."""
        event = self.first
        while True:
            yield event
            if self.done() and any(c.stop_hit for c in self.choices):
                self.leg.close_reason = "stop_string"
                await self.events.aclose()  # type: ignore[attr-defined]
                return
            try:
                event = await anext(self.events)
            except StopAsyncIteration:
                return

    def done(self) -> bool:
        return all(c.finished for c in self.choices)


@dataclass
class OpenStream:
    """Engine streams whose first events arrived; `Responders.sse` turns them into bytes."""

    ctx: RequestContext
    legs: list[_LegStream]

    async def aclose(self) -> None:
        for leg_stream in self.legs:
            await leg_stream.events.aclose()  # type: ignore[attr-defined]


class Responders:
    def __init__(self, codec: Codec, decode: DecodeStage, executor: Executor,
                 model_name: str) -> None:
        self.codec = codec
        self.decode = decode
        self.executor = executor
        self.model_name = model_name

    # -- streaming -------------------------------------------------------------------------
    async def open_stream(self, ctx: RequestContext) -> OpenStream:
        opened = await asyncio.gather(*(self._open_leg(ctx, leg) for leg in ctx.legs),
                                      return_exceptions=True)
        streams = [s for s in opened if isinstance(s, _LegStream)]
        errors = [e for e in opened if isinstance(e, BaseException)]
        if errors:
            for stream in streams:
                stream.leg.close_reason = "sibling_failed"
                await stream.events.aclose()  # type: ignore[attr-defined]
            raise errors[0]
        return OpenStream(ctx, streams)

    async def _open_leg(self, ctx: RequestContext, leg: Leg) -> _LegStream:
        events = self.decode.events(ctx, leg)
        try:
            first = await anext(events)
        except StopAsyncIteration:
            raise EngineError(f"engine ended request {leg.request_id} without output") from None
        return _LegStream(leg, events, first, [_Choice() for _ in range(leg.n)])

    async def sse(self, opened: OpenStream) -> AsyncIterator[bytes]:
        ctx = opened.ctx
        clock = _ClientClock(ctx)
        try:
            if ctx.endpoint == "chat":
                ident = self._identity(ctx, "chat.completion.chunk")
                for index in range(ctx.legs[0].n):
                    yield clock.sent(encode_event(chat_role_chunk(
                        ident, index, ctx.legs[0].token_ids if _return_ids(ctx) else None)))
            else:
                ident = self._identity(ctx, "text_completion")
            async with aclosing(_merged(opened.legs)) as merged:
                async for leg_stream, event in merged:
                    chunk = self._stream_event(ctx, ident, leg_stream, event)
                    if chunk is not None:
                        yield clock.sent(encode_event(chunk))
            if ctx.include_usage:
                yield encode_event(self._usage(ctx, ident, opened))
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

    def _error_event(self, ctx: RequestContext, message: str, error_type: str, status: int
                     ) -> bytes:
        if ctx.endpoint == "completion":
            return completion_error_event(message, error_type, status)
        return encode_error_event(message, error_type, status)

    def _stream_event(self, ctx: RequestContext, ident: StreamIdentity, leg_stream: _LegStream,
                      event: dict[str, Any]) -> dict[str, Any] | None:
        if not event.get("choices"):
            return None  # the engine's usage chunk: usage is counted here instead
        engine_choice = event["choices"][0]
        state = leg_stream.choices[engine_choice["index"]]
        if state.finished:
            return None  # tokens after a stop-string match, before the abort landed
        out = self._derender_step(ctx, leg_stream.leg, event, state)
        if out is None:
            return None
        leg = leg_stream.leg
        if ctx.endpoint == "chat":
            return chat_content_chunk(
                ident, out, index=engine_choice["index"], has_parser=self.codec.has_parser,
                return_token_ids=_return_ids(ctx),
                had_tokens=bool(engine_choice.get("token_ids")))
        prompt_ids = None
        if _return_ids(ctx) and not state.prompt_ids_sent:
            prompt_ids, state.prompt_ids_sent = leg.token_ids, True
        return completion_chunk(ident, out, index=leg.prompt_index * leg.n + engine_choice["index"],
                                prompt_token_ids=prompt_ids, return_token_ids=_return_ids(ctx))

    def _derender_step(self, ctx: RequestContext, leg: Leg, event: dict[str, Any],
                       state: _Choice) -> dict[str, Any] | None:
        """Feed one engine event to the streaming derenderer; return the derendered choice."""
        engine_choice = event["choices"][0]
        state.tokens += len(engine_choice.get("token_ids") or [])
        body: dict[str, Any] = {"stream": True, "model": self.model_name, "generate_chunk": event,
                                "stream_state": state.stream_state, "prompt_tokens": len(leg.token_ids)}
        if state.stream_state is None:
            # Only the first step needs the request and prompt: the state carries what they
            # settle (derender_api contract), and re-validating them per chunk costs ~0.4 ms.
            body["prompt_token_ids"] = leg.token_ids
            body["chat_request" if ctx.endpoint == "chat" else "completion_request"] = ctx.body
        started = time.perf_counter()
        if ctx.endpoint == "chat":
            result = self.codec.derender_chat(body)
        else:
            result = self.codec.derender_completion(body)
        ctx.add_phase("derender", time.perf_counter() - started)
        state.stream_state = result.get("stream_state")
        choices = (result.get("chunk") or {}).get("choices") or []
        out = choices[0] if choices else None
        state.stop_hit = bool(result.get("abort_engine_request"))
        if state.stop_hit or engine_choice.get("finish_reason") is not None or (
                out is not None and out.get("finish_reason") is not None):
            state.finished = True
            state.finish_reason = (out or {}).get("finish_reason") or engine_choice.get("finish_reason")
            state.stop_reason = (out or {}).get("stop_reason")
        return out

    def _usage(self, ctx: RequestContext, ident: StreamIdentity, opened: OpenStream
               ) -> dict[str, Any]:
        prompt = sum(len(s.leg.token_ids) for s in opened.legs)
        completion = sum(c.tokens for s in opened.legs for c in s.choices)
        return usage_chunk(ident, prompt, completion)

    def _identity(self, ctx: RequestContext, obj: str) -> StreamIdentity:
        return StreamIdentity(ctx.response_id(), ctx.created, self.model_name, obj)

    # -- non-streaming ---------------------------------------------------------------------
    async def batch(self, ctx: RequestContext) -> dict[str, Any]:
        if ctx.stop_strings:
            responses = await self._collect_with_stops(ctx)
        else:
            responses = list(await asyncio.gather(*(self.decode.complete(ctx, leg)
                                                    for leg in ctx.legs)))
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self.executor, self._derender_batch, ctx, responses)
        ctx.add_phase("derender", time.perf_counter() - started)
        result["id"] = ctx.response_id()
        result["created"] = ctx.created
        return result

    def _derender_batch(self, ctx: RequestContext, responses: list[dict[str, Any]]
                        ) -> dict[str, Any]:
        if ctx.endpoint == "chat":
            leg = ctx.legs[0]
            return self.codec.derender_chat({
                "model": self.model_name, "generate_response": responses[0],
                "prompt_tokens": len(leg.token_ids), "prompt_token_ids": leg.token_ids,
                "chat_request": ctx.body})
        return self.codec.derender_completion({
            "model": self.model_name, "generate_responses": responses,
            "prompt_tokens": [len(leg.token_ids) for leg in ctx.legs],
            "prompt_token_ids": [leg.token_ids for leg in ctx.legs],
            "completion_request": ctx.body})

    async def _collect_with_stops(self, ctx: RequestContext) -> list[dict[str, Any]]:
        opened = await self.open_stream(ctx)
        try:
            return list(await asyncio.gather(*(self._collect_leg(ctx, s) for s in opened.legs)))
        finally:
            await opened.aclose()

    async def _collect_leg(self, ctx: RequestContext, leg_stream: _LegStream) -> dict[str, Any]:
        request_id = leg_stream.first.get("request_id")
        async with aclosing(leg_stream.iterate()) as events:
            async for event in events:
                self._collect_event(ctx, leg_stream, event)
                request_id = event.get("request_id", request_id)
        return _collected_response(leg_stream, str(request_id))

    def _collect_event(self, ctx: RequestContext, leg_stream: _LegStream, event: dict[str, Any]
                       ) -> None:
        if not event.get("choices"):
            return
        engine_choice = event["choices"][0]
        state = leg_stream.choices[engine_choice["index"]]
        if state.finished:
            return
        state.token_ids.extend(engine_choice.get("token_ids") or [])
        content = (engine_choice.get("logprobs") or {}).get("content")
        if content is not None:
            state.logprobs = state.logprobs if state.logprobs is not None else []
            state.logprobs.extend(content)
        self._derender_step(ctx, leg_stream.leg, event, state)
        if state.finished and not state.stop_hit:
            state.finish_reason = engine_choice.get("finish_reason")
            state.stop_reason = engine_choice.get("stop_reason")


def _collected_response(leg_stream: _LegStream, request_id: str) -> dict[str, Any]:
    """A GenerateTokensResponse assembled from streamed events (what batch derender reads)."""
    choices = []
    for index, c in enumerate(leg_stream.choices):
        finish = "stop" if c.stop_hit else c.finish_reason
        choices.append({"index": index, "finish_reason": finish, "stop_reason": c.stop_reason,
                        "token_ids": c.token_ids, "routed_experts": None, "sampling_mask": None,
                        "weight_versions": None,
                        "logprobs": None if c.logprobs is None else {"content": c.logprobs}})
    prompt = len(leg_stream.leg.token_ids)
    completion = sum(len(c.token_ids) for c in leg_stream.choices)
    return {"request_id": request_id, "model": None, "created": 0,
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                      "completion_tokens": completion, "prompt_tokens_details": None,
                      "completion_tokens_details": None},
            "prompt_logprobs": None, "prompt_token_id_logprobs": None,
            "kv_transfer_params": None, "ec_transfer_params": None, "output_mode": "tokens",
            "choices": choices}


def _return_ids(ctx: RequestContext) -> bool:
    return bool(ctx.body.get("return_token_ids"))


async def _merged(legs: list[_LegStream]) -> AsyncIterator[tuple[_LegStream, dict[str, Any]]]:
    """Events of every leg as they come; one leg is iterated directly (the common case)."""
    if len(legs) == 1:
        async with aclosing(legs[0].iterate()) as events:
            async for event in events:
                yield legs[0], event
        return
    queue: asyncio.Queue[tuple[_LegStream | None, Any]] = asyncio.Queue()

    async def pump(leg_stream: _LegStream) -> None:
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
