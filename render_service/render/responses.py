"""Responses request -> one GenerateRequest, as vLLM 0.33's `render_responses_request`.

vLLM renders a Responses request like a chat request: `construct_input_messages` turns
`instructions` + `input` items into chat messages, function tools become chat tools (other
tool types are not rendered), and `reasoning.effort` goes to the template. We build that chat
request and run the chat render on it, then give the result the Responses shape: the `resp_`
request id of the body (the X-Request-Id header is not read), no parse_context, no
reasoning_ended, and `extra_args` `{}` when nothing else fills it (vLLM's to_sampling_params).

On a gpt_oss model the prompt is vLLM's Harmony rendering of the Responses items
(`harmony_responses`); the converted chat request still gives the sampling params and the
Harmony structural tags.

Namespace functions are shown as `NAMESPACE__NAME`, custom tools as vLLM's one-string function
shim (their calls with `{"input": ...}` arguments); a tool_choice naming a function or custom
tool is a named chat choice, the forms that constrain nothing in vLLM (allowed_tools, mcp,
built-in types) are "auto" rendered without tool-call constraints.

Not served (501) by the gateway's /v1/responses: Harmony models, namespace and custom tools.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from render_service.errors import BadRequestError, NotImplementedFeatureError
from render_service.protocol import (
    ChatCompletionRequest,
    StreamOptions,
    parse_request,
    sanitize_message,
    vllm_validation_error,
)
from render_service.protocol.responses import (
    NAMED_CHOICE_TYPES,
    NAMESPACE_SEPARATOR,
    ResponsesRequest,
)
from render_service.protocol.validation import VLLMValidationError
from render_service.render.chat import render_chat_request
from render_service.render.chat_prompt import check_template_trust
from render_service.render.context import RenderContext
from render_service.render.harmony_responses import responses_harmony_prompt_ids

__all__ = ["render_responses", "responses_chat_body"]

_PARTIAL = ("in_progress", "incomplete")
CUSTOM_INPUT_KEY = "input"
# vLLM's `custom_tool_parameters`: the schema a custom tool's function shim is shown with.
_CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {CUSTOM_INPUT_KEY: {"type": "string", "description": "The freeform text payload for this tool."}},
    "required": [CUSTOM_INPUT_KEY],
    "additionalProperties": False,
}


def responses_chat_body(ctx: RenderContext, body: object) -> tuple[dict[str, Any], dict[str, Any]]:
    """For serving (the gateway): the validated request and the chat body that renders alike."""
    request = _checked(ctx, body)
    if ctx.bundle.is_harmony:  # vLLM renders and parses those apart from chat (not served yet)
        raise NotImplementedFeatureError("/v1/responses for Harmony models is not supported yet")
    for tool in request.tools:  # their calls would need vLLM's custom / namespace output items
        if tool.get("type") in ("namespace", "custom"):
            raise NotImplementedFeatureError(f"/v1/responses with {tool['type']} tools is not supported yet")
    chat = to_chat_request(request, ctx.config.reasoning_effort_map)
    if request.stream:
        chat.stream_options = StreamOptions(include_usage=True)
    return request.model_dump(mode="json"), chat.model_dump(exclude_unset=True)


def _checked(ctx: RenderContext, body: object) -> ResponsesRequest:
    request = parse_request(ResponsesRequest, body)
    ctx.check_model(request.model)
    if request.previous_response_id is not None:
        raise _invalid_request(
            "previous_response_id is not supported by the stateless render endpoint.", "previous_response_id"
        )
    return request


def render_responses(
    ctx: RenderContext, body: object, fetched_media: Mapping[str, bytes] | None = None
) -> dict[str, Any]:
    request = _checked(ctx, body)
    harmony_ids = None
    if ctx.bundle.is_harmony:  # the prompt comes from the Responses items, not from chat messages
        check_template_trust(None, request.chat_template_kwargs, ctx.config.trust_request_chat_template)
        harmony_ids = responses_harmony_prompt_ids(request, ctx.config.reasoning_effort_map)
    chat = to_chat_request(request, ctx.config.reasoning_effort_map, with_messages=harmony_ids is None)
    result = render_chat_request(
        ctx,
        chat,
        request.request_id,
        fetched_media,
        output_tokens_param="max_output_tokens",
        responses=True,
        responses_harmony_ids=harmony_ids,
        tool_constraints=not _unconstrained_choice(request.tool_choice),
    )
    return _responses_shape(result, request)


def input_messages(request: ResponsesRequest) -> list[dict[str, Any]]:
    """vLLM `construct_input_messages` with no history."""
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    if isinstance(request.input, str):
        messages.append({"role": "user", "content": request.input})
        return messages
    converted: list[dict[str, Any]] = []
    for item in request.input:
        message = _item_message(item, converted[-1] if converted else None)
        if message is not None:
            converted.append(message)
    return messages + converted


def to_chat_request(
    request: ResponsesRequest, effort_map: Mapping[str, str], *, with_messages: bool = True
) -> ChatCompletionRequest:
    """The chat request whose render is the Responses render (prompt, tools, constraints).

    `with_messages` False: no messages (a Harmony prompt is rendered from the items directly)."""
    continue_final = _continues_final_message(request.input)
    effort: str | None = request.reasoning.effort if request.reasoning is not None else None
    if effort is not None:
        effort = effort_map.get(effort, effort)
    tools = [chat_tool for tool in request.tools for chat_tool in _chat_tools(tool)]
    fields: dict[str, Any] = {
        "messages": input_messages(request) if with_messages else [],
        "model": request.model,
        "tools": tools or None,
        # vLLM passes tool_choice only with tools; "none" is how our chat model says "no choice".
        "tool_choice": _chat_tool_choice(request.tool_choice) if tools else "none",
        "parallel_tool_calls": request.parallel_tool_calls,
        "reasoning_effort": effort,
        "include_reasoning": request.include_reasoning,
        "add_generation_prompt": not continue_final,
        "continue_final_message": continue_final,
        "chat_template_kwargs": request.chat_template_kwargs,
        "media_io_kwargs": request.media_io_kwargs,
        "mm_processor_kwargs": request.mm_processor_kwargs,
        "max_tokens": request.max_output_tokens,
        "truncate_prompt_tokens": -1 if request.truncation != "disabled" else None,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "top_k": request.top_k,
        "min_p": request.min_p,
        "presence_penalty": request.presence_penalty,
        "frequency_penalty": request.frequency_penalty,
        "repetition_penalty": request.repetition_penalty,
        "seed": request.seed,
        "stop": request.stop,
        "stop_token_ids": request.stop_token_ids,
        "ignore_eos": request.ignore_eos,
        "logit_bias": request.logit_bias,
        "skip_special_tokens": request.skip_special_tokens,
        "spaces_between_special_tokens": request.spaces_between_special_tokens,
        "include_stop_str_in_output": request.include_stop_str_in_output,
        "watermarking": request.watermarking,
        "stream": request.stream,
        "structured_outputs": _structured_outputs(request),
        "cache_salt": request.cache_salt,
        "priority": request.priority,
        "vllm_xargs": request.vllm_xargs,
        "kv_transfer_params": request.kv_transfer_params,
        "ec_transfer_params": request.ec_transfer_params,
        "mm_payload": request.mm_payload,
    }
    if request.include_output_logprobs():
        fields.update(logprobs=True, top_logprobs=request.top_logprobs)
    try:
        return ChatCompletionRequest.model_validate(fields)
    except ValidationError as exc:
        raise BadRequestError(sanitize_message(str(exc))) from None
    except VLLMValidationError as exc:
        raise BadRequestError(sanitize_message(str(exc)), param=exc.parameter) from None


def _invalid_request(message: str, param: str) -> BadRequestError:
    error = BadRequestError(message, param=param)
    error.error_type = "invalid_request_error"
    return error


def _responses_shape(result: dict[str, Any], request: ResponsesRequest) -> dict[str, Any]:
    result.pop("render_fingerprint", None)
    result.update(
        request_id=request.request_id,
        model=request.model,
        reasoning_ended=None,
        return_token_ids=None,
        parse_context=None,
        stream_options=None,
    )
    if not (request.vllm_xargs or request.kv_transfer_params or request.ec_transfer_params):
        result["sampling_params"] = _with_empty_extra_args(result["sampling_params"])
    return result


def _with_empty_extra_args(sampling: dict[str, Any]) -> dict[str, Any]:
    """vLLM's Responses to_sampling_params passes `extra_args={}` (chat passes None)."""
    out: dict[str, Any] = {}
    for key, value in sampling.items():
        if key == "bad_words":
            out["extra_args"] = {}
        out[key] = value
    return out


def _structured_outputs(request: ResponsesRequest) -> dict[str, Any] | None:
    """vLLM `extract_structured_outputs`: text.format, else structured_outputs."""
    text_format = request.text.format if request.text is not None else None
    if text_format is None:
        return request.structured_outputs
    if request.structured_outputs is not None:
        raise vllm_validation_error(
            "Cannot specify both structured_outputs and text.format", parameter="structured_outputs"
        )
    kind = text_format.get("type")
    if kind == "json_object":
        return {"json_object": True}
    if kind == "json_schema" and text_format.get("schema") is not None:
        return {"json": text_format["schema"]}
    return None


def _chat_tools(tool: dict[str, Any]) -> list[dict[str, Any]]:
    """vLLM `get_function_tools`: a function as it is, a namespace's functions as
    `NAMESPACE__NAME`, a custom tool as a one-string function shim; other tools are not shown."""
    kind = tool.get("type")
    if kind == "function":
        return [_chat_tool(tool)]
    if kind == "namespace":
        inner = [t for t in tool.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]
        return [_chat_tool({**t, "name": _flat_name(tool.get("name"), t.get("name"))}) for t in inner]
    if kind == "custom":
        shim = {"name": tool.get("name"), "description": tool.get("description"), "parameters": _CUSTOM_PARAMETERS}
        return [{"type": "function", "function": shim}]
    return []


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}


def _flat_name(namespace: Any, name: Any) -> str:
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}"


def _unconstrained_choice(choice: str | dict[str, Any]) -> bool:
    """allowed_tools, mcp and the built-in forms: vLLM constrains no call for them, but they
    are not "none" (special tokens are kept, tools shown)."""
    return isinstance(choice, dict) and choice.get("type") not in NAMED_CHOICE_TYPES


def _chat_tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    """A named function or custom tool is a named chat function (the custom shim); the other
    forms are "auto", rendered without tool constraints (`_unconstrained_choice`)."""
    if isinstance(choice, str):
        return choice
    if choice.get("type") in NAMED_CHOICE_TYPES:
        return {"type": "function", "function": {"name": choice["name"]}}
    return "auto"


def _continues_final_message(items: str | list[Any]) -> bool:
    """vLLM `should_continue_final_message`: a last message/reasoning item still in progress."""
    if isinstance(items, str) or not items or not isinstance(items[-1], dict):
        return False
    last = items[-1]
    return last.get("type", "message") in ("message", "reasoning") and last.get("status") in _PARTIAL


def _call_function(item: dict[str, Any]) -> dict[str, Any]:
    """A function call (its namespace flattened into the name), or a custom tool call as a
    call of its shim with `{"input": ...}` arguments."""
    if item.get("type") == "custom_tool_call":
        arguments = json.dumps({CUSTOM_INPUT_KEY: item.get("input") or ""}, ensure_ascii=False)
        return {"name": item.get("name"), "arguments": arguments}
    name = item.get("name")
    if item.get("namespace"):
        name = _flat_name(item["namespace"], name)
    return {"name": name, "arguments": item.get("arguments")}


def _item_message(item: Any, prev: dict[str, Any] | None) -> dict[str, Any] | None:
    """One input item as a chat message, or None when it was merged into `prev` (the
    preceding assistant message takes following calls, reasoning and text)."""
    if not isinstance(item, dict):
        raise BadRequestError("Input items must be objects.", param="input")
    assistant = prev if prev is not None and prev.get("role") == "assistant" else None
    kind = item.get("type")
    if kind in ("function_call", "custom_tool_call"):
        call = {"id": item.get("call_id"), "function": _call_function(item), "type": "function"}
        if assistant is not None:
            assistant.setdefault("tool_calls", []).append(call)
            return None
        return {"role": "assistant", "tool_calls": [call]}
    if kind == "reasoning":
        if item.get("encrypted_content"):
            raise vllm_validation_error("Encrypted content is not supported.", parameter="input")
        content, summary = item.get("content") or [], item.get("summary") or []
        reasoning = content[0].get("text", "") if content else summary[0].get("text", "") if summary else ""
        if assistant is not None and assistant.get("reasoning") is None:
            assistant["reasoning"] = reasoning
            return None
        return {"role": "assistant", "reasoning": reasoning}
    if kind in ("function_call_output", "custom_tool_call_output"):
        return {"role": "tool", "content": item.get("output"), "tool_call_id": item.get("call_id")}
    if item.get("role") == "assistant":
        content = item.get("content")
        text = content if isinstance(content, str) else content[0].get("text") if isinstance(content, list) and content else None
        if text is not None:
            if assistant is not None and assistant.get("content") is None:
                assistant["content"] = text
                return None
            return {"role": "assistant", "content": text}
    if "role" in item:
        return item
    raise vllm_validation_error(f"Unsupported input item type: {kind}", parameter="input")
