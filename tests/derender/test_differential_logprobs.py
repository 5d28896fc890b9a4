"""Logprobs vs the vLLM 0.33 reference derender: batch and streamed, chat and completions.

Covered: the integer `GenerateLogProbs` form and the older `"token_id:N"` form (vLLM 0.33
accepts only the integer form, so ours on the older form is compared to vLLM on the same
ids in the integer form, and vLLM's 400 on the older form is asserted), top_logprobs cuts,
U+FFFD repair of byte pieces split across chunks (one token per chunk puts every piece of a
multi-token character in its own chunk), in-range ids outside the vocabulary ("" / null
bytes), and logprobs hidden by `include_reasoning: false`. Streams are compared chunk by chunk
(`skeleton`, which keeps each chunk's logprobs) and folded against the batch result.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import PARSER_FLAGS
from .helpers import EOS, chat_request, splits_of
from .ref_compare import (
    chat_batch_views,
    chunk_bodies,
    completion_batch_views,
    fold_chat,
    fold_completion,
    int_logprobs,
    normalise,
    old_form,
    ref_call,
    ref_status,
    run_stream,
    skeleton,
)
from .test_parser_stream import PROMPT

pytestmark = pytest.mark.vllm
CHAT = "/v1/chat/completions/derender"
COMPLETION = "/v1/completions/derender"
# Byte-fallback pieces: 🫠 is 3 tokens, 𝔘 / 龘 2, 👨‍👩‍👧 7, each piece alone decodes to "\ufffd".
TEXT = "<think>\nmelt 🫠 𝔘\n</think>\n\nfamily 👨‍👩‍👧 龘 中文 café"
UNKNOWN_IDS = [151936, 2**32 - 1]  # in the tokenizer's id range, not in the vocabulary


@pytest.fixture(scope="module")
def ours(make_derenderer):  # noqa: ANN001, ANN201
    return make_derenderer(**PARSER_FLAGS)


def _with_unknown(logprobs: dict[str, Any]) -> dict[str, Any]:
    """Append candidates with in-range ids the vocabulary lacks to every position."""
    extra = [{"token_id": t, "logprob": -20.0, "rank": 20} for t in UNKNOWN_IDS]
    return {"content": [{**e, "top_logprobs": e["top_logprobs"] + extra} for e in logprobs["content"]]}


CHAT_REQUESTS = {
    "top-2": chat_request(logprobs=True, top_logprobs=2),
    "top-0": chat_request(logprobs=True, top_logprobs=0),
    "top-all": chat_request(logprobs=True, top_logprobs=-1),
    "not-requested-keeps-all": chat_request(),
    "hidden-without-reasoning": chat_request(logprobs=True, top_logprobs=1, include_reasoning=False),
}
# vLLM's parsed chat stream replays the whole output per chunk (O(n^2)); the cut does not
# interact with chunking, so these are streamed on both sides, the rest compared in batch.
CHAT_STREAMED = {"top-2", "not-requested-keeps-all", "hidden-without-reasoning"}


@pytest.mark.parametrize("name", sorted(CHAT_REQUESTS))
def test_chat_logprobs_batch_and_stream(ref_parsed, ours, tok, name):  # noqa: ANN001
    request = CHAT_REQUESTS[name]
    ids = tok.encode(TEXT, add_special_tokens=False) + [EOS]
    prompt = tok.encode(PROMPT, add_special_tokens=False)
    lp = _with_unknown(int_logprobs(ids, tops=3))
    every = {"chat_request": request, "prompt_token_ids": prompt}

    def batch(logprobs):  # noqa: ANN001, ANN202
        return {**every, "generate_response": {"request_id": "generate-tokens-lp", "choices": [
            {"index": 0, "token_ids": ids, "finish_reason": "stop", "logprobs": logprobs}]}}  # fmt: skip

    ref_batch = ref_call(ref_parsed, CHAT)(batch(lp))
    assert normalise(ours.derender_chat(batch(lp))) == normalise(ref_batch)
    assert normalise(ours.derender_chat(batch(old_form(lp)))) == normalise(ref_batch)
    status, error = ref_status(ref_parsed, CHAT, batch(old_form(lp)))
    assert status == 400 and "token_id" in error["error"]["message"]  # vLLM 0.33: integer form only
    expected = chat_batch_views(ref_batch)[0]
    _check_chat_logprobs_shape(expected["logprobs"], name)

    if name not in CHAT_STREAMED:
        return
    chunks = chunk_bodies({0: ids}, lambda i, n: splits_of(n, "one"), logprobs={0: lp})
    ref_chunks = run_stream(ref_call(ref_parsed, CHAT), chunks, {}, every)
    for form in (lp, old_form(lp)):
        chunks = chunk_bodies({0: ids}, lambda i, n: splits_of(n, "one"), logprobs={0: form})
        our_chunks = run_stream(ours.derender_chat, chunks, every, {})
        assert [skeleton(r["chunk"]) for r in our_chunks] == [skeleton(r["chunk"]) for r in ref_chunks]
        folded = fold_chat(our_chunks)[0]
        assert (folded["content"], folded["reasoning"], folded["logprobs"]) == (
            expected["content"], expected["reasoning"], expected["logprobs"])


def _check_chat_logprobs_shape(entries: list | None, name: str) -> None:
    """What the reference result looks like, so the comparison cannot pass vacuously."""
    if name == "hidden-without-reasoning":
        assert entries is None
        return
    tokens = "".join(e["token"] for e in entries)
    assert "🫠" in tokens and "👨‍👩‍👧" in tokens and "\ufffd" not in tokens  # repaired
    want = {"top-2": 2, "top-0": 0, "top-all": 5, "not-requested-keeps-all": 5}[name]
    assert {len(e["top_logprobs"]) for e in entries} == {want}
    if want == 5:
        assert entries[0]["top_logprobs"][-1] == {"token": "", "logprob": -20.0, "bytes": None}


COMPLETION_REQUESTS = {
    "logprobs-0": {"prompt": "p", "logprobs": 0},
    "logprobs-2": {"prompt": "p", "logprobs": 2},
    "no-logprobs-keeps-all": {"prompt": "p"},
    "skip-special-false": {"prompt": "p", "logprobs": 1, "skip_special_tokens": False},
}


@pytest.mark.parametrize("name", sorted(COMPLETION_REQUESTS))
def test_completion_logprobs_batch_and_stream(ref_parsed, ours, tok, name):  # noqa: ANN001
    request = COMPLETION_REQUESTS[name]
    ids = tok.encode(TEXT, add_special_tokens=False) + [EOS]
    lp = _with_unknown(int_logprobs(ids, tops=2))

    def batch(logprobs):  # noqa: ANN001, ANN202
        return {"completion_request": request, "prompt_tokens": [3], "generate_responses": [
            {"request_id": "cmpl-lp", "choices": [
                {"index": 0, "token_ids": ids, "finish_reason": "stop", "logprobs": logprobs}]}]}  # fmt: skip

    ref_batch = ref_call(ref_parsed, COMPLETION)(batch(lp))
    assert normalise(ours.derender_completion(batch(lp))) == normalise(ref_batch)
    assert normalise(ours.derender_completion(batch(old_form(lp)))) == normalise(ref_batch)
    expected = completion_batch_views(ref_batch)[0]
    assert "".join(e[2] for e in expected["logprobs"]).startswith("<think>\nmelt 🫠 𝔘")

    every = {"completion_request": request}
    chunks = chunk_bodies({0: ids}, lambda i, n: splits_of(n, "one"), logprobs={0: lp})
    ref_chunks = run_stream(ref_call(ref_parsed, COMPLETION), chunks, {}, every)
    for form in (lp, old_form(lp)):
        chunks = chunk_bodies({0: ids}, lambda i, n: splits_of(n, "one"), logprobs={0: form})
        our_chunks = run_stream(ours.derender_completion, chunks, every, {})
        assert [normalise(r["chunk"]) for r in our_chunks] == [normalise(r["chunk"]) for r in ref_chunks]
        assert fold_completion(our_chunks)[0] == expected
