"""muse / musespark1x / muse_glimmer tool parsers at render: vLLM's MuseToolParser.adjust_request
sets skip_special_tokens=False on every request it sees (the channel framing is special
tokens) and skips the base hook's JSON schema for required / named tool_choice (Muse answers
in ATEM, not JSON); vLLM's renderer does not call it for tool_choice="none" without a
reasoning parser."""

from __future__ import annotations

from typing import Any

import pytest

from render_service.config import ServiceConfig
from render_service.protocol import ChatCompletionRequest
from render_service.render.parser_support import ParserSupport

TOOL = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "string"}}}}}
NAMES = ["muse", "musespark1x", "muse_glimmer"]


def _changes(name: str, **body: Any) -> dict[str, Any]:
    config = ServiceConfig(tool_call_parser=name, enable_auto_tool_choice=True)
    request = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **body})
    return ParserSupport(config, None).adjust_request(request)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("body", [
    {"tools": [TOOL]},
    {"tools": [TOOL], "tool_choice": "auto"},
    {"tools": [TOOL], "tool_choice": "required"},
    {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "f"}}},
    {"tools": [TOOL], "response_format": {"type": "json_object"}},
])  # fmt: skip
def test_special_tokens_kept_and_no_json_schema(name: str, body: dict[str, Any]) -> None:
    assert _changes(name, **body) == {"skip_special_tokens": False}


@pytest.mark.parametrize("name", NAMES)
def test_tool_choice_none_is_not_adjusted(name: str) -> None:
    assert _changes(name, tools=[TOOL], tool_choice="none") == {}
