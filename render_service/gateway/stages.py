"""The stages: render -> prefill -> decode (derender lives with the responders).

    RenderStage   OpenAI body -> one Leg per GenerateRequest (on the renderer thread pool)
    PrefillStage  P/D only (pool=None makes it a no-op: collocated mode is a parameter, not a
                  code path). max_tokens=1, non-streaming, kv_transfer_params do_remote_decode;
                  a failed try goes to another prefill engine; with none left the leg decodes
                  without remote KV (the decode engine recomputes the prompt). A conversation
                  turn's first try loads the last turn's KV from its decoder (conversations.py);
                  if that try fails, the prefill runs again without it.
    DecodeStage   `complete(leg)` (JSON) or `events(leg)` (SSE events); a failure before the
                  first event (or a JSON answer) is retried on another engine (no token reached
                  the client, so it is safe), after it the error propagates to the responder.
                  Not retried: a JSON decode that ran past its whole-request deadline
                  (`timeouts.request_s`), engine 4xx, and an engine refusing our credentials.
                  In P/D, a retry reuses the prefill's kv_transfer_params only when the failed
                  try never reached its engine; otherwise it recomputes (`_prepare_retry`).
                  A JSON decode of a conversation turn records where the turn's KV stays.

Each try is one `attempt.EngineAttempt` (lease, deadline, abort-if-unfinished, phase timing)
and the tries of a leg's phase follow one policy (`attempt.retried`).

Every engine request that does not finish cleanly (failure, deadline, cancellation by a
client hang-up, or a consumer closing the stream after a stop string) is aborted through
the `Aborter` in the background, so nothing leaks on the engines. In P/D, aborting the
*prefill* request after it answered does nothing (vLLM 0.33 already finished it; its KV
blocks stay on the prefill engine until a decoder has pulled them or the NIXL
`kv_lease_duration`, 30 s by default, expires). What frees them early is aborting the
*decode* request while it still waits to be scheduled: its engine then tells the prefill
engine to release the blocks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from concurrent.futures import Executor
from contextlib import aclosing
from typing import Any

from render_service.config import Limits
from render_service.errors import EngineTimeoutError, RenderServiceError, ServiceUnavailableError
from render_service.gateway.attempt import (
    Aborter,
    Attempts,
    EngineAttempt,
    observe_phase,
    record_failure,
    retried,
)
from render_service.gateway.codec import Codec
from render_service.gateway.config import Timeouts
from render_service.gateway.context import Leg, RequestContext, engine_body, prefill_body
from render_service.gateway.conversations import Conversations
from render_service.gateway.errors import RequestDeadlineError
from render_service.gateway.metrics import GATEWAY_METRICS
from render_service.gateway.pool import Engine, EnginePool
from render_service.http.media_fetch import MediaFetcher
from render_service.render.request_bounds import check_counts

__all__ = ["Aborter", "DecodeStage", "PrefillStage", "RenderStage"]

log = logging.getLogger(__name__)

EngineEvents = AsyncGenerator[dict[str, Any], None]


class RenderStage:
    """Fetch the request's http(s) images (async, here), then render on the executor (sans-IO)."""

    def __init__(self, codec: Codec, executor: Executor,
                 fetcher: MediaFetcher | None = None, limits: Limits | None = None) -> None:
        self.codec = codec
        self.executor = executor
        self.fetcher = fetcher
        self.limits = limits

    async def run(self, ctx: RequestContext) -> None:
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        if ctx.endpoint == "chat":
            if self.limits is not None:  # before fetching images (render checks again)
                check_counts(ctx.body, self.limits)
            fetched = await self.fetcher.fetch(ctx.body) if self.fetcher is not None else {}
            rendered = [await loop.run_in_executor(
                self.executor, self.codec.render_chat, ctx.body, ctx.request_id_header, fetched)]
        else:
            rendered = await loop.run_in_executor(
                self.executor, self.codec.render_completion, ctx.body, ctx.request_id_header)
        ctx.legs = [Leg(i, r) for i, r in enumerate(rendered)]
        observe_phase(ctx, "render", time.perf_counter() - started)


class PrefillStage:
    def __init__(self, pool: EnginePool | None, timeouts: Timeouts, max_retries: int,
                 aborter: Aborter) -> None:
        self.pool = pool
        self.timeouts = timeouts
        self.max_retries = max_retries
        self.aborter = aborter

    async def run(self, ctx: RequestContext) -> None:
        if self.pool is None:
            return
        started = time.perf_counter()
        await asyncio.gather(*(self._prefill(leg, self.pool) for leg in ctx.legs))
        observe_phase(ctx, "prefill", time.perf_counter() - started)

    async def _prefill(self, leg: Leg, pool: EnginePool) -> None:
        try:
            engine, response = await self._tries(leg, pool)
        except ServiceUnavailableError:
            return self._recompute(leg, "no healthy prefill engine")
        except RenderServiceError as exc:
            if exc.retryable:  # the retries are used up
                return self._recompute(leg, f"prefill failed: {exc.message}")
            raise
        leg.kv_transfer_params = response.get("kv_transfer_params")
        leg.prefill_done_at = time.perf_counter()
        if not leg.kv_transfer_params:
            log.warning("prefill %s on %s returned no kv_transfer_params; decode recomputes",
                        leg.request_id, engine.url)

    async def _tries(self, leg: Leg, pool: EnginePool) -> tuple[Engine, dict[str, Any]]:
        """The prefill's tries. One carrying a conversation's last turn (`leg.prefill_kv`)
        goes first, alone: if it fails (the decoder's blocks expired or it went away, a
        refused NIXL read under `kv_load_failure_policy: fail`), the prompt is prefilled
        again without it, which is all the turn loses."""
        if leg.prefill_kv is not None:
            try:
                return await self._tried(leg, pool, prefill_body(leg, leg.prefill_kv), 0)
            except ServiceUnavailableError:
                raise
            except RenderServiceError as exc:
                log.warning("prefill %s with conversation %s's last turn failed (%s); "
                            "prefilling without it", leg.request_id, leg.conversation,
                            exc.message)
                GATEWAY_METRICS.continuation_fallbacks.inc()
                leg.prefill_kv = None
        return await self._tried(leg, pool, prefill_body(leg), self.max_retries)

    async def _tried(self, leg: Leg, pool: EnginePool, body: dict[str, Any], max_retries: int
                     ) -> tuple[Engine, dict[str, Any]]:
        async def run(engine: Engine) -> tuple[Engine, dict[str, Any]]:
            response = await self._one_prefill(engine, pool, body)
            pool.served(engine, leg.blocks)
            return engine, response

        return await retried(Attempts(pool, max_retries, "prefill"), leg, run, lambda exc: None)

    async def _one_prefill(self, engine: Engine, pool: EnginePool, body: dict[str, Any]
                           ) -> dict[str, Any]:
        deadline = self.timeouts.prefill_s
        async with EngineAttempt(pool, engine, body["request_id"], self.aborter,
                                 abort_reason=lambda: "prefill_unfinished") as attempt:
            try:
                async with attempt.deadline(deadline):
                    response = await engine.client.generate(body, timeout_s=deadline)
            except TimeoutError as exc:
                raise EngineTimeoutError(
                    f"prefill on {engine.url} took longer than {deadline:g} s") from exc
            attempt.finished()
            return response

    def _recompute(self, leg: Leg, why: str) -> None:
        log.warning("request %s decodes without remote KV: %s", leg.request_id, why)
        GATEWAY_METRICS.fallbacks.inc()
        leg.kv_transfer_params = None


class DecodeStage:
    def __init__(self, pool: EnginePool, timeouts: Timeouts, max_retries: int,
                 aborter: Aborter, kv_lease_s: float = 30.0,
                 conversations: Conversations | None = None) -> None:
        self.pool = pool
        self.timeouts = timeouts
        self.max_retries = max_retries
        self.aborter = aborter
        self.kv_lease_s = kv_lease_s
        self.conversations = conversations

    # -- non-streaming -----------------------------------------------------------------
    async def complete(self, ctx: RequestContext, leg: Leg) -> dict[str, Any]:
        async def run(engine: Engine) -> dict[str, Any]:
            response = await self._one_complete(ctx, leg, engine)
            self.pool.served(engine, leg.blocks)
            if self.conversations is not None:
                self.conversations.record(leg, engine, response)
            return response

        attempts = Attempts(self.pool, self.max_retries, "decode")
        return await retried(attempts, leg, run, lambda exc: self._prepare_retry(leg, exc))

    async def _one_complete(self, ctx: RequestContext, leg: Leg, engine: Engine) -> dict[str, Any]:
        request_id = leg.attempt_request_id()
        leg.attempts += 1
        body = engine_body(leg, stream=False, request_id=request_id)
        deadline = self.timeouts.request_s
        async with EngineAttempt(self.pool, engine, request_id, self.aborter,
                                 abort_reason=lambda: "decode_unfinished",
                                 phase=(ctx, "decode")) as attempt:
            try:
                async with attempt.deadline(deadline):
                    response = await engine.client.generate(body, timeout_s=deadline)
            except (TimeoutError, EngineTimeoutError) as exc:
                # The whole-request deadline (ours or httpx's read timeout, both request_s).
                raise RequestDeadlineError(
                    f"decode on {engine.url} took longer than {deadline:g} s") from exc
            attempt.finished()
            attempt.produced_output()
            return response

    # -- streaming -----------------------------------------------------------------------
    async def events(self, ctx: RequestContext, leg: Leg) -> EngineEvents:
        """Engine SSE events of one leg; retried on another engine until the first event.

        Close it (aclose) to stop early: the engine request is aborted and the engine's
        load count released before aclose returns (every inner generator is closed
        explicitly, not left to the garbage collector)."""
        attempts = Attempts(self.pool, self.max_retries, "decode")
        opened = await retried(attempts, leg, lambda engine: self._open(ctx, leg, engine),
                               lambda exc: self._prepare_retry(leg, exc))
        if opened is None:
            return  # the engine ended the stream without an event
        stream, first = opened
        async with aclosing(stream):
            yield first
            async for event in stream:
                yield event

    async def _open(self, ctx: RequestContext, leg: Leg, engine: Engine
                    ) -> tuple[EngineEvents, dict[str, Any]] | None:
        """One try's stream, past its first event: the part of a stream that may be retried."""
        stream = self._one_stream(ctx, leg, engine)
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            return None
        return stream, first

    async def _one_stream(self, ctx: RequestContext, leg: Leg, engine: Engine) -> EngineEvents:
        request_id = leg.attempt_request_id()
        leg.attempts += 1
        leg.close_reason = "client_gone"
        stream = engine.client.stream(engine_body(leg, stream=True, request_id=request_id))
        async with EngineAttempt(self.pool, engine, request_id, self.aborter,
                                 abort_reason=lambda: leg.close_reason,
                                 on_exit=stream.aclose,
                                 phase=(ctx, "decode")) as attempt:
            deadline = self.timeouts.first_token_s  # then the inter-token one
            try:
                while True:
                    try:
                        event = await _next_within(stream, deadline, engine, attempt.produced)
                    except StopAsyncIteration:
                        attempt.finished()
                        return
                    if not attempt.produced:
                        attempt.produced_output()
                        self._first_event(ctx, leg, engine)
                    deadline = self.timeouts.inter_token_s
                    yield event
            except RenderServiceError as exc:
                leg.close_reason = f"decode_{exc.metric_cause}"
                if attempt.produced:  # past the first event: not retried, so counted here
                    record_failure(self.pool, engine, "decode", exc)
                raise

    def _first_event(self, ctx: RequestContext, leg: Leg, engine: Engine) -> None:
        self.pool.served(engine, leg.blocks)
        if leg.prefill_done_at is not None:
            observe_phase(ctx, "kv_handoff", time.perf_counter() - leg.prefill_done_at)

    # -- P/D retries ---------------------------------------------------------------------
    def _prepare_retry(self, leg: Leg, exc: RenderServiceError) -> None:
        """Decide whether the next decode try may pull the prefill's KV again.

        vLLM's NIXL prefill engine keeps a finished prefill's blocks until a decoder reports
        it has read them, or until `kv_lease_duration` (30 s) passes; a decode request
        aborted before it was scheduled also releases them. After that the block ids may
        hold another request's KV, and a pull reads it without any error (vLLM only logs
        "Potentially invalid KV blocks" on the prefill side). So the same kv_transfer_params
        are sent again only when the failed try provably never reached its engine (connect
        refused / timed out) and the lease is young; otherwise the retry recomputes the
        prompt on the decode engine (no remote KV).
        """
        if leg.kv_transfer_params is None:
            return
        if not exc.reached_engine and self._lease_fresh(leg):
            log.info("decode %s retried with the same KV (the failed engine never got it)",
                     leg.request_id)
            return
        log.warning("decode %s retried without remote KV (the prefill's blocks may be "
                    "released): %s", leg.request_id, exc.message)
        GATEWAY_METRICS.fallbacks.inc()
        leg.kv_transfer_params = None
        leg.prefill_done_at = None

    def _lease_fresh(self, leg: Leg) -> bool:
        # Half the lease: the retry still has to reach the engine and start the pull.
        return (leg.prefill_done_at is not None
                and time.perf_counter() - leg.prefill_done_at < self.kv_lease_s / 2)


async def _next_within(stream: AsyncGenerator[dict[str, Any], None], deadline_s: float, engine: Engine,
                       started: bool) -> dict[str, Any]:
    try:
        async with asyncio.timeout(deadline_s):
            return await anext(stream)
    except TimeoutError as exc:
        what = "an inter-token" if started else "the first-token"
        raise EngineTimeoutError(
            f"engine {engine.url} exceeded {what} deadline of {deadline_s:g} s") from exc
