"""minicpmv with enable_thinking=false: output starts in content, a <think>...</think> span is
dropped (never printed), markers and escaped newlines as with thinking on. Differential against
vLLM (its own module: one oracle call per module, and the kwargs are per call)."""

from __future__ import annotations

import pytest

from .family_run import THINK_CASES, assert_batches_match, assert_streams_match_batch, family_run
from .test_reasoning_minicpmv import ESCAPES

pytestmark = pytest.mark.vllm

NO_THINK = {
    "hidden_span": "<think>hidden</think>visible\\nanswer",
    "unterminated_span": "answer <think>never closed",
    "span_then_call": "a<think>x</think><tool_call>\n<function=f>\n</function>\n</tool_call>",
    "plain": "It is 18 °C in 東京 ☀️.",
}


@pytest.fixture(scope="module")
def run(vllm_ref):
    return family_run(vllm_ref, reasoning="minicpmv", extra={**THINK_CASES, **ESCAPES, **NO_THINK},
                      chat_template_kwargs={"enable_thinking": False})


def test_batch_matches_vllm(run):
    assert run.construct == {"tool": None, "reasoning": None, "composed": None}
    assert assert_batches_match(run) > 20


def test_stream_equals_batch_on_every_split(run):
    assert_streams_match_batch(run)
