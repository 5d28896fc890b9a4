"""`cohere_command3` / `cohere_command4` as the reasoning parser alone, against vLLM 0.33.

vLLM composes `CohereCommandParser` from the reasoning name alone too (melody splits the
reasoning; no tool parser, so no calls). One oracle call per preset; `is_reasoning_end` is
vLLM's backward scan of the prompt ids.
"""

from __future__ import annotations

import pytest

from parsers.reasoning_tokens import reasoning_token_counter
from parsers.registry import get_reasoning_parser

from .family_run import assert_batches_match, assert_stream_invariant, family_run
from .family_tokenizers import FAMILIES, family_key, family_tokenizer

pytestmark = pytest.mark.vllm

CASES = {
    "cmd4_default_reasoning": "thinking first<|END_THINKING|><|START_TEXT|>answer<|END_TEXT|>",
    "cmd3_default_answer": "answer only  ",
    "thinking_block": "<|START_THINKING|>\n  r  \n<|END_THINKING|>\n<|START_RESPONSE|> c <|END_RESPONSE|>",
    "action_without_tools": '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {}}]<|END_ACTION|>',
}


@pytest.mark.parametrize("name", ["cohere_command3", "cohere_command4"])
def test_reasoning_alone_matches_vllm(vllm_ref, name: str) -> None:
    run = family_run(vllm_ref, reasoning=name, extra=CASES, max_cuts=8)
    assert assert_batches_match(run) > 10
    for case in run.names:
        assert assert_stream_invariant(run, case, n_random=2) < 1024


@pytest.mark.parametrize("name", ["cohere_command3", "cohere_command4"])
def test_is_reasoning_end(name: str) -> None:
    bundle = family_tokenizer("reasoning", name)
    tok = bundle.tokenizer
    parser = get_reasoning_parser(name)(tok, None, special_tokens=bundle.special_tokens)
    start, end, bot = (tok.token_to_id(t) for t in
                       ("<|START_THINKING|>", "<|END_THINKING|>", "<|CHATBOT_TOKEN|>"))
    assert None not in (start, end, bot)
    assert parser.is_reasoning_end([1, start, 2, end]) is True
    assert parser.is_reasoning_end([1, start, 2]) is False
    assert parser.is_reasoning_end([end, bot, 3]) is False
    assert parser.is_reasoning_end([bot, end]) is False  # the chatbot turn comes first
    assert parser.is_reasoning_end([2, end]) is True
    assert parser.is_reasoning_end([]) is False


@pytest.mark.parametrize("name", ["cohere_command3", "cohere_command4"])
def test_reasoning_tokens_equal_vllm(vllm_ref, name: str) -> None:
    """CohereCommandParser.count_reasoning_tokens: ids inside START/END_THINKING pairs (cmd4
    counts none before an explicit START_THINKING, though the filter starts in reasoning)."""
    bundle = family_tokenizer("reasoning", name)
    texts = ["<|START_THINKING|>a b c<|END_THINKING|><|START_RESPONSE|>d<|END_RESPONSE|>",
             "plain reasoning<|END_THINKING|><|START_TEXT|>x<|END_TEXT|>",
             "<|END_THINKING|>x<|START_THINKING|>a<|START_THINKING|>b<|END_THINKING|>c"]
    eos = bundle.tokenizer.token_to_id("<|END_OF_TURN_TOKEN|>") or 0
    loader = FAMILIES[family_key("reasoning", name)].loader
    cases = [{"tokenizer_dir": str(bundle.directory), "loader": loader,
              "reasoning_parser": name, "tool_parser": None, "kwargs": {},
              "ids": bundle.encode(t), "prompt_ids": [], "skip_special_tokens": False,
              "stop": [], "eos_ids": [eos], "chunks": None} for t in texts]
    theirs = vllm_ref.call("reasoning_tokens", cases=cases)
    parser = get_reasoning_parser(name)(bundle.tokenizer, None, special_tokens=bundle.special_tokens)
    counter = reasoning_token_counter(parser)
    for case, res in zip(cases, theirs, strict=True):
        assert counter.count(case["ids"]) == res["batch"], case
    assert theirs[0]["batch"] > 0 and theirs[1]["batch"] == 0 and theirs[2]["batch"] > 0
