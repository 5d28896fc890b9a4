"""Completions derender vs the vLLM 0.33 reference, batch and streamed.

Completions run no parser, so where vLLM streams a case its chunks must equal ours exactly
(text included). Stop strings: vLLM cuts them in batch and refuses them when streaming; our
stream must then fold to vLLM's batch result (and end the stream with an abort request).
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import PARSER_FLAGS
from .helpers import EOS, splits_of
from .ref_compare import (
    chunk_bodies,
    completion_batch_views,
    cut_after,
    fold_completion,
    int_logprobs,
    normalise,
    ref_call,
    ref_status,
    run_stream,
)

pytestmark = pytest.mark.vllm
COMPLETION = "/v1/completions/derender"
SECONDARY_EOS = 151643
PERIOD = 13
VLLM_STREAM_STOP_ERROR = "stop strings are not supported by streaming derender"
PROMPT_IDS = [785, 4226, 374]


@pytest.fixture(scope="module")
def ours(make_derenderer):  # noqa: ANN001, ANN201
    return make_derenderer(**PARSER_FLAGS)


def _choice(parts: list, finish: str = "stop", stop_reason: Any = None) -> dict[str, Any]:
    return {"parts": parts, "finish_reason": finish, "stop_reason": stop_reason}


TEXT = " forty-two, 中文 😀 🫠 and café"
# name -> (completion_request, engine choices by index)
CASES: dict[str, tuple[dict[str, Any], dict[int, dict[str, Any]]]] = {
    "plain-eos-dropped": ({"prompt": "p"}, {0: _choice([TEXT, EOS])}),
    "length": ({"prompt": "p"}, {0: _choice([TEXT], finish="length")}),
    "n2-interleaved": ({"prompt": "p", "n": 2, "logprobs": 1}, {
        0: _choice([TEXT, EOS]), 1: _choice([" other 👍🏽 answer"], finish="length")}),
    "return-token-ids": ({"prompt": "p", "return_token_ids": True}, {0: _choice([TEXT, EOS])}),
    "stop-token-id-reported": ({"prompt": "p", "stop_token_ids": [PERIOD]}, {
        0: _choice([" An answer."], stop_reason=PERIOD)}),
    "stop-token-id-inferred": ({"prompt": "p", "stop_token_ids": [PERIOD]}, {0: _choice([" An answer."])}),
    "secondary-eos": ({"prompt": "p"}, {0: _choice([TEXT, SECONDARY_EOS])}),
    "ignore-eos": ({"prompt": "p", "ignore_eos": True}, {
        0: _choice([" A", EOS, " more", EOS])}),
    "ignore-eos-special-kept": ({"prompt": "p", "ignore_eos": True, "skip_special_tokens": False}, {
        0: _choice([" A", EOS, " more", EOS])}),
    "include-stop-str-keeps-eos": ({"prompt": "p", "include_stop_str_in_output": True,
                                    "skip_special_tokens": False}, {0: _choice([TEXT, EOS])}),
    "min-tokens-no-stop": ({"prompt": "p", "min_tokens": 50}, {0: _choice([TEXT, EOS])}),
    "stop-string": ({"prompt": "p", "stop": ["中文"], "logprobs": 0}, {0: _choice([TEXT, EOS])}),
    "stop-string-reported": ({"prompt": "p", "stop": ["STOP"]}, {
        0: _choice([" text STOP"], stop_reason="STOP")}),
    "stop-include-in-output": ({"prompt": "p", "stop": ["😀"], "include_stop_str_in_output": True}, {
        0: _choice([TEXT, EOS])}),
    "stop-after-min-tokens": ({"prompt": "p", "stop": ["ab"], "min_tokens": 3}, {
        0: _choice([" ab ab then ab", EOS])}),
    "stop-n2-one-matches": ({"prompt": "p", "n": 2, "stop": "STOP", "logprobs": 1}, {
        0: _choice([" no match here", EOS]), 1: _choice([" cut STOP here", EOS])}),
}  # fmt: skip


def _ids(tok, parts: list) -> list[int]:  # noqa: ANN001
    out: list[int] = []
    for part in parts:
        out.extend(tok.encode(part, add_special_tokens=False) if isinstance(part, str) else [part])
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_completion_matches_reference(ref_parsed, ours, tok, name):  # noqa: ANN001
    request, spec = CASES[name]
    outputs = {index: _ids(tok, c["parts"]) for index, c in spec.items()}
    finish = {index: c["finish_reason"] for index, c in spec.items()}
    stop_reason = {index: c["stop_reason"] for index, c in spec.items()}
    logprobs = {i: int_logprobs(ids) for i, ids in outputs.items()} if "logprobs" in request else None
    choices = [{"index": i, "token_ids": outputs[i], "finish_reason": finish[i], "stop_reason": stop_reason[i],
                **({"logprobs": logprobs[i]} if logprobs else {})} for i in spec]  # fmt: skip
    body = {"completion_request": request, "prompt_tokens": [len(PROMPT_IDS)], "prompt_token_ids": [PROMPT_IDS],
            "generate_responses": [{"request_id": "cmpl-ref", "prompt_token_ids": PROMPT_IDS, "choices": choices}]}  # fmt: skip
    ref_batch, our_batch = ref_call(ref_parsed, COMPLETION)(body), ours.derender_completion(body)
    assert normalise(our_batch) == normalise(ref_batch)
    assert list(our_batch) == list(ref_batch)
    expected = completion_batch_views(ref_batch)

    first = {"completion_request": request, "prompt_token_ids": PROMPT_IDS, "prompt_tokens": len(PROMPT_IDS)}
    for kind in ("one", "random"):
        chunks = chunk_bodies(outputs, lambda i, n, kind=kind: splits_of(n, kind, seed=i), finish=finish,
                              stop_reason=stop_reason, logprobs=logprobs, prompt_token_ids=PROMPT_IDS)  # fmt: skip
        sent: dict[int, int] = {}
        our_chunks = run_stream(ours.derender_completion, chunks, first, {}, sent)
        want = expected
        if request.get("stop"):  # see ref_compare.cut_after
            want = {i: cut_after(v, sent[i]) for i, v in expected.items()}
        assert fold_completion(our_chunks) == want, kind
        if request.get("stop"):
            status, error = ref_status(ref_parsed, COMPLETION, {"stream": True, "generate_chunk": chunks[0], **first})
            assert status == 400 and VLLM_STREAM_STOP_ERROR in error["error"]["message"], error
            continue
        ref_chunks = run_stream(ref_call(ref_parsed, COMPLETION), chunks, {}, first)  # vLLM: on every chunk
        assert [normalise(r["chunk"]) for r in our_chunks] == [normalise(r["chunk"]) for r in ref_chunks]


def test_multi_prompt_batch_matches_reference(ref_parsed, ours, tok):  # noqa: ANN001
    """Several prompts (one engine response each): flat indexes, summed usage, kv params."""
    a, b = _ids(tok, [TEXT, EOS]), _ids(tok, [" second STOP prompt", EOS])
    body = {"completion_request": {"prompt": ["p", "q"], "stop": ["STOP"], "return_token_ids": True},
            "prompt_tokens": [3, 4], "prompt_token_ids": [PROMPT_IDS, None],
            "generate_responses": [
                {"request_id": "r1", "prompt_token_ids": PROMPT_IDS, "kv_transfer_params": {"x": 1},
                 "choices": [{"index": 0, "token_ids": a, "finish_reason": "stop"}]},
                {"request_id": "r2", "prompt_token_ids": [9, 9], "kv_transfer_params": {"x": 1},
                 "choices": [{"index": 0, "token_ids": b, "finish_reason": "stop"},
                             {"index": 1, "token_ids": a, "finish_reason": "length"}]}]}  # fmt: skip
    ref_batch = ref_call(ref_parsed, COMPLETION)(body)
    assert normalise(ours.derender_completion(body)) == normalise(ref_batch)
    assert [c["index"] for c in ref_batch["choices"]] == [0, 1, 2]
