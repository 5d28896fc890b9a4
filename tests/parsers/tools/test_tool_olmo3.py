"""olmo3: split invariance, differential tests against vLLM 0.33's Olmo3PythonicToolParser
(exact arguments strings), the named divergences, streaming with a bounded state, totality.

No Olmo 3 tokenizer is installed; outputs are cut into real Llama 3 (tiktoken BPE, the same
kind of tokenizer) and Qwen3 tokens, so markers and values split in two different ways."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsers._errors import ParserError, StateError
from parsers._events import ToolArgsDelta, ToolCallStart
from parsers.tools.olmo3 import BLOCK_CLOSE, BLOCK_OPEN, Olmo3PythonicToolParser

from ..chunking import collapse_events
from .test_tool_pythonic import (
    _random_value,
    assert_exact_arguments,
    assert_streams_like_batch,
    assert_table_total,
    generated_calls,
    json_values,
    ours,
    vllm_batch,
)
from .tool_parser_support import (
    assert_matches_vllm,
    assert_split_invariant,
    collapsed,
    llama3,
    qwen3,
)


def block(*lines: str) -> str:
    return BLOCK_OPEN + "\n" + "\n".join(lines) + "\n" + BLOCK_CLOSE


W = 'get_weather(city="Paris", unit=null)'
S = (
    'search(query="北京 ☔ \\"quoted\\"", '
    'filters={"lang": "zh", "safe": true, "n": 10, "tags": ["a", "b"], "x": null})'
)
CORPUS: dict[str, str] = {
    # realistic (Olmo 3 style)
    "plain_content": "The capital of France is Paris. 🇫🇷",
    "single_call": block(W),
    "parallel_calls": block(W, S),
    "after_reasoning_newline": "\n\n" + block(W),
    "blank_lines_and_indent": BLOCK_OPEN + "\n\n   " + W + "   \n\n\t" + S + "\n\n" + BLOCK_CLOSE,
    "no_arguments": block("get_time()"),
    "bare_calls": W + "\n" + S,
    "bare_call_trailing_newline": "\n" + W + "\n",
    "text_after_block": block(W) + "\nI have called the weather tool.",
    "second_block_ignored": block(W) + "\n" + block(S),
    "python_literals": block("f(a=True, b=None, c=False, d=-1.5e3, e=(1, 2), g={'k'})"),
    "escapes": block("send(text='H\\u00e9llo\\n\\t\\\\ \\x41 \\N{EM DASH}', to=\"a'b\")"),
    "newline_inside_string": block("note(text='first line   \n   second line')"),
    "triple_quoted_code": block('write_file(path="a.py", content="""def f():\n    return 1\n""")'),
    "later_positional": block(W, "convert(12.5, unit='f')"),
    "later_dotted_name": block(W, "math.sqrt(x=4)"),
    "same_line_two_calls": BLOCK_OPEN + W + ", " + S + BLOCK_CLOSE,
    "crlf_lines": BLOCK_OPEN + "\r\n" + W + "\r\n" + S + "\r\n" + BLOCK_CLOSE,
    # hostile
    "prose_then_block": "Let me check the weather.\n" + block(W),
    "empty_block": "Hi " + BLOCK_OPEN + "\n\n" + BLOCK_CLOSE,
    "prose_in_block": block("I will call get_weather now."),
    "positional_first": block("get_weather('Paris')"),
    "not_a_literal": block("get_weather(city=Paris)"),
    "list_in_block": block("[get_weather(city='Paris')]"),
    "close_without_open": W + BLOCK_CLOSE,
    "unclosed_block": BLOCK_OPEN + "\n" + W + "\n" + S,
    "unclosed_block_cut_in_call": BLOCK_OPEN + "\n" + W + "\nsearch(query='x",
    "call_split_over_lines": block("get_weather(city='Paris',\n    unit='c')"),
    "comment_after_call": block(W + "  # the weather"),
    "bare_then_prose": W + "\nThanks!",
    "bare_then_block": W + "\n" + block(S),
    "nested_block_marker": block("note(text='<function_calls>'), " + BLOCK_OPEN),
    "garbage": block("%$#@!"),
    "truncated": BLOCK_OPEN + "\nget_weather(city='Par",
    "lone_open_marker": BLOCK_OPEN,
    "whitespace_only": "  \n\t ",
}

# vLLM's stream differs from its own batch here.
STREAM_LOSSES = frozenset({
    "bare_calls", "bare_call_trailing_newline", "prose_then_block", "unclosed_block",
    "unclosed_block_cut_in_call", "call_split_over_lines", "comment_after_call",
    "bare_then_block", "nested_block_marker", "truncated", "after_reasoning_newline",
    "blank_lines_and_indent", "newline_inside_string", "prose_in_block", "positional_first",
    "not_a_literal", "list_in_block", "garbage", "lone_open_marker",
})  # fmt: skip
DIVERGENCES: dict[str, str] = {
    "prose_then_block": "content_before_block",
    "unclosed_block": "unclosed_block",
    "unclosed_block_cut_in_call": "unclosed_block",
    "truncated": "unclosed_block",
    "call_split_over_lines": "broken_call_list",
    "comment_after_call": "broken_call_list",
    "bare_then_prose": "broken_call_list",
    "close_without_open": "broken_call_list",
    "nested_block_marker": "broken_call_list",
    "bare_then_block": "bare_calls_then_block",
}


@pytest.fixture(scope="module")
def parser() -> Olmo3PythonicToolParser:
    return Olmo3PythonicToolParser(llama3().vocab, [])


@pytest.mark.parametrize("tokenizer", [llama3, qwen3], ids=["llama3", "qwen3"])
@pytest.mark.parametrize("case", sorted(CORPUS))
def test_olmo3_split_invariant(parser: Olmo3PythonicToolParser, case: str, tokenizer) -> None:
    """Streaming any split of real token sequences yields exactly the batch result."""
    text = CORPUS[case]
    assert_split_invariant(parser, text, tokenizer().chunks(text))


@pytest.mark.vllm
def test_olmo3_matches_vllm(vllm_oracle, parser: Olmo3PythonicToolParser) -> None:
    """Batch == vLLM 0.33 batch (exact arguments strings) except the named divergences; the
    in-process `vllm_batch` agrees with vLLM on every case."""
    results = assert_matches_vllm(
        vllm_oracle, "olmo3", parser, llama3(), CORPUS,
        stream_losses=STREAM_LOSSES, divergences=frozenset(DIVERGENCES),
    )  # fmt: skip
    assert_exact_arguments(parser, CORPUS, results, set(DIVERGENCES))
    for name, res in results.items():
        theirs = (res["batch"]["content"], [(n, a) for n, a, _ in res["batch"]["calls"]])
        assert vllm_batch(CORPUS[name], "olmo3") == theirs, name


def generated_olmo3(seed: int, values: list[object]) -> str:
    """Calls one per line (blank lines, indentation, trailing spaces), in a block or bare."""
    rng = random.Random(seed)
    lines = [rng.choice(["", "  ", "\t"]) + call + rng.choice(["", " ", "\n"])
             for call in generated_calls(rng, values, newlines=False)]  # fmt: skip
    body = "\n".join(lines)
    if rng.random() < 0.3:
        return rng.choice(["", "\n"]) + body
    return rng.choice(["", "\n", " \n"]) + BLOCK_OPEN + rng.choice(["", "\n"]) + body + rng.choice(
        ["", "\n"]
    ) + BLOCK_CLOSE + rng.choice(["", "\n", " done"])


def generated_sample(n: int) -> list[str]:
    rng = random.Random(77)
    return [
        generated_olmo3(i, [_random_value(rng) for _ in range(rng.randint(0, 5))]) for i in range(n)
    ]


@pytest.mark.vllm
def test_olmo3_generated_match_vllm(vllm_oracle, parser: Olmo3PythonicToolParser) -> None:
    """Generated outputs (strings with line breaks included): vLLM's exact results."""
    texts = generated_sample(120)
    for text, res in zip(texts, vllm_oracle.run("olmo3", llama3(), texts), strict=True):
        theirs = (res["batch"]["content"], [(n, a) for n, a, _ in res["batch"]["calls"]])
        assert vllm_batch(text, "olmo3") == theirs, text
        assert ours(parser, text) == theirs, text


@pytest.mark.parametrize("text", generated_sample(120), ids=lambda t: str(len(t)))
def test_olmo3_generated_outputs(parser: Olmo3PythonicToolParser, text: str) -> None:
    """vLLM's rule in process on the same outputs; streaming them gives the batch result."""
    expected = vllm_batch(text, "olmo3")
    assert expected[1], f"generator produced an output vLLM refuses: {text!r}"
    assert ours(parser, text) == expected


@pytest.mark.parametrize("text", generated_sample(30), ids=lambda t: str(len(t)))
def test_olmo3_generated_stream_like_batch(parser: Olmo3PythonicToolParser, text: str) -> None:
    assert_streams_like_batch(parser, text, llama3().chunks(text), n_random=4)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(json_values, max_size=4), seed=st.integers(0, 2**32))
def test_olmo3_generated_values(values: list[object], seed: int) -> None:
    text = generated_olmo3(seed, values)
    expected = vllm_batch(text, "olmo3")
    if expected[1]:
        assert ours(Olmo3PythonicToolParser(None, []), text) == expected


@pytest.mark.parametrize("case", ["parallel_calls", "newline_inside_string", "triple_quoted_code"])
def test_olmo3_cut_at_every_offset(parser: Olmo3PythonicToolParser, case: str) -> None:
    """The output ending at any character: stream == batch, calls vLLM accepts are vLLM's,
    arguments are JSON, and content is the model text from some point on."""
    text = CORPUS[case]
    for cut in range(len(text) + 1):
        prefix = text[:cut]
        content, calls = ours(parser, prefix)
        theirs = vllm_batch(prefix, "olmo3")
        if theirs[1] and BLOCK_CLOSE in prefix:
            assert (content, calls) == theirs, prefix
        for _, arguments in calls:
            json.loads(arguments)
        assert content is None or prefix.endswith(content), prefix
        assert_streams_like_batch(parser, prefix, [(ch, []) for ch in prefix], n_random=1,
                                  chars=False)  # fmt: skip


ATOMS = [BLOCK_OPEN, BLOCK_CLOSE, "\n", " ", "f(", "a=", "1", "'", '"', "\\", ",", ")", "(", "[",
         "{", "}", ":", "null", "true", "#", "é", "\u2028", "\r\n", "x"]  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(st.lists(st.sampled_from(ATOMS), min_size=1, max_size=5).map("".join),
                       max_size=12))  # fmt: skip
def test_olmo3_garbage_streams_like_batch(pieces: list[str]) -> None:
    """Arbitrary text around the markers: stream == batch (state round-tripped), arguments
    are JSON, and calls vLLM accepts (in a closed block) are vLLM's."""
    parser = Olmo3PythonicToolParser(None, [])
    text = "".join(pieces)
    result = parser.parse(text, "r")
    state, events = parser.initial_state(), []
    for piece in pieces:
        state = type(state).from_json(json.loads(json.dumps(state.to_json())))
        state, out = parser.feed(state, piece, "r")
        events += out
    events += parser.finish(state, "r")[1]
    assert collapse_events(events) == collapsed(result)
    for call in result.tool_calls:
        json.loads(call.arguments)
    theirs = vllm_batch(text, "olmo3")
    one_block_first = text.count(BLOCK_OPEN) == 1 and text.startswith(BLOCK_OPEN)
    if theirs[1] and one_block_first and BLOCK_CLOSE in text:
        assert ours(parser, text) == theirs


# -- the named divergences ----------------------------------------------------------------------


def test_olmo3_divergence_content_before_block(parser: Olmo3PythonicToolParser) -> None:
    """`content_before_block`: prose before the block has streamed as content; the block's
    calls follow (vLLM's batch drops the prose). Whitespace alone is held and dropped."""
    content, calls = ours(parser, CORPUS["prose_then_block"])
    assert content == "Let me check the weather.\n" and calls == vllm_batch(block(W), "olmo3")[1]
    text = CORPUS["after_reasoning_newline"]
    assert ours(parser, text) == vllm_batch(text, "olmo3")


def test_olmo3_divergence_unclosed_block(parser: Olmo3PythonicToolParser) -> None:
    """`unclosed_block`: the output ends inside a block: its calls stay, as bare calls would
    (vLLM: all content)."""
    assert ours(parser, CORPUS["unclosed_block"]) == (None, vllm_batch(block(W, S), "olmo3")[1])
    content, calls = ours(parser, CORPUS["unclosed_block_cut_in_call"])
    assert content is None and [n for n, _ in calls] == ["get_weather", "search"]
    assert calls[1][1] == '{"query": "x"}'


def test_olmo3_divergence_broken_call_list(parser: Olmo3PythonicToolParser) -> None:
    """`broken_call_list`: vLLM joins lines with ", ", so a call over two lines, a comment, or
    prose after a call break the list there: the calls sent stay, the rest is content."""
    assert ours(parser, CORPUS["call_split_over_lines"]) == (
        ",\n    unit='c')\n" + BLOCK_CLOSE, [("get_weather", '{"city": "Paris"}')])
    assert ours(parser, CORPUS["bare_then_prose"]) == ("\nThanks!", vllm_batch(W, "olmo3")[1])
    assert ours(parser, CORPUS["comment_after_call"])[0] == "  # the weather\n" + BLOCK_CLOSE


def test_olmo3_divergence_bare_calls_then_block(parser: Olmo3PythonicToolParser) -> None:
    """`bare_calls_then_block`: bare calls break at a later block's marker (vLLM would read
    the block only)."""
    content, calls = ours(parser, CORPUS["bare_then_block"])
    assert calls == vllm_batch(W, "olmo3")[1] and content == "\n" + block(S)


def test_olmo3_line_joining_inside_strings(parser: Olmo3PythonicToolParser) -> None:
    """A line break inside a literal reads as ", " with the lines' ends stripped, as vLLM's
    joining makes it; its text is never held longer than the whitespace around the break."""
    _, calls = ours(parser, CORPUS["newline_inside_string"])
    assert calls == [("note", '{"text": "first line, second line"}')]
    state, events = parser.feed(parser.initial_state(), BLOCK_OPEN + "\nnote(text='first   ", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['{"text": "first']
    assert state.call.args.lex.tok == "   "
    state, events = parser.feed(state, "\n  second", "r")
    assert [e.text for e in events] == [", second"]


def test_olmo3_streams_incrementally(parser: Olmo3PythonicToolParser) -> None:
    """Leading whitespace is held, the call commits at its first value, a 100,000-character
    argument streams one token at a time with the state under 1 KB."""
    head = "\n\n" + BLOCK_OPEN + "\nwrite(path='x', data='"
    state, events = parser.feed(parser.initial_state(), head, "r")
    assert [type(e) for e in events] == [ToolCallStart, ToolArgsDelta]
    body = ("for i in range(10):\n    print(i, 'é', \"世界\")\n" * 3000)[:100_000]
    text = "write(path='x', data=" + json.dumps(body, ensure_ascii=False) + ")\n" + BLOCK_CLOSE
    state, out, sizes, first_args_at = parser.initial_state(), [], [], None
    chunks = [piece for piece, _ in llama3().chunks(BLOCK_OPEN + "\n" + text)]
    for i, piece in enumerate(chunks):
        wire = json.dumps(state.to_json())
        sizes.append(len(wire.encode()))
        state, events = parser.feed(type(state).from_json(json.loads(wire)), piece, "r")
        if first_args_at is None and any(isinstance(e, ToolArgsDelta) for e in events):
            first_args_at = i
        out += events
    out += parser.finish(state, "r")[1]
    opened = next(i for i, piece in enumerate(chunks) if "(" in piece)
    assert max(sizes) < 1024, max(sizes)
    assert first_args_at is not None and first_args_at - opened <= 16
    (call,) = collapse_events(out).tool_calls
    assert json.loads(call.arguments) == {"path": "x", "data": body}


def test_olmo3_corrupted_state_is_a_state_error(parser: Olmo3PythonicToolParser) -> None:
    state, _ = parser.feed(parser.initial_state(), BLOCK_OPEN + "\nf(a=[1, {'k': (", "r")
    wire = state.to_json()
    corruptions = [
        (("phase",), "list"), (("call", "args", "stack"), "AX"), (("call", "args", "held"), []),
        (("call", "args", "pos"), "key"), (("call", "args", "lex", "quote"), "x"),
        (("ext", "where"), "nowhere"),
    ]  # fmt: skip
    for path, value in corruptions:
        bad = json.loads(json.dumps(wire))
        node = bad
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        with pytest.raises(StateError):
            parser.feed(type(state).from_json(bad), "x", "r")


def test_olmo3_table_is_total() -> None:
    assert_table_total(Olmo3PythonicToolParser(None, []), [
        "Hi\n" + block(W, S) + " tail", W + " x", BLOCK_OPEN + "\n" + BLOCK_CLOSE, "x",
    ])  # fmt: skip


def test_olmo3_typed_errors_only(parser: Olmo3PythonicToolParser) -> None:
    """Limits surface as ParserError subclasses."""
    state, _ = parser.feed(parser.initial_state(), BLOCK_OPEN + "\nf(a=(", "r")
    with pytest.raises(ParserError):
        parser.feed(state, "'" + "x" * 600_000, "r")


def test_olmo3_long_leading_whitespace_streams(parser: Olmo3PythonicToolParser) -> None:
    """Whitespace before anything else is held up to MAX_HELD_CHARS, then streamed as content
    (`content_before_block`), so a model stuck on newlines keeps a small state."""
    state, events = parser.feed(parser.initial_state(), "\n" * 5000, "r")
    assert "".join(e.text for e in events) == "\n" * 5000 and len(json.dumps(state.to_json())) < 1024
    text = "\n" * 5000 + block(W)
    assert ours(parser, text) == ("\n" * 5000, vllm_batch(block(W), "olmo3")[1])
