"""step3 (vLLM 0.33 Step3ReasoningParser): reasoning up to the first </think>, <think> kept
as text, no </think> -> all reasoning; differential against vLLM on the Step3 corpus, hostile
variants and think cases."""

from __future__ import annotations

import pytest

from parsers import ReasoningResult
from parsers._errors import ParserConfigError
from parsers.registry import get_reasoning_parser

from .family_run import THINK_CASES, assert_batches_match, assert_streams_match_batch, family_run
from .family_tokenizers import family_tokenizer

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def run(vllm_ref):
    return family_run(vllm_ref, reasoning="step3", extra=THINK_CASES)


def test_batch_matches_vllm(run):
    assert run.construct == {"tool": None, "reasoning": None, "composed": None}
    assert assert_batches_match(run) > 20


def test_stream_equals_batch_on_every_split(run):
    assert_streams_match_batch(run)


class _NoThinkEnd:
    def token_to_id(self, token: str) -> int | None:
        return 7 if token == "<think>" else None


def test_needs_think_end_token_and_reads_ids():
    with pytest.raises(ParserConfigError):
        get_reasoning_parser("step3")(_NoThinkEnd())
    bundle = family_tokenizer("reasoning", "step3")
    parser = get_reasoning_parser("step3")(bundle.tokenizer)
    end, start = bundle.token_id("</think>"), bundle.token_id("<think>")
    assert parser.is_reasoning_end([1, end, start]) and not parser.is_reasoning_end([start, 1])
    assert parser.parse("<think>a</think>") == ReasoningResult("<think>a", None)
    assert parser.parse("") == ReasoningResult("", None)
