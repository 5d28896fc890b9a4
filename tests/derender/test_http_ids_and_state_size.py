"""Over HTTP: logprob token ids out of the tokenizer's range, and stream_state size at issue.

Ids: vLLM 0.33 answers an id outside the tokenizer's 32-bit range with a 400 (the tokenizer's
OverflowError) and an in-range id outside the vocabulary with token "" / bytes null; the
differential test checks the second against vLLM itself. Ours must answer 400 for the first on
both endpoints, batch and stream, for the integer and the older `"token_id:N"` form.

State size: a state over `--max-stream-state-bytes` is refused on the chunk that would
issue it (the first), so no stream starts that cannot finish.
"""

from __future__ import annotations

import json
import random

import pytest
from fastapi.testclient import TestClient

from render_service.config import Limits, ServiceConfig
from render_service.http.app import create_app

from .conftest import PARSER_FLAGS
from .helpers import EOS, REQUEST_ID

CHAT = "/v1/chat/completions/derender"
COMPLETION = "/v1/completions/derender"
OUT_OF_RANGE = [-1, 2**32, 10**12, 2**63]
# Past 64 bits the JSON number is not even an integer to the body parser: still a 400.
BEYOND_INT64 = 2**70
OLD_FORM_OUT_OF_RANGE = ["token_id:99999999999", "token_id:4294967296", "token_id:" + "9" * 5000]
MALFORMED_OLD_FORM = ["token_id:", "token_id:²", "token_id:-1", "tok:5", None]


def _client(bundle, **overrides):  # noqa: ANN001, ANN003, ANN202
    return TestClient(create_app(ServiceConfig(stream_state_secret="ids", **overrides), bundle=bundle))


@pytest.fixture(scope="module")
def client(bundle):  # noqa: ANN001, ANN201
    with _client(bundle, **PARSER_FLAGS) as c:
        yield c


def _candidate(token) -> dict:  # noqa: ANN001
    """An int id, or the older placeholder form when `token` is a string (or None)."""
    if isinstance(token, int):
        return {"token_id": token, "logprob": -0.5}
    return {"token": token, "logprob": -0.5, "bytes": None}


def _bodies(tok, sampled, top):  # noqa: ANN001, ANN202
    """The four derender bodies (chat/completion x batch/stream) carrying one logprob entry."""
    ids = tok.encode("hello", add_special_tokens=False)
    lp = {"content": [{**_candidate(sampled), "top_logprobs": [_candidate(top)]}]}
    choice = {"index": 0, "token_ids": ids, "logprobs": lp}
    chat = {"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 1}
    prompt = [1, 2]
    return [
        (CHAT, {"chat_request": chat, "prompt_token_ids": prompt, "generate_response": {
            "request_id": REQUEST_ID, "choices": [{**choice, "finish_reason": "length"}]}}),
        (CHAT, {"stream": True, "chat_request": chat, "prompt_token_ids": prompt, "stream_state": None,
                "generate_chunk": {"request_id": REQUEST_ID, "choices": [choice]}}),
        (COMPLETION, {"completion_request": {"prompt": "p", "logprobs": 1}, "prompt_tokens": [2],
                      "generate_responses": [{"request_id": REQUEST_ID, "choices": [
                          {**choice, "finish_reason": "length"}]}]}),
        (COMPLETION, {"stream": True, "completion_request": {"prompt": "p", "logprobs": 1},
                      "stream_state": None, "generate_chunk": {"request_id": REQUEST_ID, "choices": [choice]}}),
    ]  # fmt: skip


@pytest.mark.parametrize("bad", [*OUT_OF_RANGE, *OLD_FORM_OUT_OF_RANGE, BEYOND_INT64])
@pytest.mark.parametrize("where", ["sampled", "top"])
def test_out_of_range_logprob_id_is_400_everywhere(client, tok, bad, where):  # noqa: ANN001
    """Sampled or candidate id, int or placeholder: 400 on all four paths, never a 500."""
    good = tok.encode("hello", add_special_tokens=False)[0]
    sampled, top = (bad, good) if where == "sampled" else (good, bad)
    for path, body in _bodies(tok, sampled, top):
        r = client.post(path, json=body)
        assert r.status_code == 400, (path, body.get("stream"), r.text)
        error = r.json()["error"]
        # Schema errors carry vLLM's RequestValidationError shape: "Bad Request", every failed
        # member of the body union listed (so `param` is the first one's location, which for a
        # stream body is the batch form's `stream`); the id's own location is in the message.
        assert error["type"] == "Bad Request", error
        assert "token_id'" in error["message"] or ".token'" in error["message"], error
        assert _expected_message(bad) in error["message"], error


def _expected_message(bad) -> str:  # noqa: ANN001
    if bad == BEYOND_INT64:
        return "exceeded maximum size"
    if isinstance(bad, str):
        return "is out of range: token ids are 0..4294967295"
    return "greater than or equal to 0" if bad < 0 else "less than or equal to 4294967295"


@pytest.mark.parametrize("bad", MALFORMED_OLD_FORM)
def test_malformed_placeholder_is_400_everywhere(client, tok, bad):  # noqa: ANN001
    """A missing id or a placeholder that is not `token_id:<ASCII digits>` is a 400 too."""
    for path, body in _bodies(tok, bad, bad):
        r = client.post(path, json=body)
        assert r.status_code == 400 and "placeholder form" in r.json()["error"]["message"], r.text


@pytest.mark.parametrize("unknown", [151936, 2**32 - 1, "token_id:4294967295"])
def test_in_range_unknown_id_decodes_to_empty_string(client, tok, unknown):  # noqa: ANN001
    """Like vLLM: an id the vocabulary lacks gives token "" and bytes null (chat) / "" (completions)."""
    for path, body in _bodies(tok, unknown, unknown):
        r = client.post(path, json=body)
        assert r.status_code == 200, r.text
        payload = r.json().get("chunk", r.json())
        logprobs = payload["choices"][0]["logprobs"]
        if path == CHAT:
            entry = logprobs["content"][0]
            assert (entry["token"], entry["bytes"]) == ("", None)
            assert entry["top_logprobs"] == [{"token": "", "logprob": -0.5, "bytes": None}]
        else:
            assert logprobs["tokens"] == [""] and logprobs["top_logprobs"] == [{"": -0.5}]


def test_out_of_range_repair_context_from_token_ids_is_400(client, tok):  # noqa: ANN001
    """`token_ids` may hold any non-negative id (vLLM too), but when such an id becomes the
    U+FFFD repair context of the next chunk's logprobs, the tokenizer cannot decode it: 400
    (vLLM 0.33: 400 as well), never a 500."""
    melt = tok.encode("🫠", add_special_tokens=False)  # three byte pieces, each "\ufffd" alone
    state = None
    for k, ids in enumerate(([melt[0], 10**12], melt[-1:])):
        body = {"stream": True, "completion_request": {"prompt": "p", "logprobs": 0}, "stream_state": state,
                "generate_chunk": {"request_id": REQUEST_ID, "choices": [{"index": 0, "token_ids": ids,
                "logprobs": {"content": [{"token_id": melt[-1], "logprob": -1.0}]}}]}}  # fmt: skip
        r = client.post(COMPLETION, json=body)
        if k == 0:
            assert r.status_code == 200, r.text
            state = r.json()["stream_state"]
        else:
            assert r.status_code == 400 and "out of range" in r.json()["error"]["message"], r.text


# -- stream_state size -----------------------------------------------------------------------


def _tools(count: int, noise_chars: int, seed: int = 0) -> list[dict]:
    """Tools whose parameter *names* zlib cannot shrink much: the state carries the names and
    types of parameters (descriptions and enum values are dropped, see the test below)."""
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return [
        {"type": "function", "function": {"name": f"tool_{i}", "parameters": {"type": "object", "properties": {
            "".join(rng.choice(alphabet) for _ in range(noise_chars // 8)): {"type": "integer"}
            for _ in range(8)}}}}
        for i in range(count)
    ]  # fmt: skip


def test_descriptions_and_enum_values_do_not_grow_the_state(client, tok):  # noqa: ANN001
    """The state keeps what parsing reads of the tools: 30 tools with 100+ KB of descriptions
    and enum values give the same small state as the bare tools."""
    rng = random.Random(1)
    noise = lambda n: "".join(rng.choice("abcdefghij klmnop") for _ in range(n))  # noqa: E731
    bare = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": {"type": "object",
             "properties": {f"p{j}": {"type": "string"} for j in range(4)}}}} for i in range(30)]  # fmt: skip
    rich = [{"type": "function", "function": {"name": t["function"]["name"], "description": noise(2000),
             "parameters": {"type": "object", "required": ["p0"], "properties": {
                 k: {**v, "description": noise(600), "enum": [noise(40) for _ in range(4)]}
                 for k, v in t["function"]["parameters"]["properties"].items()}}}} for t in bare]  # fmt: skip
    assert len(json.dumps(rich)) > 100_000
    sizes = [max(len(r.json()["stream_state"]["rs"]) for r in _stream_steps(client, tok, tools)[:-1])
             for tools in (bare, rich)]
    assert sizes[1] <= sizes[0] + 32, sizes  # an enum keeps one empty value per type


def _stream_steps(client, tok, tools, chunks: int = 6):  # noqa: ANN001, ANN202
    """Stream a tool call one token per chunk; the request and prompt ride only on the first."""
    text = '<think>\nok\n</think>\n\n<tool_call>\n{"name": "tool_0", "arguments": {}}\n</tool_call>'
    ids = tok.encode(text, add_special_tokens=False) + [EOS]
    request = {"messages": [{"role": "user", "content": "hi"}], "tools": tools}
    state, responses = None, []
    for k, tid in enumerate(ids):
        last = k == len(ids) - 1
        body = {"stream": True, "stream_state": state, "generate_chunk": {"request_id": REQUEST_ID, "choices": [
            {"index": 0, "token_ids": [tid], "finish_reason": "stop" if last else None}]}}  # fmt: skip
        if k == 0:
            body.update(chat_request=request, prompt_token_ids=[1, 2])
        r = client.post(CHAT, json=body)
        responses.append(r)
        if r.status_code != 200:
            break
        state = r.json()["stream_state"]
    return responses


def test_reviewer_case_400_tools_no_longer_reach_the_state(client, tok):  # noqa: ANN001
    """About 2.8 MB of tool schemas once overflowed the default 2 MiB limit. The state now keeps
    only what the configured tool parser reads of the tools (hermes: whether any were sent), so
    the stream finishes with a state as small as one without tools."""
    tools = _tools(400, 6400)
    assert len(json.dumps(tools)) > 2 * 1024 * 1024
    responses = _stream_steps(client, tok, tools)
    assert all(r.status_code == 200 for r in responses), [r.text[:200] for r in responses if r.status_code != 200]
    assert responses[-1].json()["chunk"]["choices"][0]["finish_reason"] == "tool_calls"
    bare = _stream_steps(client, tok, _tools(1, 8))
    sizes = [len(r.json()["stream_state"]["rs"]) for r in responses[:-1]]
    bare_sizes = [len(r.json()["stream_state"]["rs"]) for r in bare[:-1]]
    assert max(sizes) <= max(bare_sizes) + 16 and max(sizes) < 2048, (sizes, bare_sizes)


def test_a_state_over_the_limit_is_refused_on_the_first_chunk_naming_the_flag(bundle, tok):  # noqa: ANN001
    """Under a limit smaller than any state, chunk 0 is the 400 naming the flag (no stream
    starts that cannot finish); under the default the same stream runs to the end."""
    tools = _tools(12, 3200)
    with _client(bundle, limits=Limits(max_stream_state_bytes=256), **PARSER_FLAGS) as tight:
        refused = _stream_steps(tight, tok, tools)
    assert len(refused) == 1 and refused[0].status_code == 400
    message = refused[0].json()["error"]["message"]
    assert "--max-stream-state-bytes 256" in message and "in-flight tool call" in message, message
    with _client(bundle, **PARSER_FLAGS) as roomy:
        responses = _stream_steps(roomy, tok, tools)
    assert all(r.status_code == 200 for r in responses)
    assert responses[-1].json()["chunk"]["choices"][0]["finish_reason"] == "tool_calls"
