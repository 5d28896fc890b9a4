"""Chat request -> prompt token ids, following vLLM 0.33's OnlineRenderer.render_chat.

Steps (each a small function below): tool-choice gate, per-request template trust, template
kwargs (server defaults < request `chat_template_kwargs` < add_generation_prompt /
continue_final_message / documents / reasoning_effort (+ enable_thinking)), template and
content-format resolution, message normalisation (`messages.build_conversation`), rendering
(`chat_template.render_chat_template`), then tokenization with vLLM's length rules.

`kv_transfer_params.prompt_token_ids` (decode-side reuse in P/D) replaces templating when
present and valid.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from render_service.config import ServiceConfig
from render_service.errors import BadRequestError
from render_service.mm.pipeline import ImagePipeline, PreparedImages
from render_service.mm.refs import ImageRef, ImageSlots
from render_service.model import ModelBundle
from render_service.protocol import ChatCompletionRequest, sanitize_message, vllm_validation_error
from render_service.protocol.content import has_non_text_content
from render_service.render.chat_template import (
    HF_APPLY_CHAT_TEMPLATE_PARAMS,
    TemplateRenderError,
    detect_content_format,
    render_chat_template,
    template_variables,
)
from render_service.render.jinja_env import RenderLimits
from render_service.render.messages import build_conversation
from render_service.render.prompt_embeds import (
    PLACEHOLDER_TOKEN,
    embeds_spec,
    embeds_token_count,
    placeholder_marker,
)
from render_service.render.prompt_limits import TokenizeLimits

__all__ = ["ChatPrompt", "merge_kwargs", "render_chat_prompt", "request_template_kwargs", "server_template_kwargs"]

_UNSET = (None, "auto")


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    token_ids: list[int]
    token_offsets: list[tuple[int, int]] | None
    images: PreparedImages | None = None
    placeholders: list[dict[str, int]] | None = None  # per image: offset/length in token_ids


# vLLM's `--cohere-format` default, always added to the server's default template kwargs.
COHERE_FORMAT_DEFAULT = "cmd4"


def server_template_kwargs(config: ServiceConfig) -> dict[str, Any]:
    """--default-chat-template-kwargs, plus `cohere_format` unless set (vLLM always adds it)."""
    kwargs = dict(config.default_chat_template_kwargs)
    kwargs.setdefault("cohere_format", COHERE_FORMAT_DEFAULT)
    return kwargs


def merge_kwargs(defaults: dict[str, Any] | None, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """vLLM merge_kwargs: overrides win, except values None or "auto" (they mean unset)."""
    merged = dict(defaults or {})
    for key, value in (overrides or {}).items():
        if not _is_unset(value):
            merged[key] = value
    return merged


def _is_unset(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value == "auto")


def request_template_kwargs(
    config: ServiceConfig,
    *,
    chat_template_kwargs: dict[str, Any] | None,
    add_generation_prompt: bool,
    continue_final_message: bool,
    documents: Any = None,
    reasoning_effort: str | None = None,
) -> dict[str, Any]:
    """Request chat_template_kwargs < the request's own template fields (server defaults go
    underneath with `merge_kwargs(config.default_chat_template_kwargs, ...)`)."""
    effort = reasoning_effort
    if effort is not None and config.reasoning_effort_map:
        effort = config.reasoning_effort_map.get(effort, effort)
    extra: dict[str, Any] = {
        "add_generation_prompt": add_generation_prompt,
        "continue_final_message": continue_final_message,
        "documents": documents,
        "reasoning_effort": effort,
    }
    if effort is not None and "enable_thinking" not in (chat_template_kwargs or {}):
        extra["enable_thinking"] = effort != "none"
    return merge_kwargs(chat_template_kwargs, extra)


def check_tool_choice_gate(request: ChatCompletionRequest, *, has_tool_parser: bool, auto_tools: bool) -> None:
    """Without a tool parser, only tool_choice "none" (or null) is served."""
    choice = request.tool_choice
    if has_tool_parser or choice in (None, "none"):
        return
    if choice == "auto":
        if not auto_tools:
            raise BadRequestError(
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
            )
        return
    described = f'"{choice}"' if isinstance(choice, str) else f'function "{choice.function.name}"'
    raise BadRequestError(f"tool_choice={described} requires --tool-call-parser to be set")


def check_template_trust(
    request_template: str | None, kwargs: dict[str, Any] | None, trusted: bool
) -> None:
    if trusted:
        return
    if request_template is not None or (kwargs and kwargs.get("chat_template") is not None):
        raise BadRequestError(
            "Chat template is passed with request, but --trust-request-chat-template is not "
            "set. Refused request with untrusted chat template."
        )


def check_mm_kwargs(request: Any, trusted: bool) -> None:
    if trusted:
        return
    for name, what in (("mm_processor_kwargs", "multimodal preprocessing resource usage"),
                       ("media_io_kwargs", "multimodal media loading resource usage")):
        if getattr(request, name, None):
            raise vllm_validation_error(
                f"Per-request {name} are disabled by default because they can change {what}. "
                "Start the server with --trust-request-mm-kwargs only when clients are trusted.",
                parameter=name,
            )


def resolve_template(bundle: ModelBundle, requested: str | None, tools: Any) -> str:
    """transformers' get_chat_template: a named template, the tool_use/default entry, or text."""
    templates = bundle.chat_template
    if isinstance(templates, dict):
        if requested is not None:
            return templates.get(requested, requested)
        if tools is not None and "tool_use" in templates:
            return templates["tool_use"]
        if "default" in templates:
            return templates["default"]
        raise BadRequestError(
            "This model has multiple chat templates with no default specified! Please either "
            "pass a chat template or the name of the template you wish to use to the "
            f"`chat_template` argument. Available template names are {sorted(templates)}."
        )
    if requested is not None:
        return requested
    if templates is None:
        raise BadRequestError(
            "As of transformers v4.44, default chat template is no longer allowed, so you "
            "must provide a chat template if the tokenizer does not define one."
        )
    return templates


def reused_prompt_ids(request: Any, bundle: ModelBundle, messages: Any = None) -> list[int] | None:
    """Pop `kv_transfer_params.prompt_token_ids` (decode-side reuse) and validate them."""
    kv = getattr(request, "kv_transfer_params", None)
    if not isinstance(kv, dict):
        return None
    ids = kv.pop("prompt_token_ids", None)
    if ids is None or getattr(request, "echo", False) or has_non_text_content(messages):
        return None
    param = "kv_transfer_params.prompt_token_ids"
    if not isinstance(ids, list) or not ids or any(type(x) is not int or x < 0 for x in ids):
        raise vllm_validation_error(
            "`kv_transfer_params['prompt_token_ids']` must be a non-empty list of non-negative "
            "integers.",
            parameter=param,
        )
    if max(ids) > bundle.max_token_id:
        raise vllm_validation_error(f"Token id {max(ids)} is out of vocabulary", parameter=param)
    return ids


def render_chat_prompt(
    bundle: ModelBundle,
    config: ServiceConfig,
    request: Any,
    *,
    tool_dicts: list[dict[str, Any]] | None,
    request_kwargs: dict[str, Any],
    tokenize_limits: TokenizeLimits,
    add_special_tokens: bool,
    want_offsets: bool,
    images: ImagePipeline | None = None,
    fetched_media: Mapping[str, bytes] | None = None,
) -> ChatPrompt:
    """Template + tokenize one chat request (ChatCompletionRequest or TokenizeChatRequest).

    With image parts, the images are loaded, hashed and processed after templating, and each
    image token of the template is expanded to the image's placeholder span.
    """
    defaults = merge_kwargs(server_template_kwargs(config), {"tools": tool_dicts})
    kwargs = merge_kwargs(defaults, request_kwargs)
    reuse = reused_prompt_ids(request, bundle, request.messages)
    if reuse:
        return ChatPrompt(reuse, None)
    slots = images.slots if images is not None else None
    rendered = _render(bundle, config, request.messages, request.chat_template, kwargs, slots)
    text, refs = rendered.text, rendered.images
    prepared = None
    if refs:  # build_conversation refuses image parts when there is no image pipeline
        assert images is not None
        prepared = images.prepare(
            refs,
            fetched=fetched_media,
            mm_processor_kwargs=request.mm_processor_kwargs,
            media_io_kwargs=request.media_io_kwargs,
        )
    offsets = None
    if config.enable_prompt_embeds:
        # vLLM then tokenizes inside apply_chat_template (tokenize=True): no character bound,
        # no special tokens added, no offsets.
        ids = bundle.encoder.encode(text)
        if rendered.embeds_counts:
            ids = _expand_embeds(ids, rendered.embeds_counts, bundle.prompt_embeds_token_id, tokenize_limits)
    elif want_offsets:
        text = tokenize_limits.check_text(text)
        ids, offsets = bundle.encoder.encode_with_offsets(text, add_special_tokens=add_special_tokens)
    else:
        text = tokenize_limits.check_text(text)
        ids = bundle.encoder.encode_full(text, add_special_tokens=add_special_tokens)
    if prepared is not None:
        assert images is not None  # prepared only with a pipeline
        return _expanded_prompt(ids, prepared, images, tokenize_limits)
    checked = tokenize_limits.check_tokens(ids, counted_whole=config.enable_prompt_embeds)
    if offsets is not None and len(checked) != len(ids):
        offsets = offsets[-len(checked):] if checked and checked[0] != ids[0] else offsets[: len(checked)]
    return ChatPrompt(checked, offsets)


def _expanded_prompt(
    ids: list[int],
    prepared: PreparedImages,
    images: ImagePipeline,
    tokenize_limits: TokenizeLimits,
) -> ChatPrompt:
    """Image tokens expanded; length limits apply to the expanded prompt (as vLLM's).

    vLLM returns no token_offsets for multimodal prompts, so neither do we.
    """
    expanded, ranges = images.expand(ids, prepared)
    checked = tokenize_limits.check_tokens(expanded)
    if len(checked) != len(expanded):
        raise BadRequestError(
            "truncate_prompt_tokens cannot be applied to a prompt with images: truncation would "
            "cut image placeholders.",
            param="truncate_prompt_tokens",
        )
    return ChatPrompt(checked, None, prepared, ranges)


def render_prompt_text(
    bundle: ModelBundle,
    config: ServiceConfig,
    messages: list[dict[str, Any]],
    request_template: str | None,
    kwargs: dict[str, Any],
) -> str:
    """The chat template applied to the normalised (text-only) conversation."""
    return _render(bundle, config, messages, request_template, kwargs, None).text


@dataclass(frozen=True, slots=True)
class _Rendered:
    text: str
    images: list[ImageRef]
    # Token count of each prompt_embeds part the template kept, in prompt order.
    embeds_counts: list[int]


def _render(
    bundle: ModelBundle,
    config: ServiceConfig,
    messages: list[dict[str, Any]],
    request_template: str | None,
    kwargs: dict[str, Any],
    image_slots: ImageSlots | None,
) -> _Rendered:
    """The prompt string (chat template over the normalised conversation), its images and
    the prompt_embeds spans it shows."""
    tools = kwargs.get("tools")
    # The server's --chat-template is already the bundle's template (loaded at start).
    requested = request_template or kwargs.get("chat_template")
    source = resolve_template(bundle, requested, tools)
    content_format = config.chat_template_content_format
    if content_format == "auto":
        content_format = detect_content_format(source)
    conversation = build_conversation(messages, content_format, image_slots, prompt_embeds=config.enable_prompt_embeds)
    turns = conversation.messages
    if any(m["role"] == "developer" for m in turns) and not _mentions_developer(source):
        turns = _developer_to_system(turns)
    template_kwargs = _accepted_kwargs(kwargs, source)
    limits = RenderLimits(config.limits.render_timeout_s, config.limits.max_template_output_chars)

    def render(conversation_turns: list[dict[str, Any]]) -> str:
        options = dict(template_kwargs)
        try:
            return render_chat_template(
                source,
                conversation_turns,
                tools=tools,
                documents=options.pop("documents", None),
                add_generation_prompt=bool(options.pop("add_generation_prompt", False)),
                continue_final_message=options.pop("continue_final_message", False),
                special_tokens_map=bundle.special_tokens_map,
                template_kwargs=options,
                limits=limits,
            )
        except TemplateRenderError as exc:
            raise BadRequestError(sanitize_message(str(exc))) from exc

    if not conversation.prompt_embeds:
        return _Rendered(render(turns), conversation.images, [])
    spec = embeds_spec(bundle)
    counts = [embeds_token_count(data, spec) for data in conversation.prompt_embeds]
    visible = _visible_embeds(render(turns), counts)
    # vLLM renders again with every marker replaced by the one placeholder token.
    return _Rendered(render(_unmarked(turns, len(counts))), conversation.images, visible)


def _visible_embeds(text: str, counts: list[int]) -> list[int]:
    """vLLM's _filter_prompt_embeds_by_template: the parts the template shows, in order."""
    shown: list[tuple[int, int]] = []
    for index, count in enumerate(counts):
        marker = placeholder_marker(index)
        occurrences = text.count(marker)
        if occurrences > 1:
            raise BadRequestError(
                f"Chat template rendered prompt_embeds placeholder {marker!r} {occurrences} times; "
                "each placeholder must appear at most once."
            )
        if occurrences == 1:
            shown.append((text.index(marker), count))
    return [count for _, count in sorted(shown)]


def _unmarked(value: Any, marker_count: int) -> Any:
    """The conversation with each placeholder_marker(i) replaced by the placeholder token."""
    if isinstance(value, str):
        for index in range(marker_count):
            value = value.replace(placeholder_marker(index), PLACEHOLDER_TOKEN)
        return value
    if isinstance(value, list):
        return [_unmarked(item, marker_count) for item in value]
    if isinstance(value, dict):
        return {key: _unmarked(item, marker_count) for key, item in value.items()}
    return value


def _expand_embeds(ids: list[int], counts: list[int], token_id: int | None, limits: TokenizeLimits) -> list[int]:
    """Each placeholder token becomes a span of its embedding's length (vLLM's
    _apply_prompt_embeds_to_prompt), truncated and length-checked before it is built: a
    stride-0 payload of a few bytes may declare millions of rows."""
    found = ids.count(token_id) if token_id is not None else 0
    if found != len(counts):
        raise BadRequestError(
            f"Expected {len(counts)} prompt_embeds placeholder tokens in the rendered prompt, found {found}."
        )
    if 0 in counts:  # vLLM then looks for each expanded span, and an empty one is never found
        raise BadRequestError(
            f"Expected {len(counts)} prompt_embeds placeholder spans in the tokenized prompt, "
            f"found {len(counts) - counts.count(0)}."
        )
    spans = iter(counts)
    runs = [(token, next(spans) if token == token_id else 1) for token in ids]
    start, end = limits.check_count(sum(repeat for _, repeat in runs))
    out: list[int] = []
    position = 0
    for token, repeat in runs:  # the [start, end) slice of the expanded runs
        low, high = max(start, position), min(end, position + repeat)
        if low < high:
            out.extend([token] * (high - low))
        position += repeat
    return out


def _accepted_kwargs(kwargs: dict[str, Any], source: str) -> dict[str, Any]:
    """vLLM resolve_chat_template_kwargs: keep kwargs the template or HF's signature knows."""
    accepted = (template_variables(source) | HF_APPLY_CHAT_TEMPLATE_PARAMS) - {"chat_template", "tokenize"}
    return {k: v for k, v in kwargs.items() if k in accepted and k != "tools"}


def _mentions_developer(source: str) -> bool:
    return '"developer"' in source or "'developer'" in source


def _developer_to_system(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    converted = []
    for message in conversation:
        if message["role"] == "developer":
            message = {**message, "role": "system"}
            message.pop("tools", None)
        converted.append(message)
    return _consolidate_system(converted)


def _consolidate_system(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge all system messages into one at position 0 (vLLM, after developer conversion)."""
    contents: list[str] = []
    others: list[dict[str, Any]] = []
    needed = False
    for index, message in enumerate(conversation):
        if message["role"] != "system":
            others.append(message)
            continue
        if index > 0 or contents:
            needed = True
        content = message.get("content", "")
        if isinstance(content, list):
            content = "\n".join(
                part["text"] if isinstance(part, dict) else part
                for part in content
                if (isinstance(part, dict) and "text" in part) or isinstance(part, str)
            )
        if content:
            contents.append(content)
    if not needed:
        return conversation
    return [{"role": "system", "content": "\n\n".join(contents)}, *others]
