"""Hypothesis strategies for the streaming JSON canonicaliser: JSON *texts* with random
formatting (whitespace, escapes, number spellings), chunkings, schemas and arguments."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

WS_CHARS = " \t\n\r"
ws = st.text(alphabet=WS_CHARS, max_size=3)

_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n",
          "\r": "\\r", "\t": "\\t"}  # fmt: skip

# Any code point: astral, controls, and lone surrogates (allowed inside a Python str).
code_points = st.one_of(
    st.characters(codec=None, exclude_categories=()),
    st.sampled_from('"\\/\b\f\n\r\t\x00\x1f\x7f\u2028\ufeff\U0001f600é'),
    st.integers(0xD800, 0xDFFF).map(chr),
)


def _u(code: int, upper: bool) -> str:
    digits = f"{code:04X}" if upper else f"{code:04x}"
    return "\\u" + digits


def encode_char(char: str, how: int) -> str:
    """One character as a JSON string body would spell it: raw when allowed (how 0), as
    \\uXXXX (1, 2: upper-case hex), or with its short escape (3, also `\\/`)."""
    code = ord(char)
    # Model text is decoded UTF-8, which never holds a surrogate: those come only escaped.
    must_escape = char in '"\\' or code < 0x20 or 0xD800 <= code <= 0xDFFF
    if how == 0 and not must_escape:
        return char
    if how == 3 and char in _SHORT:
        return _SHORT[char]
    if code > 0xFFFF:
        code -= 0x10000
        return _u(0xD800 + (code >> 10), how == 2) + _u(0xDC00 + (code & 0x3FF), how == 2)
    if how == 0:  # must escape: the short form when there is one
        return _SHORT.get(char) or _u(code, False)
    return _u(code, how == 2)


def string_tokens(max_size: int = 12) -> st.SearchStrategy[str]:
    chars = st.lists(st.tuples(code_points, st.integers(0, 3)), max_size=max_size)
    return chars.map(lambda cs: '"' + "".join(encode_char(c, h) for c, h in cs) + '"')


number_tokens = st.one_of(
    st.from_regex(r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?", fullmatch=True),
    st.sampled_from(["0", "-0", "-0.0", "1e400", "-1e400", "1e-400", "1E+2", "123456789" * 5]),
)
literal_tokens = st.sampled_from(["true", "false", "null", "NaN", "Infinity", "-Infinity"])
key_tokens = st.one_of(
    st.sampled_from(['"a"', '"b"', '"name"', '"k\\u0065y"', '"\\ud83d\\ude00"']), string_tokens(6)
)
scalar_tokens = st.one_of(number_tokens, literal_tokens, string_tokens())


def _array(items: list[tuple[str, str, str]], inner: str) -> str:
    if not items:
        return "[" + inner + "]"
    return "[" + ",".join(a + v + b for a, v, b in items) + "]"


def _object(members: list[tuple[str, str, str, str, str, str]], inner: str) -> str:
    if not members:
        return "{" + inner + "}"
    return "{" + ",".join(a + k + b + ":" + c + v + d for a, k, b, c, v, d in members) + "}"


def _containers(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    arrays = st.builds(_array, st.lists(st.tuples(ws, children, ws), max_size=4), ws)
    members = st.tuples(ws, key_tokens, ws, ws, children, ws)
    objects = st.builds(_object, st.lists(members, max_size=4), ws)
    return arrays | objects


value_tokens = st.recursive(scalar_tokens, _containers, max_leaves=12)
json_texts = st.builds(lambda a, v, b: a + v + b, ws, value_tokens, ws)
trailing_texts = st.one_of(
    st.just(""), st.sampled_from(["x", "]", "}", ",", ".5", "e3", " 1", '"', "<|end|>"]), st.text()
)


@st.composite
def cuts(draw: st.DrawFn, length: int) -> list[int]:
    """Sorted split points of a text of `length` characters."""
    points = draw(st.lists(st.integers(0, length), max_size=8))
    return sorted(set(points))


# -- schemas and arguments -----------------------------------------------------------------

TYPE_NAMES = ["string", "integer", "number", "boolean", "null", "object", "array",
              "int", "str", "float", "bool", "text", "dict", "list", " Integer ", "foo"]  # fmt: skip
STRINGY_VALUES = ["3", "-7", "1.5", "1e3", "1e400", "true", "FALSE", "1", "0", "null", "NULL",
                  "Null!", '{"a": 1}', '{"a": "2"}', "[1, 2]", '"x"', "abc", " 12 ", "nan",
                  "inf", "", "é", "null0", "[1e999]"]  # fmt: skip


def _type_schema(types: Any) -> dict[str, Any]:
    return {"type": types}


leaf_schemas = st.one_of(
    st.sampled_from(TYPE_NAMES).map(_type_schema),
    st.lists(st.sampled_from(TYPE_NAMES), min_size=1, max_size=3).map(_type_schema),
    st.lists(st.sampled_from([1, "a", None, True, 2.5, [1], {"x": 1}]), max_size=3).map(
        lambda e: {"enum": e}
    ),
    st.just({}),
    st.just({"description": "untyped"}),
)


def _nested_schemas(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[Any]:
    props = st.dictionaries(st.sampled_from(["a", "b", "c", "n"]), children, max_size=3)
    return st.one_of(
        st.builds(lambda p: {"type": "object", "properties": p}, props),
        st.builds(lambda i: {"type": "array", "items": i}, children),
        st.builds(lambda s: {"anyOf": s}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda s: {"oneOf": s}, st.lists(children, min_size=1, max_size=2)),
        st.builds(lambda t, i: {"type": t, "items": i}, st.sampled_from(TYPE_NAMES), children),
    )


schemas = st.recursive(leaf_schemas, _nested_schemas, max_leaves=6)
tool_properties = st.dictionaries(
    st.sampled_from(["a", "b", "c", "path", "content", "n"]), schemas, min_size=1, max_size=4
)

arg_scalars = st.one_of(
    st.sampled_from(STRINGY_VALUES),
    st.sampled_from(STRINGY_VALUES),  # twice: most coercions start from such strings
    st.text(max_size=6),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
arg_values = st.recursive(
    arg_scalars,
    lambda c: st.lists(c, max_size=3)
    | st.dictionaries(st.sampled_from(["a", "b", "c", "n", "x"]), c, max_size=3),
    max_leaves=8,
)
arg_objects = st.dictionaries(
    st.sampled_from(["a", "b", "c", "path", "content", "n", "x", "name"]), arg_values, max_size=5
)


@st.composite
def formatted(draw: st.DrawFn, value: Any) -> str:
    """`value` as JSON text: canonical (json.dumps) or randomly formatted."""
    if draw(st.booleans()):
        return json.dumps(value, ensure_ascii=False)
    return _format(draw, value)


def _format(draw: st.DrawFn, value: Any) -> str:
    if isinstance(value, dict):
        inner = [
            draw(ws) + _string(draw, k) + draw(ws) + ":" + draw(ws) + _format(draw, v)
            for k, v in value.items()
        ]
        return "{" + ",".join(inner) + draw(ws) + "}"
    if isinstance(value, list):
        return "[" + ",".join(draw(ws) + _format(draw, v) + draw(ws) for v in value) + "]"
    if isinstance(value, str):
        return _string(draw, value)
    return json.dumps(value)


def _string(draw: st.DrawFn, text: str) -> str:
    hows = draw(st.lists(st.integers(0, 3), min_size=len(text), max_size=len(text)))
    return '"' + "".join(encode_char(c, h) for c, h in zip(text, hows)) + '"'


@st.composite
def props_and_args(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A tool's properties and an arguments object that mostly uses those properties."""
    props = draw(tool_properties)
    used = draw(st.dictionaries(st.sampled_from(sorted(props)), arg_values, max_size=4))
    return props, {**draw(arg_objects), **used}
