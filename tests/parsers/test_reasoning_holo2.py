"""holo2 (vLLM 0.33 DeepSeekV3ReasoningWithThinkingParser): deepseek_r1 with thinking on by
default; differential against vLLM on the family corpus, hostile variants and think cases."""

from __future__ import annotations

import pytest

from parsers import ReasoningResult
from parsers.registry import get_reasoning_parser

from .family_run import THINK_CASES, assert_batches_match, assert_streams_match_batch, family_run
from .family_tokenizers import family_tokenizer

pytestmark = pytest.mark.vllm

# deepseek_r1's documented divergence: text before a late first <think> is kept here.
DIVERGENCES = {
    "late_think": "upstream batch drops text before a late first <think>; it had streamed",
}


@pytest.fixture(scope="module")
def run(vllm_ref):
    return family_run(vllm_ref, reasoning="holo2", extra=THINK_CASES)


def test_batch_matches_vllm(run):
    assert run.construct == {"tool": None, "reasoning": None, "composed": None}
    assert assert_batches_match(run, DIVERGENCES) > 20


def test_stream_equals_batch_on_every_split(run):
    assert_streams_match_batch(run)


@pytest.mark.parametrize(("kwargs", "thinking"), [
    ({}, True), ({"thinking": None}, True), ({"thinking": False}, False),
    ({"enable_thinking": False}, False), ({"thinking": False, "enable_thinking": True}, True),
])
def test_thinking_switch(kwargs, thinking):
    bundle = family_tokenizer("reasoning", "holo2")
    parser = get_reasoning_parser("holo2")(bundle.tokenizer, kwargs)
    text = "r</think>c"
    expected = ReasoningResult("r", "c") if thinking else ReasoningResult(None, text)
    assert parser.parse(text) == expected
