"""What the configured parsers change at render time, as vLLM 0.33's `adjust_request` does.

Render does not parse output, but the parsers still shape the `GenerateRequest`:

- `reasoning_parser_kwargs` is set (to the effective chat-template kwargs) iff a reasoning
  parser is configured;
- `reasoning_ended` comes from the reasoning parser's `is_reasoning_end(prompt_ids)`
  (`parsers.registry`, our own implementations of vLLM's parsers);
- tool parsers' `adjust_request`: Hermes-format parsers set `skip_special_tokens=False` when
  tools are present and `tool_choice != "none"`; parsers without a structural-tag model turn a
  required/named `tool_choice` into a JSON-schema `structured_outputs`. Parsers that have an
  xgrammar structural-tag model (hermes, llama3_json, qwen3_coder, deepseek_v3, ...) build an
  xgrammar structural tag for required/named choice or strict tools; that needs xgrammar and
  is refused here with a 501 rather than rendered differently.

A tool parser only counts with `--enable-auto-tool-choice` (vLLM's ParserManager ignores it
otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from render_service.config import ServiceConfig
from render_service.errors import ConfigError, NotImplementedFeatureError

__all__ = ["ToolParserSpec", "TOOL_PARSER_SPECS", "ParserSupport", "json_schema_from_tools"]


@dataclass(frozen=True, slots=True)
class ToolParserSpec:
    structural_tag_model: str | None
    keeps_special_tokens: bool  # Hermes: skip_special_tokens=False when tools are in play
    engine_based: bool = False  # vLLM parser-engine adapter: always skip_special_tokens=False
    json_schema_choice: bool = True  # base ToolParser required/named -> JSON schema


TOOL_PARSER_SPECS: dict[str, ToolParserSpec] = {
    "hermes": ToolParserSpec("hermes", True),
    "qwen3_json": ToolParserSpec("hermes", True),
    "llama3_json": ToolParserSpec("llama", False),
    "llama4_json": ToolParserSpec("llama", False),
    "mistral": ToolParserSpec(None, False, engine_based=True, json_schema_choice=False),
    "pythonic": ToolParserSpec(None, False),
    "llama4_pythonic": ToolParserSpec(None, False),
    "qwen3_coder": ToolParserSpec("qwen_3_coder", False, engine_based=True),
    "qwen3_xml": ToolParserSpec("qwen_3_coder", False, engine_based=True),
    "deepseek_v3": ToolParserSpec("deepseek_r1", False),
    "deepseek_v31": ToolParserSpec("deepseek_v3_1", False),
    "granite": ToolParserSpec(None, False, engine_based=True),
}
REASONING_PARSER_NAMES = frozenset({"qwen3", "deepseek_r1", "deepseek_v3", "glm45", "granite", "mistral"})
# Reasoning parsers vLLM runs on its parser engine, whose adjust_request keeps special tokens.
ENGINE_REASONING_PARSERS = frozenset({"qwen3", "glm45", "mistral"})


class ParserSupport:
    """The configured reasoning/tool parsers, resolved once per worker."""

    def __init__(self, config: ServiceConfig, vocab: Any, special_tokens: Sequence[str] = ()):
        reasoning = config.reasoning_parser
        if reasoning is not None and reasoning.lower() == "none":
            reasoning = None
        if reasoning is not None and reasoning not in REASONING_PARSER_NAMES:
            raise ConfigError(
                f"unknown --reasoning-parser {reasoning!r}; supported: "
                + ", ".join(sorted(REASONING_PARSER_NAMES))
            )
        tool = config.tool_call_parser
        if tool is not None and tool not in TOOL_PARSER_SPECS:
            raise ConfigError(
                f"unknown --tool-call-parser {tool!r}; supported: " + ", ".join(sorted(TOOL_PARSER_SPECS))
            )
        self.reasoning_parser = reasoning
        self.tool_parser = tool if config.enable_auto_tool_choice else None
        self.tool_spec = TOOL_PARSER_SPECS[self.tool_parser] if self.tool_parser else None
        self._vocab = vocab
        self._special_tokens = tuple(special_tokens)
        self._reasoning_cls: Any = None

    @property
    def has_parser(self) -> bool:
        return self.reasoning_parser is not None or self.tool_parser is not None

    def is_reasoning_end(self, prompt_ids: list[int], chat_template_kwargs: dict[str, Any]) -> bool:
        """vLLM's `parser.is_reasoning_end(prompt_token_ids)` for the configured parser."""
        if self._reasoning_cls is None:
            from parsers.registry import get_reasoning_parser

            self._reasoning_cls = get_reasoning_parser(self.reasoning_parser or "")
        parser = self._reasoning_cls(
            self._vocab, chat_template_kwargs, special_tokens=self._special_tokens
        )
        return bool(parser.is_reasoning_end(prompt_ids))

    def adjust_request(self, request: Any) -> dict[str, Any]:
        """Request-field changes of vLLM's DelegatingParser.adjust_request (may be empty)."""
        if not self.has_parser:
            return {}
        if self.reasoning_parser is None and request.tool_choice == "none":
            return {}  # vLLM only adjusts with a reasoning parser or a tool choice
        changes: dict[str, Any] = {}
        if self.reasoning_parser in ENGINE_REASONING_PARSERS:
            changes["skip_special_tokens"] = False
        spec = self.tool_spec
        if spec is None:
            return changes
        changes.update(self._tool_constraints(request, spec))
        if spec.engine_based or (spec.keeps_special_tokens and request.tools and request.tool_choice != "none"):
            changes["skip_special_tokens"] = False
        return changes

    def _tool_constraints(self, request: Any, spec: ToolParserSpec) -> dict[str, Any]:
        choice = request.tool_choice
        if not request.tools or choice in ("none", None):
            return {}
        if spec.structural_tag_model is not None:
            return _structural_tag_changes(request, spec.structural_tag_model, self.tool_parser or "")
        if choice == "auto" or not spec.json_schema_choice:
            return {}
        if request.structured_outputs is not None and request.structured_outputs.get("structural_tag") is not None:
            return {}
        schema = json_schema_from_tools(choice, request.tools, request.parallel_tool_calls)
        return {"structured_outputs": {"json": schema}, "response_format": None}


def _structural_tag_changes(request: Any, model: str, parser: str) -> dict[str, Any]:
    """xgrammar structural tag for tool calls (implemented for the Hermes format only)."""
    choice = request.tool_choice
    strict = any(tool.function.strict for tool in request.tools)
    single = request.parallel_tool_calls is False
    user_constraint = request.structured_outputs is not None or (
        request.response_format is not None and request.response_format.get("type") != "text"
    )
    if choice == "auto" and not strict and not single:
        return {}
    if model != "hermes" or strict or (choice == "auto" and user_constraint):
        raise NotImplementedFeatureError(
            f"tool_choice={_describe(choice)} with --tool-call-parser {parser} (strict tools, "
            "parallel_tool_calls=false or structured outputs) needs an xgrammar structural tag "
            "this render service does not build for that format yet"
        )
    if choice == "auto":
        tag_format = {
            "type": "triggered_tags",
            "triggers": ["<tool_call>"],
            "tags": _hermes_tags(request.tools),
            "at_least_one": False,
            "stop_after_first": True,
            "excludes": [],
        }
    else:
        tools = request.tools
        if not isinstance(choice, str):
            tools = [tool for tool in tools if tool.function.name == choice.function.name]
        tag_format = {
            "type": "tags_with_separator",
            "tags": _hermes_tags(tools),
            "separator": "",
            "at_least_one": True,
            "stop_after_first": single or not isinstance(choice, str),
        }
    tag = json.dumps({"type": "structural_tag", "format": tag_format})
    return {"structured_outputs": {"structural_tag": tag}, "response_format": None}


def _hermes_tags(tools: Sequence[Any]) -> list[dict[str, Any]]:
    content = {
        "type": "json_schema",
        "json_schema": True,
        "style": "json",
        "any_order": False,
        "max_whitespace_cnt": None,
        "excludes": [],
    }
    tags = []
    for tool in tools:
        name = tool.function.name
        for newline in ("\n", ""):
            tags.append(
                {
                    "type": "tag",
                    "begin": f'<tool_call>{newline}{{"name": "{name}", "arguments": ',
                    "content": dict(content),
                    "end": f"}}{newline}</tool_call>",
                }
            )
    return tags


def _describe(choice: Any) -> str:
    if isinstance(choice, str):
        return f'"{choice}"'
    return f'function "{choice.function.name}"'


def json_schema_from_tools(choice: Any, tools: Sequence[Any], parallel_tool_calls: bool | None) -> Any:
    """vLLM's get_json_schema_from_tools for required / named tool choice.

    Like vLLM it pops `$defs` out of each tool's parameters (in place) into the array schema.
    """
    if not isinstance(choice, str):
        for tool in tools:
            if tool.function.name == choice.function.name:
                return _params_or_empty_object(tool.function.parameters)
        return None
    if choice != "required":
        return None
    schema: dict[str, Any] = {
        "type": "array",
        "minItems": 1,
        "items": {"type": "object", "anyOf": [_tool_call_schema(tool) for tool in tools]},
    }
    if parallel_tool_calls is False:
        schema["maxItems"] = 1
    defs = _collect_defs(tools)
    if defs:
        schema["$defs"] = defs
    return schema


def _params_or_empty_object(params: dict[str, Any] | None) -> dict[str, Any]:
    return params if params else {"type": "object", "properties": {}}


def _tool_call_schema(tool: Any) -> dict[str, Any]:
    return {
        "properties": {
            "name": {"type": "string", "enum": [tool.function.name]},
            "parameters": _params_or_empty_object(tool.function.parameters),
        },
        "required": ["name", "parameters"],
    }


def _collect_defs(tools: Sequence[Any]) -> dict[str, Any]:
    from render_service.protocol import vllm_validation_error

    all_defs: dict[str, Any] = {}
    for tool in tools:
        params = tool.function.parameters
        if params is None:
            continue
        defs = params.pop("$defs", {})
        if not isinstance(defs, dict):
            raise vllm_validation_error(
                f"`$defs` in the parameters of tool '{tool.function.name}' must be an object, "
                f"got {type(defs).__name__}.",
                parameter="tools",
            )
        for name, schema in defs.items():
            if name in all_defs and all_defs[name] != schema:
                raise vllm_validation_error(
                    f"Tool definition '{name}' has multiple schemas, which is not supported.",
                    parameter="tools",
                )
            all_defs[name] = schema
    return all_defs
