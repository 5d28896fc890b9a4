"""hf / beam at render: vLLM's ResponseTemplateParser.adjust_request always keeps special
tokens unspaced; hf refuses the tool guarantees it cannot enforce (400, vLLM's message);
beam's template grammar is refused as not rendered yet rather than silently left out."""

from __future__ import annotations

from typing import Any

import pytest

from render_service.config import ServiceConfig
from render_service.errors import BadRequestError, ConfigError, NotImplementedFeatureError
from render_service.protocol import ChatCompletionRequest
from render_service.render.parser_support import ParserSupport

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def _support(tool: str | None, reasoning: str | None) -> ParserSupport:
    config = ServiceConfig(tool_call_parser=tool, reasoning_parser=reasoning,
                           enable_auto_tool_choice=tool is not None)
    return ParserSupport(config, None)


def _request(**body: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}], **body})


def test_hf_always_keeps_special_tokens():
    changes = _support("hf", "hf").adjust_request(_request(tools=[TOOL], tool_choice="none"))
    assert changes == {"skip_special_tokens": False, "spaces_between_special_tokens": False}
    assert _support(None, "hf").adjust_request(_request()) == changes


@pytest.mark.parametrize(("body", "param"), [
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ({"parallel_tool_calls": False}, "parallel_tool_calls"),
])  # fmt: skip
def test_hf_refuses_unenforceable_guarantees(body, param):
    with pytest.raises(BadRequestError, match="response_template parsing cannot guarantee") as err:
        _support("hf", "hf").adjust_request(_request(tools=[TOOL], **body))
    assert err.value.param == param


def test_hf_strict_tool_refused():
    strict = {"type": "function", "function": {**TOOL["function"], "strict": True}}
    with pytest.raises(BadRequestError, match="strict tools"):
        _support("hf", None).adjust_request(_request(tools=[strict]))


def test_beam_grammar_not_rendered():
    assert _support("beam", "beam").adjust_request(_request())["skip_special_tokens"] is False
    with pytest.raises(NotImplementedFeatureError):
        _support("beam", "beam").adjust_request(_request(tools=[TOOL]))


@pytest.mark.parametrize(("tool", "reasoning"), [("hermes", "hf"), ("hf", "qwen3"), ("beam", "hf")])
def test_pairs_only_with_itself(tool, reasoning):
    with pytest.raises(ConfigError, match="cannot be combined"):
        _support(tool, reasoning)
