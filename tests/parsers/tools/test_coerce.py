"""vLLM's schema coercion (parsers/tools/_coerce.py) and the streamed engine JSON arguments
(`EngineJsonArgs`) against vLLM 0.33's own functions, in one batched reference run."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from parsers.tools import _coerce
from parsers.tools._json_args import EngineJsonArgs

from . import json_strategies as js

TOOL = "f"


def tools_for(properties: Any) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": TOOL, "parameters": {
        "type": "object", "properties": properties}}}]  # fmt: skip


def json_accepts(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def vllm_engine_args(raw: str) -> str:
    """vLLM ParserEngine._extract_args_json (checked against vLLM in TestVllmDifferential)."""
    body = raw.strip()
    if not body:
        return "{}"
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError:
        return body
    if not isinstance(parsed, dict):
        return body
    for key in ("arguments", "parameters"):
        if key in parsed:
            value = parsed[key]
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return json.dumps({k: v for k, v in parsed.items() if k != "name"}, ensure_ascii=False)


@st.composite
def engine_bodies(draw: st.DrawFn, args: dict[str, Any]) -> str:
    shape = draw(st.sampled_from(["plain", "arguments", "parameters", "string", "both", "other"]))
    if shape == "plain":
        body: Any = args
    elif shape in ("arguments", "parameters"):
        body = {"name": TOOL, shape: args}
        if draw(st.booleans()):
            body = {shape: args, "name": TOOL}
    elif shape == "string":
        body = {"name": TOOL, "arguments": draw(js.formatted(args))}
    elif shape == "both":
        body = {"name": TOOL, "parameters": args, "arguments": draw(js.arg_values)}
    else:
        body = draw(js.arg_values)
    return draw(js.ws) + draw(js.formatted(body)) + draw(js.ws)


# -- vLLM differential --------------------------------------------------------------------------

ORACLE = r"""
import json, sys, types
from vllm.parser.engine.parser_engine import ParserEngine as E
from vllm.tool_parsers.utils import coerce_to_schema_type, extract_types_from_schema, find_tool_properties
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam

def engine(tools):
    e = types.SimpleNamespace(_tools=[ChatCompletionToolsParam(**t) for t in tools])
    e._extract_args_value = E._extract_args_value
    e._coerce_dict = E._coerce_dict
    e._extract_name_and_args = lambda raw: E._extract_name_and_args(e, raw)
    return e

out = []
for op, a in json.load(sys.stdin):
    if op == "types":
        out.append(sorted(extract_types_from_schema(a[0])))
    elif op == "coerce_str":
        v = a[0]
        r = coerce_to_schema_type(v, a[1])
        out.append([r, r is not v])
    elif op == "coerce_value":
        out.append(list(E._coerce_value(a[0], a[1])))
    elif op == "props":
        out.append(find_tool_properties([ChatCompletionToolsParam(**t) for t in a[0]], a[1]))
    elif op == "fix":
        out.append(E._fix_arg_types(engine(a[0]), a[2], a[1]))
    elif op == "engine":
        e = engine(a[0])
        out.append(E._fix_arg_types(e, E._extract_args_json(e, a[1], a[2]), a[2]))
json.dump(out, sys.stdout)
"""


def _vllm_python() -> Path:
    root = Path(__file__).resolve().parents[3]
    venv = Path(os.environ.get("RS_VLLM_REF_VENV", root / ".cache" / "vllm-ref"))
    if not (venv / "bin" / "python").exists():
        pytest.fail(f"vLLM 0.33 reference venv not found at {venv} (set RS_VLLM_REF_VENV)")
    return venv / "bin" / "python"


def run_vllm(calls: list[tuple[str, list[Any]]]) -> list[Any]:
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR",
           "PYTHONPATH": ""}  # fmt: skip
    done = subprocess.run(
        [str(_vllm_python()), "-c", ORACLE], input=json.dumps(calls), capture_output=True,
        text=True, env=env, timeout=500, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _cases(strategy: st.SearchStrategy[Any], n: int) -> list[Any]:
    """`n` reproducible draws (a derandomized Hypothesis run)."""
    found: list[Any] = []

    @settings(max_examples=n, database=None, derandomize=True, phases=[Phase.generate])
    @given(strategy)
    def collect(value: Any) -> None:
        found.append(copy.deepcopy(value))

    collect()
    return found[:n]


@st.composite
def _engine_case(draw: st.DrawFn) -> tuple[Any, str, list[int]]:
    props, args = draw(js.props_and_args())
    body = draw(engine_bodies(args))
    return props, body, draw(js.cuts(len(body)))


def _text(value: Any) -> list[str]:
    """Results as JSON texts: exact types (1 vs 1.0 vs true), NaN equal to NaN."""
    return [json.dumps(v, sort_keys=False) for v in value]


TYPE_SETS = [["string"], ["integer"], ["number"], ["boolean"], ["null"], ["object"], ["array"],
             ["int"], ["str"], ["float"], ["bool"], ["dict"], ["list"], ["integer", "string"],
             ["null", "string"], ["number", "null"], ["boolean", "integer"], ["array", "object"],
             ["foo"], [" Integer "], ["TEXT"], ["uint64", "double"]]  # fmt: skip
NESTED_SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "str"}}},
    {"type": "array", "items": {"type": "number"}},
    {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "bool"}}}},
    {"enum": [1, 2]}, {"enum": ["x", None]}, {"anyOf": [{"type": "null"}, {"type": "integer"}]},
    {"oneOf": [{"type": "array"}, {"type": "string"}]}, {"allOf": [{"type": "number"}]}, {},
    {"type": "object"}, {"type": "array", "items": "integer"},
]  # fmt: skip
PLAIN_VALUES = [*js.STRINGY_VALUES, 1, -3, 1.0, 2.5, -0.0, 1e20, 10**20, True, False, None,
                [1, "2", "x"], {"a": "1", "b": 2}, {"a": "true"}, []]  # fmt: skip


@pytest.fixture(scope="module")
def cases() -> dict[str, list[Any]]:
    """Every type set and nested schema against every interesting value, plus random ones."""
    schemas = [{"type": t} for t in TYPE_SETS] + NESTED_SCHEMAS + _cases(js.schemas, 100)
    values = _cases(js.arg_values, 100)
    strings = [v for v in PLAIN_VALUES if isinstance(v, str)]
    pairs = [[v, s] for v in PLAIN_VALUES for s in schemas[: len(TYPE_SETS) + len(NESTED_SCHEMAS)]]
    return {
        "types": [[s] for s in schemas],
        "coerce_str": [[v, t] for v in strings for t in TYPE_SETS],
        "coerce_value": pairs + [[v, s] for v, s in zip(values, schemas[-100:])],
        "props": [[tools_for(s.get("properties", {})), TOOL] for s in schemas[:60]],
        "fix": [[tools_for(p), TOOL, json.dumps(a)] for p, a in _cases(js.props_and_args(), 200)],
        "engine": _cases(_engine_case(), 300),
    }  # fmt: skip


@pytest.fixture(scope="module")
def vllm(cases: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """vLLM's results for `cases`, from one batched run of the reference venv."""
    calls: list[tuple[str, list[Any]]] = []
    for op, args in cases.items():
        if op == "engine":
            calls += [("engine", [tools_for(p), body, TOOL]) for p, body, _ in args]
        else:
            calls += [(op, copy.deepcopy(a)) for a in args]
    results = iter(run_vllm(calls))
    return {op: [next(results) for _ in args] for op, args in cases.items()}


@pytest.mark.vllm
class TestVllmDifferential:
    def test_schema_types(self, cases: dict[str, list[Any]], vllm: dict[str, list[Any]]) -> None:
        """schema_types == vLLM extract_types_from_schema."""
        assert [sorted(_coerce.schema_types(s)) for (s,) in cases["types"]] == vllm["types"]

    def test_coerce_to_schema_type(
        self, cases: dict[str, list[Any]], vllm: dict[str, list[Any]]
    ) -> None:
        """coerce_to_schema_type == vLLM's, value and identity ("changed")."""
        ours = []
        for value, types in cases["coerce_str"]:
            result = _coerce.coerce_to_schema_type(value, types)
            ours.append([result, result is not value])
        assert _text(ours) == _text(vllm["coerce_str"])

    def test_coerce_value(self, cases: dict[str, list[Any]], vllm: dict[str, list[Any]]) -> None:
        """coerce_value == vLLM ParserEngine._coerce_value."""
        ours = [list(_coerce.coerce_value(copy.deepcopy(v), s)) for v, s in cases["coerce_value"]]
        assert _text(ours) == _text(vllm["coerce_value"])

    def test_tool_properties(self, cases: dict[str, list[Any]], vllm: dict[str, list[Any]]) -> None:
        """tool_properties == vLLM find_tool_properties."""
        assert [_coerce.tool_properties(t, n) for t, n in cases["props"]] == vllm["props"]

    def test_fix_arg_types(self, cases: dict[str, list[Any]], vllm: dict[str, list[Any]]) -> None:
        """fix_arg_types == vLLM ParserEngine._fix_arg_types."""
        assert [_coerce.fix_arg_types(a, n, t) for t, n, a in cases["fix"]] == vllm["fix"]

    def test_streamed_engine_args(
        self, cases: dict[str, list[Any]], vllm: dict[str, list[Any]]
    ) -> None:
        """Streamed ENGINE_ARGS == vLLM's batch arguments unless a divergence is reported."""
        checked = 0
        for (props, body, cuts), expected in zip(cases["engine"], vllm["engine"]):
            assert _coerce.fix_arg_types(vllm_engine_args(body), TOOL, tools_for(props)) == expected
            fmt = EngineJsonArgs(props, limit=1 << 20)
            state, out = fmt.start(), []
            for a, b in zip([0, *cuts], [*cuts, len(body)], strict=False):
                state, piece, _ = fmt.feed(state, body[a:b])
                out.append(piece)
            state, piece = fmt.end(state)
            if not state.json.diverged and json_accepts(body) == (state.json.status == "done"):
                assert "".join(out) + piece == expected, body
                checked += 1
        assert checked > len(cases["engine"]) // 2
