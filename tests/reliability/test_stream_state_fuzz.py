"""Property-based fuzzing of the echoed `stream_state` through the derender stream step.

A real state is taken mid-stream (inside a tool call, so the parser holds buffered text) from
the qwen3 + hermes configuration. Then:

- wire corruptions (character flips, cuts, insertions, splices, other JSON types) of the
  token: the next step either succeeds, which is only possible with the unchanged token, or
  fails with StreamStateError (a 400) - in process and over HTTP (never a 5xx);
- signed corruptions: the payload is decoded, one value anywhere in it replaced by random
  JSON, and re-signed with the server's secret and binding (what a bug or a version skew
  between replicas could produce). The MAC passes, so this reaches the state decoder, the
  detokenizer and parser states: the step must give output or a typed 400, nothing else.

The parsers' own Hypothesis suites fuzz each parser's state directly; this covers the derender
envelope around them.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from render_service.errors import BadRequestError, StreamStateError

from .reliability_support import EOS, SCRIPTED_OUTPUTS, TOOLS, split_sizes, stream_chunks

REQUEST_ID = "generate-tokens-chatcmpl-fuzz"
CHAT = {"messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS}
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


# Corruption alphabet: base64url plus separators, padding, NUL and non-ASCII text.
EXTRA_CHARS = ".=+/ \x00é"
TEXT = st.text(min_size=1, max_size=12)
FUZZ = settings(max_examples=300, deadline=None, database=None, derandomize=True,
                suppress_health_check=list(HealthCheck))  # fmt: skip


@pytest.fixture(scope="module")
def derenderer(make_app):  # noqa: ANN001, ANN201
    return make_app().state.service.derenderer


@pytest.fixture(scope="module")
def stream(derenderer, bundle) -> dict[str, Any]:  # noqa: ANN001
    """A stream of a reasoning + two tool calls output, stopped inside the first call."""
    ids = bundle.hf_tokenizer.encode(SCRIPTED_OUTPUTS["reasoning+tools"], add_special_tokens=False) + [EOS]
    chunks = stream_chunks(REQUEST_ID, ids, split_sizes(len(ids), random.Random(7)))
    text_so_far = ""
    state = None
    for k, chunk in enumerate(chunks):
        body = {"stream": True, "generate_chunk": chunk, "stream_state": state}
        if k == 0:
            body |= {"chat_request": CHAT, "prompt_token_ids": [1, 2, 3]}
        state = orjson.loads(orjson.dumps(derenderer.derender_chat(body)))["stream_state"]
        text_so_far += bundle.hf_tokenizer.decode(chunk["choices"][0]["token_ids"])
        if "<tool_call>" in text_so_far and "get_weather" in text_so_far:
            return {"state": state, "next": chunks[k + 1]}
    raise AssertionError("the scripted output never reached a tool call")


def _step(derenderer, stream: dict[str, Any], state: Any) -> dict[str, Any]:  # noqa: ANN001
    body = {"stream": True, "generate_chunk": stream["next"], "stream_state": state}
    return derenderer.derender_chat(orjson.loads(orjson.dumps(body)))


def test_the_untouched_state_continues_the_stream(derenderer, stream) -> None:  # noqa: ANN001
    result = _step(derenderer, stream, stream["state"])
    assert result["stream_state"]["rs"] != stream["state"]["rs"]


# -- wire corruptions --------------------------------------------------------------------------


@st.composite
def corrupted_tokens(draw: st.DrawFn, token: str) -> str:
    kind = draw(st.sampled_from(["flip", "cut", "insert", "delete", "splice", "dots", "case"]))
    at = draw(st.integers(0, len(token) - 1))
    if kind == "flip":
        return token[:at] + draw(st.sampled_from(B64 + EXTRA_CHARS)) + token[at + 1 :]
    if kind == "cut":
        return token[:at]
    if kind == "insert":
        return token[:at] + draw(TEXT) + token[at:]
    if kind == "delete":
        return token[:at] + token[at + draw(st.integers(1, 40)) :]
    if kind == "splice":
        other = draw(st.integers(0, len(token) - 1))
        return token[:at] + token[other:]
    if kind == "dots":
        return token.replace(".", draw(st.sampled_from(["", "..", ".x.", ","])), draw(st.integers(1, 2)))
    return token[:at] + token[at:].swapcase()


@st.composite
def corrupted_wires(draw: st.DrawFn, wire: dict[str, str]) -> Any:
    shape = draw(st.sampled_from(["token"] * 6 + ["type", "extra-key", "nested", "list"]))
    if shape == "token":
        return {"rs": draw(corrupted_tokens(wire["rs"]))}
    if shape == "type":
        return draw(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=20), st.booleans(),
                              st.just({"rs": None}), st.just({"rs": 5}), st.just({})))  # fmt: skip
    if shape == "extra-key":
        return {**wire, draw(st.text(min_size=1, max_size=5)): draw(st.text(max_size=5))}
    if shape == "nested":
        return {"rs": wire}
    return [wire["rs"]]


def test_non_ascii_token_is_a_typed_400(derenderer, stream, default_server) -> None:  # noqa: ANN001
    """A non-ASCII character in the echoed token (e.g. a client re-encoding it) is a 400."""
    version, payload, tag = stream["state"]["rs"].split(".")
    for token in (f"{version}.{payload}.{tag[:-1]}é", f"{version}.{payload}é.{tag}"):
        with pytest.raises(StreamStateError):
            _step(derenderer, stream, {"rs": token})
    body = {"stream": True, "generate_chunk": stream["next"], "stream_state": {"rs": f"{version}.{payload}.{tag}é"}}
    assert httpx.post(default_server.url + "/v1/chat/completions/derender", json=body, timeout=30).status_code == 400


def _expect_typed_refusal_or_same(derenderer, stream, wire: Any) -> None:  # noqa: ANN001
    if wire == {"rs": stream["state"]["rs"]}:
        _step(derenderer, stream, wire)
        return
    # null means "first chunk" (then chat_request is missing); everything else is a state error.
    with pytest.raises(BadRequestError if wire is None else StreamStateError):
        _step(derenderer, stream, wire)


def test_wire_corruptions_are_typed_400s(derenderer, stream) -> None:  # noqa: ANN001
    @FUZZ
    @given(wire=corrupted_wires(stream["state"]))
    def run(wire: Any) -> None:
        _expect_typed_refusal_or_same(derenderer, stream, wire)

    run()


def test_state_from_another_stream_or_choice_is_refused(derenderer, stream) -> None:  # noqa: ANN001
    """A valid state replayed into another request id or choice index fails the binding."""
    for request_id, index in (("generate-tokens-other", 0), (REQUEST_ID, 1)):
        chunk = copy.deepcopy(stream["next"])
        chunk["request_id"] = request_id
        chunk["choices"][0]["index"] = index
        body = {"stream": True, "generate_chunk": chunk, "stream_state": stream["state"]}
        with pytest.raises(StreamStateError, match="signature mismatch"):
            derenderer.derender_chat(body)


# -- signed corruptions (past the MAC) ----------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every location in a JSON value (dict keys and list indices)."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    out = copy.copy(value)
    out[head] = _replace(value[head], rest, new)
    return out


def _open_payload(derenderer, wire: dict[str, str]) -> dict[str, Any]:  # noqa: ANN001
    envelope = derenderer.ctx.envelope
    return envelope.codec.decode(wire, binding=envelope._binding("chat", REQUEST_ID, 0))


def _seal_payload(derenderer, payload: dict[str, Any]) -> dict[str, str]:  # noqa: ANN001
    envelope = derenderer.ctx.envelope
    body = {k: v for k, v in payload.items() if k != "issued_at"}
    return envelope.codec.encode(body, binding=envelope._binding("chat", REQUEST_ID, 0))


def test_signed_value_corruptions_give_output_or_a_typed_400(derenderer, stream) -> None:  # noqa: ANN001
    payload = _open_payload(derenderer, stream["state"])
    paths = [p for p in _paths(payload) if p]  # the root is replaced in the structural test
    assert len(paths) > 20  # the state really holds parser and detokenizer internals

    @FUZZ
    @given(path=st.sampled_from(paths), new=JSON_VALUES)
    def run(path: tuple, new: Any) -> None:
        wire = _seal_payload(derenderer, _replace(payload, path, new))
        try:
            result = _step(derenderer, stream, wire)
        except BadRequestError:
            return
        assert set(result) >= {"chunk", "stream_state"}
        orjson.dumps(result)

    run()


def test_signed_structural_corruptions_give_output_or_a_typed_400(derenderer, stream) -> None:  # noqa: ANN001
    """Dropped keys and whole-state replacements past the MAC."""
    payload = _open_payload(derenderer, stream["state"])
    paths = [p for p in _paths(payload) if p]

    @FUZZ
    @given(path=st.sampled_from(paths), whole=JSON_VALUES, drop=st.booleans())
    def run(path: tuple, whole: Any, drop: bool) -> None:
        if drop:
            parent = _replace(payload, (), copy.deepcopy(payload))
            holder = parent
            for part in path[:-1]:
                holder = holder[part]
            del holder[path[-1]]
            candidate = parent
        else:
            candidate = whole if isinstance(whole, dict) else {"value": whole}
        try:
            _step(derenderer, stream, _seal_payload(derenderer, candidate))
        except BadRequestError:
            return

    run()


# -- over HTTP: never a 5xx -------------------------------------------------------------------------


def test_corrupted_states_over_http_are_400_or_success(default_server) -> None:  # noqa: ANN001
    """Random corruptions of a state returned by the server itself: 400 or 200, never 5xx."""
    with httpx.Client(base_url=default_server.url, timeout=30) as client:
        tokenizer_ids = client.post("/tokenize", json={"prompt": SCRIPTED_OUTPUTS["reasoning+tools"],
                                                        "add_special_tokens": False}).json()["tokens"]  # fmt: skip
        ids = tokenizer_ids + [EOS]
        chunks = stream_chunks("generate-tokens-http-fuzz", ids, split_sizes(len(ids), random.Random(3), 12))
        first = {"stream": True, "generate_chunk": chunks[0], "stream_state": None, "chat_request": CHAT,
                 "prompt_token_ids": [1, 2, 3]}  # fmt: skip
        response = client.post("/v1/chat/completions/derender", json=first)
        assert response.status_code == 200
        state = response.json()["stream_state"]
        statuses: dict[int, int] = {}

        @settings(max_examples=120, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(wire=corrupted_wires(state))
        def run(wire: Any) -> None:
            body = {"stream": True, "generate_chunk": chunks[1], "stream_state": wire}
            reply = client.post("/v1/chat/completions/derender", json=body)
            statuses[reply.status_code] = statuses.get(reply.status_code, 0) + 1
            assert reply.status_code in (200, 400), reply.text[:300]
            if reply.status_code == 200:
                assert wire == state
            else:
                error = reply.json()["error"]
                assert error["type"] == "BadRequestError"
                assert wire is None or "stream_state" in error["message"], error["message"]

        run()
        assert statuses.get(400, 0) > 50
