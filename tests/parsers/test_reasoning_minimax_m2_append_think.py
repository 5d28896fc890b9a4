"""minimax_m2_append_think (vLLM's MiniMaxM2AppendThinkReasoningParser): no reasoning, the content
is `<think>` + the output, in batch and in every split; one oracle call."""

from __future__ import annotations

import pytest

from parsers.reasoning.minimax_m2 import MinimaxM2AppendThinkReasoningParser

from .chunking import Collapsed, assert_chunking_invariant
from .family_corpus import corpus_entries
from .family_oracle import vllm_family
from .family_tokenizers import family_tokenizer

NAME = "minimax_m2_append_think"
OWN = {"empty": "", "plain": "hello", "think_end": "a</think>b", "special": "x<|im_end|>y </minimax:tool_call>"}


@pytest.fixture(scope="module")
def bundle():  # noqa: ANN201
    return family_tokenizer("reasoning", NAME)


def _texts() -> list[str]:
    return [e["text"] for e in corpus_entries("reasoning", NAME)] + list(OWN.values())


@pytest.mark.vllm
def test_append_think_matches_vllm(vllm_ref, bundle) -> None:  # noqa: ANN001
    parser = MinimaxM2AppendThinkReasoningParser(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    texts = _texts()
    out = vllm_family(vllm_ref, reasoning=NAME, bundle=bundle, cases=texts)
    assert not out.infra_errors(), out.infra_errors()
    for text, res in zip(texts, out.results, strict=True):
        got = parser.parse(text)
        assert {"reasoning": got.reasoning, "content": got.content} == res["reasoning"], text
    ids = [bundle.token_id("<think>"), 5, bundle.token_id("</think>")]
    assert parser.is_reasoning_end(ids) and not parser.is_reasoning_end(ids[:2]) and not parser.is_reasoning_end([])


@pytest.mark.parametrize("text", _texts())
def test_append_think_stream_equals_batch(bundle, text: str) -> None:  # noqa: ANN001
    parser = MinimaxM2AppendThinkReasoningParser(bundle.tokenizer, {})
    assert_chunking_invariant(
        lambda s, t: parser.feed(s, t), parser.finish, parser.initial_state(), parser.state_type(),
        bundle.pieces(text) if text else [""], Collapsed("", "<think>" + text, ()),
    )
