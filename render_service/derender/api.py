"""In-process derender API: engine output -> OpenAI responses, batch and streaming.

    derenderer = Derenderer(config, renderer)
    response = derenderer.derender_chat(body)          # batch or one stream step
    response = derenderer.derender_completion(body)

`body` is the JSON body of `POST /v1/chat/completions/derender` (or completions) as a dict;
`"stream": true` selects a stream step, which returns
`{"chunk": ..., "stream_state": ...[, "abort_engine_request": true]}`. Call it once per engine
chunk per choice, echoing the previous `stream_state` unchanged (null on the first call).
Methods are synchronous and thread-safe; errors are `render_service.errors` exceptions.

Our additions to vLLM 0.33's wire format (vLLM clients are unaffected by them):
- `stream_state` is an opaque signed value (`{"rs": "..."}`); after the first call
  `chat_request` and `prompt_token_ids` may be omitted. If both a state and a `chat_request`
  are sent, the state's settings win.
- stop strings work when streaming; a match ends the choice with `stop_reason` = the string and
  adds `"abort_engine_request": true` to the response.
- an optional top-level `render_fingerprint` (chat render returns it as the GenerateRequest's
  last key; `parse_context.render_fingerprint` is accepted too) is compared to this server's
  configuration fingerprint; a mismatch is a 400 `ConfigMismatchError`.
"""

from __future__ import annotations

import os
from typing import Any

from parsers.response_template import template_of
from parsers.tools import tool_parser_traits
from render_service.config import ServiceConfig
from render_service.derender.chat_batch import derender_chat_batch
from render_service.derender.completion_batch import derender_completion_batch
from render_service.derender.context import DerenderContext, HfTokenDecoder
from render_service.derender.decoding import Decoders, EosIds
from render_service.derender.parsing import ParserFactory
from render_service.derender.schemas import (
    ChatBatchBody,
    ChatStreamBody,
    CompletionBatchBody,
    CompletionStreamBody,
    parse_body,
)
from render_service.derender.settings import ChatSettings, CompletionSettings
from render_service.derender.state import ChoiceKind, LocalStateEnvelope, StateEnvelope
from render_service.derender.stream import derender_stream
from render_service.derender.stream_kinds import CHAT_STREAM, COMPLETION_STREAM
from render_service.derender.stream_state import StreamStateCodec
from render_service.errors import ConfigMismatchError, NotFoundError
from render_service.protocol import ChatCompletionRequest, CompletionRequest, parse_request

__all__ = ["Derenderer"]

# Keys that are ours, not vLLM's ChatCompletionRequest fields; removed before validation.
_OUR_REQUEST_KEYS = ("parse_context", "render_fingerprint")
# What a vLLM client resends with every stream chunk and a verified state makes redundant:
# the state carries the prompt's effect and the request settings (which win anyway).
RESENT_KEYS: dict[ChoiceKind, frozenset[str]] = {
    ChoiceKind.CHAT: frozenset({"prompt_token_ids", "chat_request"}),
    ChoiceKind.COMPLETION: frozenset({"prompt_token_ids", "completion_request"}),
}


class Derenderer:
    def __init__(self, config: ServiceConfig, renderer: Any, *, local_states: bool = False) -> None:
        """`local_states=True` is for callers in this process that keep each choice's
        `stream_state` in memory between chunks (the gateway): states are then plain objects,
        neither signed nor serialisable, and cost nothing to pass back."""
        bundle = renderer.bundle
        config = config.for_model(bundle.model_type)
        self._config = config
        self._renderer = renderer
        # What of a request's tools the stream state must carry for the configured parser.
        self._tool_view = tool_parser_traits(config.tool_call_parser or "").tool_view
        self.ctx = _build_context(config, bundle, self._resolve_kwargs, local_states)

    # -- public API -----------------------------------------------------------------------

    def derender_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """`POST /v1/chat/completions/derender`: batch response or one stream step."""
        body = self._lean(body, ChoiceKind.CHAT)
        request = parse_body(body, ChatBatchBody, ChatStreamBody)
        self._check_model(request.model)
        self._check_fingerprint(request.render_fingerprint)
        settings = self._chat_settings(request.chat_request)
        if isinstance(request, ChatStreamBody):
            return derender_stream(self.ctx, request, settings, CHAT_STREAM)
        return derender_chat_batch(self.ctx, request, settings)

    def derender_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """`POST /v1/completions/derender`: batch response or one stream step."""
        body = self._lean(body, ChoiceKind.COMPLETION)
        request = parse_body(body, CompletionBatchBody, CompletionStreamBody)
        self._check_model(request.model)
        self._check_fingerprint(request.render_fingerprint)
        settings = None
        if request.completion_request is not None:
            raw = _without_our_keys(request.completion_request)
            settings = CompletionSettings.from_request(parse_request(CompletionRequest, raw))
        if isinstance(request, CompletionStreamBody):
            return derender_stream(self.ctx, request, settings, COMPLETION_STREAM)
        return derender_completion_batch(self.ctx, request, settings)

    def without_resent(self, body: dict[str, Any], kind: ChoiceKind) -> dict[str, Any] | None:
        """`body` without the resent prompt ids and request when its `stream_state` is this
        server's state for the chunk's stream and choice, else None (validate it all).

        vLLM's protocol resends both with every chunk (a 32k-token prompt is ~350 KB); once
        the state verifies they cannot change the result, so they are neither validated nor
        materialised (the HTTP layer does not even decode them). The first chunk, and any
        chunk whose state does not verify, is validated in full, with vLLM's errors."""
        wire = body.get("stream_state")
        if wire is None or body.get("stream") is not True:
            return None
        chunk = body.get("generate_chunk")
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        request_id = chunk.get("request_id") if isinstance(chunk, dict) else None
        if not (isinstance(request_id, str) and isinstance(choices, list) and len(choices) == 1
                and isinstance(choices[0], dict)):
            return None
        index = choices[0].get("index")
        if type(index) is not int or not self.ctx.envelope.authentic(wire, kind, request_id, index):
            return None
        resent = RESENT_KEYS[kind]
        return {k: v for k, v in body.items() if k not in resent}

    def reasoning_parser_for(self, chat_request: dict[str, Any]) -> Any | None:
        """The reasoning parser derender uses for this chat request (None: none configured)."""
        settings = self._chat_settings(chat_request)
        if not self.ctx.parsers.reasoning_name or settings is None:
            return None
        return self.ctx.parsers.get(settings).reasoning_parser

    # -- helpers --------------------------------------------------------------------------

    def _lean(self, body: dict[str, Any], kind: ChoiceKind) -> dict[str, Any]:
        if RESENT_KEYS[kind].isdisjoint(body):
            return body  # nothing resent (our lean protocol, or the HTTP layer dropped it)
        return self.without_resent(body, kind) or body

    def _chat_settings(self, raw: dict[str, Any] | None) -> ChatSettings | None:
        if raw is None:
            return None
        request = parse_request(ChatCompletionRequest, _without_our_keys(raw))
        return ChatSettings.from_request(request, self._resolve_kwargs, self._tool_view)

    def _resolve_kwargs(self, request: Any) -> dict[str, Any]:
        resolve = getattr(self._renderer, "effective_chat_template_kwargs", None)
        kwargs = resolve(request) if resolve is not None else _fallback_kwargs(self._config, request)
        # The parser never reads documents; keep them out of the stream state.
        return {k: v for k, v in kwargs.items() if k != "documents"}

    def _check_model(self, name: str | None) -> None:
        names = self.ctx.served_model_names
        if name and name not in names:
            raise NotFoundError(
                f"The model `{name}` does not exist. Valid aliases: {', '.join(names)}.",
                param="model",
            )

    def _check_fingerprint(self, fingerprint: str | None) -> None:
        if fingerprint is not None and fingerprint != self.ctx.fingerprint:
            raise ConfigMismatchError(
                f"render_fingerprint {fingerprint!r} does not match this server's configuration "
                f"({self.ctx.fingerprint!r}): the request was rendered with another model, "
                "tokenizer, chat template or parser settings, so its output would be split "
                "differently. Send it to a derender server configured like the render server.",
                param="render_fingerprint",
            )


def _without_our_keys(raw: dict[str, Any]) -> dict[str, Any]:
    if not any(k in raw for k in _OUR_REQUEST_KEYS):
        return raw
    return {k: v for k, v in raw.items() if k not in _OUR_REQUEST_KEYS}


def _fallback_kwargs(config: ServiceConfig, request: Any) -> dict[str, Any]:
    """vLLM's build_chat_params(...).with_defaults(...).chat_template_kwargs."""
    effort = request.reasoning_effort
    if effort is not None and config.reasoning_effort_map:
        effort = config.reasoning_effort_map.get(effort, effort)
    extra: dict[str, Any] = {
        "add_generation_prompt": request.add_generation_prompt,
        "continue_final_message": request.continue_final_message,
        "documents": request.documents,
        "reasoning_effort": effort,
    }
    user = request.chat_template_kwargs or {}
    if effort is not None and "enable_thinking" not in user:
        extra["enable_thinking"] = effort != "none"
    merged = {k: v for k, v in user.items()} | {
        k: v for k, v in extra.items() if v not in (None, "auto")
    }
    defaults = config.default_chat_template_kwargs or {}
    if not defaults:
        return merged
    return dict(defaults) | {k: v for k, v in merged.items() if v not in (None, "auto")}


def _leading_space_marker(hf_tokenizer: Any) -> str | None:
    import json

    try:
        pre = json.loads(hf_tokenizer.backend_tokenizer.to_str()).get("pre_tokenizer") or {}
    except (AttributeError, ValueError):
        return None
    subs = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    for sub in subs:
        if sub and sub.get("type") == "Metaspace":
            marker: str = sub.get("replacement", "\u2581")
            return marker
    return None


def _mistral_tokenizer(bundle: Any) -> Any:
    """mistral-common's own tokenizer in mistral mode (vLLM decodes with it), else None."""
    if getattr(bundle, "mistral", None) is None:
        return None
    return bundle.mistral.tokenizer.instruct_tokenizer.tokenizer


def _build_context(
    config: ServiceConfig, bundle: Any, resolve_kwargs: Any, local_states: bool
) -> DerenderContext:
    hf = bundle.hf_tokenizer
    backend = hf.backend_tokenizer
    secret = config.stream_state_secret
    # Without a configured secret, states are valid only on this process (one replica).
    key = secret.encode() if secret else os.urandom(32)
    codec = StreamStateCodec(secret=key, max_bytes=config.limits.max_stream_state_bytes)
    parsers = ParserFactory(config, backend, list(hf.all_special_tokens), template_of(hf))
    return DerenderContext(
        served_model_names=tuple(bundle.served_model_names),
        max_model_len=bundle.max_model_len,
        max_logprobs=config.max_logprobs,
        fingerprint=bundle.fingerprint,
        decoders=Decoders(backend, hf.all_special_ids, mistral=_mistral_tokenizer(bundle)),
        token_decoder=HfTokenDecoder(hf, _leading_space_marker(hf)),
        eos=EosIds.from_bundle(bundle.eos_token_id, bundle.generation_config),
        parsers=parsers,
        envelope=LocalStateEnvelope() if local_states else StateEnvelope(codec, bundle.fingerprint),
        resolve_kwargs=resolve_kwargs,
    )
