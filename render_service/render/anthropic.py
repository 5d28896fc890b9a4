"""Anthropic Messages request -> the chat request vLLM 0.33 renders for it.

`vllm launch render`'s `/v1/messages/render` (and `vllm serve`'s `/v1/messages`) convert the
request with `AnthropicServingMessages.to_chat_completion_request` and render that chat
request. vLLM builds the chat request from a few fields (validated), then assigns the rest
(stream, response_format, reasoning_effort, thinking_token_budget, tool_choice, tools)
without validation; we do the same, so e.g. a tool_choice without tools is not refused here.

Inline system messages are merged into the leading one when the template refuses a system
message after the first turn (probed once, as vLLM does at startup), and thinking.type
"disabled" sends `reasoning_effort` = `--anthropic-disabled-thinking-effort` ("auto": "none"
unless the template rejects or ignores it, then "low").
"""

from __future__ import annotations

import json
import time
from typing import Any

import jinja2
import jinja2.ext
import jinja2.sandbox
from pydantic import ValidationError

from render_service.errors import BadRequestError
from render_service.protocol import (
    ChatCompletionNamedToolChoiceParam,
    ChatCompletionRequest,
    ChatCompletionToolsParam,
    StreamOptions,
    VLLMValidationError,
    sanitize_message,
)
from render_service.protocol.anthropic import (
    AnthropicContentBlock,
    AnthropicCountTokensRequest,
    AnthropicMessage,
    AnthropicMessagesRequest,
    AnthropicThinkingEnabled,
    AnthropicTool,
    AnthropicToolChangeDefinition,
)

__all__ = ["messages_to_chat", "template_requires_system_first"]

_BILLING_HEADER = "x-anthropic-billing-header"  # Claude Code's per-request hash: defeats caching
_PROBE_MESSAGES = [
    {"role": "system", "content": "t"},
    {"role": "user", "content": "t"},
    {"role": "system", "content": "t"},
    {"role": "user", "content": "t"},
]


def template_requires_system_first(source: str | None) -> bool:
    """vLLM `_detect_merge_inline_system`: does [system, user, system, user] fail to render?"""
    if not source:
        return True
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    try:
        env.from_string(source).render(messages=_PROBE_MESSAGES, add_generation_prompt=False)
    except jinja2.TemplateError:
        return True
    return False


AnthropicRequest = AnthropicMessagesRequest | AnthropicCountTokensRequest


def messages_to_chat(
    request: AnthropicRequest, *, merge_inline_system: bool, disabled_effort: str
) -> ChatCompletionRequest:
    """The chat request vLLM renders for `request` (validation errors are vLLM's 400s)."""
    messages = _system_messages(request, merge_inline_system)
    for msg in request.messages:
        _convert_message(msg, messages, merge_inline_system)
    chat = _base_chat_request(request, messages)
    if isinstance(request, AnthropicMessagesRequest) and request.stream:
        chat.stream = True
        chat.stream_options = StreamOptions(include_usage=True, continuous_usage_stats=True)
    output = request.output_config
    if output is not None and output.format is not None and output.format.json_schema:
        chat.response_format = {
            "type": output.format.type,
            "json_schema": {"name": output.format.type, "schema": output.format.json_schema},
        }
    if output is not None and output.effort is not None:
        chat.reasoning_effort = output.effort
    if request.thinking is not None and request.thinking.type == "disabled":
        chat.reasoning_effort = disabled_effort  # type: ignore[assignment]
    elif isinstance(request.thinking, AnthropicThinkingEnabled):
        chat.thinking_token_budget = request.thinking.budget_tokens
    _apply_tool_choice(request, chat)
    tools = _resolve_tools(request)
    if tools is not None:
        chat.tools = [
            ChatCompletionToolsParam.model_validate(
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.input_schema,
                        "strict": tool.strict,
                        "defer_loading": tool.defer_loading,
                    },
                }
            )
            for tool in tools
        ]
        if chat.tool_choice is None:
            chat.tool_choice = "auto"
    return chat


def _base_chat_request(request: AnthropicRequest, messages: list[dict[str, Any]]) -> ChatCompletionRequest:
    fields: dict[str, Any]
    if isinstance(request, AnthropicCountTokensRequest):
        fields = {"model": request.model, "messages": messages, "chat_template_kwargs": request.chat_template_kwargs}
    else:
        fields = _generation_fields(request, messages)
    try:
        return ChatCompletionRequest.model_validate(fields)
    except ValidationError as exc:  # raised inside vLLM's handler: a ValueError -> 400, its str
        raise BadRequestError(sanitize_message(str(exc))) from None
    except VLLMValidationError as exc:
        raise BadRequestError(sanitize_message(str(exc)), param=exc.parameter) from None


def _generation_fields(request: AnthropicMessagesRequest, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": request.model,
        "messages": messages,
        "max_tokens": request.max_tokens,
        "max_completion_tokens": request.max_tokens,
        "stop": request.stop_sequences,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "top_k": request.top_k,
        "watermarking": request.watermarking,
        "cache_salt": request.cache_salt,
        "kv_transfer_params": request.kv_transfer_params,
        "ec_transfer_params": request.ec_transfer_params,
        "vllm_xargs": request.vllm_xargs,
        "chat_template_kwargs": request.chat_template_kwargs,
        "mm_payload": request.mm_payload,
    }


def _text_of(content: str | list[AnthropicContentBlock]) -> str | None:
    """A system message's text without billing headers (None: nothing left)."""
    if isinstance(content, str):
        return None if content.startswith(_BILLING_HEADER) else content
    parts = [b.text for b in content if b.type == "text" and b.text and not b.text.startswith(_BILLING_HEADER)]
    return "".join(parts) if parts else None


def _system_messages(request: AnthropicRequest, merge_inline_system: bool) -> list[dict[str, Any]]:
    parts: list[str] = []
    system = request.system
    if isinstance(system, str) and system:
        parts.append(system)  # a top-level string keeps even a billing header (as vLLM)
    elif system:
        parts.extend(
            b.text for b in system if b.type == "text" and b.text and not b.text.startswith(_BILLING_HEADER)
        )
    if merge_inline_system:
        for msg in request.messages:
            text = _text_of(msg.content) if msg.role == "system" else None
            if text:
                parts.append(text)
    return [{"role": "system", "content": "".join(parts)}] if parts else []


def _convert_message(msg: AnthropicMessage, out: list[dict[str, Any]], merge_inline_system: bool) -> None:
    if msg.role == "system":
        text = None if merge_inline_system else _text_of(msg.content)
        if text:
            out.append({"role": "system", "content": text})
        return
    converted: dict[str, Any] = {"role": msg.role}
    if isinstance(msg.content, str):
        converted["content"] = msg.content
    else:
        _convert_blocks(msg, converted, out)
    if not (msg.role == "user" and "content" not in converted):
        out.append(converted)


def _convert_blocks(msg: AnthropicMessage, converted: dict[str, Any], out: list[dict[str, Any]]) -> None:
    parts: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    assert not isinstance(msg.content, str)
    for block in msg.content:
        if block.type == "text" and block.text:
            parts.append({"type": "text", "text": block.text})
        elif block.type == "image" and block.source:
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block.source)}})
        elif block.type == "thinking" and block.thinking is not None:
            reasoning.append(block.thinking)
        elif block.type == "tool_use":
            tool_calls.append(
                {
                    "id": block.id or f"call_{int(time.time())}",
                    "type": "function",
                    "function": {"name": block.name or "", "arguments": json.dumps(block.input or {})},
                }
            )
        elif block.type == "tool_result":
            if msg.role == "user":
                _user_tool_result(block, out)  # tool messages go out before this user turn
            else:
                text = str(block.content) if block.content else ""
                parts.append({"type": "text", "text": f"Tool result: {text}"})
        # redacted_thinking (opaque), tool_reference and tool changes add nothing here
    if reasoning:
        converted["reasoning"] = "".join(reasoning)
    if tool_calls:
        converted["tool_calls"] = tool_calls
    if len(parts) == 1 and parts[0]["type"] == "text":
        converted["content"] = parts[0]["text"]
    elif parts:
        converted["content"] = parts


def _image_url(source: dict[str, Any]) -> str:
    if source.get("type") == "url":
        return str(source.get("url", ""))
    return f"data:{source.get('media_type', 'image/jpeg')};base64,{source.get('data', '')}"


def _user_tool_result(block: AnthropicContentBlock, out: list[dict[str, Any]]) -> None:
    text = ""
    images: list[str] = []
    references: list[dict[str, Any]] = []
    if isinstance(block.content, str):
        text = block.content
    elif isinstance(block.content, list):
        texts: list[str] = []
        for item in block.content:
            kind = item.get("type")
            if kind == "text":
                texts.append(item.get("text", ""))
            elif kind == "image":
                url = _image_url(item.get("source", {}))
                if url:
                    images.append(url)
            elif kind == "tool_reference":
                name = item.get("tool_name") or item.get("name")
                if name:
                    references.append({"type": "tool_reference", "name": name})
        text = "\n".join(texts)
    tool_call_id = block.tool_use_id or ""
    out.append({"role": "tool", "tool_call_id": tool_call_id, "content": text or ""})
    if images:
        out.append({"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}} for u in images]})
    if references:
        out.append({"role": "tool", "tool_call_id": tool_call_id, "content": references})


def _apply_tool_choice(request: AnthropicRequest, chat: ChatCompletionRequest) -> None:
    choice = request.tool_choice
    if choice is None:
        chat.tool_choice = None
        return
    chat.parallel_tool_calls = not choice.disable_parallel_tool_use
    if choice.type == "tool":
        chat.tool_choice = ChatCompletionNamedToolChoiceParam.model_validate(
            {"type": "function", "function": {"name": choice.name}}
        )
    else:
        chat.tool_choice = {"auto": "auto", "any": "required", "none": "none"}[choice.type]  # type: ignore[assignment]


def _resolve_tools(request: AnthropicRequest) -> list[AnthropicTool] | None:
    """The tools in effect at the end of the conversation (tool_addition / tool_removal)."""
    changes = [
        block
        for msg in request.messages
        if not isinstance(msg.content, str)
        for block in msg.content
        if block.type in ("tool_addition", "tool_removal")
    ]
    if not changes:
        return request.tools
    tools = {tool.name: tool for tool in request.tools or []}
    removed: set[str] = set()
    for block in changes:
        change = block.tool
        assert change is not None  # the block's validator requires it
        if isinstance(change, AnthropicToolChangeDefinition):
            name = change.definition.name
            tools[name] = change.definition
        else:
            name = change.name
            if name not in tools:
                raise BadRequestError(f"{block.type} references tool {name!r}, which is not declared in tools")
            if block.type == "tool_addition":
                tools[name] = tools[name].model_copy(update={"defer_loading": None})
        if block.type == "tool_removal":
            removed.add(name)
        else:
            removed.discard(name)
    return [tool for name, tool in tools.items() if name not in removed]
