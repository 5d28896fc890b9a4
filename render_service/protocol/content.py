"""Content-part types of chat messages, as far as request validation must know them.

Both the chat request schema (a `kv_transfer_params.prompt_token_ids` reuse is dropped for
media prompts) and the message normalisation (`render_service.render.messages`) read these;
they live here so that the schema needs nothing from the render core.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MEDIA_PART_TYPES", "TEXT_CONTENT_PART_TYPES", "has_non_text_content"]

_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text", "refusal", "thinking"})
TEXT_CONTENT_PART_TYPES = _TEXT_PART_TYPES | {"tool_reference"}
MEDIA_PART_TYPES = frozenset(
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
                any(key in part for key in MEDIA_PART_TYPES)
                or not isinstance(part_type, str)
                or part_type not in TEXT_CONTENT_PART_TYPES
            ):
                return True
    return False
