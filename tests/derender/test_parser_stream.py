"""Chat derender with the qwen3 + hermes parsers: batch results and streaming parity."""

from __future__ import annotations

import pytest

from .conftest import PARSER_FLAGS
from .helpers import (
    EOS,
    batch_chat,
    batch_view,
    chat_request,
    concat_chat,
    same_message,
    splits_of,
    stream,
)

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time",
     "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}},
]  # fmt: skip
CALL_W = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "巴黎 😀"}}\n</tool_call>'
CALL_T = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>'
OUTPUTS = {
    "reasoning+content": "<think>\nPlan: answer 中文 😀.\n</think>\n\nThe answer is 42.",
    "reasoning+tools": f"<think>\nNeed tools.\n</think>\n\nCalling.\n{CALL_W}\n{CALL_T}",
    "tools-only": f"<think>\n\n</think>\n\n{CALL_W}",
    "unterminated-think": "<think>\nstill thinking about 日本語",
    "bad-tool-json": '<think>\nx\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {bad}\n</tool_call>',
}
PROMPT = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def parsed(make_derenderer):  # noqa: ANN001, ANN201
    return make_derenderer(**PARSER_FLAGS)


def _ids(tok, text):  # noqa: ANN001, ANN202
    return tok.encode(text, add_special_tokens=False)


def _body(tok, req):  # noqa: ANN001, ANN202
    return {"chat_request": req, "prompt_token_ids": _ids(tok, PROMPT)}


REQUESTS = {
    "auto": chat_request(tools=TOOLS),
    "no-tools": chat_request(),
    "required": chat_request(tools=TOOLS, tool_choice="required"),
    "named": chat_request(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}}),
    "serial": chat_request(tools=TOOLS, parallel_tool_calls=False),
    "hide-reasoning": chat_request(tools=TOOLS, include_reasoning=False, logprobs=True),
    "thinking-off": chat_request(tools=TOOLS, chat_template_kwargs={"enable_thinking": False}),
    "stop": chat_request(tools=TOOLS, stop=["42"]),
}


@pytest.mark.parametrize("output", sorted(OUTPUTS))
@pytest.mark.parametrize("req_name", sorted(REQUESTS))
@pytest.mark.parametrize("kind", ["one", "whole", "random"])
def test_stream_equals_batch(parsed, tok, output, req_name, kind):  # noqa: ANN001
    # With a finish-only tail the engine sent no stop token (e.g. an abort or a length cut).
    tail = kind == "random"
    ids = _ids(tok, OUTPUTS[output]) + ([] if tail else [EOS])
    body = _body(tok, REQUESTS[req_name])
    batch = batch_view(batch_chat(parsed, ids, **body))
    chunks = stream(parsed.derender_chat, ids, splits_of(len(ids), kind, seed=len(ids)),
                    first_body=body, finish_only_tail=tail)  # fmt: skip
    assert same_message(concat_chat(chunks), batch), (concat_chat(chunks), batch)


def test_tool_calls_finish_reason_and_deterministic_ids(parsed, tok):  # noqa: ANN001
    ids = _ids(tok, OUTPUTS["reasoning+tools"]) + [EOS]
    body = _body(tok, REQUESTS["auto"])
    first, again = batch_chat(parsed, ids, **body), batch_chat(parsed, ids, **body)
    view = batch_view(first)
    assert view["finish_reason"] == "tool_calls"
    assert [c["name"] for c in view["tool_calls"]] == ["get_weather", "get_time"]
    assert view["tool_calls"] == batch_view(again)["tool_calls"]
    assert all(c["id"].startswith("chatcmpl-tool-") for c in view["tool_calls"])


def test_length_finish_stays_length_with_tool_calls(parsed, tok):  # noqa: ANN001
    ids = _ids(tok, OUTPUTS["tools-only"])
    view = batch_view(batch_chat(parsed, ids, finish="length", **_body(tok, REQUESTS["auto"])))
    assert view["finish_reason"] == "length"


def test_parallel_false_keeps_first_call(parsed, tok):  # noqa: ANN001
    ids = _ids(tok, OUTPUTS["reasoning+tools"]) + [EOS]
    view = batch_view(batch_chat(parsed, ids, **_body(tok, REQUESTS["serial"])))
    assert [c["name"] for c in view["tool_calls"]] == ["get_weather"]


def test_include_reasoning_false_hides_reasoning_logprobs_and_ids(parsed, tok):  # noqa: ANN001
    ids = _ids(tok, OUTPUTS["reasoning+content"]) + [EOS]
    logprobs = {"content": [{"token_id": t, "logprob": -0.5, "top_logprobs": []} for t in ids]}
    req = chat_request(include_reasoning=False, logprobs=True, return_token_ids=True)
    out = batch_chat(parsed, ids, logprobs=logprobs, **_body(tok, req))
    choice = out["choices"][0]
    assert choice["message"]["reasoning"] is None and choice["logprobs"] is None
    assert choice["token_ids"] is None
    chunks = stream(parsed.derender_chat, ids, [1] * len(ids), first_body=_body(tok, req),
                    logprobs=logprobs)  # fmt: skip
    for r in chunks:
        for c in r["chunk"]["choices"]:
            assert c["logprobs"] is None and c["token_ids"] is None and c["delta"]["reasoning"] is None


def test_chat_request_required_with_parser(parsed, tok):  # noqa: ANN001
    from render_service.errors import BadRequestError

    ids = _ids(tok, "hi") + [EOS]
    with pytest.raises(BadRequestError, match="chat_request is required"):
        batch_chat(parsed, ids)
    with pytest.raises(BadRequestError, match="chat_request is required"):
        stream(parsed.derender_chat, ids, [len(ids)])
    with pytest.raises(BadRequestError, match="prompt_token_ids is required"):
        stream(parsed.derender_chat, ids, [len(ids)], first_body={"chat_request": chat_request()})


def test_later_chunks_need_neither_request_nor_prompt(parsed, tok):  # noqa: ANN001
    """After the first call the state carries everything (and wins over a later chat_request)."""
    ids = _ids(tok, OUTPUTS["reasoning+tools"]) + [EOS]
    body = _body(tok, REQUESTS["auto"])
    batch = batch_view(batch_chat(parsed, ids, **body))
    only_first = stream(parsed.derender_chat, ids, [1] * len(ids), first_body=body)
    assert same_message(concat_chat(only_first), batch)
    # A different chat_request on later calls does not change the parser settings.
    other = {"chat_request": chat_request(tools=TOOLS, tool_choice="none")}
    overridden = stream(parsed.derender_chat, ids, [1] * len(ids), first_body=body, later_body=other)
    assert same_message(concat_chat(overridden), batch)
