"""mistral on v11+ tokenizers (`[ARGS]` in the vocabulary): `[TOOL_CALLS]name[ARGS]{...}`.

Split invariance on real token sequences, and differential tests against vLLM 0.33's own
MistralToolParser, which takes its v11 path on the same vocabularies (tool parser alone, and
the Magistral combination `--reasoning-parser mistral --tool-call-parser mistral`)."""

from __future__ import annotations

import json
import random

import pytest

from parsers import ChatOptions, ChatParser
from parsers._errors import ParserConfigError
from parsers.registry import get_reasoning_parser
from parsers.tools.mistral import MistralToolParser, mistral_tool_call_id

from ..chunking import (
    Collapsed,
    CollapsedCall,
    assert_chunking_invariant,
    collapse_events,
    run_split,
)
from ..tokenizers_util import mistral_like
from ..vllm_ref import VllmRef
from .tool_parser_support import (
    WEATHER_TOOLS,
    Tokenizer,
    assert_matches_vllm,
    assert_split_invariant,
    comparable,
    mistral_v11,
    mistral_v13,
)

W = '{"city": "Paris", "unit": "c"}'
S = '{"query": "München 天气 ☀️", "filters": {"a": [1, {"b": null}]}}'
CALL_W = "[TOOL_CALLS]get_weather[ARGS]" + W
CALL_S = "[TOOL_CALLS]search[ARGS]" + S

CORPUS: dict[str, str] = {
    "issue_example": '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
    "plain_content": "Bonjour ! Il fait beau à Paris. 😊",
    "content_before_call": "Let me check that for you.\n\n" + CALL_W,
    "two_calls": CALL_W + CALL_S,
    "brace_without_args_marker": '[TOOL_CALLS]get_weather{"city": "Oslo"}',
    "typed_args": '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome", "days": "3"}',
    "nested_json": '[TOOL_CALLS]search[ARGS]{"f": {"x": {"y": [[], {}, "]"]}}}',
    "array_args": "[TOOL_CALLS]search[ARGS] [1, 2] tail",
    "trailing_text": CALL_W + " I hope that helps.",
    "trailing_text_then_call": CALL_W + " and then\n" + CALL_S,
    "truncated_at_eos": '[TOOL_CALLS]get_weather[ARGS]{"city": "Pa',
    "name_only": "[TOOL_CALLS]get_weather",
    "empty_slot": "Hi there [TOOL_CALLS]",
    "whitespace_then_empty_slot": "  \n[TOOL_CALLS][ARGS]",
    "whitespace_before_call": "  \n" + CALL_W,
    "non_json_args": "[TOOL_CALLS]get_weather[ARGS]city=Paris ",
    "string_args": '[TOOL_CALLS]get_weather[ARGS] "Paris" extra',
    "malformed_json": '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"]} more',
    "marker_in_name": "[TOOL_CALLS][TOOL_CALLS]get_weather[ARGS]{}",
    "empty_args_then_call": "[TOOL_CALLS][ARGS][TOOL_CALLS]get_weather[ARGS]{}",
    "whitespace_name": "[TOOL_CALLS]  [ARGS]",
    "marker_inside_json_string": '[TOOL_CALLS]search[ARGS]{"query": "a [TOOL_CALLS] b"}',
    "call_id": "[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]" + W,
    "partial_marker_at_end": "I will call a tool [TOOL_CA",
    "args_marker_in_content": "Use [ARGS] and {braces} here.",
    "special_token_in_content": "Answer 42.<|im_end|>",
    "special_token_in_args": '[TOOL_CALLS]get_weather[ARGS]{"city": <|im_end|>"Lyon"}<|im_end|>',
    "leading_whitespace_before_call": "\n\nLet me look that up.\n" + CALL_W,
}

# vLLM's stream differs from its own batch here; ours follows vLLM's batch. (vLLM streams
# argument text as it arrives, before it knows where the JSON value ends or what its schema
# types make of it; nameless and empty slots are streamed as calls.)
VLLM_STREAM_LOSSES = {
    "content_before_call": "stream keeps the blank line the batch strips",
    "leading_whitespace_before_call": "stream keeps the whitespace the batch strips",
    "typed_args": 'stream sends "3", the batch coerces it to the schema\'s integer',
    "array_args": "stream sends the text after the JSON value as arguments",
    "trailing_text": "stream sends the text after the JSON value as arguments",
    "trailing_text_then_call": "stream sends the text after the JSON value as arguments",
    "string_args": "stream sends the text after the JSON value as arguments",
    "non_json_args": "stream keeps the trailing space the batch strips",
    "name_only": 'stream sends no arguments, the batch "{}"',
    "whitespace_name": 'stream sends the name "  " unstripped and no arguments',
    "marker_inside_json_string": "stream keeps the unstripped name and arguments",
    "empty_slot": "stream sends a call without a name, the batch drops the empty slot",
    "whitespace_then_empty_slot": "stream sends a call without a name",
    "empty_args_then_call": "stream sends a call without a name",
}
STREAM_LOSSES = frozenset(VLLM_STREAM_LOSSES)
# Our batch differs from vLLM's: the leading whitespace was streamed before the call arrived.
DIVERGENCES = frozenset({"leading_whitespace_before_call"})


def _parser(tok: Tokenizer, **kwargs) -> MistralToolParser:
    return MistralToolParser(tok.vocab, WEATHER_TOOLS, special_tokens=tok.special_tokens, **kwargs)


@pytest.mark.parametrize("tok", [mistral_v11, mistral_v13], ids=["v11", "v13"])
@pytest.mark.parametrize("case", sorted(CORPUS))
def test_mistral_v11_split_invariant(tok, case: str) -> None:
    """Any split of the real token sequence, state JSON-round-tripped at every boundary,
    streams exactly the batch result."""
    text = CORPUS[case]
    assert_split_invariant(_parser(tok()), text, tok().chunks(text))


def test_vocabulary_selects_the_format() -> None:
    """`[ARGS]` in the vocabulary selects the v11 format, as vLLM's `_is_pre_v11_tokeniser`;
    the issue's example is a call there and content on a pre-v11 vocabulary."""
    text = CORPUS["issue_example"]
    v11 = MistralToolParser({"[TOOL_CALLS]": 5, "[ARGS]": 32}, []).parse(text, "r")
    assert [(c.name, json.loads(c.arguments)) for c in v11.tool_calls] == [
        ("get_weather", {"city": "Paris"})]
    assert v11.content is None
    pre_v11 = MistralToolParser({"[TOOL_CALLS]": 5}, []).parse(text, "r")
    assert pre_v11.tool_calls == () and pre_v11.content == text.removeprefix("[TOOL_CALLS]")
    with pytest.raises(ParserConfigError):
        MistralToolParser({"[ARGS]": 32}, [])


def test_format_is_part_of_the_state() -> None:
    """A pre-v11 state is rejected by a v11 parser (and back)."""
    from parsers._errors import StateError

    v11 = MistralToolParser({"[TOOL_CALLS]": 5, "[ARGS]": 32}, [])
    pre = MistralToolParser({"[TOOL_CALLS]": 5}, [])
    with pytest.raises(StateError):
        v11.feed(pre.initial_state(), "x", "r")
    with pytest.raises(StateError):
        pre.feed(v11.initial_state(), "x", "r")


def test_call_streams_name_then_arguments() -> None:
    """The name is sent with the first argument text (as vLLM sends it); the arguments
    stream as the model wrote them, and a call is complete as soon as its JSON closes."""
    parser = _parser(mistral_v11())
    state, events = parser.feed(parser.initial_state(), "Sure.\n[TOOL_CALLS]get_weather[ARGS]", "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta"]
    state, events = parser.feed(state, '{"city": "Pa', "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolArgsDelta"]
    assert events[0].name == "get_weather" and events[1].text == '{"city": "Pa'
    state, events = parser.feed(state, 'ris"}', "r")
    assert [e.text for e in events] == ['ris"}']
    assert state.call is not None and state.call.args.done
    state, events = parser.feed(parser.initial_state(), "Sure.\n" + CALL_W, "r")
    got = collapse_events(events)
    assert got.content == "Sure."
    assert [(c.name, c.id, c.arguments) for c in got.tool_calls] == [
        ("get_weather", mistral_tool_call_id("r", 0), W)]


def test_reasoning_markers_in_tool_content() -> None:
    """Without a reasoning parser vLLM keeps `[THINK]` spans as content
    (`skip_reasoning_parsing`); `extract_tool_calls` alone treats them as reasoning."""
    text = "A[THINK]r[/THINK]B" + CALL_W
    tok = mistral_v13()
    assert _parser(tok).parse(text, "r").content == "AB"
    kept = _parser(tok, skip_reasoning_parsing=True).parse(text, "r")
    assert kept.content == "A[THINK]r[/THINK]B" and len(kept.tool_calls) == 1
    assert_split_invariant(_parser(tok), text, tok.chunks(text))


@pytest.mark.vllm
@pytest.mark.parametrize("tok", [mistral_v11, mistral_v13], ids=["v11", "v13"])
def test_mistral_v11_matches_vllm(vllm_oracle, tok) -> None:
    """Batch == vLLM 0.33's batch (content, names, JSON-equal arguments) on the corpus except
    the named divergence; our stream == vLLM's stream wherever vLLM's is lossless."""
    results = assert_matches_vllm(
        vllm_oracle, "mistral", _parser(tok()), tok(), CORPUS,
        stream_losses=STREAM_LOSSES, divergences=DIVERGENCES, real_tokenizer=True,
    )
    for res in results.values():
        for _, _, vllm_id in res["batch"]["calls"]:
            assert vllm_id.isalnum() and len(vllm_id) == 9
    # Exact argument strings (vLLM returns the raw JSON text unless a type was coerced).
    for case in ("issue_example", "typed_args", "array_args", "non_json_args", "call_id"):
        ours = _parser(tok()).parse(CORPUS[case], "r")
        theirs = results[case]["batch"]
        assert [(c.name, c.arguments) for c in ours.tool_calls] == [
            (n, a) for n, a, _ in theirs["calls"]], case


# Random outputs over the format's atoms: lexer corners a hand-written corpus misses.
ATOMS = [
    "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]", "{", "}", "[", "]", '"', ":",
    ",", " ", "\n", "get_weather", "search", '"city"', '"days"', '"3"', "Paris", "<|im_end|>",
    "é😀", "hi", "\\", "1", "null", "[TOOL_CA",
]  # fmt: skip


def _random_outputs(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 14))) for _ in range(n)]


@pytest.mark.parametrize("tok", [mistral_v11, mistral_v13], ids=["v11", "v13"])
def test_mistral_v11_random_outputs_split_invariant(tok) -> None:
    for text in _random_outputs(60):
        assert_split_invariant(_parser(tok()), text, tok().chunks(text))


@pytest.mark.vllm
@pytest.mark.parametrize("tok", [mistral_v11, mistral_v13], ids=["v11", "v13"])
def test_mistral_v11_random_outputs_match_vllm(vllm_oracle, tok) -> None:
    """Our batch == vLLM's batch on 300 random outputs, except the named leading-whitespace
    divergence (content that starts with whitespace and is followed by a returned call)."""
    texts = _random_outputs(300)
    parser = _parser(tok())
    errors = []
    for text, res in zip(texts, vllm_oracle.run("mistral", tok(), texts, real_tokenizer=True),
                         strict=True):  # fmt: skip
        ours = parser.parse(text, "r")
        mine = comparable(ours.content, [(c.name, c.arguments) for c in ours.tool_calls])
        theirs = comparable(res["batch"]["content"], [(n, a) for n, a, _ in res["batch"]["calls"]])
        leading_ws = bool(ours.tool_calls) and ours.content is not None and (
            ours.content[:1].isspace() and ours.content.strip() == theirs["content"])
        if mine != theirs and not (leading_ws and mine["calls"] == theirs["calls"]):
            errors.append(f"{text!r}: ours {mine} != vLLM {theirs}")
    assert not errors, "\n".join(errors[:20])


def test_mistral_v11_divergence_leading_whitespace() -> None:
    """Named divergence: leading whitespace before prose and a call is kept (vLLM's batch
    strips it; it was streamed before the call could be known)."""
    result = _parser(mistral_v11()).parse(CORPUS["leading_whitespace_before_call"], "r")
    assert result.content == "\n\nLet me look that up."


# -- Magistral: reasoning parser + tool parser --------------------------------------------------

TOOLS = WEATHER_TOOLS
COMBINED = {
    "think_content_call": "[THINK]Let me check the weather 😀.[/THINK]I'll look it up.\n" + CALL_W,
    "think_two_calls": "[THINK]R[/THINK]" + CALL_W + CALL_S,
    "call_ends_reasoning": "[THINK]I must call a tool" + CALL_W,
    "think_answer": "[THINK]R  \n[/THINK]Just an answer, 你好.",
    "no_reasoning_call": 'Calling.[TOOL_CALLS]get_weather{"city": "Nice", "days": "2"}',
    "think_blank_call": "[THINK]R[/THINK]\n\n" + CALL_W,
    "special_token_after_call": "[THINK]R[/THINK]" + CALL_W + "<|im_end|>",
    "stray_end_marker": "[THINK]R[/THINK]A[/THINK]B" + CALL_W,
}
MODES = {
    "auto": {"tool_choice": "auto"},
    "single": {"tool_choice": "auto", "parallel_tool_calls": False},
    "hidden_reasoning": {"tool_choice": "auto", "include_reasoning": False},
    "required": {"tool_choice": "required"},
}


@pytest.fixture
def ref(vllm_ref: VllmRef) -> VllmRef:
    return vllm_ref


def _chat(options: dict) -> ChatParser:
    bundle = mistral_like()
    reasoning = get_reasoning_parser("mistral")(
        bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    tools = MistralToolParser(bundle.tokenizer, TOOLS, special_tokens=bundle.special_tokens)
    return ChatParser(reasoning, tools, ChatOptions(enable_auto_tools=True, **options))


def _calls(calls) -> list:
    return [(c["name"], json.loads(c["arguments"])) for c in calls]


@pytest.mark.parametrize("case", sorted(COMBINED))
def test_magistral_split_invariant(case: str) -> None:
    """The combined parser streams exactly its batch result under every split (whole, one
    token per chunk, every two-chunk split, 100 random splits, state JSON-round-tripped)."""
    parser, text = _chat(MODES["auto"]), COMBINED[case]
    ours = parser.parse(text, "req")
    expected = Collapsed(ours.reasoning or "", ours.content or "", tuple(
        CollapsedCall(i, c.id, c.name, c.arguments) for i, c in enumerate(ours.tool_calls)))
    assert_chunking_invariant(
        feed_fn=lambda state, delta: parser.feed(state, delta, "req"),
        finish_fn=lambda state: parser.finish(state, "req"),
        initial_state=parser.initial_state(), state_type=parser.state_type(),
        pieces=mistral_like().pieces(text), expected=expected,
    )


# vLLM's combined stream differs from its own batch here; ours follows vLLM's batch.
COMBINED_STREAM_LOSSES = {
    "think_content_call": "stream keeps the newline before the call that the batch strips",
    "no_reasoning_call": 'stream sends "2", the batch coerces it to the schema\'s integer',
}


@pytest.mark.vllm
@pytest.mark.parametrize("mode", list(MODES))
def test_magistral_reasoning_and_tools_match_vllm(ref, mode: str) -> None:
    """ChatParser(mistral reasoning, mistral tools) == vLLM's DelegatingParser batch result;
    our stream (one token per chunk, state round-tripped) == our batch, and == vLLM's stream
    wherever vLLM's stream equals its batch."""
    bundle = mistral_like()
    options = MODES[mode]
    errors = []
    for case, text in COMBINED.items():
        common = {"tokenizer_dir": str(bundle.directory), "reasoning_parser": "mistral",
                  "tool_parser": "mistral", "enable_auto_tools": True,
                  "request": {"tools": TOOLS, **options}}
        theirs = ref.call("parse", text=text, **common)
        v_batch = (theirs["reasoning"] or "", theirs["content"] or "", _calls(theirs["tool_calls"]))
        parser = _chat(options)
        ours = parser.parse(text, "req")
        mine = (ours.reasoning or "", ours.content or "",
                [(c.name, json.loads(c.arguments)) for c in ours.tool_calls])
        if mine != v_batch or (ours.reasoning, ours.content) != (theirs["reasoning"], theirs["content"]):
            errors.append(f"{case}: ours {mine} != vLLM batch {v_batch}")
        pieces = bundle.pieces(text)
        events = run_split(lambda s, t, p=parser: p.feed(s, t, "req"),
                           lambda s, p=parser: p.finish(s, "req"), parser.initial_state(),
                           parser.state_type(), pieces, tuple(range(1, len(pieces))))
        got = collapse_events(events)
        streamed = (got.reasoning, got.content, [(c.name, c.arguments) for c in got.tool_calls])
        if streamed != (ours.reasoning or "", ours.content or "",
                        [(c.name, c.arguments) for c in ours.tool_calls]):
            errors.append(f"{case}: our stream {streamed} != our batch {ours}")
        chunks = [[p, ids] for p, ids in zip(pieces, _ids_per_piece(bundle, text), strict=True)]
        s = ref.call("stream", chunks=chunks, **common)
        v_stream = (s["reasoning"], s["content"], _calls(s["tool_calls"]))
        if case in COMBINED_STREAM_LOSSES:
            if v_stream == v_batch:
                errors.append(f"{case}: listed as a vLLM stream loss but vLLM's stream is exact")
        elif v_stream != mine:
            errors.append(f"{case}: vLLM stream {v_stream} != ours {mine}")
    assert not errors, "\n".join(errors)


def _ids_per_piece(bundle, text: str) -> list[list[int]]:
    """Token ids grouped like `bundle.pieces(text)` (a piece is one or more tokens)."""
    from parsers.detokenizer import IncrementalDetokenizer

    detok = IncrementalDetokenizer(bundle.tokenizer, bundle.special_ids, skip_special_tokens=False)
    state, groups, ids = detok.initial_state(()), [], []
    for tid in bundle.encode(text):
        state, piece = detok.feed(state, [tid])
        ids.append(tid)
        if piece:
            groups.append(ids)
            ids = []
    if ids:
        groups[-1] = groups[-1] + ids if groups else ids
    return groups or [[]]
