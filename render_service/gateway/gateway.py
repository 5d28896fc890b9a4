"""Gateway: the pools, the stages and the responders wired together; one call per request.

    handle(endpoint, body, request_id_header)
      admission (bounded; 503 when saturated)
      -> RenderStage -> PrefillStage (no-op without a prefill pool) -> DecodeStage
      -> Responders (derender; SSE or JSON)

The stage list is the same for collocated and P/D serving; P/D only gives PrefillStage a pool
and DecodeStage the decode pool instead of the collocated one.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from render_service.errors import RenderServiceError, ServiceUnavailableError
from render_service.gateway.codec import Codec
from render_service.gateway.config import GatewayConfig
from render_service.gateway.context import RequestContext
from render_service.gateway.engine_client import EngineClient, EngineHttp, HttpEngineClient
from render_service.gateway.metrics import GATEWAY_METRICS
from render_service.gateway.pool import Engine, EnginePool, HealthChecker
from render_service.gateway.responders import OpenStream, Responders
from render_service.gateway.routing import make_policy
from render_service.gateway.stages import Aborter, DecodeStage, PrefillStage, RenderStage

__all__ = ["Gateway", "Admission", "StreamResult"]

ClientFactory = Callable[[str], EngineClient]


class Admission:
    """At most `limit` generation requests at once; the next one gets a 503 right away."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0

    def enter(self) -> None:
        if self.active >= self.limit:
            GATEWAY_METRICS.rejected.labels("saturated").inc()
            raise ServiceUnavailableError(
                f"The gateway is saturated ({self.limit} requests in flight, "
                "--max-concurrent-streams); retry later.")
        self.active += 1
        GATEWAY_METRICS.in_flight.inc()

    def leave(self) -> None:
        self.active -= 1
        GATEWAY_METRICS.in_flight.dec()


@dataclass
class StreamResult:
    """A started SSE response. Iterate `body`; always await `close()` at the end (it aborts
    what still runs and frees the admission slot, even if `body` was never iterated)."""

    body: AsyncIterator[bytes]
    close: Callable[[], Awaitable[None]]


class Gateway:
    def __init__(self, config: GatewayConfig, codec: Codec, *,
                 client_factory: ClientFactory | None = None,
                 executor: Executor | None = None, model_name: str | None = None) -> None:
        self.config = config
        self.codec = codec
        self._http: EngineHttp | None = None
        if client_factory is None:
            self._http = EngineHttp(connect_timeout_s=config.timeouts.connect_s,
                                    max_connections=max(64, config.max_concurrent_streams * 2))
            http = self._http
            client_factory = lambda url: HttpEngineClient(url, http)  # noqa: E731
        self.pools = self._build_pools(config, client_factory)
        self.executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway")
        self.aborter = Aborter()
        self.admission = Admission(config.max_concurrent_streams)
        self.health = HealthChecker(list(self.pools.values()), config.health)
        self.model_name = model_name or codec.models()["data"][0]["id"]
        decode_pool = self.pools["decode"] if config.disaggregated else self.pools["collocated"]
        self.render = RenderStage(codec, self.executor)
        self.prefill = PrefillStage(self.pools.get("prefill"), config.timeouts,
                                    config.max_retries, self.aborter)
        self.decode = DecodeStage(decode_pool, config.timeouts, config.max_retries, self.aborter)
        self.responders = Responders(codec, self.decode, self.executor, self.model_name)

    @staticmethod
    def _build_pools(config: GatewayConfig, factory: ClientFactory) -> dict[str, EnginePool]:
        layout: dict[str, Sequence[str]] = (
            {"prefill": config.prefill, "decode": config.decode} if config.disaggregated
            else {"collocated": config.engines})
        pools = {}
        for name, urls in layout.items():
            engines = [Engine(url, name, factory(url)) for url in urls]
            policy = make_policy(config.policy_for(name), config.prefix_cache_blocks)
            pools[name] = EnginePool(name, engines, policy, config.block_size,
                                     config.health.failure_threshold)
        return pools

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self.health.check_once(initial=True)  # start with the real state, not a guess
        self.health.start()

    async def stop(self) -> None:
        await self.health.stop()
        await self.aborter.drain()
        if self._http is not None:
            await self._http.aclose()

    def healthy(self) -> bool:
        """Serving is possible: a decode (or collocated) engine is in rotation."""
        pool = self.decode.pool
        return bool(pool.healthy())

    # -- requests ----------------------------------------------------------------------------
    async def handle(self, endpoint: str, body: dict[str, Any], request_id_header: str | None
                     ) -> dict[str, Any] | StreamResult:
        self.admission.enter()
        ctx = RequestContext(endpoint, body, request_id_header)
        handed_over = False
        try:
            await self.render.run(ctx)
            await self.prefill.run(ctx)
            if ctx.stream:
                opened = await self.responders.open_stream(ctx)
                handed_over = True
                return self._stream_result(opened)
            result = await self.responders.batch(ctx)
            self._observe_batch(ctx, "ok")
            return result
        except RenderServiceError as exc:
            GATEWAY_METRICS.errors.labels(f"http_{exc.status}").inc()
            self._observe_batch(ctx, "error")
            raise
        finally:
            if not handed_over:
                self.admission.leave()

    def _stream_result(self, opened: OpenStream) -> StreamResult:
        body = self.responders.sse(opened)
        closed = False

        async def close() -> None:
            nonlocal closed
            if closed:
                return
            closed = True
            try:
                await body.aclose()  # type: ignore[attr-defined]
                await opened.aclose()
            finally:
                self.admission.leave()

        async def released() -> AsyncIterator[bytes]:
            try:
                async for chunk in body:
                    yield chunk
            finally:
                await close()

        return StreamResult(released(), close)

    def _observe_batch(self, ctx: RequestContext, outcome: str) -> None:
        GATEWAY_METRICS.e2e.labels(ctx.endpoint, outcome).observe(
            time.perf_counter() - ctx.received_at)
        if "derender" in ctx.phases:
            GATEWAY_METRICS.phase.labels("derender").observe(ctx.phases["derender"])
