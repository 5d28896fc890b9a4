"""gpt-oss chat render: OpenAI messages -> Harmony prompt ids, as vLLM 0.33 renders them.

vLLM does not use the model's Jinja template for `model_type: gpt_oss`: it builds Harmony
messages and renders them with openai_harmony (`_make_request_with_harmony`,
`parse_chat_inputs_to_harmony_messages`, `render_for_completion`). So does this module, with
the same library (oss-harmony, which embeds the o200k vocabulary: no download):

* preamble: a system message (reasoning effort low/medium/high, the conversation start date
  from `VLLM_SYSTEM_START_DATE` or today, as vLLM) and, when there are instructions (a
  leading system/developer message) or tools, a developer message with them;
* assistant turns: `reasoning` -> analysis channel, content -> final (commentary when the
  turn has tool calls), each tool call -> commentary to `functions.NAME`, content type json;
* tool results -> a `functions.NAME` tool message to the assistant (NAME from the call id);
* later system/developer messages -> developer instructions; user messages as they are;
* analysis messages before the last final assistant message are dropped, and prior
  tool-call headers are rewritten to the legacy layout gpt-oss was trained on.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from typing import Any

from render_service.config import ServiceConfig
from render_service.errors import BadRequestError
from render_service.model import ModelBundle
from render_service.protocol import vllm_validation_error
from render_service.render.chat_prompt import reused_prompt_ids

__all__ = [
    "HARMONY_EFFORTS",
    "developer_message",
    "harmony_lib",
    "harmony_preamble",
    "harmony_prompt_ids",
    "render_harmony",
    "render_messages",
    "text_of",
]

HARMONY_EFFORTS = ("high", "medium", "low")
_BUILTIN_TOOL_TYPES = ("web_search_preview", "code_interpreter", "container")


def harmony_lib() -> Any:
    import openai_harmony

    return openai_harmony


_ENCODING: Any = None


def _encoding() -> Any:
    global _ENCODING
    if _ENCODING is None:
        h = harmony_lib()
        _ENCODING = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
    return _ENCODING


def harmony_prompt_ids(
    bundle: ModelBundle, config: ServiceConfig, request: Any, tool_dicts: list[dict[str, Any]] | None
) -> list[int]:
    """A chat (or chat tokenize) request's prompt on a gpt_oss model: the reused ids of a
    P/D decode, else the Harmony rendering (`tool_dicts` None: no tools rendered)."""
    reuse = reused_prompt_ids(request, bundle, request.messages)
    if reuse:
        return reuse
    effort = getattr(request, "reasoning_effort", None)
    if effort is not None and config.reasoning_effort_map:
        effort = config.reasoning_effort_map.get(effort, effort)
    return render_harmony(request.messages, tool_dicts, effort)


def render_harmony(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    reasoning_effort: str | None,
) -> list[int]:
    """Prompt ids of a chat request. `tools`: the request's tools (model_dump form), or None
    when they are not rendered; `reasoning_effort`: after `--reasoning-effort-map`."""
    if reasoning_effort == "none":
        raise vllm_validation_error(
            f"Harmony does not support reasoning_effort={reasoning_effort!r}", parameter="reasoning_effort"
        )
    instructions, rest = _peel_instructions(list(messages))
    harmony_messages = harmony_preamble(instructions, tools, reasoning_effort)
    harmony_messages.extend(_conversation(rest))
    return render_messages(harmony_messages)


def text_of(content: Any) -> str | None:
    """vLLM's `flatten_input_text_content`: a string, or the text parts joined."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [
        item if isinstance(item, str) else item.get("text")
        for item in content
        if isinstance(item, str) or isinstance(item, dict)
    ]
    kept = [t for t in texts if t is not None]
    return "".join(kept) if kept else None


def _peel_instructions(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    if not messages or messages[0].get("role") not in ("system", "developer"):
        return None, messages
    return text_of(messages[0].get("content")), messages[1:]


def _system_message(reasoning_effort: str | None) -> Any:
    h = harmony_lib()
    content = h.SystemContent.new()
    if reasoning_effort is not None:
        if reasoning_effort not in HARMONY_EFFORTS:
            raise vllm_validation_error(
                f"reasoning_effort={reasoning_effort!r} is not supported by Harmony. "
                f"Supported values are: {', '.join(HARMONY_EFFORTS)}.",
                parameter="reasoning_effort",
            )
        content = content.with_reasoning_effort(h.ReasoningEffort[reasoning_effort.upper()])
    date = os.environ.get("VLLM_SYSTEM_START_DATE") or datetime.datetime.now().strftime("%Y-%m-%d")
    content = content.with_conversation_start_date(date)
    return h.Message.from_role_and_content(h.Role.SYSTEM, content)


def developer_message(instructions: str | None, tools: Sequence[dict[str, Any]] | None) -> Any:
    h = harmony_lib()
    content = h.DeveloperContent.new()
    if instructions is not None:
        content = content.with_instructions(instructions)
    functions = []
    for tool in tools or ():
        kind = tool.get("type")
        if kind in _BUILTIN_TOOL_TYPES:
            continue
        if kind != "function":
            raise vllm_validation_error(f"tool type {kind!r} is not supported.", parameter="tools")
        fn = tool.get("function") or {}
        functions.append(
            h.ToolDescription.new(
                name=fn.get("name"), description=fn.get("description") or "", parameters=fn.get("parameters")
            )
        )
    if functions:
        content = content.with_function_tools(functions)
    return h.Message.from_role_and_content(h.Role.DEVELOPER, content)


def harmony_preamble(
    instructions: str | None, tools: Sequence[dict[str, Any]] | None, reasoning_effort: str | None
) -> list[Any]:
    out = [_system_message(reasoning_effort)]
    if instructions or tools:
        out.append(developer_message(instructions, tools))
    return out


def _conversation(messages: list[dict[str, Any]]) -> list[Any]:
    names: dict[Any, Any] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            names[call.get("id")] = (call.get("function") or {}).get("name")
    out: list[Any] = []
    for message in messages:
        out.extend(_message(message, names))
    return out


def _assistant(text: str, channel: str) -> Any:
    h = harmony_lib()
    return h.Message.from_role_and_content(h.Role.ASSISTANT, text).with_channel(channel)


def _message(message: dict[str, Any], names: dict[Any, Any]) -> list[Any]:
    h = harmony_lib()
    role = message.get("role")
    calls = message.get("tool_calls") or []
    out: list[Any] = []
    if role == "assistant" and calls:
        content = text_of(message.get("content"))
        if content:
            out.append(_assistant(content, "commentary"))
        if message.get("reasoning"):
            out.append(_assistant(message["reasoning"], "analysis"))
        for call in calls:
            fn = call.get("function") or {}
            arguments = fn.get("arguments", "") or ""
            msg = _assistant(arguments, "commentary").with_recipient(f"functions.{fn.get('name', '')}")
            out.append(msg.with_content_type("json"))
        return out
    if role == "tool":
        name = names.get(message.get("tool_call_id", ""), "")
        author = h.Author.new(h.Role.TOOL, f"functions.{name}")
        text = text_of(message.get("content")) or ""
        msg = h.Message.from_author_and_content(author, text).with_channel("commentary")
        return [msg.with_recipient("assistant")]
    if role == "assistant" and message.get("reasoning"):
        out.append(_assistant(message["reasoning"], "analysis"))
    content = message.get("content") or ""
    if isinstance(content, str):
        parts = [h.TextContent(text=content)]
    else:
        parts = [h.TextContent(text=part.get("text", "")) for part in content]
    if role == "assistant":
        if parts and parts[0].text:
            out.append(h.Message.from_role_and_contents(h.Role.ASSISTANT, parts).with_channel("final"))
    elif role in ("system", "developer"):
        instructions = text_of(message.get("content"))
        if instructions is not None:
            out.append(developer_message(instructions, None))
    else:
        try:
            author = h.Role(role)
        except ValueError:
            raise BadRequestError(f"Unknown message role: {role!r}", param="messages") from None
        out.append(h.Message.from_role_and_contents(author, parts))
    return out


def render_messages(messages: list[Any]) -> list[int]:
    """vLLM `render_for_completion`: analysis dropping, the assistant's turn, legacy headers."""
    h = harmony_lib()
    last_final = max(
        (i for i, m in enumerate(messages) if m.author.role == h.Role.ASSISTANT and m.channel == "final"),
        default=-1,
    )
    kept = [m for i, m in enumerate(messages) if not (i < last_final and m.channel == "analysis")]
    ids = _encoding().render_conversation_for_completion(
        h.Conversation.from_messages(kept),
        h.Role.ASSISTANT,
        config=h.RenderConversationConfig(auto_drop_analysis=False),
    )
    return _legacy_tool_headers(list(ids))


def _legacy_tool_headers(ids: list[int]) -> list[int]:
    """Prior assistant tool calls as `<|start|>assistant to=R<|channel|>C T<|message|>`.

    oss-harmony renders `<|start|>assistant<|channel|>C to=R <|constrain|>T<|message|>`; vLLM
    rewrites exactly that header shape back to the layout gpt-oss was trained on."""
    enc = _encoding()
    start, channel, constrain, message = (
        enc.encode(t, allowed_special="all")[0]
        for t in ("<|start|>", "<|channel|>", "<|constrain|>", "<|message|>")
    )
    out = list(ids)
    i = 0
    while i < len(out):
        if out[i] != start:
            i += 1
            continue
        try:
            end = out.index(message, i + 1)
            ch = out.index(channel, i + 1, end)
            co = out.index(constrain, ch + 1, end)
        except ValueError:
            i += 1
            continue
        author = enc.decode(out[i + 1 : ch])
        middle = enc.decode(out[ch + 1 : co])
        ctype = enc.decode(out[co + 1 : end])
        if author != "assistant" or " to=" not in middle or not middle.endswith(" "):
            i = end + 1
            continue
        chan, recipient = middle[:-1].split(" to=", 1)
        if not chan or not recipient or not ctype:
            i = end + 1
            continue
        header = [start, *enc.encode(f"assistant to={recipient}"), channel, *enc.encode(f"{chan} {ctype}"), message]
        out[i : end + 1] = header
        i += len(header)
    return out
