"""pythonic / llama4_pythonic: split invariance on real Llama tokens, differential tests against
vLLM 0.33's PythonicToolParser and Llama4PythonicToolParser (exact arguments strings), the
named divergences, incremental streaming with a bounded state, and table totality.

`vllm_batch` below is vLLM's batch rule run in process (its regex, `ast`, `get_parameter_value`,
json.dumps), so generated outputs can be checked by the thousand; `test_reference_is_vllm`
checks it against vLLM itself on the corpus and a seeded sample of generated outputs.
"""

from __future__ import annotations

import ast
import json
import random
import unicodedata
from collections.abc import Iterator

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsers._errors import LimitExceededError, ParserError
from parsers._events import ToolArgsDelta, ToolCallStart
from parsers.tools._base import MAX_TOOL_CALL_CHARS
from parsers.tools._machine import EOS, TEXT, TableToolParser
from parsers.tools.pythonic import Llama4PythonicToolParser, PythonicToolParser

from ..chunking import collapse_events, run_split
from .tool_parser_support import (
    assert_matches_vllm,
    assert_split_invariant,
    collapsed,
    llama3,
    llama4,
)

# -- vLLM's batch rule, in process -----------------------------------------------------------

TOOL_CALL_REGEX = regex.compile(
    r"\[([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s)?\),\s*)*"
    r"([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s*)?\)\s*)+\]",
    regex.DOTALL,
)
_JSON_NAMES = {"null": None, "true": True, "false": False}


class _NotLiteral(Exception):
    pass


def _value(node: ast.expr) -> object:  # noqa: C901 - vLLM's get_parameter_value, branch by branch
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, str | int | float):
            return node.value
        raise _NotLiteral
    if isinstance(node, ast.Dict):
        if not all(isinstance(k, ast.Constant) for k in node.keys):
            raise _NotLiteral
        pairs = zip(node.keys, node.values, strict=True)
        return {k.value: _value(v) for k, v in pairs}  # type: ignore[union-attr]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.JoinedStr) and all(isinstance(p, ast.Constant) for p in node.values):
        return "".join(str(p.value) for p in node.values)  # type: ignore[attr-defined]
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _value(node.operand)
        if isinstance(operand, int | float) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    raise _NotLiteral


def _dotted(node: ast.expr) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise _NotLiteral
    return ".".join([node.id, *reversed(parts)])


def vllm_calls(text: str) -> list[tuple[str, str]] | None:
    """vLLM's calls for a pythonic text that passed its preprocessing, or None (content)."""
    try:
        if TOOL_CALL_REGEX.match(text) is None:
            return None
        module = ast.parse(text)
        parsed = getattr(module.body[0], "value", None)
        if not isinstance(parsed, ast.List):
            return None
        if not all(isinstance(e, ast.Call) for e in parsed.elts):
            return None
        return [(_dotted(e.func), _arguments(e)) for e in parsed.elts]  # type: ignore[arg-type]
    except (_NotLiteral, SyntaxError, ValueError, TypeError, RecursionError, IndexError):
        return None


def _arguments(call: ast.Call) -> str:
    return json.dumps({k.arg: _value(k.value) for k in call.keywords}, ensure_ascii=False)


def vllm_batch(text: str, family: str = "pythonic") -> tuple[str | None, list[tuple[str, str]]]:
    """vLLM 0.33's `extract_tool_calls` for pythonic, llama4_pythonic and olmo3."""
    source = text
    if family == "llama4_pythonic" and text.startswith("<|python_start|>"):
        source = text = text[len("<|python_start|>") :].replace("<|python_end|>", "")
    if family == "olmo3":
        block = regex.search(r"<function_calls>(.*?)</function_calls>", text, regex.DOTALL)
        inner = block.group(1).strip() if block else text
        source = "[" + ", ".join(line.strip() for line in inner.splitlines() if line.strip()) + "]"
    calls = vllm_calls(source)
    return (text, []) if calls is None else (None, calls)


def ours(parser: TableToolParser, text: str) -> tuple[str | None, list[tuple[str, str]]]:
    result = parser.parse(text, "r")
    return result.content, [(c.name, c.arguments) for c in result.tool_calls]


# -- generated well-formed outputs --------------------------------------------------------------

NAME_CHARS = "abcdefghijklmnopqrstuvwxyz_0123456789"


def _name(rng: random.Random) -> str:
    while True:
        name = rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") + "".join(
            rng.choice(NAME_CHARS) for _ in range(rng.randint(0, 8))
        )
        if not _is_keyword(name):
            return name


def _is_keyword(name: str) -> bool:
    import keyword

    return keyword.iskeyword(name) or name in ("null", "true", "false")


class Renderer:
    """Python source for a value, in a randomly chosen valid spelling (quotes, prefixes,
    escapes, number forms, spacing, comments, implicit concatenation, parentheses)."""

    def __init__(self, rng: random.Random, *, newlines: bool) -> None:
        self.rng = rng
        self.newlines = newlines  # newlines and comments between tokens (not for olmo3)

    def space(self) -> str:
        choices = ["", "", " ", "  "] + (["\n", "\n    ", " # note\n  "] if self.newlines else [])
        return self.rng.choice(choices)

    def value(self, v: object, depth: int = 0) -> str:  # noqa: C901 - one branch per type
        rng = self.rng
        if v is None or isinstance(v, bool):
            names = {None: ["None", "null"], True: ["True", "true"], False: ["False", "false"]}
            return rng.choice(names[v])
        if isinstance(v, int):
            return self.integer(v)
        if isinstance(v, float):
            return self.real(v)
        if isinstance(v, str):
            return self.string(v)
        if isinstance(v, dict):
            items = [f"{self.key(k)}{self.space()}:{self.space()}{self.value(x, depth + 1)}"
                     for k, x in v.items()]  # fmt: skip
            return "{" + self.items(items) + "}"
        assert isinstance(v, list)
        elements = [self.value(x, depth + 1) for x in v]
        kind = rng.choice(["list", "tuple", "set"] if v else ["list", "tuple"])
        if kind == "tuple" and len(v) == 1:
            return "(" + self.space() + elements[0] + "," + self.space() + ")"
        if kind == "tuple":
            return "(" + self.items(elements) + ")"
        if kind == "set":
            return "{" + self.items(elements) + "}"
        return "[" + self.items(elements) + "]"

    def items(self, items: list[str]) -> str:
        if not items:
            return self.space() if self.newlines else ""
        sep = "," + self.space()
        trailing = self.rng.choice(["", "", ","])
        return self.space() + sep.join(items) + trailing + self.space()

    def key(self, k: object) -> str:
        return self.string(k, f_ok=False) if isinstance(k, str) else str(k)

    def integer(self, v: int) -> str:
        rng = self.rng
        body = abs(v)
        spelled = rng.choice([str(body), hex(body), oct(body), bin(body), f"{body:_}"])
        if rng.random() < 0.2:
            spelled = f"({spelled})"
        if v < 0:
            return self._negative(spelled)
        return "+" + spelled if rng.random() < 0.1 else spelled

    def _negative(self, spelled: str) -> str:
        return self.rng.choice([f"-{spelled}", f"- {spelled}", f"-({spelled})", f"--(-{spelled})"])

    def real(self, v: float) -> str:
        text = "1e400" if abs(v) == float("inf") else repr(abs(v))
        text = self.rng.choice([text, text.upper()])
        return self._negative(text) if str(v).startswith("-") else text

    def string(self, s: str, *, f_ok: bool = True) -> str:
        rng = self.rng
        if len(s) > 3 and rng.random() < 0.25:  # implicit concatenation
            cut = rng.randint(1, len(s) - 1)
            gap = rng.choice([" ", "", "  "])
            joined = self.literal(s[:cut], f_ok) + gap + self.literal(s[cut:], f_ok)
            return f"({joined})" if rng.random() < 0.3 else joined
        return self.literal(s, f_ok)

    def literal(self, s: str, f_ok: bool) -> str:
        rng = self.rng
        quote = rng.choice(["'", '"', "'''", '"""'])
        prefix = rng.choice(["", "", "u", "U"] + (["f", "F"] if f_ok else []))
        raw_ok = all(c.isalnum() or c in " _-.,:;!?/" for c in s)
        if raw_ok and rng.random() < 0.3:
            prefix = rng.choice(["r", "R"] + (["rf", "fR"] if f_ok else []))
        f = "f" in prefix.lower()
        body = "".join(self.char(c, quote, f) for c in s) if "r" not in prefix.lower() else s
        return prefix + quote + body + quote

    def char(self, c: str, quote: str, f: bool) -> str:
        """`c` inside a non-raw literal (braces doubled in an f-string, where `\\N{...}` is not
        used: its braces are the escape's)."""
        rng = self.rng
        if c == "\\":
            return "\\\\"
        if c in "'\"":
            return "\\" + c
        if c == "\n":
            return "\n" if len(quote) == 3 and rng.random() < 0.5 else "\\n"
        if c in "{}":
            return c * 2 if f else c
        if ord(c) < 32 or ord(c) == 127:
            return rng.choice([f"\\x{ord(c):02x}", f"\\{ord(c):o}", f"\\u{ord(c):04x}"])
        if ord(c) > 127 and rng.random() < 0.3:
            name = unicodedata.name(c, "")
            forms = [f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"]
            return rng.choice(forms + ([f"\\N{{{name}}}"] if name and not f else []))
        return c


json_scalars = (
    st.none() | st.booleans() | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, width=64) | st.text(max_size=12)
)  # fmt: skip
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=6) | st.integers(0, 99), inner, max_size=4),
    max_leaves=12,
)


def call_source(renderer: Renderer, name: str, args: dict[str, object], positional: list[str],
                *, first: bool) -> str:  # fmt: skip
    """`first`: vLLM's regex wants the first call's first keyword as `kw=`, right after `(`."""
    spellings = ["=", "= ", " = "]
    equals = ["=" if first and i == 0 else renderer.rng.choice(spellings) for i in range(len(args))]
    parts = positional + [f"{k}{eq}{renderer.value(v)}" for (k, v), eq in zip(args.items(), equals)]
    return f"{name}(" + ("," + renderer.space()).join(parts) + ")"


def generated_call_list(seed: int, values: list[object], *, newlines: bool = True) -> str:
    """A call list vLLM accepts: the first call as its regex wants it (`[name(kw=` with no
    space), later calls with spacing, dotted names and positional arguments."""
    rng = random.Random(seed)
    calls = generated_calls(rng, values, newlines=newlines)
    sep = "," + rng.choice([" ", "", "\n", " "] if newlines else [" ", ""])
    return "[" + sep.join(calls) + rng.choice(["]", "]", "]\n", "] # done"])


def generated_calls(rng: random.Random, values: list[object], *, newlines: bool) -> list[str]:
    """Calls holding `values` as keyword arguments, spelled by `Renderer`."""
    renderer = Renderer(rng, newlines=newlines)
    calls, queue = [], list(values)
    head = True  # vLLM's regex wants `name(kw=` or `name()` until a call has a keyword
    while queue or not calls:
        count = rng.randint(0, min(3, len(queue)))
        take, queue = queue[:count], queue[count:]
        first, head = head, head and not take
        args = {f"{_name(rng)}{i}": v for i, v in enumerate(take)}
        positional = [] if first or rng.random() < 0.7 else [renderer.value(rng.randint(0, 9))]
        name = _name(rng) if first or rng.random() < 0.8 else f"{_name(rng)}.{_name(rng)}"
        calls.append(call_source(renderer, name, args, positional, first=first))
    return calls


# -- the corpus ---------------------------------------------------------------------------------

BIG_CODE = 'def main():\n    print("héllo, 世界")\n    return {"ok": [1, 2]}\n\n' * 3
CORPUS: dict[str, str] = {
    # realistic (Llama 3.2 / ToolACE style)
    "plain_content": "The capital of France is Paris. 🇫🇷",
    "single_call": "[get_weather(city='San Francisco', unit='celsius')]",
    "two_calls": '[get_weather(city="Paris"), get_time(timezone="Europe/Paris")]',
    "nested_values": "[search(query='restaurants', filters={'cuisine': ['italian', 'french'], "
    "'price': {'max': 50.5, 'min': -1}, 'open_now': True, 'rating': None})]",
    "cjk_emoji_args": "[search(query='北京天气 ☔', filters={'lang': 'zh', 'emoji': '🙂'})]",
    "escapes": "[send_message(text='H\\u00e9llo\\n\"world\" \\t\\\\ \\x41\\101 \\N{EM DASH}', "
    "to=\"a\\'b\")]",
    "code_file": f'[write_file(path="main.py", content="""{BIG_CODE}""")]',
    "code_file_escaped": "[write_file(path='a.py', content=" + json.dumps(BIG_CODE) + ")]",
    "json_literals": "[set_flags(a=true, b=null, c=false, d=True, e=None)]",
    "no_arguments": "[get_time()]",
    "later_positional": "[get_weather(city='Oslo'), convert(12.5, unit='f')]",
    "later_dotted_name": "[get_weather(city='Oslo'), math.sqrt(x=4)]",
    "pretty_printed":
        "[get_weather(city='Oslo',\n  days=[1,\n    2]),\n  search(query={'k': 'v'})]",
    "comments_inside": "[get_weather(city='Oslo',  # the city\n  days=3)]",
    "trailing_newline": "[get_weather(city='Oslo')]\n",
    "trailing_comment": "[get_weather(city='Oslo')]  # done",
    "implicit_concatenation": "[search(query='abc' \"def\" f'gh{{i}}')]",
    "parenthesized_string": "[search(query=('line one\\n'\n  'line two'))]",
    "tuples_and_sets": "[resize(size=(800, 600), tags={'a', 'b'}, one=(1,), none=())]",
    "number_forms": "[f(a=0x1F, b=1_000, c=1e-3, d=-0.0, e=1e400, g=-(5), h=0o17, i=.5, j=--2)]",
    "big_int": "[f(n=" + "7" * 4000 + ")]",
    "raw_string": "[grep(pattern=r'\\d+\\.\\d*', path=R'C:\\dir')]",
    "double_star": "[f(a=1, **{'b': 2})]",
    "dict_keys": "[f(m={1: 'a', 2.5: 'b', False: 'c', None: 'd', ('e'): 'f'})]",
    "valid_python_after": "[get_weather(city='Oslo')]; x = 1",
    # hostile
    "markdown_link": "[docs](https://example.com) explain this.",
    "citation": "[1] Smith et al. say so.",
    "lone_bracket_at_end": "See the list [",
    "partial_head_at_end": "[get_weather",
    "leading_space": " [get_weather(city='Paris')]",
    "empty_list": "[]",
    "positional_first": "[get_weather('Paris')]",
    "kwargs_splat_first": "[get_weather(**{'city': 'Paris'})]",
    "space_before_keyword": "[get_weather( city='Paris')]",
    "dotted_first_name": "[weather.get(city='Oslo')]",
    "keyword_name": "[None(city='Oslo')]",
    "not_a_literal": "[get_weather(city=some_var)]",
    "signed_bool": "[get_weather(days=-True)]",
    "bytes_first": "[get_weather(city=b'Paris')]",
    "huge_int": "[f(n=" + "9" * 5000 + ")]",
    "huge_hex": "[f(n=0x" + "f" * 4000 + ")]",
    "garbage": "[f(%$#@!)]",
    "malformed_python": "[get_weather(city='Paris']",
    "truncated_at_eos": "[get_weather(city='Par",
    "truncated_before_value": "[get_weather(city=",
    "unbalanced": "[f(a=[1, 2)]",
    "text_after_list": "[get_weather(city='Paris')]\nDone.",
    "subscript_after_list": "[get_weather(city='Paris')][0]",
    "later_not_literal": "[get_weather(city='Paris', unit=celsius)]",
    "nested_call": "[f(a=1), f(a=g(x))]",
    "later_bytes": "[f(a=1, b=b'x')]",
    "placeholder": "[f(a=f'{x}')]",
    "positional_after_keyword": "[f(a=1, 'x')]",
    "missing_comma": "[f(a=1) g(b=2)]",
    "not_a_call_in_list": "[f(a=1), 'x']",
    "unterminated_string": "[f(a='never closed)]",
    "nul_in_string": "[f(a='x\x00y')]",
    "trailing_comma": "[f(a=1),]",
    "empty_call_then_positional": "[f(), g(1)]",
    "repeated_keyword": "[f(a=1, a=2)]",
    "repeated_dict_key": "[f(a={'k': 1, 'k': 2})]",
}

LLAMA4_CORPUS: dict[str, str] = {
    **{k: CORPUS[k] for k in ("single_call", "two_calls", "nested_values", "plain_content",
                              "text_after_list", "malformed_python", "markdown_link")},
    "python_start_call": "<|python_start|>[get_weather(city='Paris')]<|python_end|>",
    "python_start_two": "<|python_start|>[a(x=1), b(y='<|python_end|>z')]<|python_end|>",
    "python_start_bad": "<|python_start|>print('hi')<|python_end|>",
    "python_start_partial_end": "<|python_start|>[get_weather(city='Paris')]<|python_",
    "python_end_without_start": "[get_weather(city='Paris')]<|python_end|>",
    "python_start_late": "Sure. <|python_start|>[get_weather(city='Paris')]",
}  # fmt: skip

# vLLM's stream differs from its own batch here (ours follows vLLM's batch, or a divergence).
STREAM_LOSSES = frozenset({
    "markdown_link", "citation", "partial_head_at_end", "positional_first",
    "kwargs_splat_first", "space_before_keyword", "dotted_first_name", "keyword_name",
    "not_a_literal", "signed_bool", "bytes_first", "huge_int", "huge_hex", "garbage",
    "malformed_python", "truncated_at_eos", "truncated_before_value", "unbalanced",
    "text_after_list", "subscript_after_list", "later_not_literal", "nested_call",
    "later_bytes", "placeholder", "positional_after_keyword", "missing_comma",
    "not_a_call_in_list", "unterminated_string", "nul_in_string", "trailing_comma",
    "empty_call_then_positional", "empty_list", "number_forms",
})  # fmt: skip

# Ours differs from vLLM's batch: the named divergences of the module docstring.
DIVERGENCES: dict[str, str] = {
    "malformed_python": "broken_call_list",
    "truncated_at_eos": "broken_call_list",
    "unbalanced": "broken_call_list",
    "later_not_literal": "broken_call_list",
    "nested_call": "broken_call_list",
    "later_bytes": "broken_call_list",
    "placeholder": "broken_call_list",
    "positional_after_keyword": "broken_call_list",
    "missing_comma": "broken_call_list",
    "not_a_call_in_list": "broken_call_list",
    "unterminated_string": "broken_call_list",
    "nul_in_string": "broken_call_list",
    "text_after_list": "text_after_list",
    "subscript_after_list": "text_after_list",
    "trailing_comma": "regex_after_commit",
    "empty_call_then_positional": "regex_after_commit",
}
# Same object, another string: a repeated key is written twice (`repeated_key`).
SAME_OBJECT = frozenset({"repeated_keyword", "repeated_dict_key"})
LLAMA4_DIVERGENCES = {
    **{k: v for k, v in DIVERGENCES.items() if k in LLAMA4_CORPUS},
    "python_start_partial_end": "text_after_list",
    "python_end_without_start": "text_after_list",
}
LLAMA4_STREAM_LOSSES = (STREAM_LOSSES & set(LLAMA4_CORPUS)) | {
    "python_start_bad", "python_start_partial_end", "python_end_without_start",
    "python_start_two",
}  # fmt: skip


@pytest.fixture(scope="module")
def parser() -> PythonicToolParser:
    return PythonicToolParser(llama3().vocab, [])


@pytest.fixture(scope="module")
def parser4() -> Llama4PythonicToolParser:
    return Llama4PythonicToolParser(llama4().vocab, [])


# Outputs long enough that every two-chunk split is slow: fewer splits (still every token).
LONG = frozenset({"big_int", "huge_int", "huge_hex"})


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_pythonic_split_invariant(parser: PythonicToolParser, case: str) -> None:
    """Streaming any split of a real Llama 3 token sequence yields exactly the batch result."""
    text = CORPUS[case]
    if case in LONG:
        assert_streams_like_batch(parser, text, llama3().chunks(text), n_random=2, chars=False)
    else:
        assert_split_invariant(parser, text, llama3().chunks(text))


@pytest.mark.parametrize("case", sorted(set(LLAMA4_CORPUS) - set(CORPUS)))
def test_llama4_pythonic_split_invariant(parser4: Llama4PythonicToolParser, case: str) -> None:
    """Same, for the Llama 4 markers, on real Llama 4 tokens."""
    text = LLAMA4_CORPUS[case]
    assert_split_invariant(parser4, text, llama4().chunks(text))


def assert_exact_arguments(parser: TableToolParser, corpus: dict[str, str], results: dict,
                           skip: set[str]) -> None:  # fmt: skip
    """vLLM's arguments are json.dumps output: ours must be the same string, byte for byte."""
    for name, res in results.items():
        if name in skip:
            continue
        got = [(c.name, c.arguments) for c in parser.parse(corpus[name], "req-1").tool_calls]
        assert got == [(n, a) for n, a, _ in res["batch"]["calls"]], name


@pytest.mark.vllm
def test_pythonic_matches_vllm(vllm_oracle, parser: PythonicToolParser) -> None:
    """Batch == vLLM 0.33 batch (exact arguments strings) except the named divergences;
    stream == vLLM's stream where vLLM's is lossless."""
    results = assert_matches_vllm(
        vllm_oracle, "pythonic", parser, llama3(), CORPUS,
        stream_losses=STREAM_LOSSES, divergences=frozenset(DIVERGENCES),
    )  # fmt: skip
    assert_exact_arguments(parser, CORPUS, results, set(DIVERGENCES) | SAME_OBJECT)


@pytest.mark.vllm
def test_llama4_pythonic_matches_vllm(vllm_oracle, parser4: Llama4PythonicToolParser) -> None:
    """Same against Llama4PythonicToolParser (strips <|python_start|>, drops <|python_end|>)."""
    results = assert_matches_vllm(
        vllm_oracle, "llama4_pythonic", parser4, llama4(), LLAMA4_CORPUS,
        stream_losses=frozenset(LLAMA4_STREAM_LOSSES), divergences=frozenset(LLAMA4_DIVERGENCES),
    )  # fmt: skip
    assert_exact_arguments(parser4, LLAMA4_CORPUS, results, set(LLAMA4_DIVERGENCES))


def generated_sample(n: int, *, newlines: bool = True) -> list[str]:
    rng = random.Random(1234)
    out = []
    for i in range(n):
        out.append(generated_call_list(i, [_random_value(rng) for _ in range(rng.randint(0, 5))],
                                       newlines=newlines))  # fmt: skip
    return out


def _random_value(rng: random.Random, depth: int = 0) -> object:
    kinds = ["none", "bool", "int", "float", "str", "str", "list", "dict"]
    kind = rng.choice(kinds[:6] if depth > 2 else kinds)
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([0, 1, -1, 42, -7, 10**20, rng.randint(-(10**9), 10**9)])
    if kind == "float":
        return rng.choice([0.5, -2.25, 1e-7, 1.5e300, 3.0, rng.uniform(-1e6, 1e6)])
    if kind == "str":
        alphabet = "ab cd\n\t'\"\\{}é北🙂\x01\x7f\u2028"
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
    if kind == "list":
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}


@pytest.mark.vllm
def test_reference_is_vllm(vllm_oracle) -> None:
    """The in-process `vllm_batch` equals vLLM 0.33's batch on the corpus and on generated
    outputs (exact strings), so the generated-output tests below compare against vLLM."""
    texts = list(CORPUS.values()) + generated_sample(150)
    results = vllm_oracle.run("pythonic", llama3(), texts)
    for text, res in zip(texts, results, strict=True):
        theirs = (res["batch"]["content"], [(n, a) for n, a, _ in res["batch"]["calls"]])
        assert vllm_batch(text) == theirs, text
    results = vllm_oracle.run("llama4_pythonic", llama4(), list(LLAMA4_CORPUS.values()))
    for text, res in zip(LLAMA4_CORPUS.values(), results, strict=True):
        theirs = (res["batch"]["content"], [(n, a) for n, a, _ in res["batch"]["calls"]])
        assert vllm_batch(text, "llama4_pythonic") == theirs, text


@pytest.mark.parametrize("text", generated_sample(150), ids=lambda t: str(len(t)))
def test_generated_outputs_match_vllm(parser: PythonicToolParser, text: str) -> None:
    """Generated well-formed call lists: our batch is vLLM's (exact strings)."""
    expected = vllm_batch(text)
    assert expected[1], f"generator produced an output vLLM refuses: {text!r}"
    assert ours(parser, text) == expected


@pytest.mark.parametrize("text", generated_sample(40), ids=lambda t: str(len(t)))
def test_generated_outputs_stream_like_batch(parser: PythonicToolParser, text: str) -> None:
    """Streaming them one token, one character, or random pieces at a time gives the same."""
    assert_streams_like_batch(parser, text, llama3().chunks(text), n_random=4)


def assert_streams_like_batch(parser: TableToolParser, text: str, chunks, *, n_random: int = 10,
                              chars: bool = True) -> None:  # fmt: skip
    """Whole, one token (and one char) at a time, `n_random` random splits of each; the state
    JSON round-tripped at every boundary."""
    expected = collapsed(parser.parse(text, "r"))
    rng = random.Random(len(text))
    pieces_sets = [[t for t, _ in chunks]] + ([list(text)] if chars else [])
    for pieces in pieces_sets:
        n = len(pieces)
        splits = [(), tuple(range(1, n))] + [
            tuple(sorted(rng.sample(range(1, n), rng.randint(1, n - 1))))
            for _ in range(n_random if n > 1 else 0)
        ]
        for cuts in splits:
            events = run_split(
                lambda s, d: parser.feed(s, d, "r"), lambda s: parser.finish(s, "r"),
                parser.initial_state(), type(parser).state_type(), pieces or [""], cuts,
            )  # fmt: skip
            assert collapse_events(events) == expected, (cuts, text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(json_values, max_size=5), seed=st.integers(0, 2**32))
def test_generated_values_match_vllm(values: list[object], seed: int) -> None:
    """Any JSON-able values, spelled any valid Python way: vLLM's exact arguments strings."""
    parser = PythonicToolParser(None, [])
    text = generated_call_list(seed, values)
    expected = vllm_batch(text)
    if not expected[1]:  # e.g. a dict whose keys collide in Python (1 and True): not generated
        return
    assert ours(parser, text) == expected
    rng, state, out, at = random.Random(seed), parser.initial_state(), [], 0
    while at < len(text):
        size = rng.randint(1, 6)
        piece, at = text[at : at + size], at + size
        state = type(state).from_json(json.loads(json.dumps(state.to_json())))
        state, events = parser.feed(state, piece, "r")
        out += events
    out += parser.finish(state, "r")[1]
    assert collapse_events(out) == collapsed(parser.parse(text, "r"))


# -- hostile: every cut, garbage, limits --------------------------------------------------------

CUT_TEXTS = [CORPUS["nested_values"], CORPUS["escapes"], CORPUS["later_positional"],
             CORPUS["number_forms"], CORPUS["tuples_and_sets"]]  # fmt: skip


@pytest.mark.parametrize("text", CUT_TEXTS, ids=range(len(CUT_TEXTS)))
def test_cut_at_every_offset(parser: PythonicToolParser, text: str) -> None:
    """The output ending at any character: stream == batch; calls vLLM accepts are vLLM's;
    every argument string is JSON; content, if any, is the model text from some point on
    (nothing lost, nothing invented)."""
    for cut in range(len(text) + 1):
        prefix = text[:cut]
        content, calls = ours(parser, prefix)
        theirs = vllm_batch(prefix)
        if theirs[1]:
            assert (content, calls) == theirs, prefix
        for _, arguments in calls:
            json.loads(arguments)
        assert content is None or prefix.endswith(content), prefix
        assert not calls or content is None or len(content) < len(prefix)
        assert_streams_like_batch(parser, prefix, [(ch, []) for ch in prefix], n_random=1,
                                  chars=False)  # fmt: skip


def test_outputs_that_cannot_be_calls_stream_at_once(parser: PythonicToolParser) -> None:
    """Content is released from the first character that rules a call list out."""
    for text, held in [("[docs", "[docs"), ("[get_weather", "[get_weather"), ("Hi [", ""),
                       ("[1", ""), ("[get weather", ""), ("[f('", ""), ("[f( ", "")]:  # fmt: skip
        state, events = parser.feed(parser.initial_state(), text, "r")
        streamed = "".join(e.text for e in events)
        assert streamed + state.ext.raw == text and state.ext.raw == held, text


def test_call_commits_at_its_first_value(parser: PythonicToolParser) -> None:
    """The id and name go out with the first argument fragment, which comes as soon as the
    first value is known to be a literal; strings stream as they are read."""
    state, events = parser.feed(parser.initial_state(), "[get_weather(city=", "r")
    assert events == []
    state, events = parser.feed(state, "'Pa", "r")
    assert [type(e) for e in events] == [ToolCallStart, ToolArgsDelta]
    assert events[0].name == "get_weather" and events[1].text == '{"city": "Pa'
    state, events = parser.feed(state, "ris', days=1", "r")
    assert [e.text for e in events] == ['ris"']  # the number is held until it ends
    state, events = parser.feed(state, "4)]", "r")
    assert [e.text for e in events] == [', "days": 14}']
    assert parser.finish(state, "r")[1] == []


def test_long_string_argument_streams_with_a_small_state(parser: PythonicToolParser) -> None:
    """A 100,000-character file streamed one Llama 3 token at a time: the state stays under
    1 KB at every chunk, the first fragment comes within 16 tokens of the arguments' start,
    and the arguments are vLLM's."""
    source = (
        'def handler(event: dict, context) -> dict:\n'
        '    """Return the greeting for «{name}» 🚀."""\n'
        "    name = event.get('name', \"world\")\n    if not name:\n"
        "        raise ValueError(f'bad: {name!r}')\n"
        '    return {"statusCode": 200, "body": "Hello, " + name + "\\n"}\n\n\n'
    )
    body = (source * (100_000 // len(source) + 1))[:100_000]
    text = "[write_file(path='big.py', content=" + json.dumps(body, ensure_ascii=False) + ")]"
    chunks = [t for t, _ in llama3().chunks(text)]
    state, events, sizes = parser.initial_state(), [], []
    first_args_at = None
    for i, piece in enumerate(chunks):
        wire = json.dumps(state.to_json())
        sizes.append(len(wire.encode()))
        state = type(state).from_json(json.loads(wire))
        state, out = parser.feed(state, piece, "r")
        if first_args_at is None and any(isinstance(e, ToolArgsDelta) for e in out):
            first_args_at = i
        events += out
    events += parser.finish(state, "r")[1]
    opened = next(i for i, piece in enumerate(chunks) if "(" in piece)
    assert max(sizes) < 1024, max(sizes)
    assert first_args_at is not None and first_args_at - opened <= 16
    got = collapse_events(events)
    assert [(c.name, c.arguments) for c in got.tool_calls] == vllm_batch(text)[1]
    assert json.loads(got.tool_calls[0].arguments)["content"] == body


def test_held_text_is_bounded(parser: PythonicToolParser) -> None:
    """What is held (here a string inside a bare parenthesis, which may still be a tuple) is
    bounded by the tool-call limit; a streamed string is not held at all."""
    state, _ = parser.feed(parser.initial_state(), "[f(a=('", "r")
    with pytest.raises(LimitExceededError):
        parser.feed(state, "x" * (MAX_TOOL_CALL_CHARS + 1), "r")
    state, _ = parser.feed(parser.initial_state(), "[f(a='", "r")
    state, _ = parser.feed(state, "x" * (MAX_TOOL_CALL_CHARS + 1), "r")
    assert len(json.dumps(state.to_json())) < 1024


ATOMS = ["[", "]", "(", ")", "{", "}", ",", ":", "=", "'", '"', "'''", "\\", "\n", " ", "#", "-",
         "f", "r", "b", "x", "1", "0x", ".", "e", "é", "🙂", "None", "null", "**", "*", "get(",
         "a=", "\x00", "<|python_start|>", "<|python_end|>"]  # fmt: skip


@pytest.mark.parametrize("family", [PythonicToolParser, Llama4PythonicToolParser])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(st.lists(st.sampled_from(ATOMS), min_size=1, max_size=5).map("".join),
                       max_size=12))  # fmt: skip
def test_garbage_streams_like_batch(family: type[TableToolParser], pieces: list[str]) -> None:
    """Arbitrary text, especially `[name(` followed by junk: stream == batch (state
    round-tripped), arguments are always JSON, content is a suffix of the text, and calls
    vLLM accepts are vLLM's."""
    parser = family(None, [])
    text = "[get(" + "".join(pieces) if pieces and pieces[0] != "[" else "".join(pieces)
    try:
        result = parser.parse(text, "r")
    except ParserError:
        return
    state, events = parser.initial_state(), []
    for piece in ([text[:5]] + pieces if text.startswith("[get(") else pieces):
        state = type(state).from_json(json.loads(json.dumps(state.to_json())))
        state, out = parser.feed(state, piece, "r")
        events += out
    events += parser.finish(state, "r")[1]
    assert collapse_events(events) == collapsed(result)
    for call in result.tool_calls:
        json.loads(call.arguments)
    theirs = vllm_batch(text, family.name)
    if theirs[1]:
        assert ours(parser, text) == theirs
    if family is PythonicToolParser:
        assert result.content is None or text.endswith(result.content)


# -- the named divergences ----------------------------------------------------------------------


def test_divergence_broken_call_list(parser: PythonicToolParser) -> None:
    """`broken_call_list`: after a call was committed, the text stops being a call list. The
    calls sent stay, the broken call's JSON is closed as written (no dangling key), and the
    model text not in the sent arguments is content (vLLM: all content)."""
    assert ours(parser, CORPUS["later_not_literal"]) == (", unit=celsius)]",
                                                         [("get_weather", '{"city": "Paris"}')])
    assert ours(parser, CORPUS["unbalanced"]) == (")]", [("f", '{"a": [1, 2]}')])
    assert ours(parser, CORPUS["truncated_at_eos"]) == (None, [("get_weather", '{"city": "Par"}')])
    content, calls = ours(parser, CORPUS["nested_call"])
    assert calls == [("f", '{"a": 1}')] and content == ", f(a=g(x))]"  # g( is no literal
    assert ours(parser, "[f(a={'k': [1, {'j': 'v', 'x': y}]})]") == (
        ", 'x': y}]})]", [("f", '{"a": {"k": [1, {"j": "v"}]}}')])
    assert ours(parser, CORPUS["not_a_call_in_list"]) == (", 'x']", [("f", '{"a": 1}')])


def test_divergence_before_commit_is_vllm(parser: PythonicToolParser) -> None:
    """Before a call commits nothing is lost to a divergence: vLLM's own result, all content."""
    for case in ("not_a_literal", "positional_first", "signed_bool", "bytes_first", "huge_int",
                 "huge_hex", "truncated_before_value", "keyword_name", "garbage"):  # fmt: skip
        assert ours(parser, CORPUS[case]) == vllm_batch(CORPUS[case]) == (CORPUS[case], []), case


def test_divergence_text_after_list(parser: PythonicToolParser) -> None:
    """`text_after_list`: text after the list that Python refuses there is content and the
    calls stay (vLLM: all content); text Python accepts there is dropped, as vLLM drops it."""
    paris = [("get_weather", '{"city": "Paris"}')]
    assert ours(parser, CORPUS["text_after_list"]) == ("\nDone.", paris)
    assert ours(parser, CORPUS["subscript_after_list"])[0] == "[0]"
    for case in ("valid_python_after", "trailing_comment", "trailing_newline"):
        assert ours(parser, CORPUS[case]) == vllm_batch(CORPUS[case]), case


def test_divergence_regex_after_commit(parser: PythonicToolParser) -> None:
    """`regex_after_commit`: lists Python accepts but vLLM's regex refuses past the first
    call's head keep their calls (vLLM: all content)."""
    assert ours(parser, CORPUS["trailing_comma"]) == (None, [("f", '{"a": 1}')])
    assert ours(parser, CORPUS["empty_call_then_positional"]) == (None, [("f", "{}"), ("g", "{}")])
    assert vllm_batch(CORPUS["trailing_comma"])[1] == []


def test_divergence_repeated_key(parser: PythonicToolParser) -> None:
    """`repeated_key`: written twice; json.loads gives vLLM's object (first place, last value)."""
    for case in sorted(SAME_OBJECT):
        (_, mine), (_, theirs) = ours(parser, CORPUS[case])[1][0], vllm_batch(CORPUS[case])[1][0]
        assert mine != theirs and json.loads(mine) == json.loads(theirs), case


def test_llama4_markers(parser4: Llama4PythonicToolParser) -> None:
    """<|python_end|> is removed (even inside a string) only when the output starts with
    <|python_start|>, and rejected outputs are the stripped text, as vLLM returns them."""
    assert ours(parser4, LLAMA4_CORPUS["python_start_two"]) == (
        None, [("a", '{"x": 1}'), ("b", '{"y": "z"}')])
    assert ours(parser4, LLAMA4_CORPUS["python_start_bad"]) == ("print('hi')", [])
    assert ours(parser4, LLAMA4_CORPUS["python_end_without_start"])[0] == "<|python_end|>"
    late = LLAMA4_CORPUS["python_start_late"]
    assert ours(parser4, late) == (late, [])


# -- table totality ------------------------------------------------------------------------------

FAMILY_TEXTS: dict[type[TableToolParser], list[str]] = {
    PythonicToolParser: [CORPUS["two_calls"] + "\nok", "Hi", "[f(a=1"],
    Llama4PythonicToolParser: [LLAMA4_CORPUS["python_start_two"] + " tail", "x", "[f(a=1"],
}


def reachable_states(parser: TableToolParser, texts: list[str]) -> Iterator:
    for text in texts:
        state = parser.initial_state()
        for ch in text:
            yield state
            state, _ = parser.feed(state, ch, "r")
        yield state


def assert_table_total(parser: TableToolParser, texts: list[str]) -> None:
    """Every (phase, kind) pair has a step, every phase is reached by `texts`, and from every
    reached state every kind gives events or a typed ParserError."""
    table = parser.table
    for phase, kind in table.kinds():
        assert table.lookup(phase, kind) is not None, (phase, kind)
    seen = set()
    for state in reachable_states(parser, texts):
        seen.add(state.phase)
        for kind in (*table.markers, TEXT, EOS):
            try:
                if kind == EOS:
                    parser.finish(state, "r")
                else:
                    parser.feed(state, "x" if kind == TEXT else kind, "r")
            except ParserError:
                pass
    assert seen == set(table.phases), set(table.phases) - seen


@pytest.mark.parametrize("family", sorted(FAMILY_TEXTS, key=lambda f: f.name), ids=lambda f: f.name)
def test_table_is_total(family: type[TableToolParser]) -> None:
    assert_table_total(family(None, []), FAMILY_TEXTS[family])

