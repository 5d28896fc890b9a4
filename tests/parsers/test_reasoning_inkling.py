"""inkling reasoning with the inkling tool parser, against vLLM 0.33's composed Inkling
adapters: the corpus, hostile variants and our own cases (some after a prompt that leaves
the output inside a thinking or text block) in one oracle call; the reasoning parser alone
too; every split of every case streams to our batch result."""

from __future__ import annotations

import pytest

from parsers import ReasoningResult
from parsers.registry import get_reasoning_parser
from parsers.tools.inkling import (
    CONTENT_INVOKE_TOOL_JSON as CALL,
)
from parsers.tools.inkling import (
    CONTENT_MODEL_END_SAMPLING as END_SAMPLING,
)
from parsers.tools.inkling import (
    CONTENT_TEXT,
    CONTENT_THINKING,
    END_MESSAGE,
    MESSAGE_MODEL,
)

from .family_compare import AUTO, assert_streams_to_batch, batch_of, chat_parser, vllm_batch
from .family_corpus import corpus_entries, family_markers, hostile_variants
from .family_oracle import vllm_family
from .family_tokenizers import family_tokenizer

pytestmark = pytest.mark.vllm

NAME = "inkling"
BODY = '{"name": "search", "args": {"query": "a"}}'
OWN = {
    "thinking_trailing_ws": CONTENT_THINKING + "plan  \n" + END_MESSAGE + MESSAGE_MODEL + CONTENT_TEXT + "ok",
    "thinking_unclosed": CONTENT_THINKING + "still thinking 🤔",
    "thinking_then_call_no_end": CONTENT_THINKING + "x" + CALL + BODY + END_MESSAGE + "after",
    "think_end_sampling": CONTENT_THINKING + "r" + END_SAMPLING + "tail",
    "markers_in_thinking": CONTENT_THINKING + "a" + MESSAGE_MODEL + CONTENT_TEXT + "b" + END_MESSAGE,
    "header_text_then_end": "name" + END_MESSAGE + "x",
    "header_text_at_end": "dangling header",
    "header_then_think": "fn" + CONTENT_THINKING + "r" + END_MESSAGE,
    "call_then_header_end": CALL + BODY + MESSAGE_MODEL + "h" + END_MESSAGE + "t",
    "two_thinking_blocks": CONTENT_THINKING + "a " + END_MESSAGE + MESSAGE_MODEL + CONTENT_THINKING
    + "b" + END_MESSAGE + MESSAGE_MODEL + CONTENT_TEXT + "答え",
    "call_inside_span_then_think": CALL + BODY + CONTENT_THINKING + "r" + END_MESSAGE + "x",
    "empty": "",
}
PROMPTS = {"thinking": CONTENT_THINKING, "text": CONTENT_TEXT, "header": MESSAGE_MODEL}


@pytest.fixture(scope="module")
def oracle(vllm_ref):
    bundle = family_tokenizer("reasoning", NAME)
    entries = corpus_entries("reasoning", NAME)
    markers = family_markers("reasoning", NAME)
    texts: list[dict] = [{"text": e["text"]} for e in entries]
    for source in (entries[2]["text"], entries[6]["text"]):
        texts += [{"text": t} for t in hostile_variants(source, markers).values()]
    texts += [{"text": t} for t in OWN.values()]
    for prompt in PROMPTS.values():
        texts += [{"text": t, "prompt": "<|im_start|>assistant\n" + MESSAGE_MODEL + prompt}
                  for t in ("more thought" + END_MESSAGE + MESSAGE_MODEL + CONTENT_TEXT + "hi",
                            "text" + END_SAMPLING)]  # fmt: skip
    out = vllm_family(vllm_ref, tool=NAME, reasoning=NAME, bundle=bundle, cases=texts, request=AUTO)
    assert out.infra_errors() == []
    return bundle, out


def test_batch_matches_vllm(oracle) -> None:
    bundle, out = oracle
    bad = []
    alone = get_reasoning_parser(NAME)(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    for case, res in zip(out.cases, out.results, strict=True):
        assert "batch" in res and "reasoning" in res, res
        ours = batch_of(chat_parser(bundle, NAME, NAME), case)
        if ours != vllm_batch(res):
            bad.append((case["text"], case.get("prompt_token_ids"), ours, vllm_batch(res)))
        theirs = ReasoningResult(res["reasoning"]["reasoning"], res["reasoning"]["content"])
        if alone.parse(case["text"]) != theirs:
            bad.append(("alone", case["text"], alone.parse(case["text"]), theirs))
    assert bad == [], "\n".join(map(repr, bad[:8])) + f"\n{len(bad)} cases differ"


def test_every_split_streams_to_the_batch(oracle) -> None:
    bundle, out = oracle
    for case in out.cases:
        assert_streams_to_batch(chat_parser(bundle, NAME, NAME), case)


def test_reasoning_end_from_the_prompt() -> None:
    bundle = family_tokenizer("reasoning", NAME)
    parser = get_reasoning_parser(NAME)(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    ids = {k: bundle.token_id(v) for k, v in PROMPTS.items()}
    assert parser.is_reasoning_end([ids["text"]]) and not parser.is_reasoning_end([ids["thinking"]])
    assert not parser.is_reasoning_end([ids["header"], 5]) and not parser.is_reasoning_end([])
