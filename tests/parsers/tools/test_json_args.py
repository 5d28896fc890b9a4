"""The incremental JSON scanner and writer (parsers/tools/_json_scan.py, _json_args.py): exact
against CPython's json and vLLM's coercion under every chunking, with the state JSON
round-tripped at every boundary; bounded; linear."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from parsers._errors import LimitExceededError, StateError
from parsers.tools._coerce import fix_arg_types
from parsers.tools._engine import name_and_args_from_json
from parsers.tools._json_args import (
    DONE,
    ERROR,
    TRUNCATED,
    EngineJsonArgs,
    JsonArgs,
    JsonArgsState,
    Root,
    SchemaTable,
)

from . import json_strategies as js

TOOL = "f"
CHECKS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def tools_for(properties: Any) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": TOOL, "parameters": {
        "type": "object", "properties": properties}}}]  # fmt: skip


@dataclass
class Streamed:
    out: str
    status: str
    rest: str | None
    state: JsonArgsState


def stream(fmt: JsonArgs, text: str, cuts: list[int]) -> Streamed:
    """Feed `text` split at `cuts`, round-tripping the state through JSON at each boundary."""
    state, out = fmt.start(), []
    bounds = [0, *cuts, len(text)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        state = JsonArgsState.from_json(json.loads(json.dumps(state.to_json())))
        state, piece, rest = fmt.feed(state, text[a:b])
        out.append(piece)
        if rest is not None:
            return Streamed("".join(out), state.status, rest + text[b:], state)
    state, piece = fmt.end(state)
    return Streamed("".join(out) + piece, state.status, None, state)


def splits(text: str, random_cuts: list[int]) -> list[list[int]]:
    return [[], list(range(1, len(text))), [c for c in random_cuts if 0 < c < len(text)]]


def has_duplicate_keys(text: str) -> bool:
    """Duplicate keys are the documented divergence: json keeps the last value at the first
    key's position, a stream has written the first one already."""
    found = False

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal found
        found |= len({k for k, _ in pairs}) != len(pairs)
        return dict(pairs)

    json.loads(text, object_pairs_hook=hook)
    return found


def json_accepts(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


class TestCanonical:
    @CHECKS
    @given(text=js.json_texts, data=st.data())
    def test_equals_json_dumps_under_any_chunking(self, text: str, data: st.DataObject) -> None:
        assume(not has_duplicate_keys(text))
        expected = json.dumps(json.loads(text), ensure_ascii=False)
        for cuts in splits(text, data.draw(js.cuts(len(text)))):
            got = stream(JsonArgs(), text, cuts)
            assert got.status == DONE and got.out == expected, (text, cuts)
            assert not (got.rest or "").strip()

    @CHECKS
    @given(text=js.json_texts, tail=js.trailing_texts, data=st.data())
    def test_text_after_the_value_is_left_alone(self, text: str, tail: str, data: st.DataObject) -> None:
        whole = text.rstrip() + tail
        end = json.JSONDecoder().raw_decode(whole, len(whole) - len(whole.lstrip()))[1] if json_accepts(text) else None
        for cuts in splits(whole, data.draw(js.cuts(len(whole)))):
            got = stream(JsonArgs(), whole, cuts)
            if got.status == DONE and got.rest is not None and end is not None and end < len(whole):
                assert got.rest == whole[end:], (whole, cuts)


class TestInvalid:
    @pytest.mark.parametrize("text", ['{"a":1,}', "[01]", '"a\nb"', "{1:2}", "[1 2]", "tru", "[",
                                      '{"a"', "-", ".5", "+1", '"\\x"', "[1,]", '{"a" 1}', "nul"])
    def test_hand_list(self, text: str) -> None:
        got = stream(JsonArgs(), text, list(range(1, len(text))))
        assert got.status in (ERROR, TRUNCATED)

    @CHECKS
    @given(text=js.json_texts, data=st.data())
    def test_mutations_agree_with_json(self, text: str, data: st.DataObject) -> None:
        at = data.draw(st.integers(0, len(text)))
        insert = data.draw(st.sampled_from(["", ",", "]", "}", '"', "\\", "x", "\n", "1", ":"]))
        mutated = text[:at] + insert + text[at + data.draw(st.integers(0, 2)):]
        got = stream(JsonArgs(), mutated, data.draw(js.cuts(len(mutated))))
        complete = got.status == DONE and not (got.rest or "").strip()
        assert complete == json_accepts(mutated), mutated

    def test_huge_integer_is_an_error(self) -> None:
        assert stream(JsonArgs(), "[" + "1" * 5000 + "]", []).status == ERROR


class TestCoercion:
    @CHECKS
    @given(case=js.props_and_args(), data=st.data())
    def test_value_with_schema_equals_fix_arg_types(self, case: Any, data: st.DataObject) -> None:
        props, args = case
        text = data.draw(js.formatted(args))
        expected = fix_arg_types(json.dumps(args, ensure_ascii=False), TOOL, tools_for(props))
        got = stream(JsonArgs(schema=SchemaTable(props)), text, data.draw(js.cuts(len(text))))
        assert got.status == DONE and got.out == expected, text

    @CHECKS
    @given(case=js.props_and_args(), data=st.data())
    def test_engine_equals_vllm_rule(self, case: Any, data: st.DataObject) -> None:
        props, args = case
        if data.draw(st.booleans()):
            args = {"name": "x", data.draw(st.sampled_from(["arguments", "parameters"])): args}
        text = data.draw(js.formatted(args))
        _, raw_args = name_and_args_from_json(text)
        expected = fix_arg_types(raw_args, TOOL, tools_for(props))
        fmt = EngineJsonArgs(props, limit=1 << 20)
        state, out = fmt.start(), []
        bounds = [0, *data.draw(js.cuts(len(text))), len(text)]
        for a, b in zip(bounds, bounds[1:], strict=False):
            state, piece, _ = fmt.feed(state, text[a:b])
            out.append(piece)
        state, piece = fmt.end(state)
        if not state.json.diverged:
            assert "".join(out) + piece == expected, text

    @CHECKS
    @given(case=js.props_and_args(), data=st.data())
    def test_raw_equals_fix_arg_types_on_the_raw_text(self, case: Any, data: st.DataObject) -> None:
        props, args = case
        text = data.draw(js.formatted(args))
        expected = fix_arg_types(text, TOOL, tools_for(props))
        got = stream(JsonArgs(raw=True, schema=SchemaTable(props)), text, data.draw(js.cuts(len(text))))
        if got.state.diverged:
            assert json.loads(got.out) == json.loads(expected)
        else:
            assert got.out == expected, text

    @pytest.mark.parametrize("body", ['{"a":1} x', '{"a":1}  \n x ', '{"a":1}\t', '{"a":1} x y'])
    def test_engine_text_after_the_object_does_not_depend_on_chunking(self, body: str) -> None:
        fmt = EngineJsonArgs({"a": {"type": "integer"}}, limit=1 << 20)
        outputs = set()
        for cuts in ([], [len('{"a":1}')], [len('{"a":1} ')], list(range(1, len(body)))):
            state, out = fmt.start(), []
            for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True):
                state, piece, _ = fmt.feed(state, body[a:b])
                out.append(piece)
            state, piece = fmt.end(state)
            outputs.add("".join(out) + piece)
        assert len(outputs) == 1, outputs

    def test_string_only_values_stream_before_they_close(self) -> None:
        fmt = JsonArgs(schema=SchemaTable({"content": {"type": "string"}, "n": {"type": "integer"}}))
        state, out, _ = fmt.feed(fmt.start(), '{"content": "abc')
        assert out == '{"content": "abc'
        state, out, _ = fmt.feed(state, '", "n": "4')
        assert out == '", "n": '  # the integer is held until its string closes
        state, out, _ = fmt.feed(state, '"}')
        assert out == "4}"

    def test_held_value_limit(self) -> None:
        fmt = JsonArgs(schema=SchemaTable({"n": {"type": "integer"}}), limit=100)
        with pytest.raises(LimitExceededError):
            fmt.feed(fmt.start(), '{"n": "' + "1" * 200)


class TestEnvelope:
    def test_name_first_then_arguments(self) -> None:
        fmt = JsonArgs(root=Root.ENVELOPE)
        text = '{"name": "get_weather", "x": [1, {"y": 2}], "arguments": {"city": "P\\u00e9"}, "z": 1}'
        for cuts in ([], list(range(1, len(text)))):
            got = stream(fmt, text, cuts)
            assert got.out == '{"city": "Pé"}' and got.state.name == "get_weather" and got.state.ordered

    def test_arguments_before_name_is_not_ordered(self) -> None:
        got = stream(JsonArgs(root=Root.ENVELOPE), '{"arguments": {}, "name": "f"}', [])
        assert not got.state.ordered and got.state.named

    def test_name_must_be_a_string(self) -> None:
        assert stream(JsonArgs(root=Root.ENVELOPE), '{"name": 3, "arguments": {}}', []).status == ERROR


class TestBounds:
    def test_state_stays_small_inside_a_100k_string(self) -> None:
        fmt = JsonArgs(root=Root.ENVELOPE)
        state, _, _ = fmt.feed(fmt.start(), '{"name": "write_file", "arguments": {"path": "a.py", "content": "')
        largest = 0
        for i in range(100_000):
            state, out, _ = fmt.feed(state, "x\\n"[i % 3])
            largest = max(largest, len(json.dumps(state.to_json())))
        assert largest < 1024, largest
    # Per-chunk cost is measured in bench/stream_parse.py --case agentic (last 1,000 chunks
    # against the first 1,000), not timed here: the bounded state above is what makes it flat.


class TestStates:
    @pytest.mark.parametrize("field,value", [("disp", "WX"), ("out", "{"), ("status", "bad"),
                                              ("next", "Q"), ("where", "z")])
    def test_corrupt_states_raise(self, field: str, value: Any) -> None:
        data = JsonArgs().start().to_json()
        data[field] = value
        with pytest.raises(StateError):
            JsonArgsState.from_json(data)
