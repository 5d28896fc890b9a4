"""What the gateway needs from render/derender, as an interface (in-process, no HTTP hop).

`InProcessCodec` adapts the service's `Renderer` and `Derenderer` objects; unit tests pass a
small fake with the same methods. Bodies and results are the vLLM 0.33 wire shapes:
render -> `GenerateRequest` dict(s); derender takes `DerenderChat(Stream)Request` /
`DerenderCompletion(Stream)Request` dicts and returns the endpoint's response dicts
(streaming: `{"chunk", "stream_state"}`, plus `"abort_engine_request": true` when a stop string
matched and the engine should stop now). `reasoning_usage` gives what the serving layer needs
to report reasoning tokens (None without a reasoning parser); `tool_parser` is the tool parser
vLLM would run (None without `--enable-auto-tool-choice`), whose deltas serve_format shapes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Protocol

from parsers.reasoning_tokens import ReasoningTokenCounter, reasoning_token_counter
from render_service.config import ServiceConfig
from render_service.gateway.reasoning_usage import ReasoningUsage

__all__ = ["Codec", "InProcessCodec"]


class Codec(Protocol):
    has_parser: bool
    accepts_images: bool  # the model takes image parts (so http(s) image URLs are fetched)
    fingerprint: str  # the render configuration's fingerprint (system_fingerprint's hash)
    tool_parser: str | None

    def render_chat(self, body: dict[str, Any], request_id_header: str | None,
                    fetched_media: Mapping[str, bytes] | None = None) -> dict[str, Any]: ...

    def render_completion(self, body: dict[str, Any], request_id_header: str | None
                          ) -> list[dict[str, Any]]: ...

    def derender_chat(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def derender_completion(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def models(self) -> dict[str, Any]: ...

    def prompt_text(self, token_ids: list[int]) -> str: ...

    def reasoning_usage(self, chat_body: dict[str, Any]) -> ReasoningUsage | None: ...


class InProcessCodec:
    """The real render/derender core, called directly."""

    def __init__(self, config: ServiceConfig) -> None:
        from render_service.derender.api import Derenderer
        from render_service.render.api import Renderer

        self.renderer = Renderer(config)
        # The gateway keeps stream states in memory: no signing or compression per chunk.
        self.derenderer = Derenderer(config, self.renderer, local_states=True)
        config = self.renderer.config  # with the model's parser defaults
        self.has_parser = bool(config.reasoning_parser or config.tool_call_parser)
        self.accepts_images = self.renderer.images is not None
        self.fingerprint = self.renderer.fingerprint
        self.tool_parser = config.tool_call_parser if config.enable_auto_tool_choice else None

    def render_chat(self, body: dict[str, Any], request_id_header: str | None,
                    fetched_media: Mapping[str, bytes] | None = None) -> dict[str, Any]:
        return self.renderer.render_chat(body, request_id_header=request_id_header,
                                         fetched_media=fetched_media)

    def messages_chat_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """An Anthropic Messages body as the chat body vLLM serves it with."""
        return self.renderer.messages_chat_request(body).model_dump(exclude_unset=True)

    def responses_chat_body(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """A Responses body -> (the validated request, the chat body it is served as)."""
        return self.renderer.responses_chat_body(body)

    def count_message_tokens(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.renderer.count_message_tokens(body)

    def render_completion(self, body: dict[str, Any], request_id_header: str | None
                          ) -> list[dict[str, Any]]:
        return self.renderer.render_completion(body, request_id_header=request_id_header)

    def derender_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.derenderer.derender_chat(body)

    def derender_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.derenderer.derender_completion(body)

    def models(self) -> dict[str, Any]:
        return self.renderer.models()

    def prompt_text(self, token_ids: list[int]) -> str:
        """The prompt ids decoded as vLLM does for completions `echo` (tokenizer.decode)."""
        return str(self.renderer.detokenize({"tokens": token_ids})["prompt"])

    def reasoning_usage(self, chat_body: dict[str, Any]) -> ReasoningUsage | None:
        """The reasoning-token counter for this request's parser settings (the very parser
        object derender uses), or None when no reasoning parser is configured."""
        parser = self.derenderer.reasoning_parser_for(chat_body)
        if parser is None:
            return None
        return ReasoningUsage(_counter(parser), self.derenderer.ctx.decoders.get)


@functools.lru_cache(maxsize=64)
def _counter(parser: Any) -> ReasoningTokenCounter:
    """Counters by parser object: derender caches its parsers, so settings repeat cheaply."""
    return reasoning_token_counter(parser)
