"""olmo3 (vLLM 0.33 Olmo3ReasoningParser, plain-text <think>): differential against vLLM on the
Olmo 3 Instruct corpus (prompt without <think>), Think-template outputs (prompt ending in
<think>), hostile variants and think cases."""

from __future__ import annotations

import pytest

from parsers import ReasoningResult
from parsers.registry import get_reasoning_parser

from .family_run import THINK_CASES, assert_batches_match, assert_streams_match_batch, family_run
from .family_tokenizers import family_tokenizer

pytestmark = pytest.mark.vllm

THINK_PROMPT = "<|im_start|>user\nWeather in Tokyo?<|im_end|>\n<|im_start|>assistant\n<think>"
THINKING = {
    "think:answer": "The user wants Tokyo.\n</think>\n\nIt is 18 °C in 東京 ☀️.",
    "think:call": 'I will call.</think><function_calls>get_weather(city="Tokyo")</function_calls>',
    "think:ws": "\n</think>\n\n",
    "think:truncated": "The user wants 東京 and I am cut",
    "think:second_think": "a <think> b</think>c",
}

# Both need the whole output before its first character could be sent (module docstring).
_OPEN_NO_END = "reasoning opened (prompt or leading <think>) without </think>: reasoning here, " \
    "all content upstream"
_LATE_END = "no <think> in prompt or at the start, </think> later: content here, reasoning " \
    "before it upstream"
DIVERGENCES = {
    "think:truncated": _OPEN_NO_END,
    "think_only": _OPEN_NO_END,
    "two_ends": _LATE_END,
    "end_only": _LATE_END,
    "cjk_emoji": _LATE_END,
    "late_think": _LATE_END,
    "leading_ws_think": _LATE_END,
    "tool_call_in_reasoning": _LATE_END,
    "long": _LATE_END,
}


@pytest.fixture(scope="module")
def run(vllm_ref):
    extra: dict = {**THINK_CASES}
    extra.update({k: {"text": t, "prompt": THINK_PROMPT} for k, t in THINKING.items()})
    return family_run(vllm_ref, reasoning="olmo3", extra=extra)


def test_batch_matches_vllm(run):
    assert run.construct == {"tool": None, "reasoning": None, "composed": None}
    assert assert_batches_match(run, DIVERGENCES) > 20


def test_stream_equals_batch_on_every_split(run):
    assert_streams_match_batch(run)


def test_prompt_think_as_one_token_or_bpe_pieces():
    bundle = family_tokenizer("reasoning", "olmo3")
    parser = get_reasoning_parser("olmo3")(bundle.tokenizer)
    ids = {t: bundle.token_id(t) for t in ("<think>", "<", "think", ">", "</", "Ġ</")}
    for prompt in ([5, ids["<think>"]], [5, ids["<"], ids["think"], ids[">"]]):
        assert parser.parse("r</think>c", prompt) == ReasoningResult("r", "c")
    assert parser.parse("r</think>c", [ids["<"], ids["think"]]) == ReasoningResult(None, "r</think>c")
    assert parser.is_reasoning_end([ids["Ġ</"], ids["think"], ids[">"], 9])
    assert parser.is_reasoning_end([ids["</"], ids["think"], ids[">"]])
    assert not parser.is_reasoning_end([ids["</"], ids["think"]])
