"""The tool skeleton a stream state carries parses exactly like the request's tools, and is
small: 30 tools with 45+ KB of descriptions shrink to well under a kilobyte compressed."""

from __future__ import annotations

import json
import random
import zlib

from hypothesis import given
from hypothesis import strategies as st

from parsers.tools._coerce import fix_arg_types
from parsers.tools._schema import decode_tools, encode_tools, prune_tools

TYPES = ["string", "integer", "number", "boolean", "null", "object", "array", "int", "str", "foo"]
type_names = st.sampled_from(TYPES)
leaf = st.fixed_dictionaries(
    {"description": st.text(max_size=20)},
    optional={
        "type": st.one_of(type_names, st.lists(type_names, max_size=3)),
        "enum": st.lists(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=3)), max_size=3),
        "title": st.text(max_size=5),
    },
)
schemas = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.builds(lambda p, t: {"type": t, "properties": p}, st.dictionaries(st.sampled_from("abcd"), inner, max_size=3), type_names),
        st.builds(lambda i: {"type": "array", "items": i}, inner),
        st.builds(lambda c: {"anyOf": c}, st.lists(inner, max_size=2)),
    ),
    max_leaves=8,
)
values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False),
              st.sampled_from(["3", "1.5", "true", "null", '{"a": "1"}', "[1, 2]", "x", ""])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abcd"), inner, max_size=3)),
    max_leaves=6,
)


@given(props=st.dictionaries(st.sampled_from("abcd"), schemas, max_size=4),
       args=st.dictionaries(st.sampled_from("abcde"), values, max_size=4))
def test_encoded_tools_coerce_like_the_originals(props, args) -> None:
    tools = [{"type": "function", "function": {"name": "f", "description": "long text",
                                               "parameters": {"type": "object", "properties": props}}}]
    raw = json.dumps(args, ensure_ascii=False)
    expected = fix_arg_types(raw, "f", tools)
    assert fix_arg_types(raw, "f", prune_tools(tools)) == expected
    assert fix_arg_types(raw, "f", decode_tools(encode_tools(tools, "types"))) == expected


def agent_tools(n: int = 30, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    words = "read write list search fetch update delete create move copy run query path file".split()
    tools = []
    for i in range(n):
        props = {}
        for j in range(rng.randint(2, 6)):
            kind = rng.choice(["string", "string", "integer", "boolean", "array", "object"])
            prop = {"type": kind, "description": " ".join(rng.choices(words, k=40))}
            if kind == "array":
                prop["items"] = {"type": "string"}
            props[f"{rng.choice(words)}_{j}"] = prop
        tools.append({"type": "function", "function": {
            "name": f"{rng.choice(words)}_{rng.choice(words)}_{i}",
            "description": " ".join(rng.choices(words, k=150)),
            "parameters": {"type": "object", "properties": props, "required": list(props)[:1]},
        }})  # fmt: skip
    return tools


def test_thirty_tools_stay_small() -> None:
    tools = agent_tools()
    assert len(json.dumps(tools)) > 45_000
    for view, bound in (("presence", 16), ("names", 400), ("types", 900)):
        wire = json.dumps(encode_tools(tools, view), separators=(",", ":")).encode()
        assert len(zlib.compress(wire, 9)) < bound, view


def test_decode_refuses_foreign_data() -> None:
    import pytest

    for bad in ([1], {"f": "nope"}, {"f": {"a": [1, 2]}}, "x", -1, True):
        with pytest.raises(ValueError):
            decode_tools(bad)
