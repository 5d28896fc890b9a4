"""Non-streaming responses: engine answers -> the one JSON body `vllm serve` returns.

How a leg's engine answer is obtained (`answer_mode`):
  json      one non-streaming generate (DecodeStage.complete); also every conversation turn
            in P/D (its kv_transfer_params say where the turn's KV stays, conversations.py).
  streamed  the engine is streamed and the events collected, then turned back into a
            GenerateTokensResponse: with stop strings (a match aborts the engine at once; the
            streaming derender only finds the match) and in P/D (the first decode event times
            the KV handoff, and a failure before it is retried like a streaming request).
            Bounded as a whole by `timeouts.request_s`, like a JSON decode.
  replayed  json, then replayed as one-token events through the same stop-string scan: stop
            strings with prompt_logprobs, or with a conversation turn to record, which only a
            JSON answer carries (the token stream has none). The engine is not stopped early then; the answer is cut exactly all the same.
Every answer then goes through batch derender, which cuts the text at the stop string exactly,
and `echo`, the response role, system_fingerprint and (chat with a reasoning parser) the
usage's reasoning-token count are applied as vLLM's serving layer does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Iterable
from concurrent.futures import Executor
from contextlib import aclosing
from typing import Any

from render_service.gateway.codec import Codec
from render_service.gateway.context import Leg, RequestContext
from render_service.gateway.errors import RequestDeadlineError
from render_service.gateway.leg_stream import (
    ChoiceState,
    LegStream,
    StepDerenderer,
    replayed_events,
)
from render_service.gateway.metrics import GATEWAY_METRICS
from render_service.gateway.responders import completion_prompt_text, open_legs
from render_service.gateway.serve_format import completion_tokens_details
from render_service.gateway.stages import DecodeStage

__all__ = ["BatchResponder", "answer_mode"]


def answer_mode(ctx: RequestContext, *, disaggregated: bool) -> str:
    if ctx.records_turn or any(leg.wants_prompt_logprobs for leg in ctx.legs):
        return "replayed" if ctx.stop_strings else "json"
    if ctx.stop_strings or disaggregated:
        return "streamed"
    return "json"


class BatchResponder:
    def __init__(self, codec: Codec, decode: DecodeStage, executor: Executor, model_name: str, *,
                 disaggregated: bool = False, system_fingerprint: str | None = None) -> None:
        self.codec = codec
        self.decode = decode
        self.executor = executor
        self.model_name = model_name
        self.disaggregated = disaggregated
        self.system_fingerprint = system_fingerprint
        self.steps = StepDerenderer(codec, model_name)

    async def respond(self, ctx: RequestContext) -> dict[str, Any]:
        responses = await self._answers(ctx)
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self.executor, self._derender_batch, ctx, responses)
        ctx.add_phase("derender", time.perf_counter() - started)
        result["id"] = ctx.response_id()
        result["created"] = ctx.created
        result["system_fingerprint"] = self.system_fingerprint
        self._serve_options(ctx, result)
        return result

    # -- engine answers ------------------------------------------------------------------
    async def _answers(self, ctx: RequestContext) -> list[dict[str, Any]]:
        mode = answer_mode(ctx, disaggregated=self.disaggregated)
        if mode == "json":
            return list(await asyncio.gather(*(self.decode.complete(ctx, leg) for leg in ctx.legs)))
        if mode == "replayed":
            return list(await asyncio.gather(*(self._replayed(ctx, leg) for leg in ctx.legs)))
        deadline = self.decode.timeouts.request_s
        try:
            async with asyncio.timeout(deadline):
                return await self._streamed(ctx)
        except TimeoutError as exc:
            GATEWAY_METRICS.errors.labels("decode_deadline").inc()
            raise RequestDeadlineError(f"decode took longer than {deadline:g} s") from exc

    async def _streamed(self, ctx: RequestContext) -> list[dict[str, Any]]:
        opened = await open_legs(self.decode, ctx)
        try:
            return list(await asyncio.gather(*(self._collect(ctx, s) for s in opened.legs)))
        finally:
            await opened.aclose()

    async def _replayed(self, ctx: RequestContext, leg: Leg) -> dict[str, Any]:
        response = await self.decode.complete(ctx, leg)
        events = list(replayed_events(response))
        choices = [ChoiceState() for _ in range(leg.n)]
        leg_stream = LegStream(leg, _aiter(events[1:]), events[0], choices)
        collected = await self._collect(ctx, leg_stream)
        return {**response, "choices": collected["choices"], "usage": collected["usage"]}

    async def _collect(self, ctx: RequestContext, leg_stream: LegStream) -> dict[str, Any]:
        request_id = leg_stream.first.get("request_id")
        async with aclosing(leg_stream.iterate()) as events:
            async for event in events:
                self._collect_event(ctx, leg_stream, event)
                request_id = event.get("request_id", request_id)
        return _collected_response(leg_stream, str(request_id))

    def _collect_event(self, ctx: RequestContext, leg_stream: LegStream, event: dict[str, Any]
                       ) -> None:
        found = leg_stream.choice(event)
        if found is None:
            return
        engine_choice, state = found
        if state.finished:
            return
        state.token_ids.extend(engine_choice.get("token_ids") or [])
        content = (engine_choice.get("logprobs") or {}).get("content")
        if content is not None:
            state.logprobs = [*(state.logprobs or []), *content]
        if engine_choice.get("weight_versions") is not None:
            state.weight_versions = engine_choice["weight_versions"]
        if ctx.stop_strings:
            self.steps.step(ctx, leg_stream.leg, event, state)  # finds the stop-string match
        elif engine_choice.get("finish_reason") is not None:
            state.finished = True
        if state.finished and not state.stop_hit:
            state.finish_reason = engine_choice.get("finish_reason")
            state.stop_reason = engine_choice.get("stop_reason")

    # -- derender and serve options --------------------------------------------------------
    def _derender_batch(self, ctx: RequestContext, responses: list[dict[str, Any]]
                        ) -> dict[str, Any]:
        if ctx.endpoint == "chat":
            leg = ctx.legs[0]
            result = self.codec.derender_chat({
                "model": self.model_name, "generate_response": responses[0],
                "prompt_tokens": len(leg.token_ids), "prompt_token_ids": leg.token_ids,
                "chat_request": ctx.body})
            reasoning = self.codec.reasoning_usage(ctx.body)
            if reasoning is not None:
                count = reasoning.batch_count(responses[0].get("choices") or [], leg.token_ids)
                result["usage"]["completion_tokens_details"] = completion_tokens_details(count)
            return result
        return self.codec.derender_completion({
            "model": self.model_name, "generate_responses": responses,
            "prompt_tokens": [len(leg.token_ids) for leg in ctx.legs],
            "prompt_token_ids": [leg.token_ids for leg in ctx.legs],
            "completion_request": ctx.body})

    def _serve_options(self, ctx: RequestContext, result: dict[str, Any]) -> None:
        options = ctx.options
        if ctx.endpoint == "chat":
            for choice in result.get("choices") or []:
                message = choice["message"]
                message["role"] = options.response_role
                if options.echo:
                    message["content"] = options.chat_echo + (message.get("content") or "")
            return
        if not options.echo:
            return
        n = ctx.legs[0].n
        for choice in result.get("choices") or []:
            leg = ctx.legs[choice["index"] // n]
            prompt = ("" if options.return_token_ids
                      else completion_prompt_text(self.codec, ctx, leg))
            choice["text"] = prompt if options.echo_only else prompt + (choice.get("text") or "")


def _collected_response(leg_stream: LegStream, request_id: str) -> dict[str, Any]:
    """A GenerateTokensResponse assembled from streamed events (what batch derender reads)."""
    choices = []
    for index, c in enumerate(leg_stream.choices):
        finish = "stop" if c.stop_hit else c.finish_reason
        choices.append({"index": index, "finish_reason": finish, "stop_reason": c.stop_reason,
                        "token_ids": c.token_ids, "routed_experts": None, "sampling_mask": None,
                        "weight_versions": c.weight_versions,
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


async def _aiter(items: Iterable[dict[str, Any]]) -> AsyncGenerator[dict[str, Any], None]:
    for item in items:
        yield item
