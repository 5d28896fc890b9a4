"""A Responses request's prompt on a gpt_oss model, as vLLM 0.33's `_render_responses_with_harmony`.

vLLM does not go through chat messages here: it builds Harmony messages straight from the
Responses fields (`build_harmony_preamble`, `construct_harmony_previous_input_messages`,
`response_input_to_harmony`) and renders them like the chat Harmony path:

* instructions: `instructions`, else a leading system/developer input item;
* tools reach the developer message only when one is not a built-in (web_search_preview,
  code_interpreter, container; MCP tools count as none); then every tool must be a function or
  a built-in, anything else (namespace, custom, mcp, web_search...) is vLLM's 400;
* `previous_input_messages` (Harmony or chat dicts) come first, without system/developer ones;
* input items: messages (assistant text on the final channel), reasoning content (parts joined
  by newlines; none: skipped), function calls (commentary to `functions.NAME`, json) and their
  outputs (the tool named by the earlier call of that call_id, else a 400).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from render_service.errors import BadRequestError
from render_service.protocol import sanitize_message, vllm_validation_error
from render_service.protocol.responses import ResponsesRequest
from render_service.render.harmony import (
    developer_message,
    harmony_lib,
    harmony_preamble,
    render_messages,
    text_of,
)

__all__ = ["responses_harmony_prompt_ids"]

_BUILTIN_TOOLS = frozenset({"web_search_preview", "code_interpreter", "container"})
_INSTRUCTION_ROLES = ("system", "developer")


def responses_harmony_prompt_ids(request: ResponsesRequest, effort_map: Mapping[str, str]) -> list[int]:
    items: str | list[Any] = request.input
    instructions = request.instructions
    if instructions is None and isinstance(items, list):
        instructions, items = _peel_instructions(items)
    effort: str | None = request.reasoning.effort if request.reasoning is not None else None
    if effort is not None:
        effort = effort_map.get(effort, effort)
    messages = harmony_preamble(instructions, _preamble_tools(request.tools), effort)
    previous = request.previous_input_messages or []
    messages.extend(_previous_messages(previous))
    if isinstance(items, str):
        if items or not previous:
            messages.append(_message("user", items))
    else:
        messages.extend(_input_messages(items))
    return render_messages(messages)


def _peel_instructions(items: list[Any]) -> tuple[str | None, list[Any]]:
    first = items[0] if items else None
    if not isinstance(first, dict) or first.get("role") not in _INSTRUCTION_ROLES:
        return None, items
    return text_of(first.get("content")), items[1:]


def _preamble_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The tools vLLM lists in the developer message (None: no custom tool, so none)."""
    kinds = {tool.get("type") for tool in tools if tool.get("type") != "mcp"}
    if kinds <= _BUILTIN_TOOLS:
        return None
    return [_as_chat_tool(tool) for tool in tools]


def _as_chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type") != "function":
        return tool  # a built-in is skipped, anything else refused, by developer_message
    fields = ("name", "description", "parameters")
    return {"type": "function", "function": {key: tool.get(key) for key in fields}}


def _message(role: str, content: Any) -> Any:
    h = harmony_lib()
    try:
        author = h.Role(role)
    except ValueError:
        raise BadRequestError(f"Unknown message role: {role!r}", param="input") from None
    if isinstance(content, str):
        return h.Message.from_role_and_content(author, content)
    parts = [h.TextContent(text=part.get("text", "")) for part in content or [] if isinstance(part, dict)]
    return h.Message.from_role_and_contents(author, parts)


def _is_instruction(message: Any) -> bool:
    h = harmony_lib()
    return bool(message.author.role in (h.Role.SYSTEM, h.Role.DEVELOPER))


def _previous_messages(previous: list[dict[str, Any]]) -> list[Any]:
    """Instructions are never carried over: system/developer messages are dropped."""
    out: list[Any] = []
    for message in previous:
        converted = _harmony_format(message) if isinstance(message.get("author"), dict) else _chat_format(message)
        out.extend(m for m in converted if not _is_instruction(m))
    return out


def _harmony_format(message: dict[str, Any]) -> list[Any]:
    h = harmony_lib()
    author = message["author"]
    role, name = author.get("role"), author.get("name")
    content = message.get("content", "")
    if isinstance(content, list):
        parts = [h.TextContent(text=c.get("text", "")) for c in content if isinstance(c, dict)]
    else:
        parts = [h.TextContent(text=content if isinstance(content, str) else "")]
    try:
        harmony_role = h.Role(role)
    except ValueError:
        raise BadRequestError(f"Unknown message role: {role!r}", param="previous_input_messages") from None
    if name:
        out = h.Message(author=h.Author.new(harmony_role, name), content=parts)
    else:
        out = h.Message.from_role_and_contents(harmony_role, parts)
    for field, setter in (("channel", "with_channel"), ("recipient", "with_recipient"), ("content_type", "with_content_type")):
        if message.get(field):
            out = getattr(out, setter)(message[field])
    return [out]


def _chat_format(message: dict[str, Any]) -> list[Any]:
    h = harmony_lib()
    role = message.get("role")
    if role is None:
        raise vllm_validation_error(f"Message has no 'role' key: {message}", parameter="input")
    calls = message.get("tool_calls")
    if role == "assistant" and calls:
        out = []
        for call in calls:
            fn = call.get("function", {})
            text = fn.get("arguments", "") or ""
            msg = h.Message.from_role_and_content(h.Role.ASSISTANT, text).with_channel("commentary")
            out.append(msg.with_recipient(f"functions.{fn.get('name', '')}").with_content_type("json"))
        return out
    if role == "tool":
        name = message.get("name", "")
        if name and not name.startswith("functions."):
            name = f"functions.{name}"
        text = text_of(message.get("content")) or ""
        msg = h.Message.from_author_and_content(h.Author.new(h.Role.TOOL, name), text).with_channel("commentary")
        return [msg.with_recipient("assistant")]
    if role in _INSTRUCTION_ROLES:
        return []  # dropped by the caller anyway
    content = message.get("content", "")
    if content is None:  # vLLM iterates it and answers with Python's TypeError text
        raise BadRequestError("'NoneType' object is not iterable")
    return [_message(role, content)]


def _input_messages(items: list[Any]) -> list[Any]:
    """vLLM's loop over `response_input_to_harmony`; its errors are invalid_request_error 400s."""
    call_names: dict[Any, Any] = {}
    out: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            raise BadRequestError("Input items must be objects.", param="input")
        try:
            message = _item_message(item, call_names)
        except ValidationError as exc:  # openai_harmony's own refusal (a ValueError to vLLM)
            raise _invalid_input(BadRequestError(sanitize_message(str(exc)), param="input")) from None
        except BadRequestError as exc:
            raise _invalid_input(exc) from None
        if message is not None:
            out.append(message)
        if item.get("type") == "function_call":
            call_names[item.get("call_id")] = item.get("name")
    return out


def _invalid_input(error: BadRequestError) -> BadRequestError:
    error.error_type = "invalid_request_error"
    return error


def _item_message(item: dict[str, Any], call_names: Mapping[Any, Any]) -> Any:
    h = harmony_lib()
    kind = item.get("type")
    if kind is None or kind == "message":
        role, content = item.get("role"), item.get("content")
        if role in _INSTRUCTION_ROLES:
            text = text_of(content)
            return developer_message(text, None) if text else None
        message = _message(str(role), content)
        return message.with_channel("final") if role == "assistant" else message
    if kind == "function_call_output":
        call_id = item.get("call_id")
        if call_id not in call_names:
            raise vllm_validation_error(f"No call message found for {call_id}", parameter="input")
        author = h.Author.new(h.Role.TOOL, f"functions.{call_names[call_id]}")
        message = h.Message.from_author_and_content(author, item.get("output"))
        return message.with_channel("commentary").with_recipient("assistant")
    if kind == "reasoning":
        content = item.get("content")
        if not content:
            return None
        text = "\n".join(part["text"] for part in content)
        return h.Message.from_role_and_content(h.Role.ASSISTANT, text).with_channel("analysis")
    if kind == "function_call":
        message = h.Message.from_role_and_content(h.Role.ASSISTANT, item.get("arguments"))
        message = message.with_channel("commentary").with_recipient(f"functions.{item.get('name')}")
        return message.with_content_type("json")
    raise vllm_validation_error(f"Unknown input type: {kind}", parameter="input")
