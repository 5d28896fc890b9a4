"""Differential test: tool-call structural tags at render == vLLM 0.33's, request by request.

For every tool parser vLLM gives an xgrammar `structural_tag_model` (hermes, qwen3_json ->
"hermes"; llama3_json, llama4_json -> "llama"; qwen3_coder, qwen3_xml -> "qwen_3_coder";
deepseek_v3 -> "deepseek_r1"; deepseek_v31 -> "deepseek_v3_1"), with and without a reasoning
parser and under each --tool-strict-level, a matrix of requests (tool_choice none / auto /
required / named / absent x strict true / false / absent tools x parallel_tool_calls x user
response_format / structured_outputs, plus `$defs`, parameter-less tools, unknown or duplicate
names, ...) is rendered by vLLM's own render app and by ours. Each response must be equal as
JSON (token_ids, sampling_params with the structural_tag string byte for byte, errors with
their status and body); the structural tag is also compared parsed, for readable diffs.

vLLM runs in ONE reference-venv subprocess for the whole file (structural_tag_ref_helper.py:
one render app per model folder, the parser swapped per configuration). The ref venv is
required: without it these tests fail (CI installs it).

The only answers allowed to differ are our typed 501s for the documented corner (auto choice,
constrained tools, and a user constraint xgrammar must judge: regex, grammar, or a JSON schema
outside render_service/xgrammar_support.py's vetted keywords, or a structural-tag
response_format); those cases are named `refusable_*`: ours is that 501 or vLLM's exact
answer, never a different one.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from render_service.api import Renderer
from render_service.config import ServiceConfig
from render_service.errors import RenderServiceError
from render_service.model import ModelBundle

from .families import build_family
from .ref_server import build_render_model_dir, ref_venv

pytestmark = pytest.mark.vllm

HELPER = Path(__file__).resolve().parent / "structural_tag_ref_helper.py"
HEADER_ID = "fixed-request-id"
# No spaces: the ref venv's transformers 5.19 drops spaces when it tokenizes DeepSeek text
# (a tokenizer difference outside this test's subject; our tokenization follows 5.24).
USER = {"role": "user", "content": "Weather?"}
REF_TIMEOUT_S = 1200

# A weightless Llama config vLLM's ModelConfig accepts; the DeepSeek folder reuses it with its
# own vocabulary (render only needs the tokenizer and template).
LLAMA_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
FAMILY_CONFIGS = {
    "llama3_1": {"vocab_size": 128256, "max_position_embeddings": 131072, "bos_token_id": 128000, "eos_token_id": 128009},
    "deepseek_r1": {"vocab_size": 129280, "max_position_embeddings": 163840, "bos_token_id": 0, "eos_token_id": 1},
}
# tool parser -> (model folder, reasoning parser that fits its tokenizer, or None)
PARSERS: dict[str, tuple[str, str | None]] = {
    "hermes": ("qwen3", "qwen3"),
    "qwen3_json": ("qwen3", "qwen3"),
    "qwen3_coder": ("qwen3", "qwen3"),
    "qwen3_xml": ("qwen3", "qwen3"),
    "llama3_json": ("llama3_1", None),
    "llama4_json": ("llama3_1", None),
    "deepseek_v3": ("deepseek_r1", "deepseek_r1"),
    "deepseek_v31": ("deepseek_r1", "deepseek_r1"),
    "kimi_k2": ("qwen3", None),
    "longcat": ("qwen3", None),
    "plamo3": ("qwen3", None),
    "step3p5": ("qwen3", None),
    "step5": ("qwen3", None),
    "deepseek_v32": ("deepseek_r1", None),
    "deepseek_v4": ("deepseek_r1", None),
    "deepseek_v41": ("deepseek_r1", None),
    "glm45": ("qwen3", None),
    "glm47": ("qwen3", None),
    "ling3": ("qwen3", None),
    "minimax_m2": ("qwen3", None),
    "mimo": ("qwen3", None),
    "hy_v4": ("hy4", None),
    "kimi_k3": ("qwen3", "kimi_k3"),
}
STRICT_LEVELS = ("auto", "function", "parameter")
TAG_MODELS = {
    "hermes": "hermes",
    "qwen3_json": "hermes",
    "llama3_json": "llama",
    "llama4_json": "llama",
    "qwen3_coder": "qwen_3_coder",
    "qwen3_xml": "qwen_3_coder",
    "deepseek_v3": "deepseek_r1",
    "deepseek_v31": "deepseek_v3_1",
    "kimi_k2": "kimi",
    "longcat": "longcat",
    "plamo3": "plamo3",
    "step3p5": "qwen_3_coder",
    "step5": "qwen_3_coder",
    "deepseek_v32": "deepseek_v3_2",
    "deepseek_v4": "deepseek_v4",
    "deepseek_v41": "deepseek_v4_1",
    "glm45": "glm_4_7",
    "glm47": "glm_4_7",
    "ling3": "glm_4_7",
    "minimax_m2": "minimax",
    "mimo": "mimo",
    "hy_v4": "hy_v4",
    "kimi_k3": "kimi_k3",
}
ALIASES = ("qwen3_json", "qwen3_xml", "llama4_json", "glm47")  # the same vLLM parser class as another
# Other classes with qwen3_coder's tag model: the tool matrix only.
SAME_TAG = ("step3p5", "step5", "ling3")

# -- tools ----------------------------------------------------------------------------------


def _weather(strict: bool | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": "get_weather",
        "description": "Weather in a city, «today».",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": None},
                "days": {"type": "integer", "minimum": 1, "maximum": 1e1},
            },
            "required": ["city"],
        },
    }
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


def _search(strict: bool | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "filters": {"$ref": "#/$defs/Filters"}},
            "$defs": {"Filters": {"type": "object", "properties": {"site": {"type": "string"}}}},
        },
    }
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


def _no_params(strict: bool | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": "ping"}
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


STRICTNESS: dict[str, list[dict[str, Any]]] = {
    "absent": [_weather(), _search(), _no_params()],
    "one_true": [_weather(True), _search(), _no_params()],
    "one_false": [_weather(False), _search(), _no_params()],
    "all_true": [_weather(True), _search(True), _no_params(True)],
    "mixed": [_weather(True), _search(False), _no_params(None)],
}


def _named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


CHOICES: dict[str, Any] = {
    "auto": "auto",
    "required": "required",
    "named": _named("get_weather"),
    "named_noparams": _named("ping"),
    "none": "none",
    "absent": ...,
}
PARALLEL: dict[str, Any] = {"absent": ..., "true": True, "false": False}

# -- user constraints -------------------------------------------------------------------------

PYDANTIC_SCHEMA = {
    "$defs": {"Unit": {"enum": ["c", "f"], "title": "Unit", "type": "string"}},
    "properties": {
        "city": {"title": "City", "type": "string"},
        "unit": {"$ref": "#/$defs/Unit"},
        "days": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "default": None},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "when": {"type": "string", "format": "date-time"},
    },
    "required": ["city"],
    "title": "Answer",
    "type": "object",
    "additionalProperties": False,
}


def _rf_schema(schema: Any) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}}


# name -> (request fields, refusable in the auto corner)
CONSTRAINTS: dict[str, tuple[dict[str, Any], bool]] = {
    "none": ({}, False),
    "rf_text": ({"response_format": {"type": "text"}}, False),
    "rf_json_object": ({"response_format": {"type": "json_object"}}, False),
    "rf_pydantic": (_rf_schema(PYDANTIC_SCHEMA), False),
    "rf_unicode": (_rf_schema({"type": "string", "enum": ["é", "東京"]}), False),
    "rf_multiple_of": (_rf_schema({"type": "number", "multipleOf": 2}), False),  # vLLM: unsupported
    "rf_bad_type": (_rf_schema({"type": "object", "properties": {"a": {"type": "foo"}}}), False),
    "rf_min_over_max": (_rf_schema({"type": "integer", "minimum": 5, "maximum": 1}), False),
    "rf_unused_bad_defs": (_rf_schema({"$defs": {"x": {"type": "foo"}}, "type": "string"}), False),
    "rf_pattern": (_rf_schema({"type": "string", "pattern": "^a+$"}), True),
    "rf_no_schema": ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, False),
    "so_json": ({"structured_outputs": {"json": {"type": "object", "properties": {"x": {"type": "integer"}}}}}, False),
    "so_json_string": ({"structured_outputs": {"json": '{"type": "array", "items": {"type": "boolean"}}'}}, False),
    "so_json_bad_string": ({"structured_outputs": {"json": "{not json"}}, False),
    "so_choice": ({"structured_outputs": {"choice": ["yes", "no", 'say "hi"\n']}}, False),
    "so_choice_empty": ({"structured_outputs": {"choice": []}}, False),
    "so_json_object": ({"structured_outputs": {"json_object": True, "disable_any_whitespace": True}}, False),
    "so_json_object_false": ({"structured_outputs": {"json_object": False}}, False),
    "so_regex": ({"structured_outputs": {"regex": "[a-z]+"}}, True),
    "so_grammar": ({"structured_outputs": {"grammar": 'root ::= "a" | "b"'}}, True),
    "so_grammar_empty": ({"structured_outputs": {"grammar": ""}}, False),
    "so_json_empty_string": ({"structured_outputs": {"json": ""}}, False),
    "so_json_empty_schema": ({"structured_outputs": {"json": {}}}, False),
    "so_whitespace": ({"structured_outputs": {"json": {"type": "string"}, "whitespace_pattern": " *"}}, False),
    "rf_and_so": ({**_rf_schema({"type": "string"}), "structured_outputs": {"regex": "a"}}, False),  # vLLM: 400
    "rf_structural_tag": (
        {"response_format": {"type": "structural_tag", "format": {"type": "const_string", "value": "hi"}}},
        True,
    ),
}
# The constraints of the smaller matrix, for the parsers whose builder shape another covers.
SOME_CONSTRAINTS = ("none", "rf_json_object", "rf_pydantic", "so_choice", "so_regex", "rf_multiple_of")

# JSON schemas as the user's response_format in the auto corner (auto choice, one strict tool):
# vLLM asks xgrammar whether each compiles. DECIDED: ours must answer exactly as vLLM does;
# UNDECIDED: outside xgrammar_support's vetted keywords: ours is a 501 (or vLLM's exact answer).
DECIDED_SCHEMAS: dict[str, Any] = {
    "unknown_type": {"type": "foo"},
    "type_int": {"type": 3},
    "type_none": {"type": None},
    "type_dict": {"type": {}},
    "type_list": {"type": ["string", "null"]},
    "enum_empty": {"enum": []},
    "enum_str": {"enum": "a"},
    "required_str": {"type": "object", "required": "a"},
    "required_ints": {"type": "object", "required": [1]},
    "props_list": {"type": "object", "properties": []},
    "props_str": {"type": "object", "properties": "x"},
    "min_gt_max": {"type": "integer", "minimum": 5, "maximum": 1},
    "minlen_gt_max": {"type": "string", "minLength": 5, "maxLength": 1},
    "minitems_gt_max": {"type": "array", "minItems": 5, "maxItems": 1},
    "minprops_gt_max": {"type": "object", "minProperties": 3, "maxProperties": 1},
    "minlen_str": {"type": "string", "minLength": "a"},
    "minimum_str": {"type": "integer", "minimum": "a"},
    "minimum_bool": {"type": "number", "minimum": True},
    "ref_ok": {"$defs": {"x": {"type": "string"}}, "$ref": "#/$defs/x"},
    "ref_root": {"type": "object", "properties": {"a": {"$ref": "#"}}},
    "additional_int": {"type": "object", "additionalProperties": 1},
    "additional_schema": {"type": "object", "additionalProperties": {"type": "integer"}},
    "items_list": {"type": "array", "items": [{"type": "string"}]},
    "items_int": {"type": "array", "items": 1},
    "enum_on_object": {"type": "object", "enum": []},
    "multipleOf": {"type": "number", "multipleOf": 2},
    "allOf2": {"allOf": [{"type": "string"}, {"enum": ["a"]}]},
    "allOf1": {"allOf": [{"type": "string"}]},
    "format_email": {"type": "string", "format": "email"},
    "format_bad": {"type": "string", "format": "blah"},
    "const_obj": {"const": {"a": [1]}},
    "nested_bad_type": {"type": "object", "properties": {"a": {"type": "foo"}}},
    "anyof_bad": {"anyOf": [{"type": "foo"}, {"type": "string"}]},
    "oneof_bad": {"oneOf": [{"type": "string"}, {"type": 1}]},
    "empty": {},
    "min_eq_max": {"type": "number", "minimum": 1.5, "maximum": 1.5},
    "bool_prop_true": {"type": "object", "properties": {"a": True}},
    "items_true": {"type": "array", "items": True},
    "additional_true": {"type": "object", "additionalProperties": True},
    "int_min_int": {"type": "integer", "minimum": -3, "maximum": 7},
    "num_min_float": {"type": "number", "minimum": -3.5},
    "type_bool_value": {"type": True},
    "enum_on_string": {"type": "string", "enum": ["a", "b"]},
    "enum_on_int_mixed": {"type": "integer", "enum": ["a", 1]},
    "const_on_string_int": {"type": "string", "const": 1},
    "nested_required_ok": {"type": "object",
                           "properties": {"o": {"type": "object",
                                                "properties": {"x": {"type": "integer"}},
                                                "required": ["x"]}}},
    "defs_unused_bad": {"$defs": {"x": {"type": "foo"}}, "type": "string"},
    "ref_defs_missing_name": {"$defs": {"y": {"type": "string"}}, "$ref": "#/$defs/x"},
    "ref_definitions": {"definitions": {"x": {"type": "string"}}, "$ref": "#/definitions/x"},
    "anyof_with_ref": {"$defs": {"x": {"type": "string"}},
                       "anyOf": [{"$ref": "#/$defs/x"}, {"type": "null"}]},
    "minitems_str": {"type": "array", "minItems": "3"},
    "maxprops_ok": {"type": "object", "maxProperties": 2},
    "desc_nonstr": {"type": "string",
                    "description": {"x": 1},
                    "title": 5,
                    "default": [1],
                    "examples": 3},
    "recursive": {"$defs": {"node": {"type": "object",
                                     "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                                       {"type": "null"}]}}}},
                  "$ref": "#/$defs/node"},
    "ref_missing": {"$ref": "#/$defs/x"},
    "ref_missing_definitions": {"definitions": {"y": {}}, "$ref": "#/definitions/x"},
}
UNDECIDED_SCHEMAS: dict[str, Any] = {
    "min_gt_max_string": {"type": "string", "minimum": 5, "maximum": 1},
    "min_gt_max_notype": {"minimum": 5, "maximum": 1},
    "minlen_gt_max_int": {"type": "integer", "minLength": 5, "maxLength": 1},
    "minitems_gt_max_obj": {"type": "object", "minItems": 5, "maxItems": 1},
    "minprops_gt_max_str": {"type": "string", "minProperties": 3, "maxProperties": 1},
    "minlen_str_int": {"type": "integer", "minLength": "a"},
    "minimum_str_string": {"type": "string", "minimum": "a"},
    "int_min_float": {"type": "integer", "minimum": 0.5},
    "items_on_object": {"type": "object", "items": 1},
    "props_on_string": {"type": "string", "properties": []},
    "required_on_string": {"type": "string", "required": "x"},
    "bool_props": {"type": "object", "properties": {"a": True, "b": False}},
    "anyof_str": {"anyOf": "x"},
    "count_float": {"type": "string", "maxLength": 2.0},
    "bool_prop_false": {"type": "object", "properties": {"b": False}},
    "ref_sibling": {"$defs": {"x": {"type": "string"}}, "$ref": "#/$defs/x", "type": "integer"},
    "anyof_type": {"type": "string", "anyOf": [{"type": "string"}]},
    "ref_pointer": {"properties": {"a": {"type": "string"}},
                    "type": "object",
                    "$ref": "#/properties/a"},
}


def _deeply_nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


DECIDED_SCHEMAS["nested_70"] = _deeply_nested(70)  # past vLLM's 64 levels: no tag
DECIDED_SCHEMAS["nested_60"] = _deeply_nested(60)

# -- the request matrix -------------------------------------------------------------------------


def _body(tools: list[dict[str, Any]] | None, choice: Any, parallel: Any, extra: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [USER]}
    if tools is not None:
        body["tools"] = copy.deepcopy(tools)
    if choice is not ...:
        body["tool_choice"] = copy.deepcopy(choice)
    if parallel is not ...:
        body["parallel_tool_calls"] = parallel
    body.update(copy.deepcopy(extra))
    return body


def tool_matrix() -> Iterator[tuple[str, dict[str, Any]]]:
    """tool_choice x tool strictness x parallel_tool_calls, no user constraint."""
    for choice_name, choice in CHOICES.items():
        for strict_name, tools in STRICTNESS.items():
            for parallel_name, parallel in PARALLEL.items():
                yield f"{choice_name}-{strict_name}-par_{parallel_name}", _body(tools, choice, parallel, {})


def constraint_matrix(constraints: Sequence[str] = tuple(CONSTRAINTS)) -> Iterator[tuple[str, dict[str, Any]]]:
    """User response_format / structured_outputs against auto, required and named choice."""
    for choice_name in ("auto", "required", "named"):
        for strict_name in ("absent", "one_true"):
            for parallel_name in ("absent", "false"):
                for constraint_name in constraints:
                    extra, refusable = CONSTRAINTS[constraint_name]
                    if choice_name == "named" and constraint_name.startswith("so_") and any(
                        key in extra["structured_outputs"] for key in ("json", "regex", "choice")
                    ):
                        continue  # a request validation error, covered once in special_cases
                    prefix = "refusable_" if refusable and choice_name == "auto" else ""
                    name = f"{prefix}{choice_name}-{strict_name}-par_{parallel_name}-{constraint_name}"
                    tools = STRICTNESS[strict_name]
                    yield name, _body(tools, CHOICES[choice_name], PARALLEL[parallel_name], extra)


def special_cases() -> Iterator[tuple[str, dict[str, Any]]]:
    weather, search = _weather(True), _search(True)
    yield "no_tools", {"messages": [USER]}
    yield "named_unknown", _body([weather], _named("nope"), ..., {})
    yield "named_with_so_json", _body([weather], _named("get_weather"), ..., {"structured_outputs": {"json": {}}})
    yield "duplicate_names_named", _body([weather, _weather(False)], _named("get_weather"), ..., {})
    yield "duplicate_names_required", _body([weather, _weather(False)], "required", False, {})
    yield "empty_parameters_strict", _body(
        [{"type": "function", "function": {"name": "e", "parameters": {}, "strict": True}}], "required", ..., {}
    )
    yield "unicode_name", _body([{"type": "function", "function": {"name": "météo_東京", "strict": True,
                                                                  "parameters": {"type": "object"}}}], "required", ..., {})
    yield "defs_named_strict", _body([search], _named("search"), ..., {})
    yield "tool_choice_null", _body([weather], None, ..., {})
    yield "stream_required", _body([weather], "required", ..., {"stream": True})
    yield "skip_special_tokens_true", _body([weather], "auto", ..., {"skip_special_tokens": True})
    yield "no_tools_rf_no_schema", _body(None, ..., ..., CONSTRAINTS["rf_no_schema"][0])
    yield "choice_none_rf_and_so", _body([weather], "none", ..., CONSTRAINTS["rf_and_so"][0])
    yield "so_without_constraint", _body([weather], "auto", ..., {"structured_outputs": {"disable_any_whitespace": True}})


def schema_cases() -> Iterator[tuple[str, dict[str, Any]]]:
    """Each schema as the user's response_format where vLLM asks xgrammar about it."""
    for refusable, schemas in ((False, DECIDED_SCHEMAS), (True, UNDECIDED_SCHEMAS)):
        for name, schema in schemas.items():
            prefix = "refusable_" if refusable else ""
            yield f"{prefix}schema_{name}", _body(STRICTNESS["one_true"], "auto", ..., _rf_schema(schema))


def level_matrix() -> Iterator[tuple[str, dict[str, Any]]]:
    """The smaller matrix run under each --tool-strict-level."""
    for choice_name in ("auto", "required", "named", "none"):
        for strict_name in ("absent", "one_true", "one_false"):
            for parallel_name in ("absent", "false"):
                for constraint_name in ("none", "rf_json_object"):
                    extra = CONSTRAINTS[constraint_name][0]
                    name = f"{choice_name}-{strict_name}-par_{parallel_name}-{constraint_name}"
                    yield name, _body(STRICTNESS[strict_name], CHOICES[choice_name], PARALLEL[parallel_name], extra)


def runs() -> list[dict[str, Any]]:
    """The matrix per configuration, sized for CI: every constraint for one parser of each
    builder family that differs in shape (hermes, llama), fewer for the others; aliases of
    the same vLLM class (qwen3_json, qwen3_xml, llama4_json) get the tool matrix only; two
    parsers run again with a reasoning parser (tool matrix) and under each --tool-strict-level
    (level matrix): both decisions are parser-independent in vLLM."""
    out = []
    for parser, (model, reasoning) in PARSERS.items():
        if parser in ("hermes", "llama3_json"):
            constraints = [*constraint_matrix(), *schema_cases()]
        elif parser in ALIASES or parser in SAME_TAG:
            constraints = []
        else:
            constraints = list(constraint_matrix(SOME_CONSTRAINTS))
        out.append(_run(parser, model, None, None, [*tool_matrix(), *constraints, *special_cases()]))
        if parser in ("hermes", "deepseek_v3", "kimi_k3"):  # engine-based, classic, and K3's own
            out.append(_run(parser, model, reasoning, None, [*tool_matrix(), *special_cases()]))
        if parser in ("hermes", "deepseek_v31"):
            for level in STRICT_LEVELS:
                out.append(_run(parser, model, None, level, list(level_matrix())))
    return out


def _run(parser: str, model: str, reasoning: str | None, level: str | None, cases: list[Any]) -> dict[str, Any]:
    run_id = f"{parser}|reasoning={reasoning}|level={level}"
    return {
        "id": run_id,
        "model": model,
        "tool_parser": parser,
        "reasoning_parser": reasoning,
        "strict_level": level,
        "cases": [[f"{run_id}|{name}", body] for name, body in cases],
    }


RUNS = runs()

# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("structural-tag-models")
    dirs = {"qwen3": build_render_model_dir(root / "qwen3")}
    for family, values in FAMILY_CONFIGS.items():
        folder = build_family(family, root / family)
        (folder / "config.json").write_text(json.dumps({**LLAMA_CONFIG, **values}, indent=2))
        dirs[family] = folder
    dirs["hy4"] = _hy4_model(dirs["qwen3"], root / "hy4")
    return dirs


def _hy4_model(qwen3: Path, dst: Path) -> Path:
    """The qwen3 folder with the hy4 family tokenizer (Hy markers as single tokens): hy_v4's
    parser needs <tool_calls> / </tool_calls> in the vocabulary."""
    import shutil

    from tests.parsers.family_tokenizers import family_tokenizer

    shutil.copytree(qwen3, dst)
    for path in family_tokenizer("tool", "hy_v4").directory.glob("*.json"):
        shutil.copy(path, dst / path.name)
    return dst


@pytest.fixture(scope="module")
def vllm_results(model_dirs: dict[str, Path]) -> dict[str, Any]:
    """Every case of every run, rendered by vLLM 0.33 in one reference process."""
    python = ref_venv() / "bin" / "python"  # raises (test fails) without the ref venv
    payload = {"models": {name: str(path) for name, path in model_dirs.items()}, "runs": RUNS}
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_LOGGING_LEVEL": "ERROR",
        "PYTHONPATH": "",
    }
    proc = subprocess.run(
        [str(python), str(HELPER)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env,
        timeout=REF_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def bundles(model_dirs: dict[str, Path]) -> dict[str, ModelBundle]:
    return {name: ModelBundle.load(ServiceConfig(model=str(path))) for name, path in model_dirs.items()}


def _our_renderer(spec: dict[str, Any], model_dirs: dict[str, Path], bundles: dict[str, ModelBundle]) -> Renderer:
    config = ServiceConfig(
        model=str(model_dirs[spec["model"]]),
        tool_call_parser=spec["tool_parser"],
        enable_auto_tool_choice=True,
        reasoning_parser=spec["reasoning_parser"],
        tool_strict_level=spec["strict_level"],
    )
    return Renderer(config, bundle=bundles[spec["model"]])


# -- comparison ---------------------------------------------------------------------------------


def _ours(renderer: Renderer, body: dict[str, Any]) -> tuple[int, Any]:
    try:
        got = renderer.render_chat(copy.deepcopy(body), request_id_header=HEADER_ID)
    except RenderServiceError as exc:
        return exc.status, exc.to_body()
    assert list(got)[-1] == "render_fingerprint"  # our one addition (see test_vllm_differential.py)
    got.pop("render_fingerprint")
    return 200, got


def _tag(response: Any) -> str | None:
    if not isinstance(response, dict):
        return None
    structured = (response.get("sampling_params") or {}).get("structured_outputs") or {}
    return structured.get("structural_tag")


def _mismatch(case_id: str, expected: list[Any], got: tuple[int, Any]) -> str | None:
    """None when equal (or an allowed refusal), else a short description."""
    (ref_status, ref_body), (status, body) = expected, got
    if status == 501 and "|refusable_" in case_id:
        return None if ref_status == 200 else f"{case_id}: we refused, vLLM answered {ref_status}"
    if status != ref_status:
        return f"{case_id}: status {status} != vLLM {ref_status}: {json.dumps(body)[:600]} / {json.dumps(ref_body)[:600]}"
    ref_tag, tag = _tag(ref_body), _tag(body)
    if ref_tag != tag:
        parsed = (json.loads(tag) if tag else None) == (json.loads(ref_tag) if ref_tag else None)
        return f"{case_id}: structural_tag differs (parsed equal: {parsed}):\n ours {tag}\n vLLM {ref_tag}"
    if body != ref_body:
        return f"{case_id}: response differs:\n ours {json.dumps(body)[:1500]}\n vLLM {json.dumps(ref_body)[:1500]}"
    if isinstance(ref_body, dict) and list(body) != list(ref_body):
        return f"{case_id}: field order differs"
    return None


@pytest.mark.parametrize("spec", RUNS, ids=[spec["id"] for spec in RUNS])
def test_render_equals_vllm(spec: dict[str, Any], vllm_results, model_dirs, bundles) -> None:
    """Every case of the run: same status and body as vLLM 0.33's render, tag byte for byte."""
    renderer = _our_renderer(spec, model_dirs, bundles)
    problems = []
    for case_id, body in spec["cases"]:
        problem = _mismatch(case_id, vllm_results[case_id], _ours(renderer, body))
        if problem is not None:
            problems.append(problem)
    assert not problems, f"{len(problems)} of {len(spec['cases'])} cases differ:\n" + "\n".join(problems[:8])


def test_matrix_reaches_every_outcome(vllm_results) -> None:
    """The matrix is not vacuous: for every tag model vLLM builds tags with and without
    argument schemas, single-call tags, tags combined with a user format, leaves some tool
    requests untouched and rejects some."""
    seen: dict[str, set[str]] = {model: set() for model in TAG_MODELS.values()}
    for case_id, (status, body) in vllm_results.items():
        outcomes = seen[TAG_MODELS[case_id.split("|")[0]]]
        tag = _tag(body) if status == 200 else None
        if status != 200:
            outcomes.add(f"error-{status}")
        elif tag is None:
            outcomes.add("untouched")
        else:
            outcomes.add(json.loads(tag)["format"]["type"])
            # Kimi K3's free arguments are its any-attribute argument tag, not a JSON schema.
            free = '"json_schema": true' in tag or '"begin": "<|open|>argument "' in tag
            outcomes.add("free-arguments" if free else "schema-arguments")
            if '"stop_after_first": true' in tag:
                outcomes.add("single-call")
    expected = {"or", "free-arguments", "schema-arguments", "single-call", "untouched", "error-400"}
    skeleton_only = {"hy_v4"}  # its tags constrain names and keys, never an argument schema
    for model, outcomes in seen.items():
        want = expected - {"free-arguments", "schema-arguments"} if model in skeleton_only else expected
        assert want <= outcomes, (model, outcomes)
