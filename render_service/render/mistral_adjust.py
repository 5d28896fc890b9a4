"""`--tool-call-parser mistral` at render time: vLLM 0.33's `MistralParser.adjust_request`.

vLLM takes one of two branches (vllm/parser/mistral.py):

* **legacy** (a pre-v11 mistral-common tokenizer, a HF-mode tokenizer, a Responses request,
  or a request with a constraint mistral-common's grammar cannot express): special tokens are
  kept, and a chat request's required or named `tool_choice` without the user's own
  `structured_outputs` gets a guided
  JSON schema for the pre-v11 call array `[{"name": ..., "arguments": {...}}]` (a
  `response_format` of text/json_object/json_schema is cleared for it);
* **grammar** (a Tekken v11+ tokenizer, where `supports_grammar`): a lark grammar from
  mistral-common's `GrammarFactory`, for every chat request, tool_choice "none" included, and
  special tokens left as the request has them. vLLM 0.33 calls `get_lark_from_jinja` without
  the `force_tool_names` argument that mistral-common 1.13.1 (the version both venvs pin)
  requires, so every such request fails with that TypeError, which vLLM answers as a 400; we
  answer the same 400. The one that succeeds is tool_choice "none" with a JSON constraint:
  `get_lark_for_json_schema`, whose grammar replaces the request's constraint, here too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from render_service.errors import BadRequestError

__all__ = ["mistral_tool_adjust"]

# MistralParser's `so_non_supported_attributes`: constraints its grammar cannot carry.
_GRAMMARLESS_KEYS = ("regex", "choice", "grammar", "whitespace_pattern", "structural_tag")
_GRAMMAR_TYPE_ERROR = "GrammarFactory.get_lark_from_jinja() missing 1 required positional argument: 'force_tool_names'"


def mistral_tool_adjust(
    request: Any, *, grammar_factory: Callable[[], Any] | None, responses: bool = False
) -> dict[str, Any]:
    """Request-field changes of the mistral tool parser's adjust_request (may raise).

    `grammar_factory`: returns mistral-common's GrammarFactory for the tokenizer; None unless
    it supports grammars (vLLM's `supports_grammar`)."""
    structured = request.structured_outputs
    response_type = (request.response_format or {}).get("type")
    grammarless = response_type == "structural_tag" or (
        structured is not None and any(structured.get(key) is not None for key in _GRAMMARLESS_KEYS)
    )
    if grammar_factory is not None and not grammarless:
        return _grammar_changes(request, grammar_factory)
    changes: dict[str, Any] = {"skip_special_tokens": False}
    if (
        not responses
        and request.tools
        and structured is None
        and _forces_a_call(request.tool_choice)
        and response_type in (None, "text", "json_object", "json_schema")
    ):
        schema = _pre_v11_call_schema(request.tool_choice, request.tools)
        if schema is not None:
            changes.update(structured_outputs={"json": schema}, response_format=None)
    return changes


def _forces_a_call(choice: Any) -> bool:
    return choice == "required" or (choice is not None and not isinstance(choice, str))


def _pre_v11_call_schema(choice: Any, tools: list[Any]) -> dict[str, Any] | None:
    """vLLM's `_build_guided_schema_pre_v11`: None when the named tool is not declared."""
    extra: dict[str, Any] = {}
    if choice != "required":
        tools = [tool for tool in tools if tool.function.name == choice.function.name]
        if not tools:
            return None
        extra["maxItems"] = 1
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": [tool.function.name]},
                "arguments": tool.function.parameters or {"type": "object"},
            },
            "required": ["name", "arguments"],
        }
        for tool in tools
    ]
    return {"type": "array", "minItems": 1, **extra, "items": {"type": "object", "anyOf": calls}}


def _grammar_changes(request: Any, grammar_factory: Callable[[], Any]) -> dict[str, Any]:
    """The grammar branch's outcome in vLLM 0.33 (see the module docstring)."""
    structured = request.structured_outputs
    changes: dict[str, Any] = {}
    schema: Any = None
    if structured is not None:
        if structured.get("json_object") is not None:
            schema = _ANY_JSON
        elif structured.get("json") is not None:
            schema = _loaded_schema(structured["json"])
        else:
            raise BadRequestError(
                "Unsupported request.structured_outputs for MistralParser. Only `json` and "
                "`json_object` are supported."
            )
    elif request.response_format is not None and request.response_format.get("type") != "text":
        json_schema = request.response_format.get("json_schema")
        schema = _ANY_JSON if json_schema is None else json_schema.get("schema")
        changes["response_format"] = None
    if request.tool_choice != "none" or schema is None:
        raise BadRequestError(_GRAMMAR_TYPE_ERROR)
    factory = grammar_factory()
    lark = factory.get_lark_for_json_schema(template=factory.select_jinja_template(), json_schema=schema)
    changes["structured_outputs"] = {"grammar": lark}
    changes["_grammar_from_parser"] = True  # vLLM's flag: reasoning_ended is then true
    return changes


# vLLM's _DEFAULT_JSON_SCHEMA for json_object.
_ANY_JSON = {"anyOf": [{"type": "object"}, {"type": "array"}]}


def _loaded_schema(schema: Any) -> Any:
    if not isinstance(schema, str):
        return schema
    try:
        return json.loads(schema)
    except ValueError as exc:
        raise BadRequestError(f"Invalid JSON schema: {exc}", param="structured_outputs") from None
