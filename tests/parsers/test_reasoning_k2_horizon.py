"""k2_horizon reasoning: split invariance, and one batched differential call against vLLM
0.33's K2HorizonReasoningParser (alone and composed without a tool parser) on the corpus,
hostile variants of it and hand-written cases."""

from __future__ import annotations

from typing import Any

import pytest

from parsers import ChatOptions, ChatParser
from parsers._base import MAX_HELD_CHARS
from parsers._errors import ParserConfigError
from parsers.reasoning.k2_horizon import K2HorizonReasoningParser
from parsers.reasoning_tokens import reasoning_token_counter

from .chunking import Collapsed, assert_chunking_invariant
from .family_corpus import corpus_entries, family_markers, hostile_variants
from .family_oracle import vllm_family
from .family_tokenizers import family_tokenizer, token_chunks

T, E, TC = "<ifm|think>", "</ifm|think>", "<ifm|tool_calls>"
OWN: dict[str, str] = {
    "plain": "Just an answer 😀.",
    "think_answer": f"{T}Let me think. 東京\n{E}\n\nIt is sunny.",
    "no_start": f"Thinking without the start{E}Answer",
    "only_reasoning": f"{T}still thinking  \n",
    "tool_marker_ends": f"{T}Need the weather.{TC}<ifm|tool_call>get_weather</ifm|tool_call>",
    "tool_then_end": f"{T}A{TC}B{E}C",
    "end_then_tool": f"{T}A{E}B{TC}C",
    "late_start": f"x{T}y{E}z",
    "two_starts": f"{T}{T}a{E}b",
    "start_only": T,
    "end_only": E,
    "partial_start": "<ifm|thi",
    "partial_end": f"{T}abc</ifm|th",
    "empty_reasoning": f"{T}{E}content",
    "empty_content": f"{T}r{E}",
    "fast_markers_are_text": "<ifm|think_fast>a</ifm|think_fast>b",
}
DIVERGENCES: dict[str, str] = {}


def _cases() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {}
    entries = corpus_entries("reasoning", "k2_horizon")
    for entry in entries:
        cases[entry["name"]] = entry
    markers = family_markers("reasoning", "k2_horizon")
    for entry in entries:
        if E in entry["text"]:
            for key, text in hostile_variants(entry["text"], markers, max_cuts=16).items():
                cases[f"{entry['name']}|{key}"] = {"text": text}
    for name, text in OWN.items():
        cases[name] = {"text": text}
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def bundle() -> Any:
    return family_tokenizer("reasoning", "k2_horizon")


def _parser(bundle: Any, **kwargs: Any) -> K2HorizonReasoningParser:
    return K2HorizonReasoningParser(bundle.tokenizer, kwargs, special_tokens=bundle.special_tokens)


@pytest.mark.vllm
def test_k2_horizon_matches_vllm(vllm_ref: Any, bundle: Any) -> None:
    out = vllm_family(vllm_ref, reasoning="k2_horizon", bundle=bundle, cases=list(CASES.values()))
    assert not out.infra_errors(), out.infra_errors()
    parser = _parser(bundle)
    chat = ChatParser(parser, None, ChatOptions())
    counter = reasoning_token_counter(parser)
    errors = []
    for (name, case), res in zip(CASES.items(), out.results, strict=True):
        failed = [f"{k}: {v}" for k, v in res.items() if k.endswith("_error")]
        if failed:
            errors.append(f"{name}: vLLM raised {failed}")
            continue
        ids = bundle.encode(case["text"])
        count = counter.finish(counter.fold(counter.start([], streaming=False), ids)).count
        if count != res.get("reasoning_tokens"):
            errors.append(f"reasoning tokens {name}: ours {count} != vLLM {res.get('reasoning_tokens')}")
        ours = parser.parse(case["text"])
        if (ours.reasoning, ours.content) != (res["reasoning"]["reasoning"], res["reasoning"]["content"]):
            errors.append(f"{name}: ours {ours} != vLLM {res['reasoning']}")
        composed = chat.parse(case["text"], "r")
        batch = res["batch"]
        if (composed.reasoning, composed.content) != (batch["reasoning"], batch["content"]):
            errors.append(f"composed {name}: ours {composed} != vLLM {batch['reasoning']!r}, {batch['content']!r}")
    assert not errors, "\n".join(errors[:30])


@pytest.mark.parametrize("name", sorted(OWN) + ["reasoning_content", "reasoning_call"])
def test_k2_horizon_split_invariant(bundle: Any, name: str) -> None:
    parser, text = _parser(bundle), CASES[name]["text"]
    ours = parser.parse(text)
    assert_chunking_invariant(
        feed_fn=parser.feed, finish_fn=parser.finish, initial_state=parser.initial_state(),
        state_type=parser.state_type(), pieces=[p for p, _ in token_chunks(bundle, text)] or [""],
        expected=Collapsed(ours.reasoning or "", ours.content or ""),
    )


def test_k2_horizon_effort_markers(bundle: Any) -> None:
    fast = _parser(bundle, reasoning_effort="medium")
    assert fast.parse(OWN["fast_markers_are_text"]) == type(fast.parse(""))("a", "b")
    with pytest.raises(ParserConfigError):
        _parser(bundle, reasoning_effort="max")


def test_k2_horizon_divergence_long_undecided(bundle: Any) -> None:
    """Named divergence: an output still undecided after MAX_HELD_CHARS streams as reasoning
    (vLLM's stream); vLLM's batch would make it content if no marker ever came."""
    parser = _parser(bundle)
    long = "x" * (MAX_HELD_CHARS + 10)
    result = parser.parse(long)
    assert (result.reasoning, result.content) == (long, None)
    state, events = parser.feed(parser.initial_state(), long)
    assert "".join(e.text for e in events) == long and len(state.held) < 32
