"""Logprobs conversion (both wire forms, U+FFFD repair across chunks) and completions derender."""

from __future__ import annotations

import pytest

from render_service.errors import BadRequestError

from .helpers import EOS, batch_chat, chat_request, splits_of, stream

TEXT = "emoji 😀👍🏽 中文 café"


def _logprobs(ids, form="int", tops=3):  # noqa: ANN001, ANN202
    def cand(t, lp):  # noqa: ANN001, ANN202
        return {"token_id": t, "logprob": lp} if form == "int" else {
            "token": f"token_id:{t}", "logprob": lp, "bytes": None}  # fmt: skip

    return {"content": [
        {**cand(t, -0.1), "top_logprobs": [cand(t, -0.1)] + [cand(t + k, -1.0 - k) for k in range(1, tops)]}
        for t in ids]}  # fmt: skip


def test_both_logprob_forms_agree_and_repair_fffd(plain, tok):  # noqa: ANN001
    ids = tok.encode(TEXT, add_special_tokens=False)
    req = chat_request(logprobs=True, top_logprobs=2)
    a = batch_chat(plain, ids, logprobs=_logprobs(ids, "int"), chat_request=req)["choices"][0]["logprobs"]
    b = batch_chat(plain, ids, logprobs=_logprobs(ids, "old"), chat_request=req)["choices"][0]["logprobs"]
    assert a == b
    assert "".join(e["token"] for e in a["content"]) == TEXT  # byte pieces repaired
    assert all(len(e["top_logprobs"]) == 2 for e in a["content"])
    assert all(e["bytes"] == list(e["token"].encode()) for e in a["content"])


@pytest.mark.parametrize("kind", ["one", "random"])
def test_stream_logprobs_equal_batch(plain, tok, kind):  # noqa: ANN001
    ids = tok.encode(TEXT, add_special_tokens=False)
    lp = _logprobs(ids)
    req = chat_request(logprobs=True, top_logprobs=1)
    batch = batch_chat(plain, ids, logprobs=lp, chat_request=req)["choices"][0]["logprobs"]["content"]
    chunks = stream(plain.derender_chat, ids, splits_of(len(ids), kind, 5), logprobs=lp,
                    finish=None, first_body={"chat_request": req})  # fmt: skip
    streamed = [e for r in chunks for c in r["chunk"]["choices"] for e in c["logprobs"]["content"]]
    assert streamed == batch


def test_top_logprobs_kept_without_request_logprobs(plain, tok):  # noqa: ANN001
    ids = tok.encode("hi", add_special_tokens=False)
    out = batch_chat(plain, ids, logprobs=_logprobs(ids, tops=4))["choices"][0]["logprobs"]
    assert all(len(e["top_logprobs"]) == 4 for e in out["content"])


def _gen(ids, rid="r", **extra):  # noqa: ANN001, ANN003, ANN202
    return {"request_id": rid, "choices": [{"index": 0, "token_ids": ids, "finish_reason": "stop"}], **extra}


def test_completion_batch_flat_index_usage_and_kv(plain, tok):  # noqa: ANN001
    a = tok.encode("first answer", add_special_tokens=False) + [EOS]
    b = tok.encode("second STOP answer", add_special_tokens=False) + [EOS]
    two = {"request_id": "r2", "choices": [
        {"index": 0, "token_ids": b, "finish_reason": "stop"},
        {"index": 1, "token_ids": a, "finish_reason": "length"}]}  # fmt: skip
    out = plain.derender_completion({
        "generate_responses": [_gen(a, "r1", kv_transfer_params={"x": 1}), {**two, "kv_transfer_params": {"x": 1}}],
        "prompt_tokens": [3, 4],
        "completion_request": {"prompt": "p", "stop": ["STOP"], "return_token_ids": True},
    })  # fmt: skip
    assert [c["index"] for c in out["choices"]] == [0, 1, 2]
    assert [c["text"] for c in out["choices"]] == ["first answer", "second ", "first answer"]
    assert out["choices"][1]["stop_reason"] == "STOP"
    assert out["usage"] == {"prompt_tokens": 7, "total_tokens": 7 + 2 * len(a) + len(b),
                            "completion_tokens": 2 * len(a) + len(b),
                            "prompt_tokens_details": None, "completion_tokens_details": None}  # fmt: skip
    assert out["id"] == "r1" and out["kv_transfer_params"] == {"x": 1}
    assert out["choices"][0]["token_ids"] == a
    differ = plain.derender_completion({"generate_responses": [
        _gen(a, kv_transfer_params={"x": 1}), _gen(a, kv_transfer_params={"x": 2})]})  # fmt: skip
    assert differ["kv_transfer_params"] is None and differ["metrics"] is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"generate_responses": []}, "must not be empty"),
        ({"generate_responses": [_gen([1])], "prompt_tokens": [1, 2]}, "prompt_tokens length"),
        ({"generate_responses": [_gen([1])], "prompt_token_ids": [[1], [2]]}, "prompt_token_ids length"),
        ({"generate_responses": [_gen([])]}, "choice 0 in response r has empty"),
        ({"generate_responses": [_gen([1])], "completion_request": {"prompt": 1.5}}, "validation"),
    ],
)
def test_completion_bad_inputs(plain, body, message):  # noqa: ANN001
    with pytest.raises(BadRequestError, match=message):
        plain.derender_completion(body)


@pytest.mark.parametrize("kind", ["one", "whole", "random"])
@pytest.mark.parametrize("stop", [None, ["STOP"], ["😀"]])
def test_completion_stream_equals_batch(plain, tok, kind, stop):  # noqa: ANN001
    ids = tok.encode("text with STOP and 😀 emoji 中文", add_special_tokens=False) + [EOS]
    lp = _logprobs(ids, tops=2)
    req = {"prompt": "p", "logprobs": 1, **({"stop": stop} if stop else {})}
    gen = _gen(ids)
    gen["choices"][0]["logprobs"] = lp
    batch = plain.derender_completion({"generate_responses": [gen], "completion_request": req})["choices"][0]
    chunks = stream(plain.derender_completion, ids, splits_of(len(ids), kind, 9), logprobs=lp,
                    first_body={"completion_request": req})  # fmt: skip
    choices = [c for r in chunks for c in r["chunk"]["choices"]]
    assert "".join(c["text"] for c in choices) == batch["text"]
    assert choices[-1]["finish_reason"] == batch["finish_reason"]
    assert choices[-1]["stop_reason"] == batch["stop_reason"]
    if stop is None:  # logprobs are cut only by the stop token, like batch
        offsets = [o for c in choices for o in c["logprobs"]["text_offset"]]
        assert offsets == batch["logprobs"]["text_offset"]
        assert [t for c in choices for t in c["logprobs"]["tokens"]] == batch["logprobs"]["tokens"]
