"""What the configured parsers change at render time, as vLLM 0.33's `adjust_request` does.

Render does not parse output, but the parsers still shape the `GenerateRequest`:

- `reasoning_parser_kwargs` is set (to the effective chat-template kwargs) iff a reasoning
  parser is configured;
- `reasoning_ended` comes from the reasoning parser's `is_reasoning_end(prompt_ids)`
  (`parsers.registry`, our own implementations of vLLM's parsers);
- tool parsers' `adjust_request`: Hermes-format parsers set `skip_special_tokens=False` when
  tools are present and `tool_choice != "none"`; parsers without a structural-tag model turn a
  required/named `tool_choice` into a JSON-schema `structured_outputs`. Parsers that have an
  xgrammar structural-tag model (hermes, llama3_json, qwen3_coder, deepseek_v3, ...) get an
  xgrammar structural tag (render_service/render/structural_tags.py) for required/named choice,
  strict tools, `parallel_tool_calls=false` or `--tool-strict-level` above "auto". The one
  corner refused with a 501: auto choice with constrained tools and a user constraint whose
  acceptance by xgrammar we cannot decide (render_service/render/xgrammar_support.py).
- the mistral tool parser: its pre-v11 guided call schema, and on a Tekken v11+ tokenizer its
  grammar branch (render_service/render/mistral_adjust.py).

A tool parser only counts with `--enable-auto-tool-choice` (vLLM's ParserManager ignores it
otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from parsers.reasoning import REASONING_KEEPS_SPECIAL_TOKENS, REASONING_UNSPACES_SPECIAL_TOKENS
from parsers.registry import reasoning_parser_names, tool_parser_names
from parsers.tools import ToolParserTraits, tool_parser_traits
from parsers.tools.hy_v3 import hy_suffix as _hy_suffix
from render_service.config import TOOL_STRICT_LEVELS, ServiceConfig
from render_service.errors import BadRequestError, ConfigError, NotImplementedFeatureError
from render_service.protocol import vllm_validation_error
from render_service.render.mistral_adjust import mistral_tool_adjust
from render_service.render.sampling import normalise_structured_outputs
from render_service.render.structural_tags import (
    STRUCTURAL_TAG_MODELS,
    dump_structural_tag,
    harmony_output_format,
    json_schema_format,
    resolve_strictness,
    tool_call_format,
)
from render_service.render.xgrammar_support import Unknown, output_format

__all__ = [
    "ParserSupport",
    "ToolParserSpec",
    "extract_structured_outputs",
    "json_schema_from_tools",
]


# The parsers' own traits (parsers/tools/__init__.py) say how vLLM's serving layer treats each
# family; render reads them there, so registering a family is one place.
ToolParserSpec = ToolParserTraits


class ParserSupport:
    """The configured reasoning/tool parsers, resolved once per worker."""

    def __init__(
        self,
        config: ServiceConfig,
        vocab: Any,
        special_tokens: Sequence[str] = (),
        response_template: dict[str, Any] | None = None,
        *,
        mistral_grammar: Callable[[], Any] | None = None,
    ):
        """`mistral_grammar`: returns mistral-common's GrammarFactory when the tokenizer is
        Tekken v11+ (vLLM's `supports_grammar`: the mistral tool parser's grammar branch)."""
        reasoning = config.reasoning_parser
        if reasoning is not None and reasoning.lower() == "none":
            reasoning = None
        if reasoning is not None and reasoning not in reasoning_parser_names():
            raise ConfigError(
                f"unknown --reasoning-parser {reasoning!r}; supported: "
                + ", ".join(reasoning_parser_names())
            )
        tool = config.tool_call_parser
        if tool is not None and tool not in tool_parser_names():
            raise ConfigError(
                f"unknown --tool-call-parser {tool!r}; supported: " + ", ".join(tool_parser_names())
            )
        self.reasoning_parser = reasoning
        self.tool_parser = tool if config.enable_auto_tool_choice else None
        _check_response_template_pair(reasoning, self.tool_parser)
        self.tool_spec = tool_parser_traits(self.tool_parser) if self.tool_parser else None
        self._vocab = vocab
        self._special_tokens = tuple(special_tokens)
        self.tool_strict_level = config.tool_strict_level  # None: the parser's default
        self._reasoning_cls: Any = None
        # The checkpoint's response_template metadata (hf, beam read it).
        self._template = response_template
        # vLLM adjusts every request (tool_choice "none" too) for the mistral grammar.
        self._mistral_grammar = mistral_grammar if self.tool_parser == "mistral" else None

    @property
    def has_parser(self) -> bool:
        return self.reasoning_parser is not None or self.tool_parser is not None

    def is_reasoning_end(self, prompt_ids: list[int], chat_template_kwargs: dict[str, Any]) -> bool:
        """vLLM's `parser.is_reasoning_end(prompt_token_ids)` for the configured parser."""
        if self._reasoning_cls is None:
            from parsers.registry import get_reasoning_parser

            self._reasoning_cls = get_reasoning_parser(self.reasoning_parser or "")
        extra = (
            {"response_template": self._template}
            if self._template and getattr(self._reasoning_cls, "takes_response_template", False)
            else {}
        )
        parser = self._reasoning_cls(
            self._vocab, chat_template_kwargs, special_tokens=self._special_tokens, **extra
        )
        return bool(parser.is_reasoning_end(prompt_ids))

    def adjust_request(self, request: Any, *, responses: bool = False, tool_constraints: bool = True) -> dict[str, Any]:
        """Request-field changes of vLLM's DelegatingParser.adjust_request (may be empty).

        `responses`: the request is a converted Responses request (the mistral tool parser
        treats those apart); `tool_constraints` False: its tool_choice constrains no call."""
        if not self.has_parser:
            return {}
        if self._response_template_parser() is not None:
            return self._response_template_adjust(request)
        mistral_grammar = None if responses else self._mistral_grammar
        if self.reasoning_parser is None and request.tool_choice == "none" and mistral_grammar is None:
            return {}  # vLLM only adjusts with a reasoning parser or a tool choice
        if _COHERE_PARSERS & {self.reasoning_parser, self.tool_parser}:
            return _cohere_adjust(request, self.tool_parser is not None)
        changes: dict[str, Any] = {}
        if self.reasoning_parser in REASONING_KEEPS_SPECIAL_TOKENS:
            changes["skip_special_tokens"] = False
        if self.reasoning_parser in REASONING_UNSPACES_SPECIAL_TOKENS:
            changes["spaces_between_special_tokens"] = False
        spec = self.tool_spec
        if spec is None:
            return changes
        if tool_constraints:
            changes.update(self._tool_constraints(request, spec))
        if self.tool_parser == "mistral":  # its adjust_request decides special tokens too
            changes.update(mistral_tool_adjust(request, grammar_factory=mistral_grammar, responses=responses))
            return changes
        if spec.xtml:
            _check_xtml_named_choice(request, changes)
            changes.update(skip_special_tokens=False, spaces_between_special_tokens=False)
        if (spec.engine_based and spec.engine_keeps_special_tokens) or spec.always_keeps_special_tokens or (
            spec.keeps_special_tokens and request.tools and request.tool_choice != "none"
        ):
            changes["skip_special_tokens"] = False
        return changes

    def _response_template_parser(self) -> str | None:
        """`hf` / `beam` when configured (vLLM's ResponseTemplateParser stands for both)."""
        for name in (self.tool_parser, self.reasoning_parser):
            if name in _RESPONSE_TEMPLATE_PARSERS:
                return name
        return None

    def _response_template_adjust(self, request: Any) -> dict[str, Any]:
        """ResponseTemplateParser.adjust_request (always_adjust_request): special tokens kept
        and unspaced, then hf refuses the tool guarantees it cannot enforce; beam's template
        grammar (a structural tag from the response_template) is not rendered yet."""
        changes: dict[str, Any] = {"skip_special_tokens": False, "spaces_between_special_tokens": False}
        tools_on = self.tool_parser is not None and bool(request.tools) and request.tool_choice != "none"
        if self._response_template_parser() == "beam":
            if request.tools or _requested_constraint(request) is not None:
                raise NotImplementedFeatureError(
                    "beam's response_template grammar (tools or structured outputs) is not rendered yet"
                )
            return changes
        if tools_on:
            unsupported = _unsupported_tool_guarantee(request)
            if unsupported is not None:
                guarantee, parameter = unsupported
                raise vllm_validation_error(
                    f"response_template parsing cannot guarantee {guarantee} "
                    "without a format-compatible structural grammar",
                    parameter=parameter,
                )
        return changes

    def adjust_harmony_request(self, request: Any, *, tool_constraints: bool = True) -> dict[str, Any]:
        """vLLM's `HarmonyParser.adjust_request` on a gpt_oss model (any configured parser):
        the request's own constraint becomes a Harmony structural tag on the final message
        (`_adjust_output_format`), then the `openai` tool parser's tool-call tag applies."""
        if not self.has_parser:
            return {}
        changes: dict[str, Any] = {}
        user = _requested_constraint(request)
        if user is not None:
            content = _harmony_user_format(user)
            if content is not None:
                tag = dump_structural_tag(harmony_output_format(content))
                kept = {k: v for k, v in user.items() if k not in _CONSTRAINT_KEYS}
                changes = {"structured_outputs": {**kept, "structural_tag": tag}, "response_format": None}
        spec = self.tool_spec
        if spec is None or not tool_constraints or not request.tools or not _calls_tools(request.tool_choice):
            return changes
        if changes:
            raise NotImplementedFeatureError(
                "tool calls together with a response_format or structured_outputs on a Harmony "
                "model are not rendered yet"
            )
        level = self.tool_strict_level or spec.default_tool_strict_level
        return _structural_tag_changes(request, "harmony", None, level)

    def _tool_constraints(self, request: Any, spec: ToolParserSpec) -> dict[str, Any]:
        choice = request.tool_choice
        if not request.tools or not _calls_tools(choice):
            return {}
        user = _requested_constraint(request)  # vLLM extracts it before deciding anything
        if spec.structural_tag_model is not None:
            level = self.tool_strict_level or spec.default_tool_strict_level
            suffix = _hy_suffix(self._vocab) if spec.structural_tag_model == "hy_v4" else ""
            return _structural_tag_changes(request, spec.structural_tag_model, user, level,
                                           token_suffix=suffix, tag_on_auto=spec.structural_tag_auto)
        if choice == "auto" or not spec.json_schema_choice:
            return {}
        if request.structured_outputs is not None and request.structured_outputs.get("structural_tag") is not None:
            return {}
        schema = json_schema_from_tools(choice, request.tools, request.parallel_tool_calls)
        return {"structured_outputs": {"json": schema}, "response_format": None}


def _harmony_user_format(user: dict[str, Any]) -> dict[str, Any] | None:
    """vLLM's `structured_outputs_to_format` (no xgrammar support check on this path)."""
    if user.get("json_object"):
        return json_schema_format({"type": "object"})
    if user.get("json") is not None:
        schema = user["json"]
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as exc:
                raise BadRequestError(f"Invalid JSON schema: {exc}", param="structured_outputs") from None
        return json_schema_format(schema)
    if user.get("choice") is not None:
        return {"type": "or", "elements": [{"type": "const_string", "value": c} for c in user["choice"]]}
    for key in ("regex", "grammar", "structural_tag"):
        if user.get(key) is not None:
            raise NotImplementedFeatureError(
                f"a {key} constraint on a Harmony model (an xgrammar structural tag) is not rendered yet"
            )
    return None


_RESPONSE_TEMPLATE_PARSERS = frozenset({"hf", "beam"})
_COHERE_PARSERS = frozenset({"cohere_command3", "cohere_command4"})


def _cohere_adjust(request: Any, tool_parser: bool) -> dict[str, Any]:
    """vLLM's `CohereCommandParser.adjust_request`: special tokens kept (the filter reads the
    markers); tools or a JSON schema become a Cohere xgrammar structural tag whose tool
    grammar is xgrammar's own EBNF of each tool's schema, which render cannot build yet."""
    user = request.structured_outputs or {}
    rf = request.response_format
    rf_type = rf.get("type") if isinstance(rf, dict) else getattr(rf, "type", None)
    if user.get("structural_tag") is not None or rf_type == "structural_tag":
        return {"skip_special_tokens": False}
    wants_schema = rf_type in ("json_schema", "json_object") or bool(
        user.get("json") is not None or user.get("json_object")
    )
    if bool(request.tools) or wants_schema:
        raise NotImplementedFeatureError(
            "the Cohere Command structural tag (tools or a JSON schema) is not rendered yet"
        )
    return {"skip_special_tokens": False}


def _check_response_template_pair(reasoning: str | None, tool: str | None) -> None:
    """vLLM's ParserManager: an hf / beam parser stands for one unified parser, so it pairs
    only with its own name."""
    kinds = {n if n in _RESPONSE_TEMPLATE_PARSERS else "" for n in (reasoning, tool) if n}
    if kinds & _RESPONSE_TEMPLATE_PARSERS and len(kinds) > 1:
        raise ConfigError(f"--reasoning-parser {reasoning} and --tool-call-parser {tool} cannot be combined")


def _unsupported_tool_guarantee(request: Any) -> tuple[str, str] | None:
    """vLLM's response_template `_unsupported_tool_guarantee`: the first one asked for."""
    for tool in request.tools or ():
        data = tool.model_dump(exclude_none=True) if hasattr(tool, "model_dump") else tool
        function = data.get("function") if isinstance(data, dict) else None
        if (isinstance(data, dict) and data.get("strict")) or (
            isinstance(function, dict) and function.get("strict")
        ):
            return "strict tools", "tools"
    choice = request.tool_choice
    if choice == "required":
        return "required tool choice", "tool_choice"
    if choice is not None and not isinstance(choice, str):
        return "named tool choice", "tool_choice"
    if getattr(request, "parallel_tool_calls", True) is False:
        return "parallel_tool_calls=False", "parallel_tool_calls"
    return None


def _check_xtml_named_choice(request: Any, changes: dict[str, Any]) -> None:
    """KimiK3ToolParser.adjust_request: a named tool_choice needs the XTML structural tag
    (the request's own, or the one just built)."""
    choice = request.tool_choice
    if choice is None or isinstance(choice, str):
        return
    structured = changes.get("structured_outputs", request.structured_outputs)
    if structured is None or structured.get("structural_tag") is None:
        raise vllm_validation_error(
            "Named tool choice for Kimi K3 requires strict tool calling "
            "(VLLM_ENFORCE_STRICT_TOOL_CALLING) so the XTML structural "
            'tag can force the call. Otherwise use `tool_choice` set to "auto", "required", or "none".',
            parameter="tool_choice", value=choice,
        )


def _calls_tools(choice: Any) -> bool:
    """vLLM's `need_tool_calling`: auto, required or a named function."""
    return choice in ("auto", "required") or (choice is not None and not isinstance(choice, str))


def _structural_tag_changes(
    request: Any, model: str, user: dict[str, Any] | None, strict_level: str | None,
    *, token_suffix: str = "", tag_on_auto: bool = True,
) -> dict[str, Any]:
    """vLLM's `DelegatingParser._apply_structural_tag` (see render_service/render/structural_tags.py).

    `user` is the request's own constraint (response_format over structured_outputs). Auto
    keeps it as "a tool call or the user's format" when xgrammar accepts it; required/named
    replace it.
    """
    choice = request.tool_choice
    is_auto = choice == "auto"
    single_call = request.parallel_tool_calls is False
    if model not in STRUCTURAL_TAG_MODELS:
        raise NotImplementedFeatureError(
            f"the {model!r} structural tag vLLM builds for this tool parser is not rendered yet"
        )
    level = strict_level or "auto"
    if single_call and not (is_auto and user is not None):
        level = _stronger_level(level, "function")  # one call needs the call envelope
    simple_choice = "auto" if is_auto else "required" if choice == "required" else "forced"
    declared = [(tool.function.name, tool.function.parameters, tool.function.strict) for tool in request.tools]
    tools = resolve_strictness(declared, simple_choice, level)
    if tools is None:
        return {}
    user_format = None
    if is_auto and user is not None:
        user_format = _user_format(user, parser_model=model)
        if user_format is None:
            return {}  # xgrammar rejects the user's constraint: it applies alone
        simple_choice = "required"  # "a call or the user's format", never free text
    if simple_choice == "auto" and not tag_on_auto:
        return {}  # the parser's get_structural_tag builds none for auto (hy_v4)
    if simple_choice == "forced":
        tools = [tool for tool in tools if tool.name == choice.function.name]
        if not tools:  # reachable from Messages, whose tool_choice skips the chat validator
            raise BadRequestError(f"The tool with name '{choice.function.name}' is not found in the tools list.")
        if len(tools) != 1:
            if not tag_on_auto:  # hy_v4's get_structural_tag catches the builder's error: no tag
                return {}
            raise BadRequestError("Forced tool choice must resolve to exactly one tool.")
    tag_format = tool_call_format(model, tools, simple_choice, single_call, token_suffix)
    if user_format is not None:
        tag_format = {"type": "or", "elements": [tag_format, user_format]}
    return {"structured_outputs": {"structural_tag": dump_structural_tag(tag_format)}, "response_format": None}


def _stronger_level(level: str, floor: str) -> str:
    return max(level, floor, key=TOOL_STRICT_LEVELS.index)


def _user_format(user: dict[str, Any], parser_model: str) -> dict[str, Any] | None:
    try:
        return output_format(user)
    except Unknown as exc:
        raise NotImplementedFeatureError(
            f"tool_choice=\"auto\" with constrained tools (strict tools or --tool-strict-level) and "
            f"structured outputs holding {exc} needs xgrammar to decide whether vLLM combines them "
            f"into the {parser_model!r} structural tag; this render service does not guess"
        ) from exc


def extract_structured_outputs(
    structured: dict[str, Any] | None, response_format: dict[str, Any] | None
) -> dict[str, Any] | None:
    """vLLM's `extract_structured_outputs`: `response_format` overrides `structured_outputs`.

    Raises:
        BadRequestError: the result holds more than one constraint, or none (e.g. a
            json_schema response_format without a schema): vLLM's StructuredOutputsParams errors.
        NotImplementedFeatureError: a structural-tag `response_format` (vLLM re-serialises it
            through its pydantic model, which we do not reproduce).
    """
    if response_format is None or response_format.get("type") == "text":
        return None if structured is None else _one_constraint(dict(structured))
    kind = response_format.get("type")
    if kind == "json_object":
        override: dict[str, Any] = {"json_object": True}
    elif kind == "json_schema":
        schema = response_format.get("json_schema") or {}
        override = {"json": schema.get("schema") if isinstance(schema, dict) else None}
    else:
        raise NotImplementedFeatureError(
            f"response_format type {kind!r} (structural tags) is not supported by this render service yet"
        )
    return _one_constraint({**(structured or {}), **override})


def _one_constraint(structured: dict[str, Any]) -> dict[str, Any]:
    """`structured`, if it holds exactly one constraint (vLLM's StructuredOutputsParams check)."""
    normalised = normalise_structured_outputs(structured)  # raises vLLM's "more than one" error
    assert normalised is not None  # it is None only for None
    if not any(normalised[key] is not None for key in _CONSTRAINT_KEYS):
        raise vllm_validation_error(
            f"You must use one kind of structured outputs constraint but none are specified: {normalised}"
        )
    return structured


def _requested_constraint(request: Any) -> dict[str, Any] | None:
    """The user's constraint as vLLM's `extract_structured_outputs` returns it, same errors.

    A structural-tag `response_format` alone is a constraint we never need to read (tool
    calls replace it; the auto corner refuses it); with a second constraint vLLM's error
    message would quote its pydantic dump, so that combination is refused.
    """
    response_format = request.response_format
    kind = response_format.get("type") if response_format is not None else None
    if kind in (None, "text", "json_object", "json_schema"):
        return extract_structured_outputs(request.structured_outputs, response_format)
    if request.structured_outputs is not None and any(
        request.structured_outputs.get(key) is not None for key in _CONSTRAINT_KEYS
    ):
        raise NotImplementedFeatureError(
            f"response_format type {kind!r} together with structured_outputs is not supported by "
            "this render service yet"
        )
    return {"structural_tag": response_format}


_CONSTRAINT_KEYS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


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
