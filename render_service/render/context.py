"""What rendering reads per worker, built once: model, config, parsers and image pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from render_service.config import ServiceConfig
from render_service.errors import NotFoundError
from render_service.mm.pipeline import ImagePipeline
from render_service.model import ModelBundle
from render_service.render.chat_prompt import server_template_kwargs
from render_service.render.parser_support import ParserSupport

__all__ = ["RenderContext"]


@dataclass(frozen=True)
class RenderContext:
    """Everything per worker that rendering reads (immutable)."""

    bundle: ModelBundle
    config: ServiceConfig
    parsers: ParserSupport
    images: ImagePipeline | None = None  # None: the model takes no images

    @property
    def server_template_kwargs(self) -> dict[str, Any]:
        """--default-chat-template-kwargs plus vLLM's `cohere_format` default ("cmd4")."""
        return server_template_kwargs(self.config)

    @property
    def override_max_tokens(self) -> int | None:
        if self.config.generation_config not in ("auto", "vllm"):
            return self.bundle.sampling_defaults.get("max_tokens")
        return None

    def check_model(self, name: str | None) -> None:
        """404 for a model name that is not served; omitted or empty is accepted."""
        if not name or name in self.bundle.served_model_names:
            return
        raise NotFoundError(
            f"The model `{name}` does not exist. "
            f"Valid aliases: {', '.join(self.bundle.served_model_names)}.",
            param="model",
        )
