"""poolside_v1 (vLLM 0.33 PoolsideV1ReasoningParser): deepseek_v3 with thinking on, and an
is_reasoning_end scoped to the current assistant turn. Differential against vLLM on the Laguna
corpus, hostile variants and think cases (thinking on: its template's reasoning mode)."""

from __future__ import annotations

import pytest

from parsers import ReasoningResult
from parsers._errors import ParserConfigError
from parsers.registry import get_reasoning_parser

from .family_run import THINK_CASES, assert_batches_match, assert_streams_match_batch, family_run
from .family_tokenizers import family_tokenizer

pytestmark = pytest.mark.vllm

DIVERGENCES = {
    "late_think": "deepseek_r1: upstream batch drops text before a late first <think>",
}


@pytest.fixture(scope="module")
def run(vllm_ref):
    return family_run(vllm_ref, reasoning="poolside_v1", extra=THINK_CASES,
                      chat_template_kwargs={"enable_thinking": True})


def test_batch_matches_vllm(run):
    assert run.construct == {"tool": None, "reasoning": None, "composed": None}
    assert assert_batches_match(run, DIVERGENCES) > 20


def test_stream_equals_batch_on_every_split(run):
    assert_streams_match_batch(run)


class _NoAssistant:
    def token_to_id(self, token: str) -> int | None:
        return {"<think>": 1, "</think>": 2}.get(token)


def test_reasoning_end_is_scoped_to_the_assistant_turn():
    with pytest.raises(ParserConfigError):
        get_reasoning_parser("poolside_v1")(_NoAssistant(), {"thinking": True})
    bundle = family_tokenizer("reasoning", "poolside_v1")
    parser = get_reasoning_parser("poolside_v1")(bundle.tokenizer, {"thinking": True})
    start, end, asst = (bundle.token_id(t) for t in ("<think>", "</think>", "<assistant>"))
    assert parser.is_reasoning_end([5, end, 6])
    assert not parser.is_reasoning_end([end, asst, 6])
    assert not parser.is_reasoning_end([end, start])
    off = get_reasoning_parser("poolside_v1")(bundle.tokenizer, {})
    assert off.is_reasoning_end([]) and off.parse("a</think>b") == ReasoningResult(None, "a</think>b")
