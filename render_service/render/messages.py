"""OpenAI chat messages -> the conversation a chat template sees, as vLLM 0.33 builds it.

vLLM does not pass request messages to the template as given (`parse_chat_messages` and
`_postprocess_messages` in `vllm/renderers/chat_utils/chat_message.py`). Each message is
rebuilt with only: `role`, `content`, assistant `tool_calls` and `reasoning` (+ its alias
`reasoning_content`), tool `tool_call_id`, `name`, `task`, and developer `tools`. So:

- `content: null` (e.g. an assistant turn with only tool calls) becomes `""` ("string"
  content format) or `[]` ("openai" format);
- string content becomes `""`-joined text for "string" templates, and `[{"type": "text",
  "text": ...}]` for templates that loop over `message.content` ("openai" format); list
  content is joined with "\\n" for "string" templates;
- tool-call `arguments` JSON strings are parsed to dicts (invalid JSON or non-objects -> {});
- tool messages with text parts are flattened to a string.

Image parts (`image_url`, `input_image`) are collected in order as `ImageRef`s when the model
has an image family: "openai" templates get `{"type": "image"}` where the part was, "string"
templates get the family's placeholder text, put in front of the message's text unless
`--interleave-mm-strings` (vLLM `get_full_multimodal_text_prompt`). Parts vLLM does not know
keep their extra fields (e.g. `cache_control`) in "openai" format, as vLLM passes them on.
With --enable-prompt-embeds a `prompt_embeds` part (or an assistant `reasoning` given as one)
becomes the text `placeholder_marker(i)` where it stood, its payload kept for the caller to
validate (`render.chat_prompt`), and text holding the placeholder token is refused; without
the flag it is vLLM's 400. Audio, video and media-embedding parts are refused with a clear 400.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from render_service.errors import BadRequestError
from render_service.mm.refs import ImageRef, ImageSlots
from render_service.protocol import vllm_validation_error
from render_service.protocol.content import MEDIA_PART_TYPES
from render_service.render.prompt_embeds import PLACEHOLDER_TOKEN, placeholder_marker

__all__ = [
    "Conversation",
    "build_conversation",
    "count_history_tool_calls",
]

ContentFormat = Literal["string", "openai"]
# Which key holds the text of each text-like part type.
_TEXT_KEY = {
    "text": "text",
    "input_text": "text",
    "output_text": "text",
    "refusal": "refusal",
    "thinking": "thinking",
}
_SKIP_WHEN_NONE = ("text", "refusal")
_CLAUDE_CODE_BILLING_HEADER = "x-anthropic-billing-header"
_SUPPORTED_PART_TYPES = sorted(set(_TEXT_KEY) | MEDIA_PART_TYPES | {"tool_reference"})
_IMAGE_PART_TYPES = frozenset({"image_url", "input_image"})
# vLLM's _KNOWN_CONTENT_PART_FIELDS: every other key of a part is passed on to the template.
_KNOWN_PART_FIELDS = frozenset(
    {
        "audio_embeds", "audio_url", "closed", "data", "file", "image_embeds", "image_pil",
        "image_url", "input_audio", "name", "prompt_cache_breakpoint", "refusal", "text",
        "thinking", "type", "uuid", "video_embeds", "video_url",
    }
)  # fmt: skip
_SEPARATOR = "\n"  # vLLM multimodal_content_part_separator


@dataclass(slots=True)
class Conversation:
    messages: list[dict[str, Any]]
    images: list[ImageRef] = field(default_factory=list)
    # --enable-prompt-embeds: the base64 payload behind each placeholder_marker(i), in order.
    prompt_embeds: list[bytes] = field(default_factory=list)


@dataclass(slots=True)
class _Media:
    """Where a conversation's non-text parts go while its messages are parsed."""

    images: ImageSlots | None
    conversation: Conversation
    embeds_enabled: bool

    def add_prompt_embeds(self, part: dict[str, Any]) -> str:
        """vLLM's prompt_embeds part: its marker text; the payload is validated later, as
        vLLM's async tracker resolves it after parsing."""
        if not self.embeds_enabled:
            raise _multimodal_error("prompt_embeds")
        data = part.get("data")
        if not data:
            raise vllm_validation_error(_PROMPT_EMBEDS_MISSING_DATA, parameter="prompt_embeds")
        if not isinstance(data, str):
            raise BadRequestError("prompt_embeds data must be a base64 string", param="prompt_embeds")
        embeds = self.conversation.prompt_embeds
        embeds.append(data.encode())
        return placeholder_marker(len(embeds) - 1)

    def check_text(self, text: Any) -> None:
        """vLLM refuses text holding the placeholder token: it would fake a splice point."""
        if self.embeds_enabled and isinstance(text, str) and PLACEHOLDER_TOKEN in text:
            raise vllm_validation_error(
                f"Text content may not contain the reserved placeholder {PLACEHOLDER_TOKEN!r}. This "
                "placeholder is used internally to mark `prompt_embeds` splice positions in the "
                "tokenized prompt.",
                parameter="messages",
            )


class _Image:
    """Marker for where an image part stood among a message's parts."""


def count_history_tool_calls(messages: list[dict[str, Any]]) -> int:
    """Tool calls made by earlier assistant turns (vLLM `count_history_tool_calls`)."""
    count = 0
    for msg in messages:
        if msg.get("role") == "assistant":
            tool_calls = msg.get("tool_calls")
            if isinstance(tool_calls, list):
                count += len(tool_calls)
    return count


def build_conversation(
    messages: list[dict[str, Any]],
    content_format: ContentFormat,
    images: ImageSlots | None = None,
    *,
    prompt_embeds: bool = False,
) -> Conversation:
    """The conversation vLLM hands to `apply_chat_template`, and the request's image parts.

    Raises:
        BadRequestError: a malformed message, an unsupported content part, or an image part
            for a model that takes no images.
    """
    conversation = Conversation([])
    media = _Media(images, conversation, prompt_embeds)
    for index, message in enumerate(messages):
        conversation.messages.append(_convert_message(index, message, content_format, media))
    for message in conversation.messages:
        _postprocess_tool_calls(message)
    return conversation


def _convert_message(
    index: int,
    message: Any,
    content_format: ContentFormat,
    media: _Media,
) -> dict[str, Any]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise BadRequestError(
            f"messages[{index}] must be an object with a string 'role'", param=f"messages.{index}"
        )
    role = message["role"]
    # vLLM parses a prompt_embeds `reasoning` before the content (so its embedding comes first).
    reasoning = _reasoning_embeds(message.get("reasoning"), media) if role == "assistant" else None
    content = message.get("content")
    if content is None:
        parts: list[Any] = []
    elif isinstance(content, str):
        parts = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        parts = content
    else:
        raise BadRequestError(
            f"messages[{index}].content must be a string, a list of content parts or null",
            param=f"messages.{index}.content",
        )
    if role == "system":
        parts = _strip_billing_header(parts)
    converted = _parse_parts(role, parts, content_format == "openai", media)
    if role == "assistant":
        if message.get("tool_calls") is not None:
            converted["tool_calls"] = _copy_tool_calls(message["tool_calls"])
        if reasoning is not None:
            converted["reasoning"] = reasoning
            converted["reasoning_content"] = reasoning
    elif role == "tool":
        if "tool_call_id" in message:
            converted["tool_call_id"] = message["tool_call_id"]
        converted["content"] = _flatten_tool_content(converted.get("content"))
    if isinstance(message.get("name"), str):
        converted["name"] = message["name"]
    if isinstance(message.get("task"), str):
        converted["task"] = message["task"]
    if role == "developer":
        converted["tools"] = message.get("tools")
    return converted


def _reasoning_embeds(reasoning: Any, media: _Media) -> Any:
    """An assistant `reasoning` given as a prompt_embeds part becomes its marker text."""
    if not isinstance(reasoning, dict):
        return reasoning
    if reasoning.get("type") != "prompt_embeds":
        raise _multimodal_error("prompt_embeds")
    return media.add_prompt_embeds(reasoning)


def _parse_parts(role: str, parts: list[Any], wrap: bool, media: _Media) -> dict[str, Any]:
    items: list[Any] = []
    for part in parts:
        parsed = _parse_part(part, wrap=wrap, media=media)
        if isinstance(parsed, ImageRef):
            if media.images is None:
                raise BadRequestError(
                    "This model does not take image inputs; send text content only.", param="messages"
                )
            media.conversation.images.append(parsed)
            parsed = {"type": "image", **_extra_fields(part)} if wrap else _Image()
        if parsed is not None:
            items.append(parsed)
    if wrap:
        return {"role": role, "content": items}
    return {"role": role, "content": _string_content(items, media.images)}


def _string_content(items: list[Any], images: ImageSlots | None) -> str:
    """vLLM get_full_multimodal_text_prompt for one message of a "string" template."""
    image_count = sum(isinstance(item, _Image) for item in items)
    if not image_count or images is None:
        return _SEPARATOR.join(items)
    placeholder = images.placeholder
    if images.interleave_strings:
        texts = [placeholder if isinstance(item, _Image) else item for item in items]
    else:
        texts = [item for item in items if not isinstance(item, _Image)]
    text = _SEPARATOR.join(texts)
    missing = image_count - text.count(placeholder)
    if missing < 0:
        raise vllm_validation_error(
            f"Found more '{placeholder}' placeholders in input prompt than actual multimodal data items.",
            parameter="messages",
        )
    front = [placeholder] * missing
    return _SEPARATOR.join([*front, text] if text else front)


def _parse_part(part: Any, *, wrap: bool, media: _Media) -> Any:
    if isinstance(part, str):
        media.check_text(part)
        return {"type": "text", "text": part} if wrap else part
    if not isinstance(part, dict):
        raise BadRequestError("content parts must be strings or objects", param="messages")
    part_type = part.get("type")
    if part_type is None:
        part_type = "prompt_embeds" if media.embeds_enabled and "prompt_embeds" in part else _untyped_part_type(part)
    if not isinstance(part_type, str):
        raise vllm_validation_error("Invalid 'type' field in multimodal part.", parameter="type")
    if part_type in _TEXT_KEY:
        text = part.get(_TEXT_KEY[part_type])
        if text is None and part_type in _SKIP_WHEN_NONE:
            return None
        media.check_text(text)
        return {"type": "text", "text": text, **_extra_fields(part)} if wrap else text
    if part_type == "tool_reference":
        name = part.get("name")
        return {"type": "tool_reference", "name": name} if wrap else name
    if part_type in _IMAGE_PART_TYPES:
        return _image_ref(part, part_type)
    if part_type == "prompt_embeds":
        marker = media.add_prompt_embeds(part)  # chat templates see it as text
        return {"type": "text", "text": marker} if wrap else marker
    if part_type in MEDIA_PART_TYPES:
        raise _multimodal_error(part_type)
    raise vllm_validation_error(
        f"Unsupported chat content part type: {part_type!r}. "
        f"Supported types: {', '.join(_SUPPORTED_PART_TYPES)}.",
        parameter="type",
        value=part_type,
    )


def _untyped_part_type(part: dict[str, Any]) -> str:
    """vLLM infers the type of a part without `type` from the key it carries."""
    if "image_url" in part:
        return "image_url"
    for key in MEDIA_PART_TYPES:
        if key in part:
            raise _multimodal_error(key)
    if "tool_reference" in part:
        return "tool_reference"
    raise vllm_validation_error("Missing 'type' field in multimodal part.", parameter="type")


_IMAGE_DETAILS = ("auto", "low", "high", "original")


def _image_ref(part: dict[str, Any], part_type: str) -> ImageRef:
    """The URL of an image part, validated like vLLM's OpenAI TypedDict adapters."""
    value = part.get("image_url")
    if "type" not in part:  # untyped parts are not validated by vLLM: dict or plain string
        value = value.get("url") if isinstance(value, dict) else value
    elif part_type == "image_url":
        if not isinstance(value, dict) or not isinstance(value.get("url"), str):
            raise vllm_validation_error("image_url parts need an image_url object with a string url.", parameter="image_url")
        _check_detail(value.get("detail", "auto"), required=False)
        value = value["url"]
    else:  # input_image (Responses API shape): detail is required, image_url a string
        _check_detail(part.get("detail"), required=True)
        if value is not None and not isinstance(value, str):
            raise vllm_validation_error("input_image.image_url must be a string.", parameter="image_url")
    if not isinstance(value, str) or not value:
        # vLLM would look the image up by `uuid` in an engine-side cache; a render tier has none.
        raise BadRequestError("An image part needs image_url.url (a data: or http(s) URL).", param="messages")
    uuid = part.get("uuid")
    return ImageRef(value, None if uuid is None else str(uuid))


def _check_detail(detail: Any, *, required: bool) -> None:
    if detail is None and not required:
        return
    if detail not in _IMAGE_DETAILS:
        raise vllm_validation_error(
            f"image detail must be one of {', '.join(_IMAGE_DETAILS)}.", parameter="detail", value=detail
        )


def _extra_fields(part: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in part.items() if key not in _KNOWN_PART_FIELDS}


# vLLM 0.33's texts: prompt embeddings without --enable-prompt-embeds, and a part without data.
PROMPT_EMBEDS_DISABLED = "You must set `--enable-prompt-embeds` to input `prompt_embeds`"
_PROMPT_EMBEDS_MISSING_DATA = (
    "prompt_embeds content part requires a non-empty `data` field with base64-encoded tensor bytes."
)


def _multimodal_error(part_type: str) -> BadRequestError:
    if part_type == "prompt_embeds":
        return vllm_validation_error(PROMPT_EMBEDS_DISABLED, parameter="prompt_embeds")
    return BadRequestError(
        f"Multimodal content ({part_type!r}) is not supported by this render service; "
        "images (image_url) are, for models that take them.",
        param="messages",
    )


def _strip_billing_header(parts: list[Any]) -> list[Any]:
    """Drop Claude Code's per-request attribution line (it defeats prefix caching)."""
    out: list[Any] = []
    for part in parts:
        if isinstance(part, str):
            text: Any = part
        elif isinstance(part, dict) and part.get("type") == "text":
            text = part.get("text")
        else:
            text = None
        if not (isinstance(text, str) and text.startswith(_CLAUDE_CODE_BILLING_HEADER)):
            out.append(part)
            continue
        rest = text.partition("\n")[2]
        if rest:
            out.append(rest if isinstance(part, str) else {**part, "text": rest})
    return out


def _flatten_tool_content(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    if any(isinstance(item, dict) and item.get("type") != "text" for item in content):
        return content
    texts = [
        item.get("text", "") for item in content if isinstance(item, dict) and item.get("type") == "text"
    ]
    return "\n".join(texts) if texts else ""


def _copy_tool_calls(tool_calls: Any) -> Any:
    """Fresh dicts in the OpenAI TypedDict key order (id, function{arguments, name}, type)."""
    if not isinstance(tool_calls, list):
        raise BadRequestError("assistant tool_calls must be a list.", param="tool_calls")
    copied = []
    for index, item in enumerate(tool_calls):
        _check_tool_call(index, item)
        call = {k: item[k] for k in ("id", "function", "type") if k in item}
        function = call.get("function")
        if isinstance(function, dict):
            call["function"] = {k: function[k] for k in ("arguments", "name") if k in function}
        copied.append(call)
    return copied


def _check_tool_call(index: int, item: Any) -> None:
    """The OpenAI tool-call shape vLLM's request schema demands (id, type, name, arguments)."""
    function = item.get("function") if isinstance(item, dict) else None
    if not (
        isinstance(item, dict)
        and isinstance(item.get("id"), str)
        and item.get("type") == "function"
        and isinstance(function, dict)
        and isinstance(function.get("name"), str)
        and isinstance(function.get("arguments"), str)
    ):
        raise BadRequestError(
            f"tool_calls[{index}] must be an object with a string `id`, `type` \"function\" and "
            "`function` {`name`: string, `arguments`: JSON string}",
            param="messages",
        )


def _postprocess_tool_calls(message: dict[str, Any]) -> None:
    if message["role"] != "assistant" or "tool_calls" not in message:
        return
    tool_calls = message["tool_calls"]
    if not isinstance(tool_calls, list):
        return
    if not tool_calls:
        message.pop("tool_calls")
        return
    for item in tool_calls:
        if not isinstance(item, dict):
            raise vllm_validation_error(
                "assistant tool_calls entries must be objects.", parameter="tool_calls"
            )
        function = item.get("function")
        if item.get("type", "function") != "function" or not isinstance(function, dict):
            raise vllm_validation_error(
                "chat completions only support assistant tool_calls of type 'function'.",
                parameter="tool_calls",
            )
        function["arguments"] = _parse_arguments(function.get("arguments"))


def _parse_arguments(arguments: Any) -> dict[str, Any]:
    if not arguments:
        return {}
    if isinstance(arguments, dict):
        return arguments
    parsed: Any = arguments
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            return {}
    return parsed if isinstance(parsed, dict) else {}
