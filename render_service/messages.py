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

Multimodal parts (images, audio, video, embeddings) are refused with a clear 400 for now.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from render_service.errors import BadRequestError
from render_service.protocol import vllm_validation_error

__all__ = ["build_conversation", "has_non_text_content", "count_history_tool_calls"]

ContentFormat = Literal["string", "openai"]
_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text", "refusal", "thinking"})
_TEXT_CONTENT_PART_TYPES = _TEXT_PART_TYPES | {"tool_reference"}
_MEDIA_PART_TYPES = frozenset(
    {
        "input_image",
        "image_url",
        "image_embeds",
        "audio_embeds",
        "video_embeds",
        "prompt_embeds",
        "image_pil",
        "audio_url",
        "input_audio",
        "video_url",
    }
)
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
_SUPPORTED_PART_TYPES = sorted(set(_TEXT_KEY) | _MEDIA_PART_TYPES | {"tool_reference"})


def has_non_text_content(messages: Any) -> bool:
    """Whether any message carries media parts (or prompt-embeds reasoning)."""
    if not isinstance(messages, list):
        return False
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        for key in ("reasoning", "reasoning_content"):
            value = msg.get(key)
            if isinstance(value, dict) and value.get("type") == "prompt_embeds":
                return True
        content = msg.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, dict):
                continue
            part_type = part.get("type", "text")
            if (
                any(key in part for key in _MEDIA_PART_TYPES)
                or not isinstance(part_type, str)
                or part_type not in _TEXT_CONTENT_PART_TYPES
            ):
                return True
    return False


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
    messages: list[dict[str, Any]], content_format: ContentFormat
) -> list[dict[str, Any]]:
    """The conversation vLLM hands to `apply_chat_template` for these request messages.

    Raises:
        BadRequestError: a malformed message, an unsupported or multimodal content part.
    """
    conversation = [_convert_message(i, msg, content_format) for i, msg in enumerate(messages)]
    for message in conversation:
        _postprocess_tool_calls(message)
    return conversation


def _convert_message(index: int, message: Any, content_format: ContentFormat) -> dict[str, Any]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise BadRequestError(
            f"messages[{index}] must be an object with a string 'role'", param=f"messages.{index}"
        )
    role = message["role"]
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
    converted = _parse_parts(role, parts, wrap=content_format == "openai")
    if role == "assistant":
        if message.get("tool_calls") is not None:
            converted["tool_calls"] = _copy_tool_calls(message["tool_calls"])
        reasoning = message.get("reasoning")
        if reasoning is not None:
            if isinstance(reasoning, dict):
                raise _multimodal_error("prompt_embeds")
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


def _parse_parts(role: str, parts: list[Any], *, wrap: bool) -> dict[str, Any]:
    items: list[Any] = []
    for part in parts:
        parsed = _parse_part(part, wrap=wrap)
        if parsed is not None:
            items.append(parsed)
    if wrap:
        return {"role": role, "content": items}
    return {"role": role, "content": "\n".join(items)}


def _parse_part(part: Any, *, wrap: bool) -> Any:
    if isinstance(part, str):
        return {"type": "text", "text": part} if wrap else part
    if not isinstance(part, dict):
        raise BadRequestError("content parts must be strings or objects", param="messages")
    part_type = part.get("type")
    if part_type is None:
        for key in _MEDIA_PART_TYPES:
            if key in part:
                raise _multimodal_error(key)
        if "tool_reference" in part:
            part_type = "tool_reference"
        else:
            raise vllm_validation_error("Missing 'type' field in multimodal part.", parameter="type")
    if not isinstance(part_type, str):
        raise vllm_validation_error("Invalid 'type' field in multimodal part.", parameter="type")
    if part_type in _TEXT_KEY:
        text = part.get(_TEXT_KEY[part_type])
        if text is None and part_type in _SKIP_WHEN_NONE:
            return None
        return {"type": "text", "text": text} if wrap else text
    if part_type == "tool_reference":
        name = part.get("name")
        return {"type": "tool_reference", "name": name} if wrap else name
    if part_type in _MEDIA_PART_TYPES:
        raise _multimodal_error(part_type)
    raise vllm_validation_error(
        f"Unsupported chat content part type: {part_type!r}. "
        f"Supported types: {', '.join(_SUPPORTED_PART_TYPES)}.",
        parameter="type",
        value=part_type,
    )


def _multimodal_error(part_type: str) -> BadRequestError:
    return BadRequestError(
        f"Multimodal content ({part_type!r}) is not supported by this render service yet; "
        "send text content only.",
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
