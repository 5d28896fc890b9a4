"""Chat derender vs the vLLM 0.33 reference: request options and several choices.

Covered: n = 2 (batch; streamed with one state per index, chunks interleaved), stop strings
(vLLM cuts them in batch and refuses them when streaming; our stream must give vLLM's batch
result), `include_stop_str_in_output`, `min_tokens`, `ignore_eos`, `stop_token_ids` and
`return_token_ids` (incl. hidden by `include_reasoning: false`).

Per case: our batch equals vLLM's; our stream (two splits) folds to vLLM's batch view; where
vLLM streams the case, its stream folds to the same view and every chunk has the same
skeleton (all but the text, see `ref_compare.skeleton`).
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import PARSER_FLAGS
from .helpers import EOS, chat_request, splits_of
from .ref_compare import (
    chat_batch_views,
    chunk_bodies,
    cut_after,
    fold_chat,
    int_logprobs,
    normalise,
    ref_call,
    ref_status,
    run_stream,
    skeleton,
    stream_view_of_batch,
)
from .test_parser_stream import CALL_T, CALL_W, PROMPT, TOOLS

pytestmark = pytest.mark.vllm
CHAT = "/v1/chat/completions/derender"
SECONDARY_EOS = 151643  # <|endoftext|>, an EOS id only through generation_config
PERIOD = 13  # "."
VLLM_STREAM_STOP_ERROR = "stop strings are not supported by streaming derender"


@pytest.fixture(scope="module")
def ours(make_derenderer):  # noqa: ANN001, ANN201
    return make_derenderer(**PARSER_FLAGS)


def _choice(parts: list, finish: str = "stop", stop_reason: Any = None) -> dict[str, Any]:
    """An engine choice from text segments and raw ids (ids are encoded when the test runs)."""
    return {"parts": parts, "finish_reason": finish, "stop_reason": stop_reason}


REASONED = "<think>\nPlan: 中文 😀.\n</think>\n\n"
# name -> (chat_request, engine choices by index)
CASES: dict[str, tuple[dict[str, Any], dict[int, dict[str, Any]]]] = {
    "n2-tools-and-content": (chat_request(tools=TOOLS, logprobs=True, top_logprobs=1), {
        0: _choice([REASONED + "The answer is 42.", EOS]),
        1: _choice([f"<think>\nNeed.\n</think>\n\nCalling.\n{CALL_W}\n{CALL_T}", EOS])}),
    "n2-length-and-return-token-ids": (chat_request(return_token_ids=True), {
        0: _choice([REASONED + "first"], finish="length"),
        1: _choice([REASONED + "second 👍🏽", EOS])}),
    "stop-string-in-content": (chat_request(stop=["STOP"], logprobs=True), {
        0: _choice([REASONED + "first part STOP second part", EOS])}),
    "stop-string-reported-by-engine": (chat_request(stop=["STOP"]), {
        0: _choice([REASONED + "first part STOP"], stop_reason="STOP")}),
    "stop-string-in-reasoning": (chat_request(stop=["wait"]), {
        0: _choice(["<think>\nhmm, wait. no\n</think>\n\nanswer", EOS])}),
    "stop-earliest-end-wins": (chat_request(stop=["STOP here", "STOP", "ere"]), {
        0: _choice([REASONED + "go STOP here now", EOS])}),
    "stop-single-string-with-cjk": (chat_request(stop="答案"), {
        0: _choice([REASONED + "问题的答案是 42", EOS])}),
    "stop-include-in-output": (chat_request(stop=["STOP"], include_stop_str_in_output=True), {
        0: _choice([REASONED + "first part STOP second part", EOS])}),
    "stop-after-min-tokens": (chat_request(stop=["ab"], min_tokens=12), {
        0: _choice([REASONED + "ab then ab again", EOS])}),
    "stop-n2-one-matches": (chat_request(stop=["STOP"], logprobs=True, top_logprobs=2), {
        0: _choice([REASONED + "no stop here", EOS]),
        1: _choice([REASONED + "cut STOP here", EOS])}),
    "include-stop-str-keeps-eos": (chat_request(include_stop_str_in_output=True), {
        0: _choice([REASONED + "done", EOS])}),
    "min-tokens-without-stop": (chat_request(min_tokens=30), {
        0: _choice([REASONED + "short", EOS])}),
    "ignore-eos-mid-output": (chat_request(ignore_eos=True), {
        0: _choice([REASONED + "A", EOS, " more", SECONDARY_EOS, " end"], finish="length")}),
    "ignore-eos-final": (chat_request(ignore_eos=True), {
        0: _choice([REASONED + "A", EOS])}),
    "secondary-eos-dropped": (chat_request(), {
        0: _choice([REASONED + "A", SECONDARY_EOS])}),
    "stop-token-id-reported": (chat_request(stop_token_ids=[PERIOD]), {
        0: _choice([REASONED + "An answer."], stop_reason=PERIOD)}),
    "stop-token-id-inferred": (chat_request(stop_token_ids=[PERIOD]), {
        0: _choice([REASONED + "An answer."])}),
    "return-token-ids-with-tools": (chat_request(return_token_ids=True, tools=TOOLS), {
        0: _choice([f"<think>\nok\n</think>\n\nSure.\n{CALL_T}", EOS])}),
    "return-token-ids-hidden-without-reasoning": (
        chat_request(return_token_ids=True, include_reasoning=False), {
        0: _choice([REASONED + "visible", EOS])}),
}  # fmt: skip


# Cases where vLLM 0.33's own stream disagrees with its batch result (we follow the batch):
# an EOS token that stays in the output (ignore_eos, include_stop_str_in_output) is decoded
# with special tokens kept for the parser; vLLM's batch parse drops its "<|im_end|>" text (and
# "<|endoftext|>"), its streaming parser sends it as content whenever it arrives in a later
# chunk than the text before it. Asserted as an exact set.
VLLM_STREAM_KEEPS_SPECIAL_TEXT = {"ignore-eos-final", "ignore-eos-mid-output", "include-stop-str-keeps-eos"}
_SPECIAL_TEXTS = ("<|im_end|>", "<|endoftext|>")


def _without_special_text(view: dict[str, Any]) -> dict[str, Any]:
    content = view["content"]
    for text in _SPECIAL_TEXTS:
        content = content.replace(text, "") if content else content
    return {**view, "content": content}


def _ids(tok, parts: list) -> list[int]:  # noqa: ANN001
    out: list[int] = []
    for part in parts:
        out.extend(tok.encode(part, add_special_tokens=False) if isinstance(part, str) else [part])
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_chat_options_match_reference(ref_parsed, ours, tok, name):  # noqa: ANN001
    request, spec = CASES[name]
    prompt = tok.encode(PROMPT, add_special_tokens=False)
    outputs = {index: _ids(tok, c["parts"]) for index, c in spec.items()}
    finish = {index: c["finish_reason"] for index, c in spec.items()}
    stop_reason = {index: c["stop_reason"] for index, c in spec.items()}
    logprobs = {i: int_logprobs(ids) for i, ids in outputs.items()} if "logprobs" in request else None
    choices = [{"index": i, "token_ids": outputs[i], "finish_reason": finish[i], "stop_reason": stop_reason[i],
                **({"logprobs": logprobs[i]} if logprobs else {})} for i in spec]  # fmt: skip
    body = {"chat_request": request, "prompt_token_ids": prompt,
            "generate_response": {"request_id": "generate-tokens-ref", "prompt_token_ids": prompt, "choices": choices}}  # fmt: skip
    ref_batch, our_batch = ref_call(ref_parsed, CHAT)(body), ours.derender_chat(body)
    assert normalise(our_batch) == normalise(ref_batch)
    expected = {i: stream_view_of_batch(v, request) for i, v in chat_batch_views(ref_batch).items()}

    every = {"chat_request": request, "prompt_token_ids": prompt}
    for kind in ("one", "random"):
        chunks = chunk_bodies(outputs, lambda i, n, kind=kind: splits_of(n, kind, seed=i), finish=finish,
                              stop_reason=stop_reason, logprobs=logprobs, prompt_token_ids=prompt)  # fmt: skip
        sent: dict[int, int] = {}
        our_chunks = run_stream(ours.derender_chat, chunks, every, {}, sent)
        want = expected
        if request.get("stop"):  # see ref_compare.cut_after
            want = {i: cut_after(v, sent[i]) for i, v in expected.items()}
        folded = fold_chat(our_chunks)
        assert {i: v.pop("roles") for i, v in folded.items()} == {i: 1 for i in spec}
        assert folded == want, kind
    # vLLM's stream (replayed per chunk, O(n^2)) on the last split only.
    if request.get("stop"):
        _check_refused_by_vllm(ref_parsed, chunks[0], every)
        return
    ref_chunks = run_stream(ref_call(ref_parsed, CHAT), chunks, {}, every)
    assert [skeleton(r["chunk"]) for r in our_chunks] == [skeleton(r["chunk"]) for r in ref_chunks]
    ref_folded = fold_chat(ref_chunks)
    assert {i: v.pop("roles") for i, v in ref_folded.items()} == {i: 1 for i in spec}
    if name in VLLM_STREAM_KEEPS_SPECIAL_TEXT:
        assert ref_folded != expected
        ref_folded = {i: _without_special_text(v) for i, v in ref_folded.items()}
    assert ref_folded == expected


def _check_refused_by_vllm(ref_parsed, chunk: dict, every: dict) -> None:  # noqa: ANN001
    """vLLM 0.33 refuses stop strings when streaming; that is why ours is compared to its batch."""
    status, error = ref_status(ref_parsed, CHAT, {"stream": True, "generate_chunk": chunk, **every})
    assert status == 400 and VLLM_STREAM_STOP_ERROR in error["error"]["message"], error


def test_stop_string_ends_our_stream_early(ours, tok):  # noqa: ANN001
    """Ours cuts at the match and asks the caller to abort the engine request; nothing of the
    text after the stop string is ever sent (checked against vLLM's batch in the test above)."""
    ids = _ids(tok, [REASONED + "first part STOP second part and more", EOS])
    request = chat_request(stop=["STOP"])
    chunks = chunk_bodies({0: ids}, lambda i, n: splits_of(n, "one"))
    responses = run_stream(ours.derender_chat, chunks, {"chat_request": request,
                                                        "prompt_token_ids": [1]}, {})  # fmt: skip
    assert responses[-1].get("abort_engine_request") is True
    assert len(responses) < len(chunks)
    last = responses[-1]["chunk"]["choices"][0]
    assert (last["finish_reason"], last["stop_reason"]) == ("stop", "STOP")
