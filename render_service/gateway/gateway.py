"""Gateway: the pools, the stages and the responders wired together; one call per request.

    handle(endpoint, body, request_id_header)
      admission (bounded; 503 with Retry-After when saturated)
      -> RenderStage (fetches http(s) images, then renders) -> ServeOptions.check
      -> Conversations.plan (multi-turn P/D only: the continuation guard)
      -> PrefillStage (no-op without a prefill pool) -> DecodeStage
      -> Responders (SSE) or BatchResponder (JSON): derender, echo, usage, fingerprint

The stage list is the same for collocated and P/D serving; P/D only gives PrefillStage a pool
and DecodeStage the decode pool instead of the collocated one.

Liveness is the process itself (app.py's /health answers 200 while it serves); readiness
(`ready`) needs a healthy engine in every pool a request cannot do without: the collocated
pool, or in P/D the decode pool (without prefill engines requests still run, recomputing on
decode).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import httpx

from render_service.config import Limits
from render_service.errors import RenderServiceError, SaturatedError
from render_service.gateway.batch import BatchResponder
from render_service.gateway.codec import Codec
from render_service.gateway.config import GatewayConfig
from render_service.gateway.context import RequestContext
from render_service.gateway.continuation import conversation_id
from render_service.gateway.conversations import Conversations
from render_service.gateway.engine_client import EngineClient, EngineHttp, HttpEngineClient
from render_service.gateway.metrics import GATEWAY_METRICS
from render_service.gateway.pool import Engine, EnginePool, HealthChecker
from render_service.gateway.responders import OpenStream, Responders
from render_service.gateway.routing import make_policy
from render_service.gateway.stages import Aborter, DecodeStage, PrefillStage, RenderStage
from render_service.http.bodies import VLLM_API_VERSION
from render_service.http.media_fetch import MediaFetcher

__all__ = ["Gateway", "Admission", "SaturatedError", "StreamResult", "system_fingerprint"]

ClientFactory = Callable[[str], EngineClient]


class Admission:
    """At most `limit` generation requests at once; the next one gets a 503 right away."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0

    def enter(self) -> None:
        if self.active >= self.limit:
            GATEWAY_METRICS.rejected.labels("saturated").inc()
            raise SaturatedError(
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

    body: AsyncGenerator[bytes, None]
    close: Callable[[], Awaitable[None]]


def system_fingerprint(config: GatewayConfig, codec: Codec) -> str | None:
    """vLLM's `--fingerprint-mode`: full/hash -> `vllm-<version>-<hash8>`, custom, none.

    vLLM hashes its engine config (model, quantization, ...), which the gateway cannot see;
    ours is the render configuration's fingerprint (model, template, parsers, ...), the same
    role: it changes when the backend that produced the tokens changes. Parallelism is not
    known here, so full and hash give the same string.
    """
    if config.fingerprint_mode == "none":
        return None
    if config.fingerprint_mode == "custom":
        return config.fingerprint_value
    return f"vllm-{VLLM_API_VERSION}-{codec.fingerprint[:8]}"


class Gateway:
    def __init__(self, config: GatewayConfig, codec: Codec, *,
                 client_factory: ClientFactory | None = None,
                 executor: Executor | None = None, model_name: str | None = None,
                 render_workers: int = 1, fetcher: MediaFetcher | None = None,
                 limits: Limits | None = None,
                 engine_transport: httpx.AsyncBaseTransport | None = None) -> None:
        """`render_workers`: threads for render and batch derender (--renderer-num-workers),
        unless `executor` is given. `limits`: message/tool counts refused before images are
        fetched. `engine_transport` replaces the network (tests)."""
        self.config = config
        self.codec = codec
        self._http: EngineHttp | None = None
        if client_factory is None:
            self._http = EngineHttp(connect_timeout_s=config.timeouts.connect_s,
                                    max_connections=max(64, config.max_concurrent_streams * 2),
                                    api_key=config.engine_api_key, transport=engine_transport)
            http = self._http
            client_factory = lambda url: HttpEngineClient(url, http)  # noqa: E731
        self.pools = self._build_pools(config, client_factory)
        self._owns_executor = executor is None
        self.executor = executor or ThreadPoolExecutor(max_workers=render_workers,
                                                       thread_name_prefix="gateway-render")
        self.fetcher = fetcher
        self.aborter = Aborter()
        self.admission = Admission(config.max_concurrent_streams)
        self.health = HealthChecker(list(self.pools.values()), config.health)
        self.model_name = model_name or codec.models()["data"][0]["id"]
        decode_pool = self.pools["decode"] if config.disaggregated else self.pools["collocated"]
        fingerprint = system_fingerprint(config, codec)
        self.conversations = (Conversations(config.conversations, decode_pool, config.block_size)
                              if config.conversations.enabled else None)
        self.render = RenderStage(codec, self.executor, fetcher, limits)
        self.prefill = PrefillStage(self.pools.get("prefill"), config.timeouts,
                                    config.max_retries, self.aborter)
        self.decode = DecodeStage(decode_pool, config.timeouts, config.max_retries, self.aborter,
                                  kv_lease_s=config.kv_lease_duration,
                                  conversations=self.conversations)
        self.responders = Responders(codec, self.decode, self.model_name, fingerprint)
        self.batch = BatchResponder(codec, self.decode, self.executor, self.model_name,
                                    disaggregated=config.disaggregated,
                                    system_fingerprint=fingerprint)

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
        if self.fetcher is not None:
            await self.fetcher.aclose()
        if self._owns_executor:
            self.executor.shutdown(wait=False, cancel_futures=True)

    def ready(self) -> bool:
        """Serving is possible: a decode (or collocated) engine is in rotation."""
        return bool(self.decode.pool.healthy())

    def readiness(self) -> dict[str, Any]:
        """`ready`, and each pool's healthy/total engine counts (the /ready body)."""
        pools = {name: {"healthy": len(pool.healthy()), "total": len(pool.engines)}
                 for name, pool in self.pools.items()}
        return {"ready": self.ready(), "pools": pools}

    # -- requests ----------------------------------------------------------------------------
    async def handle(self, endpoint: str, body: dict[str, Any], request_id_header: str | None,
                     conversation_header: str | None = None,
                     on_rendered: Callable[[dict[str, Any]], None] | None = None
                     ) -> dict[str, Any] | StreamResult:
        """`conversation_header`: X-Conversation-ID (multi-turn P/D; the body's
        `conversation_id` field says the same). `on_rendered` sees the first rendered
        GenerateRequest (the Responses API echoes its resolved sampling parameters)."""
        self.admission.enter()
        ctx = RequestContext(endpoint, body, request_id_header)
        handed_over = False
        try:
            if self.conversations is not None:
                ctx.conversation_id = conversation_id(body, conversation_header)
            await self.render.run(ctx)
            if on_rendered is not None:
                on_rendered(ctx.legs[0].rendered)
            ctx.options.check()
            if self.conversations is not None:
                self.conversations.plan(ctx)
            await self.prefill.run(ctx)
            if ctx.stream:
                opened = await self.responders.open_stream(ctx)
                handed_over = True
                return self._stream_result(opened)
            result = await self.batch.respond(ctx)
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
                await body.aclose()
                await opened.aclose()
            finally:
                self.admission.leave()

        async def released() -> AsyncGenerator[bytes, None]:
            try:
                async with aclosing(body) as chunks:
                    async for chunk in chunks:
                        yield chunk
            finally:
                await close()

        return StreamResult(released(), close)

    def _observe_batch(self, ctx: RequestContext, outcome: str) -> None:
        GATEWAY_METRICS.e2e.labels(ctx.endpoint, outcome).observe(
            time.perf_counter() - ctx.received_at)
        if "derender" in ctx.phases:
            GATEWAY_METRICS.phase.labels("derender").observe(ctx.phases["derender"])
