"""HTTP adapter of the gateway: the OpenAI routes `vllm serve` has, over `Gateway.handle`.

    POST /v1/chat/completions, /v1/completions   JSON, or SSE with "stream": true
    GET  /v1/models, /metrics, /version
    GET  /health  liveness: 200 while the process serves (engines booting is not a reason
                  to restart the gateway)
    GET  /ready   readiness: 200 once a request can be served (a healthy collocated, or
                  decode, engine), else 503; the body lists each pool's healthy engines
    GET  /ping    vLLM's (SageMaker) probe, answered like /ready

Client hang-ups cancel the work (asgi.until_disconnect / SSEResponse), which aborts the
engine requests. Errors go through the service's one mapping (http.errors), headers included: a
saturated gateway's 503 carries `Retry-After`, like the middleware's own.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI, Request
from starlette.responses import Response

from render_service import __version__
from render_service.config import ServiceConfig
from render_service.errors import ConfigError, RenderServiceError
from render_service.gateway.anthropic import anthropic_error_body, chat_to_message, message_events
from render_service.gateway.asgi import ClientDisconnected, SSEResponse, until_disconnect
from render_service.gateway.codec import Codec, InProcessCodec
from render_service.gateway.config import GatewayConfig
from render_service.gateway.continuation import CONVERSATION_HEADER
from render_service.gateway.gateway import ClientFactory, Gateway, StreamResult
from render_service.gateway.responses_api import chat_to_response, response_events, sampling_echo
from render_service.http.bodies import json_response, read_json_object, version_body
from render_service.http.errors import install_error_handlers, log_client_error
from render_service.http.media_fetch import MediaFetcher
from render_service.http.metrics import CONTENT_TYPE_LATEST, render_metrics_text
from render_service.http.middleware import OPEN_PATHS, ServiceMiddleware

__all__ = ["create_gateway_app", "gateway_startup_log"]

log = logging.getLogger("render_service.gateway")

_POST_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens",
                "/v1/responses")
_GET_ROUTES = ("/v1/models", "/health", "/ready", "/ping", "/version", "/metrics")
# nginx-style "client closed request"; nobody reads it, the access log does.
_CLIENT_GONE = 499
# Requests besides the generation streams the middleware lets in (models, version, ...), so
# a gateway full of streams still answers them and streams are bounded by admission alone.
_NON_GENERATION_HEADROOM = 64



def _add_generation_routes(app: FastAPI, gateway: Gateway) -> None:
    async def serve(endpoint: str, request: Request) -> Any:
        body = await read_json_object(request)
        try:
            result = await until_disconnect(
                request.receive, gateway.handle(endpoint, body, request.headers.get("x-request-id"),
                                                request.headers.get(CONVERSATION_HEADER)))
        except ClientDisconnected:
            return Response(status_code=_CLIENT_GONE)
        if isinstance(result, StreamResult):
            return SSEResponse(result.body, on_close=result.close)
        return json_response(result)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        return await serve("chat", request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await serve("completion", request)

    # Anthropic Messages: the chat pipeline under vLLM's conversion, errors in Anthropic's shape.
    @app.post("/v1/messages")
    async def messages(request: Request) -> Any:
        try:
            body = await read_json_object(request)
            chat_body = await _off_loop(gateway, gateway.codec.messages_chat_body, body)  # type: ignore[attr-defined]
            result = await until_disconnect(
                request.receive, gateway.handle("chat", chat_body, request.headers.get("x-request-id"),
                                              request.headers.get(CONVERSATION_HEADER)))
        except ClientDisconnected:
            return Response(status_code=_CLIENT_GONE)
        except RenderServiceError as exc:
            log_client_error(request.scope, exc.status, exc.message)
            return json_response(anthropic_error_body(exc), exc.status)
        if isinstance(result, StreamResult):
            return SSEResponse(message_events(result.body), on_close=result.close)
        return json_response(chat_to_message(result))

    @app.post("/v1/responses")
    async def responses(request: Request) -> Any:
        body = await read_json_object(request)
        responses_request, chat_body = await _off_loop(
            gateway, gateway.codec.responses_chat_body, body)  # type: ignore[attr-defined]
        rendered: list[dict[str, Any]] = []
        try:
            result = await until_disconnect(
                request.receive, gateway.handle("chat", chat_body, request.headers.get("x-request-id"),
                                                request.headers.get(CONVERSATION_HEADER),
                                                on_rendered=rendered.append))
        except ClientDisconnected:
            return Response(status_code=_CLIENT_GONE)
        sampling = sampling_echo(rendered[0])
        if isinstance(result, StreamResult):
            return SSEResponse(response_events(responses_request, chat_body, sampling, result.body),
                               on_close=result.close)
        return json_response(chat_to_response(responses_request, sampling, result))

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> Response:
        try:
            body = await read_json_object(request)
            result = await _off_loop(gateway, gateway.codec.count_message_tokens, body)  # type: ignore[attr-defined]
        except RenderServiceError as exc:
            log_client_error(request.scope, exc.status, exc.message)
            return json_response(anthropic_error_body(exc), exc.status)
        return json_response(result)


async def _off_loop(gateway: Gateway, fn: Any, body: dict[str, Any]) -> Any:
    """Conversion renders templates (probes on first use): on the render pool, not the loop."""
    return await asyncio.get_running_loop().run_in_executor(gateway.executor, fn, body)


def _add_info_routes(app: FastAPI, gateway: Gateway) -> None:
    @app.get("/v1/models")
    async def models() -> Response:
        return json_response(gateway.codec.models())

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/ready")
    async def ready() -> Response:
        state = gateway.readiness()
        return json_response(state, 200 if state["ready"] else 503)

    @app.api_route("/ping", methods=["GET", "POST"])  # vLLM: SageMaker's POST /ping too
    async def ping() -> Response:
        return Response(status_code=200 if gateway.ready() else 503)

    @app.get("/version")
    async def version() -> Response:
        return json_response(version_body())

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(render_metrics_text(), media_type=CONTENT_TYPE_LATEST)


def gateway_startup_log(config: ServiceConfig, app: FastAPI) -> None:
    """The start-up summary, plus the engines; health polls stay quiet (changes are logged)."""
    from render_service.http.startup_log import log_startup_summary, quiet_http_client_logs

    gateway: Gateway = app.state.gateway
    renderer = getattr(gateway.codec, "renderer", None)
    if renderer is not None:
        log_startup_summary("gateway", config, renderer._bundle)
    for pool in gateway.pools.values():
        log.info("gateway %s pool: %s (routing %s)", pool.name, ", ".join(e.url for e in pool.engines),
                 pool.policy.name)
    quiet_http_client_logs()


def create_gateway_app(config: ServiceConfig, gateway_config: GatewayConfig, *,
                       codec: Codec | None = None,
                       client_factory: ClientFactory | None = None,
                       engine_transport: httpx.AsyncBaseTransport | None = None) -> FastAPI:
    """The gateway app. `codec`/`client_factory` replace render/derender and the engines in
    tests; `engine_transport` keeps the real HTTP engine client over an in-memory transport."""
    if config.enable_prompt_embeds:
        # The render would send the placeholder ids alone: the engine would embed those tokens
        # and answer as if that were the prompt.
        raise ConfigError("the gateway cannot serve --enable-prompt-embeds: the engines' "
                          "/inference/v1/generate takes token ids, not embeddings; use "
                          "`vllm serve --enable-prompt-embeds` for embedding prompts")
    codec = codec or InProcessCodec(config)
    fetcher = MediaFetcher.from_config(config) if codec.accepts_images else None
    gateway = Gateway(gateway_config, codec, client_factory=client_factory,
                      render_workers=config.renderer_num_workers, fetcher=fetcher,
                      limits=config.limits, engine_transport=engine_transport)

    @asynccontextmanager
    async def lifespan(_: FastAPI):  # type: ignore[no-untyped-def]
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    app = FastAPI(title="render-service gateway", version=__version__, lifespan=lifespan)
    app.state.gateway = gateway
    install_error_handlers(app)
    _add_generation_routes(app, gateway)
    _add_info_routes(app, gateway)
    app.add_middleware(
        ServiceMiddleware,
        api_key=config.api_key,
        max_body_bytes=config.limits.max_body_bytes,
        max_concurrent=max(config.limits.max_concurrent_requests,
                           gateway_config.max_concurrent_streams + _NON_GENERATION_HEADROOM),
        known_paths=frozenset(_POST_ROUTES + _GET_ROUTES),
        echo_request_id=config.enable_request_id_headers,
        log_requests=config.enable_log_requests,
        max_log_len=config.max_log_len,
        open_paths=OPEN_PATHS | {"/ready"},
    )
    return app
