"""cohere_command3/4 at render: vLLM's CohereCommandParser.adjust_request keeps special tokens
(the melody filter reads the markers) and folds tools or a JSON schema into a Cohere
structural tag whose tool grammar is xgrammar's EBNF of each schema: refused as not rendered
yet rather than silently left out. A structural tag the request brings is left alone."""

from __future__ import annotations

from typing import Any

import pytest

from render_service.config import ServiceConfig
from render_service.errors import NotImplementedFeatureError
from render_service.protocol import ChatCompletionRequest
from render_service.render.parser_support import ParserSupport

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
NAMES = ["cohere_command3", "cohere_command4"]


def _support(tool: str | None, reasoning: str | None) -> ParserSupport:
    config = ServiceConfig(tool_call_parser=tool, reasoning_parser=reasoning,
                           enable_auto_tool_choice=tool is not None)
    return ParserSupport(config, None)


def _request(**body: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **body})


@pytest.mark.parametrize("name", NAMES)
def test_keeps_special_tokens(name):
    assert _support(name, name).adjust_request(_request()) == {"skip_special_tokens": False}
    assert _support(None, name).adjust_request(_request()) == {"skip_special_tokens": False}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("body", [
    {"tools": [TOOL]},
    {"tools": [TOOL], "tool_choice": "required"},
    {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}},
    {"structured_outputs": {"json": {"type": "object"}}},
])  # fmt: skip
def test_structural_tag_not_rendered(name, body):
    with pytest.raises(NotImplementedFeatureError, match="Cohere Command structural tag"):
        _support(name, name).adjust_request(_request(**body))


@pytest.mark.parametrize("name", NAMES)
def test_own_structural_tag_left_alone(name):
    tag = '{"type": "structural_tag", "format": {"type": "const_string", "value": "x"}}'
    changes = _support(name, name).adjust_request(
        _request(tools=[TOOL], structured_outputs={"structural_tag": tag}))
    assert changes == {"skip_special_tokens": False}
