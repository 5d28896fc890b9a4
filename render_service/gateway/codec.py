"""What the gateway needs from render/derender, as an interface (in-process, no HTTP hop).

`InProcessCodec` adapts the service's `Renderer` and `Derenderer` objects; unit tests pass a
small fake with the same four methods. Bodies and results are the vLLM 0.33 wire shapes:
render -> `GenerateRequest` dict(s); derender takes `DerenderChat(Stream)Request` /
`DerenderCompletion(Stream)Request` dicts and returns the endpoint's response dicts
(streaming: `{"chunk", "stream_state"}`, plus `"abort_engine_request": true` when a stop string
matched and the engine should stop now).
"""

from __future__ import annotations

from typing import Any, Protocol

from render_service.config import ServiceConfig

__all__ = ["Codec", "InProcessCodec"]


class Codec(Protocol):
    has_parser: bool

    def render_chat(self, body: dict[str, Any], request_id_header: str | None) -> dict[str, Any]: ...

    def render_completion(self, body: dict[str, Any], request_id_header: str | None
                          ) -> list[dict[str, Any]]: ...

    def derender_chat(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def derender_completion(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def models(self) -> dict[str, Any]: ...


class InProcessCodec:
    """The real render/derender core, called directly."""

    def __init__(self, config: ServiceConfig) -> None:
        from render_service.api import Renderer
        from render_service.derender_api import Derenderer

        self.renderer = Renderer(config)
        # The gateway keeps stream states in memory: no signing or compression per chunk.
        self.derenderer = Derenderer(config, self.renderer, local_states=True)
        self.has_parser = bool(config.reasoning_parser or config.tool_call_parser)

    def render_chat(self, body: dict[str, Any], request_id_header: str | None) -> dict[str, Any]:
        return self.renderer.render_chat(body, request_id_header=request_id_header)

    def render_completion(self, body: dict[str, Any], request_id_header: str | None
                          ) -> list[dict[str, Any]]:
        return self.renderer.render_completion(body, request_id_header=request_id_header)

    def derender_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.derenderer.derender_chat(body)

    def derender_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.derenderer.derender_completion(body)

    def models(self) -> dict[str, Any]:
        return self.renderer.models()
