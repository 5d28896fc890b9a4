"""Chat cases for golden and differential tests.

Each case gives the OpenAI request body we send and the conversation/tools/kwargs that
transformers' `apply_chat_template` must receive to produce vLLM's prompt. For most cases those
are the same data; the cases whose names start with `vllm_` are where vLLM deliberately
normalises the request (tools through its request model: `"description": null`; assistant
`content: null` -> `""`; JSON-string tool arguments -> dicts; `reasoning_content` ->
`reasoning` + `reasoning_content`), and the expected conversation spells that out.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL_NO_DESCRIPTION = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}


@dataclass
class ChatCase:
    name: str
    body: dict[str, Any]
    hf_messages: list[dict[str, Any]]
    hf_tools: list[dict[str, Any]] | None = None
    hf_kwargs: dict[str, Any] = field(default_factory=dict)

    def request(self) -> dict[str, Any]:
        return copy.deepcopy(self.body)


def _tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _hf_tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "function": {"arguments": arguments, "name": name}, "type": "function"}


def chat_cases() -> list[ChatCase]:
    user = {"role": "user", "content": "What's the weather in Paris? Réponds en français 🙂"}
    multi = [
        {"role": "user", "content": "Hi! Who are you?"},
        {"role": "assistant", "content": "I am an assistant.\nHow can I help?"},
        {"role": "user", "content": "Tell me a   joke\twith tabs and  spaces."},
        {"role": "assistant", "content": "Why did the chicken cross the road?"},
        {"role": "user", "content": "Why?"},
    ]
    args = {"city": "Paris", "unit": "celsius"}
    call_id = "call00001"
    tool_turns = [
        user,
        {"role": "assistant", "content": None, "tool_calls": [_tool_call(call_id, "get_weather", args)]},
        {"role": "tool", "tool_call_id": call_id, "content": '{"temperature": 21, "sky": "clear"}'},
    ]
    hf_tool_turns = [
        user,
        {"role": "assistant", "content": "", "tool_calls": [_hf_tool_call(call_id, "get_weather", args)]},
        {"role": "tool", "tool_call_id": call_id, "content": '{"temperature": 21, "sky": "clear"}'},
    ]
    hf_weather = json.loads(json.dumps(WEATHER_TOOL))
    hf_time = {
        "type": "function",
        "function": {"name": "get_time", "description": None, "parameters": {"type": "object", "properties": {}}},
    }
    reasoning_history = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Adding two and two."},
        {"role": "user", "content": "And 3+3?"},
    ]
    hf_reasoning_history = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning": "Adding two and two.", "reasoning_content": "Adding two and two."},
        {"role": "user", "content": "And 3+3?"},
    ]
    return [
        ChatCase("system_user", {"messages": [SYSTEM, user]}, [SYSTEM, user], hf_kwargs={"add_generation_prompt": True}),
        ChatCase("multi_turn", {"messages": multi}, multi, hf_kwargs={"add_generation_prompt": True}),
        ChatCase(
            "system_multi_turn",
            {"messages": [SYSTEM, *multi]},
            [SYSTEM, *multi],
            hf_kwargs={"add_generation_prompt": True},
        ),
        ChatCase(
            "tools",
            {"messages": [SYSTEM, user], "tools": [WEATHER_TOOL]},
            [SYSTEM, user],
            [hf_weather],
            {"add_generation_prompt": True},
        ),
        ChatCase(
            "vllm_tool_calls_null_content",
            {"messages": tool_turns, "tools": [WEATHER_TOOL]},
            hf_tool_turns,
            [hf_weather],
            {"add_generation_prompt": True},
        ),
        ChatCase(
            "vllm_tool_without_description",
            {"messages": [user], "tools": [WEATHER_TOOL, TIME_TOOL_NO_DESCRIPTION]},
            [user],
            [hf_weather, hf_time],
            {"add_generation_prompt": True},
        ),
        ChatCase(
            "thinking_off",
            {"messages": [user], "chat_template_kwargs": {"enable_thinking": False}},
            [user],
            None,
            {"add_generation_prompt": True, "enable_thinking": False},
        ),
        ChatCase(
            "reasoning_effort_none",
            {"messages": [user], "reasoning_effort": "none"},
            [user],
            None,
            {"add_generation_prompt": True, "reasoning_effort": "none", "enable_thinking": False},
        ),
        ChatCase(
            "vllm_reasoning_content_history",
            {"messages": reasoning_history},
            hf_reasoning_history,
            None,
            {"add_generation_prompt": True},
        ),
        ChatCase(
            "continue_final_message",
            {
                "messages": [user, {"role": "assistant", "content": "Il fait"}],
                "add_generation_prompt": False,
                "continue_final_message": True,
            },
            [user, {"role": "assistant", "content": "Il fait"}],
            None,
            {"add_generation_prompt": False, "continue_final_message": True},
        ),
        ChatCase(
            "no_generation_prompt",
            {"messages": [SYSTEM, user], "add_generation_prompt": False},
            [SYSTEM, user],
            None,
            {"add_generation_prompt": False},
        ),
    ]
