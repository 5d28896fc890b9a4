"""Engine pools: membership, health, load accounting, and the routing call.

An engine leaves rotation when the health checker sees `failure_threshold` failed GET /health
in a row, or at once when a request finds it unreachable (passive check: no reason to keep
sending traffic to a refused port until the next poll). It returns on the first healthy poll,
with its prefix memory cleared (a restarted engine has a cold cache). `outstanding` counts the
legs this gateway has in flight on the engine; least_outstanding and prefix_aware read it.
`choose` only picks; the stage calls `served` once the engine did compute the prompt, so a
failed try does not make prefix-aware routing believe that engine holds the prefix.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from render_service.errors import ServiceUnavailableError
from render_service.gateway.config import HealthSettings
from render_service.gateway.engine_client import EngineClient
from render_service.gateway.metrics import GATEWAY_METRICS
from render_service.gateway.prefix_index import PromptBlocks
from render_service.gateway.routing import RoutingPolicy

__all__ = ["Engine", "EnginePool", "HealthChecker"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Engine:
    url: str
    pool: str
    client: EngineClient
    healthy: bool = True
    outstanding: int = 0
    failures: int = 0  # consecutive failed health polls
    epoch: int = 0  # times it left rotation (a decoder that did lost the KV it held)


class EnginePool:
    def __init__(self, name: str, engines: Sequence[Engine], policy: RoutingPolicy,
                 block_size: int, failure_threshold: int = 2) -> None:
        self.name = name
        self.engines = list(engines)
        self.policy = policy
        self.block_size = block_size
        self.failure_threshold = failure_threshold
        for engine in self.engines:
            GATEWAY_METRICS.engine_healthy.labels(name, engine.url).set(1 if engine.healthy else 0)
            GATEWAY_METRICS.engine_outstanding.labels(name, engine.url).set(0)

    def healthy(self, exclude: Sequence[Engine] = ()) -> list[Engine]:
        return [e for e in self.engines if e.healthy and e not in exclude]

    def choose(self, prompt: PromptBlocks, exclude: Sequence[Engine] = ()) -> Engine:
        """Pick an engine for a prompt; ServiceUnavailableError when none is healthy."""
        candidates = self.healthy(exclude)
        if not candidates:
            raise ServiceUnavailableError(f"no healthy {self.name} engine available")
        engine = self.policy.choose(candidates, self._keys(prompt))
        assert isinstance(engine, Engine)
        GATEWAY_METRICS.engine_choices.labels(self.name, engine.url).inc()
        return engine

    def served(self, engine: Engine, prompt: PromptBlocks) -> None:
        """`engine` computed `prompt`: its blocks are now (probably) in that engine's cache."""
        self.policy.record(engine, self._keys(prompt))

    def find(self, url: str) -> Engine | None:
        return next((e for e in self.engines if e.url == url), None)

    def _keys(self, prompt: PromptBlocks) -> list[int]:
        return prompt.keys(self.block_size) if self.policy.name == "prefix_aware" else []

    @contextmanager
    def leased(self, engine: Engine) -> Iterator[Engine]:
        engine.outstanding += 1
        gauge = GATEWAY_METRICS.engine_outstanding.labels(self.name, engine.url)
        gauge.inc()
        try:
            yield engine
        finally:
            engine.outstanding -= 1
            gauge.dec()

    def mark_unreachable(self, engine: Engine, reason: str) -> None:
        if engine.healthy:
            log.warning("%s engine %s out of rotation: %s", self.name, engine.url, reason)
        self._set_health(engine, False)
        engine.failures = max(engine.failures, self.failure_threshold)

    def observe_health(self, engine: Engine, ok: bool) -> None:
        if ok:
            engine.failures = 0
            if not engine.healthy:
                log.info("%s engine %s back in rotation", self.name, engine.url)
                self._set_health(engine, True)
            return
        engine.failures += 1
        if engine.healthy and engine.failures >= self.failure_threshold:
            log.warning("%s engine %s out of rotation: %d failed health checks",
                        self.name, engine.url, engine.failures)
            self._set_health(engine, False)

    def _set_health(self, engine: Engine, healthy: bool) -> None:
        if engine.healthy and not healthy:
            self.policy.forget(engine)
            engine.epoch += 1
        engine.healthy = healthy
        GATEWAY_METRICS.engine_healthy.labels(self.name, engine.url).set(1 if healthy else 0)


class HealthChecker:
    """Polls GET /health on every engine of every pool, all at once, every interval."""

    def __init__(self, pools: Sequence[EnginePool], settings: HealthSettings) -> None:
        self.pools = list(pools)
        self.settings = settings
        self._task: asyncio.Task[None] | None = None

    async def check_once(self, *, initial: bool = False) -> None:
        """Poll every engine once. `initial`: the first poll sets the state outright (an engine
        that is down at start is not given `failure_threshold` chances to take traffic)."""
        pairs = [(pool, engine) for pool in self.pools for engine in pool.engines]
        results = await asyncio.gather(
            *(e.client.check_health(timeout_s=self.settings.timeout_s) for _, e in pairs),
            return_exceptions=True,
        )
        for (pool, engine), result in zip(pairs, results):
            if isinstance(result, BaseException):
                log.debug("health check of %s raised %r", engine.url, result)
            if initial and result is not True:
                pool.mark_unreachable(engine, "not healthy at start")
            else:
                pool.observe_health(engine, result is True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.interval_s)
            await self.check_once()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="gateway-health")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
