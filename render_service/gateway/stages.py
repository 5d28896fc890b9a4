"""The stages: render -> prefill -> decode (derender lives with the responders).

    RenderStage   OpenAI body -> one Leg per GenerateRequest (on the renderer thread pool)
    PrefillStage  P/D only (pool=None makes it a no-op: collocated mode is a parameter, not a
                  code path). max_tokens=1, non-streaming, kv_transfer_params do_remote_decode;
                  a failed try goes to another prefill engine; with none left the leg decodes
                  without remote KV (the decode engine recomputes the prompt).
    DecodeStage   `complete(leg)` (JSON) or `events(leg)` (SSE events); a failure before the
                  first event (or a JSON answer) is retried on another engine (no token reached
                  the client, so it is safe), after it the error propagates to the responder.
                  Not retried: a JSON decode that ran past its whole-request deadline
                  (`timeouts.request_s`), engine 4xx, and an engine refusing our credentials.
                  In P/D, a retry reuses the prefill's kv_transfer_params only when the failed
                  try never reached its engine; otherwise it recomputes (`_prepare_retry`).

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
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from render_service.config import Limits
from render_service.errors import EngineTimeoutError, RenderServiceError, ServiceUnavailableError
from render_service.gateway.codec import Codec
from render_service.gateway.config import Timeouts
from render_service.gateway.context import Leg, RequestContext, engine_body, prefill_body
from render_service.gateway.engine_client import engine_request_id
from render_service.gateway.errors import (
    EngineUnavailableError,
    RequestDeadlineError,
    is_retryable,
    never_reached_engine,
)
from render_service.gateway.metrics import GATEWAY_METRICS
from render_service.gateway.pool import Engine, EnginePool
from render_service.http.media_fetch import MediaFetcher
from render_service.render.request_bounds import check_counts

__all__ = ["Aborter", "DecodeStage", "PrefillStage", "RenderStage"]

log = logging.getLogger(__name__)


class Aborter:
    """Fire-and-forget abort_requests, tracked so shutdown (and tests) can wait for them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[bool]] = set()

    def schedule(self, engine: Engine, request_id: str, reason: str) -> None:
        GATEWAY_METRICS.aborts.labels(reason).inc()
        task = asyncio.get_running_loop().create_task(
            engine.client.abort([engine_request_id(request_id)]))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


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
        _observe(ctx, "render", time.perf_counter() - started)


@dataclass
class _Attempts:
    """Engines tried and failures counted for one leg's phase."""

    pool: EnginePool
    max_retries: int
    phase: str
    failures: int = 0

    def __post_init__(self) -> None:
        self.tried: list[Engine] = []

    def choose(self, leg: Leg) -> Engine:
        # Prefer engines not tried yet; if every healthy one failed once, allow a second try.
        exclude = self.tried if self.pool.healthy(self.tried) else []
        return self.pool.choose(leg.blocks, exclude=exclude)

    def failed(self, engine: Engine, exc: RenderServiceError) -> bool:
        """Record a failed try; True if another try is allowed."""
        if isinstance(exc, EngineUnavailableError):
            self.pool.mark_unreachable(engine, exc.message)
        GATEWAY_METRICS.errors.labels(f"{self.phase}_{_cause(exc)}").inc()
        self.tried.append(engine)
        self.failures += 1
        if not is_retryable(exc) or self.failures > self.max_retries:
            return False
        GATEWAY_METRICS.retries.labels(self.phase).inc()
        log.warning("%s on %s failed (%s); retrying", self.phase, engine.url, exc.message)
        return True


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
        _observe(ctx, "prefill", time.perf_counter() - started)

    async def _prefill(self, leg: Leg, pool: EnginePool) -> None:
        attempts = _Attempts(pool, self.max_retries, "prefill")
        body = prefill_body(leg)
        while True:
            try:
                engine = attempts.choose(leg)
            except ServiceUnavailableError:
                return self._recompute(leg, "no healthy prefill engine")
            try:
                response = await self._one_prefill(engine, pool, body)
            except RenderServiceError as exc:
                if attempts.failed(engine, exc):
                    continue
                if is_retryable(exc):
                    return self._recompute(leg, f"prefill failed: {exc.message}")
                raise
            pool.served(engine, leg.blocks)
            leg.kv_transfer_params = response.get("kv_transfer_params")
            leg.prefill_done_at = time.perf_counter()
            if not leg.kv_transfer_params:
                log.warning("prefill %s on %s returned no kv_transfer_params; decode recomputes",
                            leg.request_id, engine.url)
            return

    async def _one_prefill(self, engine: Engine, pool: EnginePool, body: dict[str, Any]
                           ) -> dict[str, Any]:
        running = True  # on the engine, as far as we know
        try:
            with pool.leased(engine):
                async with asyncio.timeout(self.timeouts.prefill_s):
                    response = await engine.client.generate(body, timeout_s=self.timeouts.prefill_s)
            running = False
            return response
        except TimeoutError as exc:
            raise EngineTimeoutError(
                f"prefill on {engine.url} took longer than {self.timeouts.prefill_s:g} s") from exc
        except RenderServiceError as exc:
            running = not never_reached_engine(exc)
            raise
        finally:
            # Still running on the engine (deadline or hang-up): abort it. Once it has answered,
            # an abort is a no-op in vLLM (the request is finished; its KV waits on the lease).
            if running and engine.healthy:
                self.aborter.schedule(engine, body["request_id"], "prefill_unfinished")

    def _recompute(self, leg: Leg, why: str) -> None:
        log.warning("request %s decodes without remote KV: %s", leg.request_id, why)
        GATEWAY_METRICS.fallbacks.inc()
        leg.kv_transfer_params = None


class DecodeStage:
    def __init__(self, pool: EnginePool, timeouts: Timeouts, max_retries: int,
                 aborter: Aborter, kv_lease_s: float = 30.0) -> None:
        self.pool = pool
        self.timeouts = timeouts
        self.max_retries = max_retries
        self.aborter = aborter
        self.kv_lease_s = kv_lease_s

    # -- non-streaming -----------------------------------------------------------------
    async def complete(self, ctx: RequestContext, leg: Leg) -> dict[str, Any]:
        attempts = _Attempts(self.pool, self.max_retries, "decode")
        while True:
            engine = attempts.choose(leg)
            try:
                response = await self._one_complete(ctx, leg, engine)
            except RenderServiceError as exc:
                retry = attempts.failed(engine, exc)
                if not retry:
                    raise
                self._prepare_retry(leg, exc)
                continue
            self.pool.served(engine, leg.blocks)
            return response

    async def _one_complete(self, ctx: RequestContext, leg: Leg, engine: Engine) -> dict[str, Any]:
        request_id = leg.attempt_request_id()
        leg.attempts += 1
        body = engine_body(leg, stream=False, request_id=request_id)
        started, running = time.perf_counter(), True
        try:
            with self.pool.leased(engine):
                async with asyncio.timeout(self.timeouts.request_s):
                    response = await engine.client.generate(body, timeout_s=self.timeouts.request_s)
            running = False
        except (TimeoutError, EngineTimeoutError) as exc:
            # The whole-request deadline (ours or httpx's read timeout, both request_s).
            raise RequestDeadlineError(
                f"decode on {engine.url} took longer than {self.timeouts.request_s:g} s") from exc
        except RenderServiceError as exc:
            running = not never_reached_engine(exc)
            raise
        finally:
            if running and engine.healthy:
                self.aborter.schedule(engine, request_id, "decode_unfinished")
        _observe(ctx, "decode", time.perf_counter() - started)
        return response

    # -- streaming -----------------------------------------------------------------------
    async def events(self, ctx: RequestContext, leg: Leg) -> AsyncIterator[dict[str, Any]]:
        """Engine SSE events of one leg; retried on another engine until the first event.

        Close it (aclose) to stop early: the engine request is aborted and the engine's
        load count released before aclose returns (every inner generator is closed
        explicitly, not left to the garbage collector)."""
        attempts = _Attempts(self.pool, self.max_retries, "decode")
        while True:
            engine = attempts.choose(leg)
            outcome = _StreamOutcome()
            async with aclosing(self._one_stream(ctx, leg, engine, outcome)) as stream:
                async for event in stream:
                    yield event
            if outcome.error is None:
                return
            if outcome.started or not attempts.failed(engine, outcome.error):
                raise outcome.error
            self._prepare_retry(leg, outcome.error)

    async def _one_stream(self, ctx: RequestContext, leg: Leg, engine: Engine,
                          outcome: _StreamOutcome) -> AsyncIterator[dict[str, Any]]:
        request_id = leg.attempt_request_id()
        leg.attempts += 1
        leg.close_reason = "client_gone"
        stream = engine.client.stream(engine_body(leg, stream=True, request_id=request_id))
        started, finished = time.perf_counter(), False
        try:
            with self.pool.leased(engine):
                deadline = self.timeouts.first_token_s
                while True:
                    try:
                        event = await _next_within(stream, deadline, engine, outcome.started)
                    except StopAsyncIteration:
                        finished = True
                        break
                    if not outcome.started:
                        outcome.started = True
                        self._first_event(ctx, leg, engine)
                    deadline = self.timeouts.inter_token_s
                    yield event
        except RenderServiceError as exc:
            leg.close_reason = f"decode_{_cause(exc)}"
            finished = never_reached_engine(exc)  # nothing to abort
            if not outcome.started:
                outcome.error = exc  # events() decides: retry, or raise before any output
                return
            if isinstance(exc, EngineUnavailableError):
                self.pool.mark_unreachable(engine, exc.message)
            GATEWAY_METRICS.errors.labels(f"decode_{_cause(exc)}").inc()
            raise
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
            if not finished and engine.healthy:
                self.aborter.schedule(engine, request_id, leg.close_reason)
            if outcome.started:
                _observe(ctx, "decode", time.perf_counter() - started)

    def _first_event(self, ctx: RequestContext, leg: Leg, engine: Engine) -> None:
        self.pool.served(engine, leg.blocks)
        if leg.prefill_done_at is not None:
            _observe(ctx, "kv_handoff", time.perf_counter() - leg.prefill_done_at)

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
        if never_reached_engine(exc) and self._lease_fresh(leg):
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


@dataclass
class _StreamOutcome:
    started: bool = False
    error: RenderServiceError | None = None


async def _next_within(stream: AsyncIterator[dict[str, Any]], deadline_s: float, engine: Engine,
                       started: bool) -> dict[str, Any]:
    try:
        async with asyncio.timeout(deadline_s):
            return await anext(stream)
    except TimeoutError as exc:
        what = "an inter-token" if started else "the first-token"
        raise EngineTimeoutError(
            f"engine {engine.url} exceeded {what} deadline of {deadline_s:g} s") from exc


def _cause(exc: RenderServiceError) -> str:
    return {
        "EngineUnavailableError": "unavailable",
        "EngineUnreachableError": "unavailable",
        "EngineFailedError": "engine_error",
        "EngineAuthError": "engine_auth",
        "EngineTimeoutError": "timeout",
        "RequestDeadlineError": "deadline",
        "EngineRejectedError": "rejected",
    }.get(type(exc).__name__, "other")


def _observe(ctx: RequestContext, phase: str, seconds: float) -> None:
    ctx.add_phase(phase, seconds)
    GATEWAY_METRICS.phase.labels(phase).observe(seconds)
