"""In-process render API: OpenAI request dicts -> vLLM 0.33 `GenerateRequest` dicts.

The same object backs the HTTP routes (each route is a thin adapter) and RL/eval pipelines
that want token ids without HTTP or an event loop. Everything is synchronous and sans-IO;
results are plain JSON-ready dicts/lists (`orjson.dumps` gives vLLM's response bytes).

    from render_service.render.api import Renderer
    from render_service.config import ServiceConfig

    renderer = Renderer(ServiceConfig.embedded_default())   # as `render-service serve`
    req = renderer.render_chat({"messages": [{"role": "user", "content": "Hi"}]})
    print(req["token_ids"], req["sampling_params"]["max_tokens"])

Errors are `render_service.errors` exceptions carrying vLLM's status/message/param:
`BadRequestError` (400; schema failures are its subclass `RequestValidationError`, type
"Bad Request"), `NotFoundError` (404 unknown model), `NotImplementedFeatureError` (501).
A Renderer is safe to share between threads (the segment token cache takes a lock; all
other state is immutable after construction).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parsers.response_template import template_of
from render_service.config import ServiceConfig
from render_service.errors import BadRequestError, ConfigError, RenderServiceError
from render_service.mm.cache import ProcessedImageCache
from render_service.mm.pipeline import ImagePipeline, ImageSettings
from render_service.model import ModelBundle
from render_service.protocol import (
    ChatCompletionRequest,
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    parse_request,
    parse_union_request,
    random_uuid,
)
from render_service.protocol.anthropic import (
    EFFORTS,
    AnthropicCountTokensRequest,
    AnthropicMessagesRequest,
)
from render_service.render.anthropic import messages_to_chat, template_requires_system_first
from render_service.render.chat import render_chat, render_chat_request
from render_service.render.chat_prompt import (
    check_mm_kwargs,
    check_template_trust,
    merge_kwargs,
    render_chat_prompt,
    resolve_template,
)
from render_service.render.completion import render_completion
from render_service.render.context import RenderContext
from render_service.render.harmony import harmony_prompt_ids
from render_service.render.mistral import (
    mistral_decode,
    mistral_encode,
    mistral_grammar_factory,
    mistral_prompt_ids,
    mistral_token_strs,
)
from render_service.render.parser_support import ParserSupport
from render_service.render.prompt_limits import TokenizeLimits
from render_service.render.responses import render_responses, responses_chat_body

__all__ = ["Renderer"]


class Renderer:
    """Render/tokenize requests for one model configuration.

    Args:
        config: the service configuration (model, template, parsers, limits).
        bundle: an already loaded `ModelBundle` for `config` (optional; loaded otherwise).

    Raises:
        ConfigError: the model, tokenizer, template or parser names cannot be used.
    """

    def __init__(self, config: ServiceConfig, *, bundle: ModelBundle | None = None) -> None:
        self._bundle = bundle if bundle is not None else ModelBundle.load(config)
        config = config.for_model(self._bundle.model_type)
        self._config = config
        special = tuple(getattr(self._bundle.hf_tokenizer, "all_special_tokens", ()))
        parsers = ParserSupport(
            config, self._bundle.encoder, special, template_of(self._bundle.hf_tokenizer),
            mistral_grammar=mistral_grammar_factory(self._bundle),
        )  # fmt: skip
        self._ctx = RenderContext(self._bundle, config, parsers, image_pipeline(config, self._bundle))
        # Anthropic conversion settings, probed on first use (vLLM probes them at startup).
        self._merge_inline_system: bool | None = None
        effort = config.anthropic_disabled_thinking_effort
        self._disabled_effort: str | None = None if effort == "auto" else effort

    @classmethod
    def from_config(cls, config: ServiceConfig) -> Renderer:
        return cls(config)

    # -- properties --------------------------------------------------------------------------

    @property
    def config(self) -> ServiceConfig:
        return self._config

    @property
    def bundle(self) -> ModelBundle:
        return self._bundle

    @property
    def served_model_names(self) -> tuple[str, ...]:
        return self._bundle.served_model_names

    @property
    def max_model_len(self) -> int:
        return self._bundle.max_model_len

    @property
    def fingerprint(self) -> str:
        return self._bundle.fingerprint

    # -- endpoints ---------------------------------------------------------------------------

    def check_model(self, name: str | None) -> None:
        """Raise NotFoundError (404, vLLM's message) unless `name` is served, empty or None."""
        self._ctx.check_model(name)

    @property
    def images(self) -> ImagePipeline | None:
        """The image pipeline (None for text-only models)."""
        return self._ctx.images

    def render_chat(
        self,
        body: Any,
        *,
        request_id_header: str | None = None,
        fetched_media: Mapping[str, bytes] | None = None,
    ) -> dict[str, Any]:
        """`POST /v1/chat/completions/render`: one GenerateRequest dict.

        `fetched_media` maps http(s) image URLs of the request to their bytes (fetched by the
        caller, e.g. with `render_service.http.media_fetch`); the renderer itself does no network IO.
        """
        return render_chat(self._ctx, body, request_id_header, fetched_media)

    def messages_chat_request(self, body: Any) -> ChatCompletionRequest:
        """An Anthropic Messages body -> the chat request vLLM renders for it (validated)."""
        request = parse_request(AnthropicMessagesRequest, body)
        disabled = "none"
        if request.thinking is not None and request.thinking.type == "disabled":
            disabled = self._disabled_thinking_effort()
        return messages_to_chat(
            request, merge_inline_system=self._merges_inline_system(), disabled_effort=disabled
        )

    def count_message_tokens(self, body: Any) -> dict[str, Any]:
        """Anthropic `messages.count_tokens`: the converted chat prompt's length."""
        request = parse_request(AnthropicCountTokensRequest, body)
        disabled = "none"
        if request.thinking is not None and request.thinking.type == "disabled":
            disabled = self._disabled_thinking_effort()
        chat = messages_to_chat(request, merge_inline_system=self._merges_inline_system(), disabled_effort=disabled)
        count = len(self.render_chat_request(chat)["token_ids"])
        return {"input_tokens": count, "context_management": {"original_input_tokens": count}}

    def render_chat_request(
        self,
        request: ChatCompletionRequest,
        *,
        request_id_header: str | None = None,
        fetched_media: Mapping[str, bytes] | None = None,
    ) -> dict[str, Any]:
        """An already validated chat request (e.g. from `messages_chat_request`) -> GenerateRequest."""
        return render_chat_request(self._ctx, request, request_id_header, fetched_media)

    def render_messages(
        self,
        body: Any,
        *,
        request_id_header: str | None = None,
        fetched_media: Mapping[str, bytes] | None = None,
    ) -> dict[str, Any]:
        """`POST /v1/messages/render`: the Messages request's chat render (one GenerateRequest)."""
        chat = self.messages_chat_request(body)
        return self.render_chat_request(chat, request_id_header=request_id_header, fetched_media=fetched_media)

    def render_responses(self, body: Any, *, fetched_media: Mapping[str, bytes] | None = None) -> dict[str, Any]:
        """`POST /v1/responses/render`: one GenerateRequest (`resp_` id from the body)."""
        return render_responses(self._ctx, body, fetched_media)

    def responses_chat_body(self, body: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """A Responses body -> (the validated request as JSON, the chat body that serves it)."""
        return responses_chat_body(self._ctx, body)

    def render_completion(
        self, body: Any, *, request_id_header: str | None = None
    ) -> list[dict[str, Any]]:
        """`POST /v1/completions/render`: one GenerateRequest dict per prompt."""
        return render_completion(self._ctx, body, request_id_header)

    def tokenize(self, body: Any) -> dict[str, Any]:
        """`POST /tokenize` (completion-style `prompt` or chat-style `messages`)."""
        # vLLM's TokenizeRequest is the union of both forms: the first that validates wins
        # (the chat form first when "messages" is present), else both forms' errors are listed.
        first = TokenizeChatRequest if isinstance(body, dict) and "messages" in body else None
        request = parse_union_request((TokenizeCompletionRequest, TokenizeChatRequest), body, first=first)
        if isinstance(request, TokenizeChatRequest):
            return self._tokenize_chat(request)
        self.check_model(request.model)
        if self._bundle.is_mistral:
            ids = mistral_encode(self._bundle, request.prompt, add_special_tokens=request.add_special_tokens)
        else:
            ids = self._bundle.encoder.encode_full(request.prompt, add_special_tokens=request.add_special_tokens)
        return self._tokenize_response(ids, request.return_token_strs)

    def detokenize(self, body: Any) -> dict[str, Any]:
        """`POST /detokenize`: {"prompt": text}.

        As in vLLM, ids the tokenizer does not know decode to nothing (200), and an id that
        does not fit the tokenizer's u32 is a 400 with the tokenizer's OverflowError text.
        """
        request = parse_request(DetokenizeRequest, body)
        self.check_model(request.model)
        if self._bundle.is_mistral:
            return {"prompt": mistral_decode(self._bundle, request.tokens)}
        try:
            return {"prompt": self._bundle.hf_tokenizer.decode(request.tokens)}
        except OverflowError as exc:
            raise BadRequestError(str(exc)) from None

    def models(self) -> dict[str, Any]:
        """`GET /v1/models` body (vLLM ModelList)."""
        now = int(time.time())
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": now,
                    "owned_by": "vllm",
                    "root": self._bundle.model,
                    "parent": None,
                    "max_model_len": self._bundle.max_model_len,
                    "permission": [_model_permission(now)],
                }
                for name in self._bundle.served_model_names
            ],
        }

    # -- internals ---------------------------------------------------------------------------

    def _merges_inline_system(self) -> bool:
        """vLLM `_should_merge_inline_system`: the template with and without tools refuses a
        system message after the first turn."""
        if self._merge_inline_system is None:
            merge = False
            no_tools: tuple[list[dict[str, Any]] | None, ...] = (None, [])
            for tools in no_tools:
                try:
                    source: str | None = resolve_template(self._bundle, None, tools)
                except RenderServiceError:
                    source = None
                merge = merge or template_requires_system_first(source)
            self._merge_inline_system = merge
        return self._merge_inline_system

    def _disabled_thinking_effort(self) -> str:
        """vLLM `DisabledThinkingEffortResolver._probe`: "low" if the template rejects
        reasoning_effort "none" or renders it like a real effort, else "none"."""
        if self._disabled_effort is None:
            none_prompt = self._probe_prompt("none")
            effort = "none"
            if none_prompt is None or any(self._probe_prompt(e) == none_prompt for e in EFFORTS):
                effort = "low"
            self._disabled_effort = effort
        return self._disabled_effort

    def _probe_prompt(self, effort: str) -> list[int] | None:
        body = {"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": effort}
        try:
            return list(render_chat(self._ctx, body, None)["token_ids"])
        except RenderServiceError:
            return None

    def _tokenize_chat(self, request: TokenizeChatRequest) -> dict[str, Any]:
        self.check_model(request.model)
        config = self._config
        tool_dicts = None if request.tools is None else [tool.model_dump() for tool in request.tools]
        if self._bundle.is_harmony:  # vLLM renders the chat with Harmony, as chat render does
            ids = harmony_prompt_ids(self._bundle, config, request, tool_dicts)
            return self._tokenize_response(ids, request.return_token_strs)
        check_template_trust(request.chat_template, request.chat_template_kwargs, config.trust_request_chat_template)
        check_mm_kwargs(request, config.trust_request_mm_kwargs)
        if self._bundle.is_mistral:  # mistral-common tokenizes the chat, as chat render does
            ids = mistral_prompt_ids(self._bundle, request, tool_dicts)
            return self._tokenize_response(ids, request.return_token_strs)
        request_kwargs = merge_kwargs(
            request.chat_template_kwargs,
            {
                "add_generation_prompt": request.add_generation_prompt,
                "continue_final_message": request.continue_final_message,
            },
        )
        limits = TokenizeLimits(
            max_total_tokens=None,
            max_output_tokens=0,
            truncate_prompt_tokens=None,
            truncation_side=None,
            max_output_tokens_param="max_tokens",
            max_chars_per_token=self._bundle.max_chars_per_token,
            tokenizer_truncation_side=self._bundle.truncation_side,
        )
        prompt = render_chat_prompt(
            self._bundle,
            config,
            request,
            tool_dicts=tool_dicts,
            request_kwargs=request_kwargs,
            tokenize_limits=limits,
            add_special_tokens=request.add_special_tokens,
            want_offsets=False,
            images=self._ctx.images,
        )
        return self._tokenize_response(prompt.token_ids, request.return_token_strs)

    def _tokenize_response(self, ids: list[int], with_strs: bool | None) -> dict[str, Any]:
        strs = None
        if with_strs and self._bundle.is_mistral:
            strs = mistral_token_strs(self._bundle, ids)
        elif with_strs:
            strs = self._bundle.hf_tokenizer.convert_ids_to_tokens(ids)
        return {
            "count": len(ids),
            "max_model_len": self._bundle.max_model_len,
            "tokens": ids,
            "token_strs": strs,
        }


def image_pipeline(config: ServiceConfig, bundle: ModelBundle) -> ImagePipeline | None:
    """The worker's image pipeline and its processed-image cache (None for text-only models)."""
    if bundle.image_family is None:
        return None
    limits = config.limits
    media_dir = Path(config.allowed_local_media_path) if config.allowed_local_media_path else None
    if media_dir is not None and not media_dir.is_dir():
        raise ConfigError(f"--allowed-local-media-path {media_dir} is not an existing folder")
    settings = ImageSettings(
        model_id=bundle.model,
        hasher=config.mm_hasher_algorithm,
        float_dtype=bundle.float_dtype,
        max_images=limits.max_images,
        max_image_pixels=limits.max_image_pixels,
        max_image_bytes=limits.max_image_bytes,
        allowed_media_dir=media_dir,
        interleave_strings=config.interleave_mm_strings,
    )
    cache = ProcessedImageCache(int(config.mm_processor_cache_gb * 1024**3))
    return ImagePipeline(bundle.image_family, settings, cache)


def _model_permission(now: int) -> dict[str, Any]:
    return {
        "id": f"modelperm-{random_uuid()}",
        "object": "model_permission",
        "created": now,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
