"""hy_v4 reasoning: our parser (composed without a tool parser) against vLLM 0.33's
HYV4ReasoningParser on the hy4 family tokenizer (markers suffixed) and corpus, hostile
variants and own cases, with thinking on (vLLM's default "high") and `no_think`, in one oracle
call; chunking invariance and bounded state."""

from __future__ import annotations

import pytest

from .family_check import check_chunking, check_family_vs_vllm, family_chat
from .family_corpus import corpus_entries, family_markers, hostile_variants
from .family_tokenizers import family_tokenizer

NAME = "hy_v4"
T, E, TC = "<think>", "</think>", "<tool_calls>"
OFF = {"reasoning_effort": "no_think"}
LOW = {"reasoning_effort": "low"}
OWN: dict[str, str] = {
    "plain": "Just an answer 😀.",
    "think_answer": f"{T}Let me think. 東京\n{E}\n\nIt is sunny.",
    "no_start": f"Thinking without the start{E}Answer",
    "only_reasoning": f"{T}still thinking  \n",
    "late_start": f"x{T}y{E}z",
    "two_starts": f"{T}{T}a{E}b",
    "two_ends": f"a{E}b{E}c",
    "start_only": T,
    "end_only": E,
    "partial_start": "<thi",
    "partial_end": f"{T}abc</th",
    "empty_reasoning": f"{T}{E}content",
    "empty_content": f"{T}r{E}",
    "tool_marker_in_reasoning": f"r{TC}x{E}after",
    "long_reasoning": "長い" * 300 + E + "done",
}
_LATE = ("text before a late <think> is kept as reasoning, as vLLM's own stream does "
         "(its batch drops it: deepseek_r1's divergence)")
DIVERGENCES: dict[str, str] = {"late_start": _LATE, "low:late_start": _LATE}


def _cases() -> dict[str, object]:
    cases: dict[str, object] = {}
    entries = corpus_entries("reasoning", NAME)
    texts = {e["name"]: e["text"] for e in entries} | OWN
    for entry in entries:
        if E in entry["text"]:
            for key, text in hostile_variants(entry["text"], family_markers("reasoning", NAME),
                                              max_cuts=12).items():
                texts[f"{entry['name']}|{key}"] = text
    for name, text in texts.items():
        cases[name] = {"text": text}  # no kwargs: vLLM's default effort "high", thinking on
        cases["off:" + name] = {"text": text, "chat_template_kwargs": OFF}
        cases["low:" + name] = {"text": text, "chat_template_kwargs": LOW}
    return cases


@pytest.mark.vllm
def test_hy_v4_reasoning_matches_vllm(vllm_ref) -> None:
    check_family_vs_vllm(
        vllm_ref, family_chat(tool=None, reasoning=NAME), tool=None, reasoning=NAME,
        cases=_cases(), divergences=DIVERGENCES,
    )


@pytest.mark.parametrize("case", sorted(OWN))
def test_hy_v4_reasoning_chunking(case: str) -> None:
    bundle = family_tokenizer("reasoning", NAME)
    check_chunking(family_chat(tool=None, reasoning=NAME), bundle, OWN[case])
    check_chunking(family_chat(tool=None, reasoning=NAME, chat_template_kwargs=OFF), bundle, OWN[case])


def test_hy_v4_reasoning_state_bounded() -> None:
    chat = family_chat(tool=None, reasoning=NAME)
    state = chat.initial_state([])
    state, _ = chat.feed(state, "r" * 5000, "req")
    assert len(str(state.to_json())) < 2000
    state, events = chat.feed(state, E + "answer", "req")
    assert "answer" in "".join(getattr(e, "text", "") for e in events)
