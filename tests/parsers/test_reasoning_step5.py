"""step5 (vLLM 0.33 registers DeepSeekR1ReasoningParser under this name): differential
against vLLM on the Step 3.7 corpus, hostile variants and think cases."""

from __future__ import annotations

import pytest

from parsers.reasoning.deepseek_r1 import DeepSeekR1ReasoningParser
from parsers.registry import get_reasoning_parser

from .family_run import THINK_CASES, assert_batches_match, assert_streams_match_batch, family_run

pytestmark = pytest.mark.vllm

DIVERGENCES = {
    "late_think": "upstream batch drops text before a late first <think>; it had streamed",
}


@pytest.fixture(scope="module")
def run(vllm_ref):
    return family_run(vllm_ref, reasoning="step5", extra=THINK_CASES)


def test_batch_matches_vllm(run):
    assert run.construct == {"tool": None, "reasoning": None, "composed": None}
    assert assert_batches_match(run, DIVERGENCES) > 20


def test_stream_equals_batch_on_every_split(run):
    assert_streams_match_batch(run)


def test_is_the_deepseek_r1_machine():
    cls = get_reasoning_parser("step5")
    assert issubclass(cls, DeepSeekR1ReasoningParser) and cls.name == "step5"
