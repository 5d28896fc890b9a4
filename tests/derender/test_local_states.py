"""In-process states (`Derenderer(local_states=True)`, the gateway's mode): same output, no MAC,
and the same request/choice/endpoint checks."""

from __future__ import annotations

from typing import Any

import pytest

from render_service.config import ServiceConfig
from render_service.derender_api import Derenderer
from render_service.errors import StreamStateError

from .conftest import PARSER_FLAGS, SECRET, _BundleRenderer
from .helpers import EOS, MESSAGES, REQUEST_ID, batch_chat, batch_view, concat_chat, same_message

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
OUTPUT = 'Let me think.</think>Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "巴黎 😀"}}\n</tool_call>'


@pytest.fixture(scope="module")
def local(bundle) -> Derenderer:  # noqa: ANN001
    config = ServiceConfig(stream_state_secret=SECRET, **PARSER_FLAGS)
    return Derenderer(config, _BundleRenderer(bundle), local_states=True)


def _chunks(ids: list[int], request_id: str = REQUEST_ID) -> list[dict[str, Any]]:
    return [
        {"request_id": request_id, "choices": [{"index": 0, "token_ids": [tid],
         "finish_reason": "stop" if k == len(ids) - 1 else None, "stop_reason": None}]}
        for k, tid in enumerate(ids)
    ]  # fmt: skip


def _run(derenderer: Derenderer, ids: list[int]) -> list[dict[str, Any]]:
    state, out = None, []
    for k, chunk in enumerate(_chunks(ids)):
        body: dict[str, Any] = {"stream": True, "generate_chunk": chunk, "stream_state": state}
        if k == 0:
            body |= {"chat_request": {"messages": MESSAGES, "tools": TOOLS}, "prompt_token_ids": [1, 2, 3]}
        response = derenderer.derender_chat(body)
        state = response["stream_state"]
        out.append(response)
    return out


def test_local_stream_equals_the_signed_batch(local: Derenderer, make_derenderer, tok) -> None:  # noqa: ANN001
    """One token per chunk with in-memory states concatenates to the batch message."""
    ids = tok.encode(OUTPUT, add_special_tokens=False) + [EOS]
    signed = make_derenderer(**PARSER_FLAGS)
    batch = batch_chat(signed, ids, chat_request={"messages": MESSAGES, "tools": TOOLS},
                       prompt_token_ids=[1, 2, 3])  # fmt: skip
    responses = _run(local, ids)
    assert not isinstance(responses[-1]["stream_state"], dict)  # an object, not a wire value
    assert same_message(concat_chat(responses), batch_view(batch))


def test_local_state_is_bound_to_its_request_and_choice(local: Derenderer, tok) -> None:  # noqa: ANN001
    """A local state reused for another request or choice is refused like a signed one."""
    ids = tok.encode("hello there", add_special_tokens=False)
    first = _run(local, ids[:1])[0]["stream_state"]
    other_request = _chunks(ids[1:2], request_id="generate-tokens-other")[0]
    with pytest.raises(StreamStateError, match="another request"):
        local.derender_chat({"stream": True, "generate_chunk": other_request, "stream_state": first})
    other_choice = _chunks(ids[1:2])[0]
    other_choice["choices"][0]["index"] = 1
    with pytest.raises(StreamStateError, match="another choice"):
        local.derender_chat({"stream": True, "generate_chunk": other_choice, "stream_state": first})


def test_wire_states_are_not_accepted_in_local_mode(local: Derenderer, make_derenderer, tok) -> None:  # noqa: ANN001
    """A signed wire state (or any JSON value) is refused by an in-process derenderer."""
    ids = tok.encode("hello there", add_special_tokens=False)
    signed = make_derenderer(**PARSER_FLAGS)
    body = {"stream": True, "generate_chunk": _chunks(ids[:1])[0], "stream_state": None,
            "chat_request": {"messages": MESSAGES}, "prompt_token_ids": [1, 2, 3]}  # fmt: skip
    wire = signed.derender_chat(body)["stream_state"]
    with pytest.raises(StreamStateError, match="this process's own state"):
        local.derender_chat({"stream": True, "generate_chunk": _chunks(ids[1:2])[0], "stream_state": wire})
