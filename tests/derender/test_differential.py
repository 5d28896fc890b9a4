"""Ours vs the vLLM 0.33 reference derender (`vllm launch render`) on the same inputs.

Both servers get identical bodies (the same engine outputs and chunk sequences); the reference
gets `chat_request` and `prompt_token_ids` on every chunk as vLLM requires, ours only on the
first. Compared: batch messages, concatenated stream deltas, finish and stop reasons, and
logprobs. Tool-call ids are compared by shape (vLLM's are random).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from .conftest import PARSER_FLAGS
from .helpers import (
    EOS,
    REQUEST_ID,
    batch_view,
    chat_request,
    concat_chat,
    same_message,
    splits_of,
    stream,
)
from .test_parser_stream import CALL_T, CALL_W, PROMPT, TOOLS

from ..render.ref_server import PARSER_FLAGS as REF_FLAGS  # noqa: E402
from ..render.ref_server import RefRenderServer, build_render_model_dir  # noqa: E402

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[2]
_TOOL_ID = re.compile(r"^chatcmpl-tool-[0-9a-f]+$")


@pytest.fixture(scope="module")
def ref_parsed():  # noqa: ANN201
    model_dir = build_render_model_dir(REPO / ".cache" / "derender-ref-model")
    log_dir = REPO / ".cache" / "derender-ref-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with RefRenderServer(model_dir, REF_FLAGS, log_dir) as server:
        yield server


@pytest.fixture(scope="module")
def ours(make_derenderer):  # noqa: ANN001, ANN201
    return make_derenderer(**PARSER_FLAGS)


def _ref_call(server, path):  # noqa: ANN001, ANN202
    def call(body):  # noqa: ANN001, ANN202
        response = server.post(path, body)
        assert response.status_code == 200, response.text
        return response.json()

    return call


def _shape_ids(view):  # noqa: ANN001, ANN202
    for call in view["tool_calls"]:
        assert _TOOL_ID.match(call["id"] or ""), call
        call["id"] = "<id>"
    return view


OUTPUTS = [
    "<think>\nPlan: answer 中文 😀.\n</think>\n\nThe answer is 42.",
    f"<think>\nNeed tools.\n</think>\n\nCalling.\n{CALL_W}\n{CALL_T}",
    f"<think>\n\n</think>\n\n{CALL_W}",
    "<think>\nstill thinking about 日本語",
    "Plain answer with emoji 👨‍👩‍👧 and accents café.",
    '<think>\n\n</think>\n\n{"city": "Paris"}',
    '<think>\nx\n</think>\n\n[{"name": "get_time", "parameters": {"tz": "CET"}}]',
]
REQUESTS = [
    chat_request(tools=TOOLS),
    chat_request(),
    chat_request(tools=TOOLS, parallel_tool_calls=False),
    chat_request(tools=TOOLS, include_reasoning=False),
    chat_request(tools=TOOLS, chat_template_kwargs={"enable_thinking": False}),
    chat_request(tools=TOOLS, tool_choice="required"),
    chat_request(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}}),
]


@pytest.mark.parametrize("output", range(len(OUTPUTS)))
@pytest.mark.parametrize("req", range(len(REQUESTS)))
def test_batch_and_stream_match_reference(ref_parsed, ours, tok, output, req):  # noqa: ANN001
    ids = tok.encode(OUTPUTS[output], add_special_tokens=False) + [EOS]
    prompt = tok.encode(PROMPT, add_special_tokens=False)
    body = {"chat_request": REQUESTS[req], "prompt_token_ids": prompt,
            "generate_response": {"request_id": REQUEST_ID, "prompt_token_ids": prompt,
                                  "choices": [{"index": 0, "token_ids": ids, "finish_reason": "stop"}]}}  # fmt: skip
    ref = _ref_call(ref_parsed, "/v1/chat/completions/derender")(body)
    mine = ours.derender_chat(body)
    assert _shape_ids(batch_view(mine)) == _shape_ids(batch_view(ref))
    assert list(mine) == list(ref) and list(mine["choices"][0]) == list(ref["choices"][0])
    every = {"chat_request": REQUESTS[req], "prompt_token_ids": prompt}
    for kind in ("one", "random"):
        sizes = splits_of(len(ids), kind, seed=output)
        ref_chunks = stream(_ref_call(ref_parsed, "/v1/chat/completions/derender"), ids, sizes,
                            every_body=every)  # fmt: skip
        our_chunks = stream(ours.derender_chat, ids, sizes, first_body=every)
        ref_stream, our_stream = _shape_ids(concat_chat(ref_chunks)), _shape_ids(concat_chat(our_chunks))
        ref_batch = _shape_ids(batch_view(ref))
        # Our stream always equals vLLM's batch result; so it equals vLLM's stream wherever
        # vLLM's own stream agrees with its batch.
        assert same_message(our_stream, ref_batch), (our_stream, ref_batch)
        if same_message(ref_stream, ref_batch):
            assert same_message(our_stream, ref_stream)


def test_logprobs_match_reference(ref_parsed, ours, tok):  # noqa: ANN001
    ids = tok.encode("emoji 😀👍🏽 中文 café", add_special_tokens=False) + [EOS]
    lp = {"content": [{"token_id": t, "logprob": -0.25, "top_logprobs": [
        {"token_id": t, "logprob": -0.25}, {"token_id": t + 1, "logprob": -2.0}]} for t in ids]}  # fmt: skip
    req = chat_request(logprobs=True, top_logprobs=1)
    body = {"chat_request": req, "generate_response": {"request_id": "r", "choices": [
        {"index": 0, "token_ids": ids, "finish_reason": "stop", "logprobs": lp}]}}  # fmt: skip
    ref = _ref_call(ref_parsed, "/v1/chat/completions/derender")(body)
    assert ours.derender_chat(body)["choices"][0]["logprobs"] == ref["choices"][0]["logprobs"]


def test_completions_match_reference(ref_parsed, ours, tok):  # noqa: ANN001
    ids = tok.encode("some text STOP more 😀", add_special_tokens=False) + [EOS]
    lp = {"content": [{"token_id": t, "logprob": -0.5, "top_logprobs": [{"token_id": t, "logprob": -0.5}]}
                      for t in ids]}  # fmt: skip
    body = {"completion_request": {"prompt": "p", "stop": ["STOP"], "logprobs": 0},
            "prompt_tokens": [2],
            "generate_responses": [{"request_id": "r", "choices": [
                {"index": 0, "token_ids": ids, "finish_reason": "stop", "logprobs": lp}]}]}  # fmt: skip
    ref = _ref_call(ref_parsed, "/v1/completions/derender")(body)
    mine = ours.derender_completion(body)
    for key in ("created",):
        ref.pop(key), mine.pop(key)
    assert mine == ref
