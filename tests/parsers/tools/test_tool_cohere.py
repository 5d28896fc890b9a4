"""`cohere_command3` / `cohere_command4` against vLLM 0.33's `CohereCommandParser` (cohere_melody).

One oracle call per preset runs the corpus, hostile variants and the cases below through
vLLM's composed parser (tool + reasoning name, as served); ours is the chat parser over
`parsers.cohere`. Streams equal our batch under one-character and random splits with the
state round-tripped, and the state stays small on a long argument and a long reasoning.
"""

from __future__ import annotations

import json

import pytest

from parsers.chat import ChatOptions

from ..chunking import ChunkingStats, collapse_events, run_split
from ..family_run import REQUEST_ID, assert_batches_match, assert_stream_invariant, family_run, ours

pytestmark = pytest.mark.vllm

CALL = '{"tool_call_id": "%s", "tool_name": "%s", "parameters": %s}'
CASES: dict[str, str] = {
    "plain": "Hello world  \n",
    "response_then_more": "<|START_RESPONSE|>a<|END_RESPONSE|>dropped after",
    "text_markers": "<|START_TEXT|>Hello<|END_TEXT|>",
    "think_ws": "<|START_THINKING|>  I will call \n<|END_THINKING|>  <|START_ACTION|>["
    + CALL % ("0", "get", '{"a": 1, "b": "x"}') + "]<|END_ACTION|>",
    "empty_params_first": "<|START_ACTION|>[" + CALL % ("0", "get", "{}") + ", "
    + CALL % ("1", "h", '{"a": [1, {"b": "}"}]}') + "]<|END_ACTION|>",
    "indented": '<|START_ACTION|>[\n    {\n        "tool_call_id": "7",\n        "tool_name": "f",\n'
    '        "parameters": {\n            "x": "a\\"b",\n            "y": 2\n        }\n    }\n]<|END_ACTION|>',
    "bad_json_args": "<|START_ACTION|>[" + CALL % ("0", "f", '{"x": 1,}') + "]<|END_ACTION|>",
    "cut_args": "<|START_ACTION|>[" + CALL % ("0", "f", '{"x": "unterminated'),
    "no_call_id": '<|START_ACTION|>[{"tool_name": "f", "parameters": {"x": 1}}]<|END_ACTION|>',
    "citations": "Hello <co>cited</co: 0:[1]> world and <co>more</co: 1:[0,2]>.",
    "not_citations": "a <co: 0>x</co: 0> b <code>c</code>",
    "malformed_then_citation": "a <co: 0>x</co: 0> b <co>y</co: 0:[1]> c",
    "open_citation": "Some <co>open citation text",
    "cited_reasoning": "<|START_THINKING|>think <co>cit</co: 0:[0]> ok<|END_THINKING|>ans <co>b</co: 1:[2]>",
    "nested_thinking": "<|START_THINKING|>a<|START_THINKING|>b<|END_THINKING|>c<|END_THINKING|>d",
    "marker_prefix_end": "text <|START_TH",
    "only_action": "<|START_ACTION|>",
    "long_args": "<|START_ACTION|>[" + CALL % ("0", "search", '{"query": "' + "q" * 1500 + '"}')
    + "]<|END_ACTION|>",
    "action_garbage": "<|START_ACTION|>" + "not a call, " * 120 + '"tool_call_id"  :' * 3
    + '[{"tool_call_id":  "3", "tool_name": "f", "parameters": {"a": 1}}]<|END_ACTION|>',
    "id_only_cut": '<|START_ACTION|>[{"tool_call_id": "0", "tool_na',
    "nan_args": "<|START_ACTION|>[" + CALL % ("0", "f", '{"a": NaN}') + "]<|END_ACTION|>tail",
    "surrogate_args": "<|START_ACTION|>[" + CALL % ("0", "f", '{"a": "\\ud800"}') + "]<|END_ACTION|>",
    "surrogate_pair_args": "<|START_ACTION|>[" + CALL % ("0", "f", '{"a": "\\ud83d\\ude00"}') + "]<|END_ACTION|>",
    "long_ignored": "<|START_RESPONSE|>ok<|END_RESPONSE|>" + "after " * 250,
    "long_reasoning": "<|START_THINKING|>" + "r " * 800 + "<|END_THINKING|><|START_RESPONSE|>ok<|END_RESPONSE|>",
}

# vLLM's own test strings (tests/parser/cohere tool-call tests), both answer framings.
VLLM_SINGLE = ('<|START_THINKING|> i will call foo with query1<|END_THINKING|><|START_ACTION|>\n[\n'
               '    {"tool_call_id": "0", "tool_name": "foo", "parameters": {"query": "query1"}}\n]\n'
               "<|END_ACTION|>")
CASES.update({
    "vllm_single": VLLM_SINGLE,
    "vllm_multi": '<|START_THINKING|>first I think about foo<|END_THINKING|><|START_ACTION|>\n[\n'
    '    {"tool_call_id": "0", "tool_name": "foo", "parameters": {"query": "query1"}},\n'
    '    {"tool_call_id": "1", "tool_name": "bar", "parameters": {"x": 42}}\n]\n<|END_ACTION|>',
    "vllm_reasoning_only": "<|START_THINKING|>just think, no response<|END_THINKING|>",
    **{f"vllm_citations_{tag.lower()}": "<|START_THINKING|>This is a rainbow <co>emoji: 🌈</co: 0:[1]>"
       f"<|END_THINKING|>\n<|START_{tag}|>foo <co>bar</co: 0:[1,2],1:[3,4]><|END_{tag}|>"
       for tag in ("RESPONSE", "TEXT")},
})

# Where melody's own stream and batch differ (its patterns search the whole buffer, so what
# a chunk holds decides the match); ours follows its batch here, and its stream elsewhere.
STREAM_DIVERGENCES = {
    "empty_params_first": 'batch: `"parameters": {"` is found in the second call, then the '
    'first call\'s `{}` is its arguments; a stream reading `{}}` alone gives none',
    "malformed_then_citation": "batch: a `<co: 0>` tag before a real `<co>` citation is plain text up to "
    "the closing tag; a stream that sees the real citation first removes it",
}
# Where our stream follows vLLM's batch, not vLLM's stream.
VLLM_STREAM_DIVERGENCES = {
    "id_only_cut": "a call id whose name never came: vLLM's batch returns a nameless call, its "
    "stream never sends one; ours sends it at the end, as the batch has it",
}
RUNS: dict[str, object] = {}


@pytest.fixture(scope="module", params=["cohere_command3", "cohere_command4"])
def run(request, vllm_ref):
    name = request.param
    if name not in RUNS:
        RUNS[name] = family_run(vllm_ref, tool=name, reasoning=name, extra=CASES, max_cuts=12)
    return RUNS[name]


def test_batch_matches_vllm(run) -> None:
    assert assert_batches_match(run) > 40


def test_vllm_expectations(run) -> None:
    """vLLM's own expectations for its test strings."""
    parser = run.parser()
    single = parser.parse(run.cases["vllm_single"]["text"], REQUEST_ID)
    assert single.reasoning == "i will call foo with query1"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in single.tool_calls] == [
        ("0", "foo", {"query": "query1"})]
    tag = "response" if run.tool == "cohere_command3" else "text"
    cited = parser.parse(run.cases[f"vllm_citations_{tag}"]["text"], REQUEST_ID)
    assert (cited.reasoning, cited.content) == ("This is a rainbow emoji: 🌈", "foo bar")


def test_model_call_ids_are_kept(run) -> None:
    """vLLM returns melody's tool_call_id (the model's own), not a generated id."""
    result = run.parser().parse(run.cases["indented"]["text"], REQUEST_ID)
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("7", "f", '{\n    "x": "a\\"b",\n    "y": 2\n}')]
    theirs = run.results["indented"]["batch"]["tool_calls"]
    if theirs and "id" in theirs[0]:
        assert theirs[0]["id"] == "7"


def test_streams_equal_batch(run) -> None:
    parser = run.parser()
    for name in run.names:
        if name in STREAM_DIVERGENCES:  # still a divergence: one character a chunk differs
            text = run.cases[name]["text"]
            events = run_split(lambda s, d: parser.feed(s, d, REQUEST_ID),
                               lambda s: parser.finish(s, REQUEST_ID), parser.initial_state(),
                               parser.state_type(), list(text), tuple(range(1, len(text))),
                               ChunkingStats())
            batch = parser.parse(text, REQUEST_ID)
            got = collapse_events(events)
            assert (got.reasoning, got.content, [c.arguments for c in got.tool_calls]) != (
                batch.reasoning or "", batch.content or "",
                [c.arguments for c in batch.tool_calls]), name
            continue
        size = assert_stream_invariant(run, name, n_random=3)
        assert size < 1024, (name, size)


def test_token_stream_matches_vllm_stream(run) -> None:
    """Fed vLLM's token chunks, our stream adds up to vLLM's streamed message, ids included
    (melody reads the same chunks, so even its stream-only readings agree)."""
    parser = run.parser()
    for name in run.names:
        if name in VLLM_STREAM_DIVERGENCES:
            assert run.results[name]["stream"]["tool_calls"] == [], name
            continue
        theirs = run.results[name]["stream"]
        pieces = [t for t, _ in run.cases[name]["chunks"]] or [""]
        events = run_split(lambda s, d: parser.feed(s, d, REQUEST_ID),
                           lambda s: parser.finish(s, REQUEST_ID), parser.initial_state(),
                           parser.state_type(), pieces, tuple(range(1, len(pieces))),
                           ChunkingStats())
        got = collapse_events(events)
        assert (got.reasoning, got.content, [(c.id, c.name, c.arguments) for c in got.tool_calls]) == (
            theirs["reasoning"] or "", theirs["content"] or "",
            [(c.get("id"), c["name"], c["arguments"]) for c in theirs["tool_calls"]]), name


def test_tool_choice_none_and_no_reasoning(run) -> None:
    text = run.cases["think_ws"]["text"]
    tool = run.tool
    none = ours(run.bundle, tool=tool, reasoning=None, tools=run.tools,
                options=ChatOptions(tool_choice="none", enable_auto_tools=True)).parse(text, "r")
    assert (none.reasoning, none.content, none.tool_calls) == ("I will call", None, ())
    hidden = ours(run.bundle, tool=tool, reasoning=tool, tools=run.tools,
                  options=ChatOptions(tool_choice="auto", enable_auto_tools=True,
                                      include_reasoning=False)).parse(text, "r")
    assert hidden.reasoning is None and [c.name for c in hidden.tool_calls] == ["get"]
    off = ours(run.bundle, tool=tool, reasoning=None, tools=run.tools,
               options=ChatOptions(tool_choice="auto", enable_auto_tools=False)).parse(text, "r")
    assert (off.reasoning, off.content) == (None, text)  # no parser is built without auto tools
