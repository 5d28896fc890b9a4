"""Reasoning-token counts of seed_oss, minimax_m2, minimax_m2_append_think and minimax_m3 equal
vLLM 0.33's (batch, one token per step, whole output, state round-tripped), one oracle call."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parsers.reasoning_tokens import ReasoningCount, reasoning_token_counter
from parsers.registry import get_reasoning_parser

from .family_tokenizers import FAMILIES, family_key, family_tokenizer

pytestmark = pytest.mark.vllm

TEXTS: dict[str, list[str]] = {
    "seed_oss": ["<seed:think>a b c</seed:think>answer", "a b</seed:think>c", "<seed:think>x <seed:tool_call>\n"
                 "<function=f>\n</function>\n</seed:tool_call>", "no end", "x</seed:think>y<seed:think>z"],
    "minimax_m2": ["think a b</think>answer", "a <minimax:tool_call><invoke name=\"f\"></invoke>"
                   "</minimax:tool_call>", "<think>x</think>y</think>", "never ends"],
    "minimax_m2_append_think": ["a b</think>c", ""],
    "minimax_m3": ["<mm:think>a b</mm:think>c", "</mm:think>x", "p<mm:think>a<mm:think>b</mm:think>c</mm:think>d",
                   "plain"],
}
KWARGS: dict[str, list[dict[str, Any]]] = {"minimax_m3": [{}, {"thinking_mode": "enabled"}]}


def _cases() -> list[dict[str, Any]]:
    cases = []
    for name, texts in TEXTS.items():
        bundle = family_tokenizer("reasoning", name)
        eos = bundle.tokenizer.token_to_id("<|im_end|>")
        for kwargs in KWARGS.get(name, [{}]):
            for i, text in enumerate(texts):
                ids = bundle.encode(text) + ([eos] if i % 2 == 0 else [])
                cases.append({"id": f"{name}-{i}-{json.dumps(kwargs)}", "name": name, "bundle": bundle,
                              "payload": {"tokenizer_dir": str(bundle.directory),
                                          "loader": FAMILIES[family_key("reasoning", name)].loader,
                                          "reasoning_parser": name, "tool_parser": None, "kwargs": kwargs,
                                          "ids": ids, "prompt_ids": bundle.encode("<|im_start|>user\nhi"),
                                          "skip_special_tokens": False, "stop": [], "eos_ids": [eos],
                                          "chunks": None}})
    return cases


CASES = _cases()


def _stream(counter: Any, case: dict[str, Any], texts: list[str]) -> list[int]:
    payload = case["payload"]
    state = counter.start(payload["prompt_ids"], streaming=True)
    counts = []
    for k, (token_id, text) in enumerate(zip(payload["ids"], texts, strict=True)):
        state = ReasoningCount.from_json(json.loads(json.dumps(state.to_json())))
        state = counter.fold(state, [token_id], text if counter.needs_text(state) else "")
        if k == len(payload["ids"]) - 1:
            state = counter.finish(state)
        counts.append(state.count)
    return counts


def test_counts_equal_vllm(vllm_ref) -> None:  # noqa: ANN001
    results = vllm_ref.call("reasoning_tokens", cases=[c["payload"] for c in CASES])
    bad = {}
    for case, theirs in zip(CASES, results, strict=True):
        bundle, payload = case["bundle"], case["payload"]
        parser = get_reasoning_parser(case["name"])(bundle.tokenizer, payload["kwargs"],
                                                    special_tokens=bundle.special_tokens)
        counter = reasoning_token_counter(parser)
        ours = {"batch": counter.count(payload["ids"], payload["prompt_ids"]),
                "one_by_one": _stream(counter, case, theirs["one_by_one"]["texts"])}
        want = {"batch": theirs["batch"], "one_by_one": theirs["one_by_one"]["counts"]}
        if ours != want:
            bad[case["id"]] = {"ours": ours, "vllm": want}
    assert not bad, bad
