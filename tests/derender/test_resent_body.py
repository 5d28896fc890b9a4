"""vLLM's streaming protocol resends `prompt_token_ids` and the request with every chunk.

Once a chunk's `stream_state` verifies, those are neither validated nor decoded (the state
carries their effect), so an unchanged vLLM client costs what the lean protocol costs. These
tests pin that the output is the same either way, that the first chunk and a chunk with a bad
state are still validated in full (vLLM's errors), and that the body's JSON syntax is always
checked."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from render_service.config import ServiceConfig
from render_service.derender.api import RESENT_KEYS
from render_service.derender.state import ChoiceKind
from render_service.http.app import create_app

from .conftest import PARSER_FLAGS
from .helpers import EOS, REQUEST_ID

CHAT = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}]}  # fmt: skip
OUTPUT = ('Let me check.\n</think>\n\nChecking.\n<tool_call>\n{"name": "get_weather", '
          '"arguments": {"city": "Paris"}}\n</tool_call>')
CHAT_PATH, COMPLETION_PATH = "/v1/chat/completions/derender", "/v1/completions/derender"


@pytest.fixture(scope="module")
def client():  # noqa: ANN201
    config = ServiceConfig(stream_state_secret="resent", **PARSER_FLAGS)
    with TestClient(create_app(config), raise_server_exceptions=False) as c:
        yield c


def _chunk(ids: list[int], last: bool) -> dict:
    return {"request_id": REQUEST_ID, "choices": [
        {"index": 0, "token_ids": ids, "finish_reason": "stop" if last else None}]}  # fmt: skip


def _stream(client, path: str, ids: list[int], first: dict, resend: dict | None) -> list[dict]:  # noqa: ANN001
    """One token per chunk; `first` goes with the first chunk, `resend` with every later one."""
    state, chunks = None, []
    for i, tid in enumerate(ids):
        body = {"stream": True, "generate_chunk": _chunk([tid], i == len(ids) - 1),
                "stream_state": state, **(first if i == 0 else resend or {})}  # fmt: skip
        r = client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
        assert r.status_code == 200, (i, r.text)
        state = r.json()["stream_state"]
        chunk = r.json()["chunk"]
        chunk.pop("created")  # a clock: two streams may straddle a second
        chunks.append(chunk)
    return chunks


def _prompt(client) -> list[int]:  # noqa: ANN001
    r = client.post("/v1/chat/completions/render", json=CHAT)
    assert r.status_code == 200
    return r.json()["token_ids"]


def test_resent_prompt_and_request_change_nothing(client, tok) -> None:  # noqa: ANN001
    prompt = _prompt(client)
    ids = tok.encode(OUTPUT, add_special_tokens=False) + [EOS]
    first = {"chat_request": CHAT, "prompt_token_ids": prompt}
    lean = _stream(client, CHAT_PATH, ids, first, None)
    vllm_style = _stream(client, CHAT_PATH, ids, first, first)
    assert vllm_style == lean
    calls = [tc for c in lean for ch in c["choices"] for tc in ch["delta"].get("tool_calls") or []]
    assert calls and calls[0]["function"]["name"] == "get_weather"


def test_completion_resend_changes_nothing(client, tok) -> None:  # noqa: ANN001
    ids = tok.encode("one two three", add_special_tokens=False) + [EOS]
    first = {"completion_request": {"prompt": "count", "max_tokens": 8}, "prompt_token_ids": [1, 2, 3]}
    assert _stream(client, COMPLETION_PATH, ids, first, first) == _stream(client, COMPLETION_PATH, ids, first, None)


def test_first_chunk_is_validated_in_full(client, tok) -> None:  # noqa: ANN001
    ids = tok.encode("hi", add_special_tokens=False)
    body = {"stream": True, "generate_chunk": _chunk(ids, False), "stream_state": None,
            "chat_request": CHAT, "prompt_token_ids": ["x"]}  # fmt: skip
    r = client.post(CHAT_PATH, json=body)
    assert r.status_code == 400 and "prompt_token_ids" in r.text


def test_a_bad_state_takes_the_full_path(client, tok) -> None:  # noqa: ANN001
    ids = tok.encode("hi", add_special_tokens=False)
    forged = {"stream": True, "generate_chunk": _chunk(ids, False), "stream_state": {"rs": "1.a.b"},
              "chat_request": CHAT}  # fmt: skip
    r = client.post(CHAT_PATH, json={**forged, "prompt_token_ids": ["x"]})
    assert r.status_code == 400 and "prompt_token_ids" in r.text  # validation first, as vLLM
    r = client.post(CHAT_PATH, json={**forged, "prompt_token_ids": [1, 2]})
    assert r.status_code == 400 and "invalid stream_state" in r.json()["error"]["message"]


def _first_chunk(client, tok) -> tuple[dict, dict, list[int]]:  # noqa: ANN001
    """A vLLM-style first chunk of "hi there" (prompt and request sent), its state, the ids."""
    ids = tok.encode("hi there", add_special_tokens=False)
    first = {"stream": True, "generate_chunk": _chunk(ids[:1], False), "stream_state": None,
             "chat_request": CHAT, "prompt_token_ids": _prompt(client)}  # fmt: skip
    return first, client.post(CHAT_PATH, json=first).json()["stream_state"], ids


def test_state_from_another_request_does_not_skip_validation(client, tok) -> None:  # noqa: ANN001
    first, state, ids = _first_chunk(client, tok)
    other = {**_chunk(ids[1:], False), "request_id": REQUEST_ID + "-other"}
    r = client.post(CHAT_PATH, json={**first, "generate_chunk": other, "stream_state": state,
                                     "prompt_token_ids": [-1]})  # fmt: skip
    assert r.status_code == 400 and "prompt_token_ids" in r.text


def test_resent_values_are_still_syntax_checked(client, tok) -> None:  # noqa: ANN001
    first, state, ids = _first_chunk(client, tok)
    good = json.dumps({**first, "generate_chunk": _chunk(ids[1:], False), "stream_state": state})
    broken = good.replace('"prompt_token_ids": [', '"prompt_token_ids": [,', 1)
    r = client.post(CHAT_PATH, content=broken, headers={"content-type": "application/json"})
    assert r.status_code == 400 and "'type': 'json_invalid'" in r.json()["error"]["message"]
    nan = good.replace('"prompt_token_ids": [', '"prompt_token_ids": [NaN, ', 1)  # stdlib accepts it
    r = client.post(CHAT_PATH, content=nan, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def test_resent_keys_are_the_vllm_fields() -> None:
    assert RESENT_KEYS[ChoiceKind.CHAT] == {"prompt_token_ids", "chat_request"}
    assert RESENT_KEYS[ChoiceKind.COMPLETION] == {"prompt_token_ids", "completion_request"}


def test_lazy_reader_decodes_only_the_head() -> None:
    from render_service.http.bodies import _head

    raw = json.dumps({"stream": True, "stream_state": {"rs": "1.a.b"}, "prompt_token_ids": [1, 2],
                      "chat_request": {"messages": []}, "generate_chunk": {"request_id": "r"}}).encode()  # fmt: skip
    head = _head(raw, RESENT_KEYS[ChoiceKind.CHAT])
    assert head == {"stream": True, "stream_state": {"rs": "1.a.b"}, "generate_chunk": {"request_id": "r"}}
    assert _head(b'{"a": NaN}', frozenset()) is None and _head(b"[1]", frozenset()) is None
