"""granite_thinking_parser reasoning against vLLM 0.33's GraniteThinkingParserReasoningAdapter:
the Granite 4 corpus, hostile variants and our own cases under every switch setting, in one
oracle call; every split streams to our batch result."""

from __future__ import annotations

from typing import Any

import pytest

import parsers.reasoning.nemotron_v3 as nemotron_v3
from parsers import ReasoningResult
from parsers.registry import get_reasoning_parser

from .chunking import Collapsed, assert_chunking_invariant
from .family_corpus import corpus_entries, hostile_variants
from .family_oracle import vllm_family
from .family_tokenizers import family_tokenizer

NAME = "granite_thinking_parser"
MARKERS = ["<think>", "</think>", "<tool_call>", "</tool_call>"]
SWITCHES: list[dict[str, Any]] = [
    {},
    {"enable_thinking": False},
    {"force_nonempty_content": True},
    {"enable_thinking": 0},  # falsy but not False: thinking off, no swap
]
OWN = {
    "empty": "",
    "newlines": "\n\n",
    "template_shape": "<think>\nThe user wants 東京 weather 😀\n</think>\nIt is sunny.",
    "truncated_thought": "<think>The user wants 東京 weather",
    "thought_newline_answer": "thinking hard  \n</think>\n\n",
    "thought_blank_answer": "thinking</think>\n \n",
    "end_only": "</think>",
    "newlines_then_text": "r</think>\n\n\nanswer\n\nmore",
    "reenter": "a</think>b<think>c</think>d",
    "tool_ends_thought": "plan<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "dup_end": "r</think></think>\nc",
    "marker_prefix_end": "r</thi",
}
LONG = "long thought " * 100
DIVERGENCES = {
    "long_truncated_thought": "force switch, thought over MAX_SWAP_HELD_CHARS: we keep it as "
    "reasoning (it has streamed); vLLM's batch swaps it to content",
}


def _build(kwargs: dict[str, Any]) -> Any:
    bundle = family_tokenizer("reasoning", NAME)
    cls = get_reasoning_parser(NAME)
    return cls(bundle.tokenizer, kwargs, special_tokens=bundle.special_tokens)


@pytest.fixture(scope="module")
def oracle(vllm_ref):
    entries = corpus_entries("reasoning", NAME)
    prompt = entries[0]["prompt"]
    texts: list[dict[str, Any]] = [*entries]
    for source in (OWN["template_shape"], entries[4]["text"]):
        texts += [{"text": t, "prompt": prompt} for t in hostile_variants(source, MARKERS).values()]
    texts += [{"text": t, "prompt": prompt} for t in OWN.values()]
    texts += [{"text": t} for t in OWN.values()]  # and without the prompt
    texts.append({"text": "<think>" + LONG, "_long": True})  # no prompt: starts in reasoning
    cases = [{**t, "chat_template_kwargs": kw} for kw in SWITCHES for t in texts]
    bundle = family_tokenizer("reasoning", NAME)
    out = vllm_family(vllm_ref, reasoning=NAME, bundle=bundle,
                      cases=[{k: v for k, v in c.items() if k != "_long"} for c in cases])
    assert out.infra_errors() == []
    return cases, out


def test_batch_matches_vllm(oracle, monkeypatch) -> None:
    monkeypatch.setattr(nemotron_v3, "MAX_SWAP_HELD_CHARS", 1000)
    cases, out = oracle
    diverged = 0
    for case, res, sent in zip(cases, out.results, out.cases, strict=True):
        parser = _build(case["chat_template_kwargs"])
        ours = parser.parse(case["text"], sent.get("prompt_token_ids", ()))
        raw = res["batch"]["raw"]
        theirs = ReasoningResult(raw["reasoning"], raw["content"])
        alone = res["reasoning"]
        if case.get("_long") and parser.force and parser.thinking:
            diverged += 1
            assert theirs == ReasoningResult(ours.content, ours.reasoning)  # DIVERGENCES
            assert ours.reasoning and ours.content is None
            continue
        assert ours == theirs, (case, res["batch"])
        assert parser.parse(case["text"]) == ReasoningResult(alone["reasoning"], alone["content"]), case
        assert res["batch"]["reasoning"] == raw["reasoning"]
    assert diverged == len(DIVERGENCES)


def test_every_split_streams_to_the_batch(oracle, monkeypatch) -> None:
    monkeypatch.setattr(nemotron_v3, "MAX_SWAP_HELD_CHARS", 1000)
    cases, out = oracle
    for case, sent in zip(cases, out.cases, strict=True):
        parser = _build(case["chat_template_kwargs"])
        prompt = sent.get("prompt_token_ids", ())
        result = parser.parse(case["text"], prompt)
        pieces = [p for p, _ in sent["chunks"]] or [""]
        assert_chunking_invariant(
            parser.feed, parser.finish, parser.initial_state(prompt), parser.state_type(),
            pieces, Collapsed(result.reasoning or "", result.content or ""), n_random=8,
        )


def test_leading_newlines_and_the_swap() -> None:
    parser = _build({"force_nonempty_content": True})
    assert parser.parse("<think>abc</think>\nhi") == ReasoningResult("abc", "hi")
    assert parser.parse("<think>abc</think>\n") == ReasoningResult("abc", None)  # present: no swap
    assert parser.parse("<think>abc</think>") == ReasoningResult(None, "abc")  # absent: swap
    state = parser.initial_state()
    state, events = parser.feed(state, "<think>abc")
    assert events == [] and state.reasoning == "abc"
    state, events = parser.feed(state, "</think>\n")
    assert state.settled and [type(e).__name__ for e in events] == ["ReasoningDelta"]
