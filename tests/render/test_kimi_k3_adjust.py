"""kimi_k3 at render: vLLM's KimiK3ReasoningParser.adjust_request and KimiK3ToolParser's both
keep special tokens and unspace them (the XTML markers must reach the parsers as contiguous
text), on every request they see; the tool parser adds no JSON schema for required / named
(its structural tag is built instead, compared with vLLM's in
test_structural_tags_vllm_differential.py). vLLM's renderer does not adjust tool_choice="none"
without a reasoning parser."""

from __future__ import annotations

from typing import Any

import pytest

from render_service.config import ServiceConfig
from render_service.protocol import ChatCompletionRequest
from render_service.render.parser_support import ParserSupport

TOOL = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "string"}}}}}
KEPT = {"skip_special_tokens": False, "spaces_between_special_tokens": False}


def _changes(tool: str | None, reasoning: str | None, **body: Any) -> dict[str, Any]:
    config = ServiceConfig(tool_call_parser=tool, reasoning_parser=reasoning, enable_auto_tool_choice=tool is not None)
    request = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **body})
    return ParserSupport(config, None).adjust_request(request)


@pytest.mark.parametrize("body", [{}, {"tools": [TOOL]}, {"tools": [TOOL], "tool_choice": "none"}])
def test_reasoning_parser_keeps_special_tokens_unspaced(body: dict[str, Any]) -> None:
    assert _changes(None, "kimi_k3", **body) == KEPT


@pytest.mark.parametrize("body", [{"tools": [TOOL]}, {"tools": [TOOL], "response_format": {"type": "json_object"}}])
def test_tool_parser_auto_keeps_special_tokens_unspaced(body: dict[str, Any]) -> None:
    assert _changes("kimi_k3", None, **body) == KEPT


def test_tool_parser_required_gets_the_xtml_tag() -> None:
    changes = _changes("kimi_k3", None, tools=[TOOL], tool_choice="required")
    assert '"<|open|>tools<|sep|>"' in changes["structured_outputs"]["structural_tag"]
    assert {k: changes[k] for k in KEPT} == KEPT and changes["response_format"] is None


def test_tool_choice_none_is_not_adjusted_without_reasoning_parser() -> None:
    assert _changes("kimi_k3", None, tools=[TOOL], tool_choice="none") == {}
