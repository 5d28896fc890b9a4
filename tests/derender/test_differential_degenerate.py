"""Degenerate engine output vs the vLLM 0.33 reference derender (batch).

1,100 lone UTF-8 continuation bytes (Qwen3 token 94, the byte-level piece for 0xA1) never
complete a character, so the detokenizer window grows by one token per id. A stream's state
caps that window (a typed 400, see test_http.py); vLLM's batch derender decodes the whole
output in one uncapped pass, and ours must give the same responses.
"""

from __future__ import annotations

import pytest

from .conftest import PARSER_FLAGS
from .helpers import EOS, REQUEST_ID, chat_request
from .ref_compare import normalise, ref_call
from .test_parser_stream import PROMPT, TOOLS

pytestmark = pytest.mark.vllm
LONE_CONTINUATION = 94


@pytest.fixture(scope="module")
def ours(make_derenderer):  # noqa: ANN001, ANN201
    return make_derenderer(**PARSER_FLAGS)


@pytest.mark.parametrize("tail", ["", "hello"], ids=["nothing-decodes", "then-a-word"])
def test_degenerate_output_batch_matches_reference(ref_parsed, ours, tok, tail):  # noqa: ANN001
    ids = [LONE_CONTINUATION] * 1100 + tok.encode(tail, add_special_tokens=False) + [EOS]
    prompt = tok.encode(PROMPT, add_special_tokens=False)
    gen = {"request_id": REQUEST_ID, "prompt_token_ids": prompt,
           "choices": [{"index": 0, "token_ids": ids, "finish_reason": "stop"}]}  # fmt: skip
    chat = {"chat_request": chat_request(tools=TOOLS), "prompt_token_ids": prompt,
            "generate_response": gen}  # fmt: skip
    assert normalise(ours.derender_chat(chat)) == normalise(
        ref_call(ref_parsed, "/v1/chat/completions/derender")(chat))
    completion = {"prompt_token_ids": [prompt], "generate_responses": [gen]}
    mine = normalise(ours.derender_completion(completion))
    assert mine == normalise(ref_call(ref_parsed, "/v1/completions/derender")(completion))
    assert mine["choices"][0]["text"] == ("\ufffd" * 1100 + tail if tail else "")
