"""HTTP adapter over the in-process API: thin routes, one error mapping, one config.

Each route reads the JSON body, hands it to the sync core on the renderer thread pool
(`--renderer-num-workers` threads, like vLLM's renderer pool) and serialises the result with
orjson. No request logic lives here beyond two O(1) bounds on untrusted chat bodies
(--max-messages, --max-tools) checked before a body takes a render thread.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from render_service import __version__
from render_service.config import ServiceConfig, config_from_json
from render_service.derender.api import RESENT_KEYS, Derenderer
from render_service.derender.state import ChoiceKind
from render_service.errors import BadRequestError
from render_service.http.bodies import (
    json_response,
    read_json_object,
    read_lazy_object,
    version_body,
)
from render_service.http.errors import handled_error_response, install_error_handlers
from render_service.http.media_fetch import MediaFetcher
from render_service.http.metrics import CONTENT_TYPE_LATEST, METRICS, render_metrics_text
from render_service.http.middleware import ServiceMiddleware
from render_service.http.openapi import install_openapi
from render_service.http.startup_log import lean_log_records
from render_service.model import ModelBundle
from render_service.render.api import Renderer
from render_service.render.request_bounds import check_counts

__all__ = ["CONFIG_ENV", "app_from_env", "create_app"]

# The CLI hands the config to worker processes through this variable (JSON).
CONFIG_ENV = "RENDER_SERVICE_CONFIG_JSON"

T = TypeVar("T")

_POST_ROUTES = (
    "/v1/chat/completions/render",
    "/v1/completions/render",
    "/v1/messages/render",
    "/v1/responses/render",
    "/v1/chat/completions/derender",
    "/v1/completions/derender",
    "/tokenize",
    "/detokenize",
    "/invocations",
)
_GET_ROUTES = ("/v1/models", "/health", "/ping", "/version", "/load", "/metrics", "/kv_event_sources")
# Members of vLLM's body model per route, for the error a non-object body gets (see
# bodies.read_json_object): TokenizeRequest and the derender bodies are unions.
_TOKENIZE_BODY = ((), ())
_DERENDER_CHAT_BODY = (("DerenderChatRequest",), ("DerenderChatStreamRequest",))
_DERENDER_COMPLETION_BODY = ((), ("DerenderCompletionStreamRequest",))
_NON_GET_METHODS = ["POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"]
# The routes whose handler ServiceMiddleware calls directly (see _HotRoutes): every route of
# _add_core_routes, whose handlers take the request alone.
_HOT_POST_ROUTES = frozenset(_POST_ROUTES) - {"/invocations"}

Handler = Callable[[Request], Awaitable[Response]]


class Service:
    """What the routes need: the core objects and the pool they run on."""

    def __init__(self, config: ServiceConfig, bundle: ModelBundle | None = None) -> None:
        self.config = config
        self.renderer = Renderer(config, bundle=bundle)
        self.derenderer = Derenderer(config, self.renderer)
        self.pool = ThreadPoolExecutor(
            max_workers=config.renderer_num_workers, thread_name_prefix="renderer"
        )
        self.fetcher = MediaFetcher.from_config(config)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: fn(*args, **kwargs))

    async def derender(self, fn: Callable[[dict[str, Any]], T], body: dict[str, Any]) -> T:
        """A stream step on a state, with nothing to validate, runs inline: it takes about as
        long as the hop to a pool thread and back would (0.2 ms for one token); the first chunk
        and batch derender (a whole request to validate, a whole output) go to the pool."""
        if _is_stream_step(body):
            return fn(body)
        return await self.run(fn, body)

    async def fetch_media(self, body: Any) -> dict[str, bytes]:
        """The http(s) images of a chat body, fetched under the policy (the core does no IO)."""
        if self.renderer.images is None:
            return {}  # render refuses the parts: no images for this model
        return await self.fetcher.fetch(body)

    async def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        await self.fetcher.aclose()




# A stream step with more tokens than this goes to the pool (a few ms of parser work).
_INLINE_MAX_TOKENS = 64
_ANY_RESENT = frozenset().union(*RESENT_KEYS.values())


def _is_stream_step(body: dict[str, Any]) -> bool:
    if body.get("stream") is not True or body.get("stream_state") is None:
        return False
    if not _ANY_RESENT.isdisjoint(body):
        return False  # to be validated: a state that did not verify, or a first chunk
    chunk = body.get("generate_chunk")
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return False
    tokens = choices[0].get("token_ids")
    return isinstance(tokens, list) and len(tokens) <= _INLINE_MAX_TOKENS


def _rendered_response(
    renderer: Renderer, body: Any, request_id_header: str | None, fetched: dict[str, bytes]
) -> tuple[dict[str, Any], Response]:
    result = renderer.render_chat(body, request_id_header=request_id_header, fetched_media=fetched)
    return result, json_response(result)


async def _derender_body(
    request: Request, derenderer: Derenderer, members: tuple[tuple[str, ...], ...], kind: ChoiceKind
) -> dict[str, Any]:
    """The body; a stream chunk whose state verifies skips decoding what the client resent."""
    lazy = await read_lazy_object(request, members, RESENT_KEYS[kind])
    if lazy.whole:
        return lazy.head  # a small body: the derender skips what its verified state makes redundant
    return derenderer.without_resent(lazy.head, kind) or lazy.full()


def _request_id_header(request: Request) -> str | None:
    return request.headers.get("x-request-id")


def _add_core_routes(app: FastAPI, service: Service) -> None:
    renderer, derenderer = service.renderer, service.derenderer
    limits = service.config.limits

    @app.post("/v1/chat/completions/render")
    async def render_chat(request: Request) -> Response:
        body = await read_json_object(request)
        check_counts(body, limits)
        fetched = await service.fetch_media(body)
        # Serialised on the pool too: with images the body is megabytes of base64.
        result, response = await service.run(
            _rendered_response, renderer, body, _request_id_header(request), fetched
        )
        METRICS.tokens_rendered.inc(len(result["token_ids"]))
        return response

    @app.post("/v1/messages/render")
    async def render_messages(request: Request) -> Response:
        body = await read_json_object(request)
        check_counts(body, limits)
        chat = await service.run(renderer.messages_chat_request, body)
        fetched = await service.fetch_media({"messages": chat.messages})
        result = await service.run(
            renderer.render_chat_request, chat, request_id_header=_request_id_header(request), fetched_media=fetched
        )
        METRICS.tokens_rendered.inc(len(result["token_ids"]))
        return json_response(result)

    @app.post("/v1/responses/render")
    async def render_responses(request: Request) -> Response:
        body = await read_json_object(request)
        items = body.get("input")
        check_counts({"messages": items, "tools": body.get("tools")}, limits)
        fetched = await service.fetch_media({"messages": items}) if isinstance(items, list) else {}
        result = await service.run(renderer.render_responses, body, fetched_media=fetched)
        METRICS.tokens_rendered.inc(len(result["token_ids"]))
        return json_response(result)

    @app.post("/v1/completions/render")
    async def render_completion(request: Request) -> Response:
        body = await read_json_object(request)
        result = await service.run(renderer.render_completion, body, request_id_header=_request_id_header(request))
        METRICS.tokens_rendered.inc(sum(len(r["token_ids"]) for r in result))
        return json_response(result)

    @app.post("/v1/chat/completions/derender")
    async def derender_chat(request: Request) -> Response:
        body = await _derender_body(request, derenderer, _DERENDER_CHAT_BODY, ChoiceKind.CHAT)
        check_counts(body.get("chat_request"), limits)
        return json_response(await service.derender(derenderer.derender_chat, body))

    @app.post("/v1/completions/derender")
    async def derender_completion(request: Request) -> Response:
        body = await _derender_body(request, derenderer, _DERENDER_COMPLETION_BODY, ChoiceKind.COMPLETION)
        return json_response(await service.derender(derenderer.derender_completion, body))

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        body = await read_json_object(request, _TOKENIZE_BODY)
        check_counts(body, limits)
        return json_response(await service.run(renderer.tokenize, body))

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        body = await read_json_object(request)
        return json_response(await service.run(renderer.detokenize, body))


def _add_info_routes(app: FastAPI, service: Service) -> None:
    @app.get("/v1/models")
    async def models() -> Response:
        return json_response(service.renderer.models())

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    async def ping() -> Response:
        return Response(status_code=200)

    app.add_api_route("/ping", ping, methods=["GET"])
    app.add_api_route("/ping", ping, methods=["POST"], include_in_schema=False)  # vLLM: SageMaker's too

    @app.get("/version")
    async def version() -> Response:
        return json_response(version_body())

    @app.get("/kv_event_sources")
    async def kv_event_sources() -> Response:
        return json_response({})  # vLLM: the engines' KV-event publishers; none on a render server

    @app.post("/invocations")
    async def invocations(request: Request) -> Response:
        # SageMaker's entry point. vLLM's render server registers no invocation handler (they
        # are the generate and pooling endpoints), so every JSON object gets this 400.
        try:  # the stdlib's parser, for vLLM's error text (raw_request.json())
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:  # vLLM: an HTTPException
            return json_response({"error": {"message": f"JSON decode error: {exc}", "type": "Bad Request",
                                            "param": None, "code": 400}}, 400)
        if not isinstance(body, dict):  # vLLM's adapter-id hook indexes the body: its TypeError
            try:
                body["model"]
            except (TypeError, IndexError, KeyError) as exc:
                raise BadRequestError(str(exc)) from None
        raise BadRequestError("Cannot find suitable handler for request. Expected one of: []")

    @app.get("/load")
    async def load() -> Response:
        return json_response({"server_load": service.pool._work_queue.qsize()})

    async def metrics() -> Response:
        return Response(render_metrics_text(), media_type=CONTENT_TYPE_LATEST)

    # vLLM mounts prometheus_client's ASGI app at /metrics: any method, with or without "/".
    # (Not OPTIONS on "/metrics/": it is no probe path, and OPTIONS bypasses --api-key.)
    app.add_api_route("/metrics", metrics, methods=["GET"])
    app.add_api_route("/metrics", metrics, methods=_NON_GET_METHODS, include_in_schema=False)
    app.add_api_route("/metrics/", metrics, methods=["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH"],
                      include_in_schema=False)


class _HotRoutes:
    """The hot POST routes served without the framework's per-request layers.

    FastAPI wraps each request in five middlewares, a router, a per-route exception wrapper,
    an exit stack and dependency solving: on a stream chunk that is more CPU than the derender
    step itself. These routes call the same handler FastAPI routes to (and documents) and map
    its exceptions with the app's own handlers, as FastAPI's exception middlewares would, so
    each response is the one FastAPI sends. Everything else goes to `framework`.
    """

    def __init__(self, app: FastAPI, framework: ASGIApp) -> None:
        self.framework = framework
        # Routing under --root-path is Starlette's business: no shortcut then.
        self.handlers: dict[str, Handler] = {} if app.root_path else {
            route.path: route.endpoint
            for route in app.routes
            if isinstance(route, APIRoute) and route.path in _HOT_POST_ROUTES and route.methods == {"POST"}
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.handlers.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if handler is None or scope.get("root_path"):
            await self.framework(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await handler(request)
        except Exception as exc:
            await self._send_error(request, exc, send)
            return
        await response(scope, receive, send)

    async def _send_error(self, request: Request, exc: Exception, send: Send) -> None:
        response, unexpected = await handled_error_response(request, exc)
        await response(request.scope, request.receive, send)
        if unexpected:
            raise exc  # as Starlette's ServerErrorMiddleware: the server logs it too


class _ServiceApp(FastAPI):
    """The FastAPI app entered through ServiceMiddleware and _HotRoutes (`entry`)."""

    entry: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await (self.entry or self.framework)(scope, receive, send)

    async def framework(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)


def create_app(config: ServiceConfig, *, bundle: ModelBundle | None = None) -> FastAPI:
    """Build the render/derender app for one worker process.

    `bundle`: an already loaded model for `config` (loaded here otherwise). It must come from a
    config that differs from `config` only in serving options (limits, API key, secret, trust
    flags): the bundle carries the template, max_model_len and the configuration fingerprint.
    """
    service = Service(config, bundle)

    @asynccontextmanager
    async def lifespan(_: FastAPI):  # type: ignore[no-untyped-def]
        yield
        await service.close()

    app = _ServiceApp(title="render-service", version=__version__, lifespan=lifespan,
                  root_path=config.http.root_path)  # vLLM: app.root_path = --root-path
    app.state.service = service
    install_error_handlers(app)
    _add_core_routes(app, service)
    _add_info_routes(app, service)
    install_openapi(
        app,
        api_key_required=bool(config.api_key),
        served_model_names=tuple(service.renderer.served_model_names),
    )
    app.entry = ServiceMiddleware(
        _HotRoutes(app, app.framework),
        api_key=config.api_key,
        max_body_bytes=config.limits.max_body_bytes,
        max_concurrent=config.limits.max_concurrent_requests,
        known_paths=frozenset(_POST_ROUTES + _GET_ROUTES),
        echo_request_id=config.enable_request_id_headers,
        log_requests=config.enable_log_requests,
        max_log_len=config.max_log_len,
    )
    return app


def app_from_env() -> FastAPI:
    """uvicorn factory for worker processes: the CLI serialised the config into CONFIG_ENV."""
    lean_log_records()  # a spawned worker: its own logging module
    return create_app(config_from_json(os.environ[CONFIG_ENV]))
