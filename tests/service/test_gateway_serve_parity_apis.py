"""Differential: the gateway's /v1/messages and /v1/responses against `vllm serve`'s, one engine.

Same engine and gateway as test_gateway_serve_parity.py (tests/service/conftest.py): vLLM 0.32
CPU serves its own Anthropic Messages and Responses routes over the same weights our gateway
drives through /inference/v1/generate, and the scripted logits processor forces the same tokens
on both sides. Each case is sent three ways to each side:
- raw HTTP, batch: the JSON bodies must be equal once the ids and clocks are normalised
  (`msg_` / `resp_` / `toolu_` / `fc_` / `rs_` ids, `created_at`);
- raw HTTP, stream: the SSE event names in order, and every event's data (normalised), must be
  equal; where tool-call arguments are cut into fragments differently (the gateway streams
  them as they are read, vLLM as diffs of re-parsed partial JSON) the fragments of a block are
  joined before comparing, so order, boundaries and the assembled arguments still count;
- the official SDK (`anthropic` `messages.stream`, `openai` `responses.stream`): the final
  message / response the SDK assembles from the stream must be equal, and equal to the batch.
Known differences of vLLM 0.32 from 0.33 are translated by `_as_v033`, each with its reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.gateway.e2e_support import RunningGateway, Scripts
from tests.service.conftest import HTTP_TIMEOUT_S, MODEL

pytestmark = pytest.mark.engine

MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
ATTEMPTS = 3  # a differing stream is re-run: step merging is timing (parity module docstring)
THINK = "<think>\nThe capital is Paris.\n</think>\n\n"
ANSWER = "Paris is the capital."
TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}},
                  "required": ["city"]}
ANTHROPIC_TOOL = {"name": "get_weather", "description": "Weather in a city",
                  "input_schema": WEATHER_SCHEMA}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "description": "Weather in a city",
                  "parameters": WEATHER_SCHEMA}
USER = "Capital of France? Then the weather there."
# vLLM's stream sends the "\n\n" between </think> and <tool_call> as a text block its batch
# message does not have; ours follows the batch (README "Streams never lose text"): the case
# asserts serve's stream has exactly that extra whitespace-only block, and nothing else differs.
WHITESPACE_BEFORE_CALL = "whitespace_before_call"


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    body: dict[str, Any]
    script: str
    known: str | None = None  # a named known difference (module docstring)

    def request_body(self, scripts: Scripts, *, stream: bool) -> dict[str, Any]:
        body = json.loads(json.dumps(self.body))
        body["vllm_xargs"] = {"rs_script": scripts.ids(self.script)}
        if stream:
            body["stream"] = True
        return body


def _messages(name: str, script: str, known: str | None = None, **fields: Any) -> Case:
    body = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": USER}]}
    return Case(name, MESSAGES, {**body, **fields}, script, known)


def _responses(name: str, script: str, known: str | None = None, **fields: Any) -> Case:
    return Case(name, RESPONSES, {"model": MODEL, "input": USER, **fields}, script, known)


CASES = [
    _messages("messages_text", ANSWER),
    _messages("messages_thinking_text", THINK + ANSWER),
    _messages("messages_thinking_tool_use", THINK + TOOL_CALL, WHITESPACE_BEFORE_CALL,
              tools=[ANTHROPIC_TOOL]),
    _messages("messages_text_then_tool_use", "Let me check.\n" + TOOL_CALL,
              tools=[ANTHROPIC_TOOL]),
    _messages("messages_max_tokens", THINK + ANSWER, max_tokens=5),
    _messages("messages_system", ANSWER, system="Answer in one line."),
    _responses("responses_text", ANSWER),
    _responses("responses_reasoning_text", THINK + ANSWER),
    _responses("responses_reasoning_function_call", THINK + TOOL_CALL, WHITESPACE_BEFORE_CALL,
               tools=[RESPONSES_TOOL]),
    _responses("responses_max_output_tokens", THINK + ANSWER, max_output_tokens=5),
    _responses("responses_instructions", ANSWER, instructions="Answer in one line."),
]


# -- the tests --------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_batch_matches_vllm_serve(case: Case, serve_engine: str, parity_gateway: RunningGateway,
                                  parity_scripts: Scripts) -> None:
    body = case.request_body(parity_scripts, stream=False)
    with httpx.Client(timeout=HTTP_TIMEOUT_S) as client:
        serve = client.post(serve_engine + case.path, json=body)
        ours = client.post(parity_gateway.url + case.path, json=body)
    assert (ours.status_code, ours.headers["content-type"]) == (
        serve.status_code, serve.headers["content-type"]), ours.text
    assert _normalise(ours.json()) == _normalise(_as_v033(serve.json())), _diff(serve, ours)
    if case.path == RESPONSES:  # README "Known differences": generate reports no cache hits
        assert _ENGINE_CACHE_COUNTS.items() <= ours.json()["usage"]["input_tokens_details"].items()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_stream_matches_vllm_serve(case: Case, serve_engine: str, parity_gateway: RunningGateway,
                                   parity_scripts: Scripts) -> None:
    body = case.request_body(parity_scripts, stream=True)
    differences: list[str] = []
    with httpx.Client(timeout=HTTP_TIMEOUT_S) as client:
        for _ in range(ATTEMPTS):
            serve = _events(client, serve_engine + case.path, body)
            ours = _events(client, parity_gateway.url + case.path, body)
            serve = _v033_stream(serve)
            if case.known == WHITESPACE_BEFORE_CALL:
                serve = _without_whitespace_item(serve) if case.path == RESPONSES \
                    else _without_whitespace_block(serve)
            if ours == serve:
                return
            differences.append(_first_difference(serve, ours))
    pytest.fail(f"{case.name}: stream differs from vllm serve in {ATTEMPTS} attempts; "
                f"first attempt: {differences[0]}", pytrace=False)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_sdk_assembles_what_vllm_serve_assembles(case: Case, serve_engine: str,
                                                 parity_gateway: RunningGateway,
                                                 parity_scripts: Scripts) -> None:
    body = case.request_body(parity_scripts, stream=False)
    serve = _sdk_final(serve_engine, case.path, body)
    ours = _sdk_final(parity_gateway.url, case.path, body)
    if case.path == RESPONSES:
        _v033_streamed_response(serve)
    if case.known == WHITESPACE_BEFORE_CALL:
        key, kind = ("output", "message") if case.path == RESPONSES else ("content", "text")
        blank = [b for b in serve[key] if b["type"] == kind and _is_blank(b)]
        assert len(blank) == 1, serve
        serve[key].remove(blank[0])
    assert _normalise(ours) == _normalise(_as_v033(serve)), "\n".join(
        _paths(_normalise(_as_v033(serve)), _normalise(ours)))


# -- HTTP and SDK -----------------------------------------------------------------------------
def _events(client: httpx.Client, url: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    """(event name, normalised data) per SSE event, the deltas of a block joined."""
    with client.stream("POST", url, json=body) as response:
        assert response.status_code == 200, response.read()
        raw = response.read().decode()
    events = []
    for block in raw.strip("\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        data = fields.get("data", "")
        payload = data if data == "[DONE]" else _normalise(_as_v033(json.loads(data)))
        events.append((fields.get("event", ""), payload))
    return _join_deltas(events)


# Delta events whose pieces are joined per block before comparing: chunk boundaries are
# timing in vLLM (merged engine steps) and, for tool arguments, cut differently by design.
_DELTA_EVENTS = {"content_block_delta": ("delta", ("text", "thinking", "partial_json")),
                 "response.output_text.delta": (None, ("delta",)),
                 "response.reasoning_text.delta": (None, ("delta",)),
                 "response.function_call_arguments.delta": (None, ("delta",))}


def _join_deltas(events: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    joined: list[tuple[str, Any]] = []
    for name, data in events:
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k != "sequence_number"}  # counts events
        previous = joined[-1] if joined else None
        if previous is not None and previous[0] == name and name in _DELTA_EVENTS \
                and _same_block(previous[1], data):
            joined[-1] = (name, _appended(name, previous[1], data))
            continue
        joined.append((name, data))
    return joined


def _holder(name: str, data: dict[str, Any]) -> dict[str, Any]:
    where = _DELTA_EVENTS[name][0]
    return data[where] if where else data


def _same_block(first: dict[str, Any], second: dict[str, Any]) -> bool:
    keys = ("index", "item_id", "output_index", "content_index")
    if any(first.get(k) != second.get(k) for k in keys):
        return False
    kind = first.get("delta")  # Messages: a text, thinking or input_json delta object
    return not isinstance(kind, dict) or kind.get("type") == second["delta"].get("type")


def _appended(name: str, first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    merged = json.loads(json.dumps(first))
    target, source = _holder(name, merged), _holder(name, second)
    for key in _DELTA_EVENTS[name][1]:
        if isinstance(source.get(key), str):
            target[key] = target.get(key, "") + source[key]
    return merged


def _without_whitespace_block(events: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Serve's stream minus its one whitespace-only text block, later indices shifted."""
    starts = [i for i, (name, data) in enumerate(events) if name == "content_block_start"
              and data["content_block"]["type"] == "text"]
    assert len(starts) == 1, events
    start = starts[0]
    index = events[start][1]["index"]
    delta, stop = events[start + 1], events[start + 2]
    assert delta[0] == "content_block_delta" and not delta[1]["delta"]["text"].strip(), events
    assert stop[0] == "content_block_stop", events
    rest = events[:start] + events[start + 3:]
    return [(name, {**data, "index": data["index"] - 1})
            if isinstance(data, dict) and isinstance(data.get("index"), int) and data["index"] > index
            else (name, data) for name, data in rest]


def _is_blank(block: dict[str, Any]) -> bool:
    text = block.get("text", "") + "".join(p.get("text", "") for p in block.get("content") or [])
    return not text.strip()


def _without_whitespace_item(events: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Serve's Responses stream minus its one whitespace-only message item (ids are
    normalised away, so the item is found by its output index)."""
    added = [data for name, data in events if name == "response.output_item.added"
             and data["item"]["type"] == "message"]
    assert len(added) == 1, events
    index = added[0]["output_index"]
    rest = []
    for name, data in events:
        if not isinstance(data, dict):
            rest.append((name, data))
            continue
        if data.get("output_index") == index:
            if name == "response.output_text.delta":
                assert not data["delta"].strip(), data
            continue
        if isinstance(data.get("output_index"), int) and data["output_index"] > index:
            data = {**data, "output_index": data["output_index"] - 1}
        if isinstance(data.get("response"), dict) and len(data["response"]["output"]) > index:
            output = list(data["response"]["output"])
            assert _is_blank(output.pop(index)), data
            data = {**data, "response": {**data["response"], "output": output}}
        rest.append((name, data))
    return rest


def _v033_stream(events: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """An incomplete Responses stream as 0.33 sends it (v0.33 responses/serving.py):
    `close_current(response_item_status(finish_reason))` closes the item still open at a
    length finish "incomplete" (0.32: "completed"), and `responses_stream_generator` ends
    with `response.incomplete` (0.32: `response.completed` carrying status incomplete)."""
    if not events or not isinstance(events[-1][1], dict):
        return events
    name, terminal = events[-1]
    if name != "response.completed" or terminal["response"]["status"] != "incomplete":
        return events
    done = [data for event, data in events if event == "response.output_item.done"]
    if done:
        done[-1]["item"]["status"] = "incomplete"
    _v033_streamed_response(terminal["response"])
    return [*events[:-1], ("response.incomplete", {**terminal, "type": "response.incomplete"})]


def _v033_streamed_response(response: dict[str, Any]) -> None:
    if response["status"] == "incomplete" and response["output"]:
        response["output"][-1]["status"] = "incomplete"


def _sdk_final(base_url: str, path: str, body: dict[str, Any]) -> Any:
    extra = {"vllm_xargs": body["vllm_xargs"]}
    args = {k: v for k, v in body.items() if k not in ("vllm_xargs", "stream")}
    if path == MESSAGES:
        with anthropic.Anthropic(base_url=base_url, api_key="unused", max_retries=0,
                                 timeout=HTTP_TIMEOUT_S) as client, \
                client.messages.stream(**args, extra_body=extra) as stream:
            return stream.get_final_message().model_dump(mode="json")
    with openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0,
                       timeout=HTTP_TIMEOUT_S) as client, \
            client.responses.stream(**args, extra_body=extra) as stream:
        # The SDK's get_final_response() wants response.completed; an incomplete response
        # ends with response.incomplete, whose response is the final one too.
        terminal = [event for event in stream
                    if event.type in ("response.completed", "response.incomplete")]
        return terminal[-1].response.model_dump(mode="json")


# -- vLLM 0.32 -> 0.33, normalisation ---------------------------------------------------------
# v0.33 responses/protocol.py ResponsesResponse gained these fields (None unless the request
# set them); model_dump(mode="json") writes them, in this order, after `prompt` / `reasoning`.
_V033_RESPONSE_FIELDS = {"prompt": ("prompt_cache_options", "prompt_cache_key",
                                    "prompt_cache_retention"),
                         "reasoning": ("safety_identifier",)}


def _as_v033(payload: Any) -> Any:
    """The 0.33 answer for a 0.32 one: each step is a 0.32/0.33 difference of `vllm serve`."""
    if not isinstance(payload, dict):
        return payload
    if payload.get("object") == "response":
        return _v033_response(payload)
    if isinstance(payload.get("response"), dict):  # a Responses stream event
        return {**payload, "response": _v033_response(payload["response"])}
    return payload


def _v033_response(response: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in response.items():
        out[key] = value
        for added in _V033_RESPONSE_FIELDS.get(key, ()):
            out[added] = None
    return out


_ID_KEYS = frozenset({"id", "call_id", "item_id", "response_id"})
_CLOCK_KEYS = frozenset({"created_at", "completed_at"})
_RANDOM_KEYS = frozenset({"signature"})  # a random hex per thinking block, on both sides
# Responses usage: the engine's prefix-cache counts, which /inference/v1/generate does not
# report (README "Known differences"); ours are always these.
_ENGINE_CACHE_COUNTS = {"cached_tokens": 0, "cache_write_tokens": 0}
_ID_TEXT = re.compile(r"^(msg|resp|toolu|fc|rs|call|chatcmpl-tool)[_-]")


def _normalise(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _normal_leaf(key, item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def _normal_leaf(key: str, item: Any) -> Any:
    if key in _ID_KEYS and isinstance(item, str) and (_ID_TEXT.match(item) or key == "id"):
        return "<id>"
    if key in _CLOCK_KEYS and isinstance(item, int | float):
        return 0
    if key in _RANDOM_KEYS and isinstance(item, str):
        return "<random>"
    if key in _ENGINE_CACHE_COUNTS and isinstance(item, int):
        return "<engine cache>"
    return _normalise(item)


def _diff(serve: httpx.Response, ours: httpx.Response) -> str:
    return "\n" + "\n".join(_paths(_normalise(_as_v033(serve.json())), _normalise(ours.json())))


def _paths(expected: Any, ours: Any, where: str = "") -> list[str]:
    """One line per differing path (serve's value, then ours)."""
    if isinstance(expected, dict) and isinstance(ours, dict):
        return [line for key in dict.fromkeys([*expected, *ours])
                for line in _paths(expected.get(key, "<absent>"), ours.get(key, "<absent>"),
                                   f"{where}.{key}")]
    if isinstance(expected, list) and isinstance(ours, list) and len(expected) == len(ours):
        return [line for i, (a, b) in enumerate(zip(expected, ours, strict=True))
                for line in _paths(a, b, f"{where}[{i}]")]
    return [] if expected == ours else [f"{where or '.'}: serve {expected!r} ours {ours!r}"]


def _first_difference(serve: list[tuple[str, Any]], ours: list[tuple[str, Any]]) -> str:
    for index, (expected, mine) in enumerate(zip(serve, ours, strict=False)):
        if expected != mine:
            return f"event {index}: serve {expected!r} ours {mine!r}"
    return f"lengths differ: serve {len(serve)} events {[n for n, _ in serve]}, " \
           f"ours {len(ours)} {[n for n, _ in ours]}"
