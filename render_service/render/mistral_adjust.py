"""`--tool-call-parser mistral` at render time: vLLM 0.33's `MistralParser.adjust_request`.

vLLM takes one of two branches (vllm/parser/mistral.py):

* **legacy** (a pre-v11 mistral-common tokenizer, a HF-mode tokenizer, or a request with a
  constraint mistral-common's grammar cannot express): special tokens are kept, and a
  required or named `tool_choice` without the user's own `structured_outputs` gets a guided
  JSON schema for the pre-v11 call array `[{"name": ..., "arguments": {...}}]` (a
  `response_format` of text/json_object/json_schema is cleared for it);
* **grammar** (a Tekken v11+ tokenizer, where `supports_grammar`): a lark grammar from
  mistral-common's `GrammarFactory`, for every chat request, tool_choice "none" included.
  vLLM 0.33 calls `get_lark_from_jinja` without the `force_tool_names` argument that
  mistral-common 1.13.1 (the version both venvs pin) requires, so every such request but one
  fails with that TypeError, which vLLM answers as a 400; we answer the same 400. The one
  that would succeed (tool_choice "none" with a JSON constraint: `get_lark_for_json_schema`)
  needs llguidance to build, which we do not ship: a 501.
"""

from __future__ import annotations

from typing import Any

from render_service.errors import BadRequestError, NotImplementedFeatureError

__all__ = ["mistral_tool_adjust"]

# MistralParser's `so_non_supported_attributes`: constraints its grammar cannot carry.
_GRAMMARLESS_KEYS = ("regex", "choice", "grammar", "whitespace_pattern", "structural_tag")
_GRAMMAR_TYPE_ERROR = "GrammarFactory.get_lark_from_jinja() missing 1 required positional argument: 'force_tool_names'"


def mistral_tool_adjust(request: Any, *, supports_grammar: bool) -> dict[str, Any]:
    """Request-field changes of the mistral tool parser's adjust_request (may raise)."""
    structured = request.structured_outputs
    response_type = (request.response_format or {}).get("type")
    grammarless = response_type == "structural_tag" or (
        structured is not None and any(structured.get(key) is not None for key in _GRAMMARLESS_KEYS)
    )
    if supports_grammar and not grammarless:
        _refuse_grammar(request)
    changes: dict[str, Any] = {"skip_special_tokens": False}
    if (
        request.tools
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


def _refuse_grammar(request: Any) -> None:
    """The grammar branch's outcome in vLLM 0.33 (see the module docstring)."""
    structured = request.structured_outputs
    if structured is not None:
        if structured.get("json_object") is None and structured.get("json") is None:
            raise BadRequestError(
                "Unsupported request.structured_outputs for MistralParser. Only `json` and "
                "`json_object` are supported."
            )
        wants_json = True
    else:
        wants_json = (request.response_format or {}).get("type") in ("json_object", "json_schema")
    if request.tool_choice == "none" and wants_json:
        raise NotImplementedFeatureError(
            "the mistral-common JSON-schema grammar (Tekken v11+ with --tool-call-parser mistral) "
            "is not rendered yet"
        )
    raise BadRequestError(_GRAMMAR_TYPE_ERROR)
