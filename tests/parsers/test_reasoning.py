"""Reasoning families: split invariance with JSON round trips, upstream cases, prompt phases,
garbage input and corrupted state. Equality with vLLM itself is in test_differential.py."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsers import ParserError, ReasoningResult, StateError
from parsers._errors import ParserConfigError

from .chunking import assert_chunking_invariant
from .families import FAMILIES, build, bundle_for, corpus_for, expected_collapsed

CASES = [(family, case_id, text) for family in FAMILIES for case_id, text in corpus_for(family)]


@pytest.mark.parametrize(("family", "case_id", "text"), CASES, ids=[f"{f}-{c}" for f, c, _ in CASES])
def test_stream_equals_batch_on_every_split(family: str, case_id: str, text: str) -> None:
    """Whole, per token, every 2-split and 100 random splits, state JSON-round-tripped."""
    parser = build(family)
    pieces = bundle_for(family).pieces(text)
    stats = assert_chunking_invariant(
        parser.feed,
        parser.finish,
        parser.initial_state(),
        parser.state_type(),
        pieces,
        expected_collapsed(parser.parse(text)),
    )
    assert stats.splits_checked >= 1
    assert stats.max_state_bytes < 600, "reasoning state must stay small (no history)"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_long_alternating_whitespace_streams_like_batch(family: str) -> None:
    """600 held whitespace runs (one per character): glm45 holds trailing reasoning whitespace
    run-length encoded; a bound of 512 runs once failed its stream where batch succeeds."""
    start, end = ("[THINK]", "[/THINK]") if family == "mistral" else ("<think>", "</think>")
    text = f"{start}R" + " \n" * 300 + f"hello{end}" + " \n" * 300 + "done"
    if family == "granite":
        text = "Here is my thought process: R" + " \n" * 300 + "Here is my response: done"
    parser = build(family)
    result = parser.parse(text)
    stats = assert_chunking_invariant(
        parser.feed,
        parser.finish,
        parser.initial_state(),
        parser.state_type(),
        bundle_for(family).pieces(text),
        expected_collapsed(result),
        n_random=20,  # each boundary round-trips ~600 held runs; 20 random splits suffice
    )
    assert stats.splits_checked >= 1
    if family == "glm45":
        assert result == ReasoningResult("R" + " \n" * 300 + "hello", " \n" * 300 + "done")
        assert stats.max_state_bytes > 600 * 2, "the whole whitespace run was held at some point"


# -- upstream's own test cases (vLLM tests/reasoning, wire doc §6.3), batch results ------------

R1_CASES = [
    ("This is a reasoning section</think>This is the rest", ("This is a reasoning section", "This is the rest")),
    ("This is a reasoning section</think>", ("This is a reasoning section", None)),
    ("This is content", ("This is content", None)),
    ("This\nThat</think>This is the rest\nThat", ("This\nThat", "This is the rest\nThat")),
    ("</think>This is the rest", ("", "This is the rest")),
    ("<think>This is a reasoning section</think>This is the rest", ("This is a reasoning section", "This is the rest")),
    ("<think>This is a reasoning section", ("This is a reasoning section", None)),
    ("", ("", None)),
    ("\n<think>This is a reasoning section</think>\nThis is the rest", ("This is a reasoning section", "\nThis is the rest")),
]


@pytest.mark.parametrize(("text", "expected"), R1_CASES)
def test_deepseek_r1_upstream_cases(text: str, expected: tuple) -> None:
    assert build("deepseek_r1").parse(text) == ReasoningResult(*expected)


QWEN3_CASES = [
    ("This is a reasoning section</think>This is the rest", ("This is a reasoning section", "This is the rest")),
    ("This is a reasoning section</think>", ("This is a reasoning section", None)),
    ("<think>This is a reasoning section</think>This is the rest", ("This is a reasoning section", "This is the rest")),
    ("This is the rest", ("This is the rest", None)),
    ("<think>This is a reasoning section", ("This is a reasoning section", None)),
    (
        "I need to read the file.\n\n<tool_call>\n<function=bash>\n<parameter=command>\ncat /etc/hosts\n</parameter>\n</function>\n</tool_call>",
        ("I need to read the file.\n\n", "<tool_call>\n<function=bash>\n<parameter=command>\ncat /etc/hosts\n</parameter>\n</function>\n</tool_call>"),
    ),
    ("<think>reasoning</think>", ("reasoning", None)),
    ("<think>R</think>C</think>D", ("R", "CD")),  # duplicate </think> absorbed
]


@pytest.mark.parametrize(("text", "expected"), QWEN3_CASES)
def test_qwen3_upstream_cases(text: str, expected: tuple) -> None:
    assert build("qwen3").parse(text) == ReasoningResult(*expected)


def test_qwen3_thinking_disabled_is_verbatim_content() -> None:
    parser = build("qwen3", {"enable_thinking": False})
    text = "<think>x</think>This is plain content<|im_end|>"
    assert parser.parse(text) == ReasoningResult(None, text)
    state, events = parser.feed(parser.initial_state(), text)
    assert "".join(e.text for e in events) == text


def test_qwen3_drops_non_marker_special_tokens() -> None:
    assert build("qwen3").parse("R</think>A<|im_end|>B<|endoftext|>") == ReasoningResult("R", "AB")


def test_qwen3_prompt_that_closed_reasoning_starts_in_content() -> None:
    bundle = bundle_for("qwen3")
    parser = build("qwen3")
    closed = bundle.encode("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    open_ = bundle.encode("<|im_start|>assistant\n<think>\n")
    earlier_turn = bundle.encode("<think>a</think>b<|im_end|>\n<|im_start|>assistant\n")
    assert parser.is_reasoning_end(closed)
    assert not parser.is_reasoning_end(open_)
    assert not parser.is_reasoning_end(earlier_turn)
    assert parser.parse("Hello", closed) == ReasoningResult(None, "Hello")
    assert parser.parse("Hello", open_) == ReasoningResult("Hello", None)
    assert parser.parse("Hello", earlier_turn) == ReasoningResult("Hello", None)


def test_deepseek_r1_is_reasoning_end_scans_backwards() -> None:
    bundle = bundle_for("deepseek_r1")
    parser = build("deepseek_r1")
    assert parser.is_reasoning_end(bundle.encode("a<think>b</think>c"))
    assert not parser.is_reasoning_end(bundle.encode("a</think>b<think>c"))
    assert not parser.is_reasoning_end(bundle.encode("plain"))


def test_deepseek_v3_defaults_to_identity() -> None:
    parser = build("deepseek_v3", {})
    assert parser.parse("<think>a</think>b") == ReasoningResult(None, "<think>a</think>b")
    assert parser.is_reasoning_end([])
    thinking = build("deepseek_v3", {"enable_thinking": True})
    assert thinking.parse("<think>a</think>b") == ReasoningResult("a", "b")


def test_glm45_reenters_reasoning_and_strips_trailing_whitespace() -> None:
    parser = build("glm45")
    assert parser.parse("A  \n</think>C<think>B \n</think>D") == ReasoningResult("A  \nB", "CD")
    assert parser.parse("R \n\n") == ReasoningResult("R", None)
    assert build("glm45", {"enable_thinking": False}).parse("<think>x") == ReasoningResult(None, "<think>x")


def test_mistral_encodings() -> None:
    parser = build("mistral")
    assert parser.encoding == "special_token"
    assert parser.parse("Hi[THINK]R [/THINK]C[/THINK]D") == ReasoningResult("R", "HiCD")
    assert parser.parse("[THINK]R[TOOL_CALLS]f{}") == ReasoningResult("R", "[TOOL_CALLS]f{}")
    qwen = bundle_for("qwen3")
    with pytest.raises(ParserConfigError):
        build_cls = type(parser)
        build_cls(qwen.tokenizer, {}, special_tokens=qwen.special_tokens)


def test_granite_cases() -> None:
    parser = build("granite")
    assert parser.parse("Here is my thought process: A Here is my response: B") == ReasoningResult(" A ", " B")
    assert parser.parse("Here's my thought process:A Here's my response:") == ReasoningResult("A ", None)
    assert parser.parse("plain") == ReasoningResult(None, "plain")
    assert parser.parse("") == ReasoningResult(None, "")


def test_unknown_reasoning_markers_missing_from_vocab_is_a_config_error() -> None:
    from parsers.reasoning.deepseek_r1 import DeepSeekR1ReasoningParser

    class EmptyVocab:
        def token_to_id(self, token: str) -> int | None:
            return None

    with pytest.raises(ParserConfigError):
        DeepSeekR1ReasoningParser(EmptyVocab())


# -- properties ---------------------------------------------------------------------------

_ALPHABET = st.sampled_from(
    ["<think>", "</think>", "<tool_call>", "[THINK]", "[/THINK]", "<|im_end|>", "<", "/", "think",
     ">", " ", "\n", "a", "你", "😀", "Here is my ", "thought process:", "response:", "\ufffd"]
)


@pytest.mark.parametrize("family", list(FAMILIES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(deltas=st.lists(st.one_of(st.text(max_size=8), st.lists(_ALPHABET, max_size=6).map("".join)), max_size=12))
def test_garbage_deltas_give_output_or_typed_error(family: str, deltas: list[str]) -> None:
    parser = build(family)
    state = parser.initial_state()
    events = []
    try:
        for delta in deltas:
            state, out = parser.feed(state, delta)
            events += out
            state = parser.state_type().from_json(json.loads(json.dumps(state.to_json())))
        state, out = parser.finish(state)
        events += out
    except ParserError:
        return
    streamed = expected_collapsed(ReasoningResult(
        "".join(e.text for e in events if type(e).__name__ == "ReasoningDelta"),
        "".join(e.text for e in events if type(e).__name__ == "ContentDelta"),
    ))
    assert streamed == expected_collapsed(parser.parse("".join(deltas)))


@pytest.mark.parametrize("family", list(FAMILIES))
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_corrupted_state_is_state_error_or_valid(family: str, data: st.DataObject) -> None:
    parser = build(family)
    state, _ = parser.feed(parser.initial_state(), "Reasoning  \n<thi")
    wire = bytearray(json.dumps(state.to_json()).encode())
    for _ in range(data.draw(st.integers(1, 4))):
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    try:
        loaded = json.loads(wire.decode("utf-8", errors="replace"))
    except json.JSONDecodeError:
        return  # not JSON: the transport layer's error, not a state
    try:
        restored = parser.state_type().from_json(loaded)
        parser.feed(restored, "more</think>x")
        parser.finish(restored)
    except StateError:
        pass


@pytest.mark.parametrize("family", list(FAMILIES))
def test_wrong_version_and_foreign_state_are_state_errors(family: str) -> None:
    parser = build(family)
    data = parser.initial_state().to_json()
    with pytest.raises(StateError):
        parser.state_type().from_json({**data, "v": 999})
    with pytest.raises(StateError):
        parser.state_type().from_json({**data, "extra": 1})
    other = next(f for f in FAMILIES if build(f).state_type() is not parser.state_type())
    with pytest.raises(StateError):
        parser.feed(build(other).initial_state(), "x")
