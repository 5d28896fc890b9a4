"""One engine attempt, and the retry policy, written once for prefill, JSON decode and streams.

    EngineAttempt  `async with` around one request on one engine: holds the engine's lease (its
                   outstanding count, read by routing), gives the phase deadline, and on exit
                   closes what it was told to, aborts the engine request unless it answered (or
                   provably never reached the engine), and times the phase if it produced output.
    Attempts       the retry policy of one leg's phase: which engine next, whether a failure may
                   be retried, and the error/retry metrics.
    retried        the loop: engines are tried until one succeeds, a failure is final, or the
                   retries are used up; `before_retry` runs between tries.

Error classes say what they are (`metric_cause`, `retryable`, `reached_engine`: see
render_service.errors); nothing here tests exception types by name.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TypeVar

from render_service.errors import RenderServiceError
from render_service.gateway.context import Leg, RequestContext
from render_service.gateway.engine_client import engine_request_id
from render_service.gateway.errors import EngineUnavailableError
from render_service.gateway.metrics import GATEWAY_METRICS
from render_service.gateway.pool import Engine, EnginePool

__all__ = ["Aborter", "Attempts", "EngineAttempt", "observe_phase", "retried"]

log = logging.getLogger(__name__)

T = TypeVar("T")


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


def observe_phase(ctx: RequestContext, phase: str, seconds: float) -> None:
    ctx.add_phase(phase, seconds)
    GATEWAY_METRICS.phase.labels(phase).observe(seconds)


class EngineAttempt:
    """One engine request in flight. `abort_reason` is read at exit (a consumer may set it
    while a stream is suspended); `on_exit` closes the engine stream before any abort."""

    def __init__(self, pool: EnginePool, engine: Engine, request_id: str, aborter: Aborter, *,
                 abort_reason: Callable[[], str],
                 on_exit: Callable[[], Awaitable[None]] | None = None,
                 phase: tuple[RequestContext, str] | None = None) -> None:
        self.pool = pool
        self.engine = engine
        self.request_id = request_id
        self._aborter = aborter
        self._abort_reason = abort_reason
        self._on_exit = on_exit
        self._phase = phase
        self._lease: AbstractContextManager[Engine] | None = None
        self._started = time.perf_counter()
        self.running = True  # on the engine, as far as we know
        self.produced = False  # output arrived: the phase is timed

    @staticmethod
    def deadline(seconds: float) -> asyncio.Timeout:
        return asyncio.timeout(seconds)

    def finished(self) -> None:
        """The engine finished the request: nothing to abort."""
        self.running = False

    def produced_output(self) -> None:
        """An answer or a first event arrived: the phase is timed at exit."""
        self.produced = True

    async def __aenter__(self) -> EngineAttempt:
        self._lease = self.pool.leased(self.engine)
        self._lease.__enter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._lease is not None
        self._lease.__exit__(exc_type, exc, tb)
        if isinstance(exc, RenderServiceError) and not exc.reached_engine:
            self.running = False  # never sent: nothing to abort
        if self._on_exit is not None:
            await self._on_exit()
        # Once it has answered, an abort is a no-op in vLLM; an unhealthy engine is not asked.
        if self.running and self.engine.healthy:
            self._aborter.schedule(self.engine, self.request_id, self._abort_reason())
        if self.produced and self._phase is not None:
            ctx, phase = self._phase
            observe_phase(ctx, phase, time.perf_counter() - self._started)


class Attempts:
    """Engines tried and failures counted for one leg's phase (the retry policy)."""

    def __init__(self, pool: EnginePool, max_retries: int, phase: str) -> None:
        self.pool = pool
        self.max_retries = max_retries
        self.phase = phase
        self.failures = 0
        self.tried: list[Engine] = []

    def choose(self, leg: Leg) -> Engine:
        # Prefer engines not tried yet; if every healthy one failed once, allow a second try.
        exclude = self.tried if self.pool.healthy(self.tried) else []
        return self.pool.choose(leg.blocks, exclude=exclude)

    def failed(self, engine: Engine, exc: RenderServiceError) -> bool:
        """Record a failed try; True if another try is allowed."""
        record_failure(self.pool, engine, self.phase, exc)
        self.tried.append(engine)
        self.failures += 1
        if not exc.retryable or self.failures > self.max_retries:
            return False
        GATEWAY_METRICS.retries.labels(self.phase).inc()
        log.warning("%s on %s failed (%s); retrying", self.phase, engine.url, exc.message)
        return True


def record_failure(pool: EnginePool, engine: Engine, phase: str, exc: RenderServiceError) -> None:
    """An engine failure's side effects: passive health check, and the error metric."""
    if isinstance(exc, EngineUnavailableError):
        pool.mark_unreachable(engine, exc.message)
    GATEWAY_METRICS.errors.labels(f"{phase}_{exc.metric_cause}").inc()


async def retried(attempts: Attempts, leg: Leg, run: Callable[[Engine], Awaitable[T]],
                  before_retry: Callable[[RenderServiceError], None]) -> T:
    """`run` on engines chosen by `attempts` until it returns; a final failure is raised."""
    while True:
        engine = attempts.choose(leg)
        try:
            return await run(engine)
        except RenderServiceError as exc:
            if not attempts.failed(engine, exc):
                raise
            before_retry(exc)
