"""Differential: the gateway answers byte for byte what `vllm serve` answers, on one real engine.

Theory of operation:
- ONE vLLM 0.32 CPU engine, started with `--enable-scale-out` (not `--tokens-only`), serves
  both vLLM's own OpenAI routes (`/v1/chat/completions`, `/v1/completions`, with
  `--reasoning-parser qwen3 --tool-call-parser hermes --enable-auto-tool-choice`, so vLLM itself
  splits reasoning and tool calls) and `/inference/v1/generate`. Our gateway (in-process, on
  uvicorn) points at that same engine. Every case sends the same body to both.
- Outputs are forced by the harness's scripted logits processor (`vllm_xargs.rs_script`), so
  both sides get the same tokens. The completions logprobs cases are unscripted and greedy:
  a forced token is rarely the model's own top-1, and a 0.32 engine's *generate* cuts
  `top_logprobs` to max(k, 1) entries while serve keeps k + 1 (tests/harness/README.md,
  "differences" item 1); with greedy sampling the sampled token is the top-1, the candidate
  set is k entries on both paths, and nothing engine-version-specific is left to compare.
- Stream chunking: vLLM merges the outputs of several engine steps into one chunk whenever the
  API server's consumer falls behind, so chunk boundaries are timing, not protocol. The engine
  also loads a tiny logits processor (`StepPace`, source below, written to a temp folder on
  the engine's PYTHONPATH) that sleeps a few ms per step, which leaves the API server time to
  ship each step alone; and a differing stream case is re-run up to ATTEMPTS times: it passes
  if one attempt is identical, else the report shows the attempt with the fewest differences
  (a real difference shows in all). With n > 1 the interleaving of the choices is timing too,
  so each choice's chunks are compared in order (`_by_choice`).
- Expected = what vLLM 0.33 `vllm serve` returns (our contract). The engine is 0.32, so its
  answer is turned into 0.33's by `_as_v033`, one named step per known difference, each citing
  the 0.33 source. Then both sides are normalised (`id`, `created`, the value of
  `system_fingerprint` when it is a string, tool-call ids: request-id derived or random) and
  compared twice: parsed (a path-by-path diff, readable) and as raw bytes (key order, float
  text, escaping, SSE framing, `data: [DONE]`).
- Known differences (deliberate, documented in README.md; `Case.known` names them): such a
  case asserts everything the difference leaves equal, and the difference itself, so a change
  on either side fails the case.
  TOOL_CALL_FRAGMENTS: both stream a tool call as its name, then argument fragments, but the
  fragments are cut differently (ours: as the arguments are read, canonical JSON written as it
  is decoded; vLLM: diffs of re-parsed partial JSON). Asserted equal: the assembled calls
  (name; arguments string- and JSON-equal; one `chatcmpl-tool-<16 hex>` id and type each),
  the delta that opens each call, the shape (name first, then argument fragments only), the
  finish reasons, and every chunk once tool calls are taken out (with return_token_ids that
  is one chunk per token, on both sides).
  STOP_STRING_HOLDBACK: while a stream runs vLLM holds back the last (longest stop string -
  1) characters; ours holds back only text that may begin a stop string. Asserted equal: the
  assembled text, finish_reason and stop_reason, and the first and final chunks apart from
  their text; asserted different: how the text is cut into chunks.
- Reasoning tokens: with `--reasoning-parser`, every chat usage carries
  `completion_tokens_details.reasoning_tokens` (0.32 and 0.33 count alike here; the 0.33
  change, a prompt that already closed reasoning, is not exercised). The split-character case
  shows vLLM's streamed count skipping steps without text, which the gateway reproduces.
- The expected raw bytes are re-serialised from vLLM's own bytes; `_dumps` keeps every float's
  original text and writes compact UTF-8 JSON like pydantic and Starlette do. Each serve
  payload is first checked to round-trip through `_dumps` unchanged, so the serialiser itself
  cannot invent a difference.

Why tests/service/ and not tests/gateway/: the shared tokens and P/D engines live from their
first user (tests/derender) to their last (tests/harness/test_engines.py) and are stopped
after it (tests/conftest.py pytest_runtest_teardown); tests/gateway runs in between, and the
idle P/D engines poll both cores. Here this engine never runs next to them; it is stopped when
the module ends.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Self

import httpx
import pytest

from tests.gateway.e2e_support import RunningGateway, Scripts
from tests.service.conftest import CHAT, COMPLETIONS, HTTP_TIMEOUT_S, MODEL

pytestmark = pytest.mark.engine

ATTEMPTS = 3  # a differing stream case is re-run (chunking is timing: module docstring)
MAX_REPORTED_EVENTS = 12

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TOOL_CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
REASONING_TEXT = "<think>\nThe capital is Paris.\n</think>\n\nParis."
# "ꙮ" is three byte-level tokens: two steps without text, which vLLM's streamed count skips.
SPLIT_CHAR_REASONING_TEXT = "<think>\nThe capital ꙮ is Paris.\n</think>\n\nParis."
TOOL_CALL_FRAGMENTS = "tool_call_fragments"
STOP_STRING_HOLDBACK = "stop_string_holdback"
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
NAMED_TOOL = {"type": "function", "function": {"name": "get_weather"}}
CITY_JSON = '{"city": "Paris"}'
CITY_FORMAT = {"type": "json_schema", "json_schema": {
    "name": "city", "schema": WEATHER_TOOL["function"]["parameters"]}}


# -- cases ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    name: str
    path: str
    body: dict[str, Any]
    script: str | None = None  # forced output text; None: unscripted (greedy)
    known: str | None = None  # a named known difference (KNOWN_DIFFERENCES) replaces exactness

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    def request_body(self, scripts: Scripts) -> dict[str, Any]:
        body = json.loads(json.dumps(self.body))
        if self.script is not None:
            body.setdefault("vllm_xargs", {})["rs_script"] = scripts.ids(self.script)
        return body


def _chat(name: str, text: str, script: str | None, *, thinking: bool = False,
          known: str | None = None, **fields: Any) -> Case:
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    if not thinking:
        body.update(NO_THINKING)
    body.update(fields)
    return Case(name, CHAT, body, script, known)


def _completion(name: str, prompt: str, script: str | None, *, known: str | None = None,
                **fields: Any) -> Case:
    return Case(name, COMPLETIONS, {"model": MODEL, "prompt": prompt, **fields}, script, known)


USAGE = {"include_usage": True}
CONTINUOUS_USAGE = {"include_usage": True, "continuous_usage_stats": True}
CASES = [
    _chat("chat_plain", "Say hello", "Hello there, friend."),
    _chat("chat_stream_include_usage", "Say hello", "Hello there, friend.", stream=True,
          stream_options=USAGE),
    _chat("chat_reasoning", "Capital of France?", REASONING_TEXT, thinking=True),
    _chat("chat_reasoning_stream", "Capital of France?", REASONING_TEXT, thinking=True,
          stream=True),
    _chat("chat_tool_call", "Weather in Paris?", TOOL_CALL_TEXT, tools=[WEATHER_TOOL]),
    _chat("chat_reasoning_continuous_usage_stream", "Capital of France?",
          SPLIT_CHAR_REASONING_TEXT, thinking=True, stream=True, stream_options=CONTINUOUS_USAGE),
    _chat("chat_reasoning_n2", "Capital of France?", REASONING_TEXT, thinking=True, n=2),
    _chat("chat_tool_call_stream", "Weather in Paris?", TOOL_CALL_TEXT, tools=[WEATHER_TOOL],
          stream=True, known=TOOL_CALL_FRAGMENTS),
    # return_token_ids also shows the prompt ids (our render vs serve's) and the chunking.
    _chat("chat_tool_call_stream_token_ids", "Weather in Paris?", TOOL_CALL_TEXT,
          tools=[WEATHER_TOOL], stream=True, return_token_ids=True, known=TOOL_CALL_FRAGMENTS),
    # Forced tool calls: the engine's grammar is hermes' structural tag, so the script is the
    # hermes text. Content "" (vLLM #48617, v0.33 message_assembly.py `_forces_tool_calls` ->
    # `content or ""`); a named tool finishes "stop", "required" "tool_calls" (v0.33
    # tool_calls_utils.py resolve_finish_reason).
    _chat("chat_named_tool_call", "Weather in Paris?", TOOL_CALL_TEXT, tools=[WEATHER_TOOL],
          tool_choice=NAMED_TOOL),
    _chat("chat_named_tool_call_stream", "Weather in Paris?", TOOL_CALL_TEXT,
          tools=[WEATHER_TOOL], tool_choice=NAMED_TOOL, stream=True, known=TOOL_CALL_FRAGMENTS),
    _chat("chat_required_tool_call", "Weather in Paris?", TOOL_CALL_TEXT, tools=[WEATHER_TOOL],
          tool_choice="required"),
    # Structured outputs need an engine with its tokenizer (`--enable-scale-out`, as here):
    # `--tokens-only` engines refuse them. The grammar and the script agree, so both sides
    # decode the same JSON. A forced script cannot show that the grammar reached the engine,
    # so the choice case is unscripted and greedy (test_structured_outputs_reach_the_engine).
    # A completion's grammar waits for the end of reasoning, which with `--reasoning-parser`
    # a plain prompt never reaches (`reasoning_ended` false): the regex case decodes freely
    # on both sides.
    _chat("chat_structured_outputs_choice", "Yes or no?", None, max_tokens=8, temperature=0,
          structured_outputs={"choice": ["yes", "no"]}),
    _chat("chat_response_format_json_schema", "Weather as JSON", CITY_JSON,
          response_format=CITY_FORMAT),
    _chat("chat_response_format_json_schema_stream", "Weather as JSON", CITY_JSON,
          response_format=CITY_FORMAT, stream=True),
    _completion("completion_structured_outputs_regex", "Answer:", None, max_tokens=5,
                temperature=0, structured_outputs={"regex": " (yes|no)"}),
    _chat("chat_n2", "Count", "One two three.", n=2),
    _chat("chat_n2_stream", "Count", "One two three.", n=2, stream=True),
    _chat("chat_logprobs", "Ok?", "Yes, sure.", logprobs=True, top_logprobs=2),
    _chat("chat_logprobs_stream", "Ok?", "Yes, sure.", logprobs=True, top_logprobs=2,
          stream=True),
    _chat("chat_max_tokens_length", "Count", "one two three four five", max_tokens=3),
    _chat("chat_max_tokens_length_stream", "Count", "one two three four five", max_tokens=3,
          stream=True, stream_options=USAGE),
    _chat("chat_continuous_usage_stream", "Ok?", "Yes, sure.", stream=True,
          stream_options=CONTINUOUS_USAGE),
    _chat("chat_stop_string_stream", "Count", "one two three four", stop=["three"],
          stream=True, known=STOP_STRING_HOLDBACK),
    _completion("completion_plain", "The sky is", " blue today", max_tokens=20),
    _completion("completion_stream", "The sky is", " blue today", max_tokens=20, stream=True),
    _completion("completion_echo", "The sky is", " blue", max_tokens=6, echo=True),
    _completion("completion_echo_stream", "The sky is", " blue", max_tokens=6, echo=True,
                stream=True),
    _completion("completion_logprobs", "The sky is", None, max_tokens=6, temperature=0,
                logprobs=2),
    _completion("completion_logprobs_stream", "The sky is", None, max_tokens=6, temperature=0,
                logprobs=2, stream=True),
    _completion("completion_max_tokens_length", "Count:", " one two three four five",
                max_tokens=3),
    _completion("completion_continuous_usage_stream", "The sky is", " blue today",
                max_tokens=20, stream=True, stream_options=CONTINUOUS_USAGE),
    _completion("completion_stop_string", "Count:", " one two three four", max_tokens=20,
                stop=[" three"]),
    _completion("completion_stop_string_stream", "Count:", " one two three four", max_tokens=20,
                stop=[" three"], stream=True, known=STOP_STRING_HOLDBACK),
]


# -- the test ---------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gateway_matches_vllm_serve(case: Case, serve_engine: str,
                                    parity_gateway: RunningGateway,
                                    parity_scripts: Scripts) -> None:
    body = case.request_body(parity_scripts)
    failed: list[Outcome] = []
    with httpx.Client(timeout=HTTP_TIMEOUT_S) as client:
        for _ in range(ATTEMPTS if case.stream else 1):
            serve = _exchange(client, serve_engine + case.path, body)
            ours = _exchange(client, parity_gateway.url + case.path, body)
            outcome = _compare(case, serve, ours)
            if outcome.equal:
                return
            failed.append(outcome)
    closest = min(failed, key=lambda o: len(o.lines))  # the attempt least disturbed by timing
    pytest.fail(f"{case.name}: gateway differs from vllm serve (0.33 expectations), "
                f"{len(failed)} attempt(s); closest:\n{closest.report()}", pytrace=False)


def test_structured_outputs_reach_the_engine(parity_gateway: RunningGateway) -> None:
    """The choice parity case would pass vacuously if neither side applied the grammar."""
    (case,) = [c for c in CASES if c.name == "chat_structured_outputs_choice"]
    free = {k: v for k, v in case.body.items() if k != "structured_outputs"}
    with httpx.Client(timeout=HTTP_TIMEOUT_S) as client:
        texts = [client.post(parity_gateway.url + case.path, json=body).json()["choices"][0]
                 ["message"]["content"] for body in (case.body, free)]  # fmt: skip
    assert texts[0] in ("yes", "no")
    assert texts[1] not in ("yes", "no")


# -- HTTP -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: bytes


def _exchange(client: httpx.Client, url: str, body: dict[str, Any]) -> Reply:
    response = client.post(url, json=body)
    return Reply(response.status_code, response.headers.get("content-type", ""), response.content)


def _sse_payloads(body: bytes) -> list[bytes]:
    """`data: <payload>\\n\\n` events -> payloads; anything else is a framing error."""
    if not body.endswith(b"\n\n"):
        raise FramingError(f"stream does not end with a blank line: {body[-80:]!r}")
    payloads = []
    for event in body[:-2].split(b"\n\n"):
        if not event.startswith(b"data: ") or b"\n" in event:
            raise FramingError(f"not a single-line `data: ` event: {event[:200]!r}")
        payloads.append(event[len(b"data: "):])
    return payloads


class FramingError(AssertionError):
    pass


# -- JSON: parse keeping float text, serialise like pydantic / Starlette ------------------------
class _Float(float):
    """A float that remembers how the server wrote it."""

    text: str

    def __new__(cls, text: str) -> Self:
        value = super().__new__(cls, text)
        value.text = text
        return value


def _loads(raw: bytes) -> Any:
    return json.loads(raw, parse_float=_Float)


def _dumps(value: Any) -> str:
    """Compact UTF-8 JSON (`separators=(",", ":")`, no ASCII escaping), floats as written."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{_dumps(k)}:{_dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dumps(v) for v in value) + "]"
    if isinstance(value, _Float):
        return value.text
    return json.dumps(value, ensure_ascii=False)


# -- vLLM 0.32 serve -> 0.33 serve ------------------------------------------------------------
def _as_v033(case: Case, payload: Any, *, chunk: bool) -> Any:
    """The 0.33 answer for a 0.32 one: each step is a 0.32/0.33 difference of `vllm serve`."""
    if not isinstance(payload, dict) or "error" in payload or not payload.get("choices"):
        return payload  # usage chunk (exclude_none: unchanged), errors, [DONE]
    choices = payload["choices"]
    if not chunk:
        # v0.33 {chat_completion,completion}/protocol.py: *ResponseChoice gained
        # `weight_versions` (last field); JSONResponse(model_dump()) writes it as null.
        for choice in choices:
            choice["weight_versions"] = None
        return payload
    if case.path == COMPLETIONS:
        # v0.33 completion/serving.py completion_stream_generator passes weight_versions=
        # (last choice field) and kv_transfer_params= (last top-level field) on every chunk,
        # dumped with exclude_unset=True, so both appear as null.
        for choice in choices:
            choice["weight_versions"] = None
        payload["kv_transfer_params"] = None
        return payload
    if any("role" in choice.get("delta", {}) for choice in choices):
        return payload  # v0.33 role (first) chunk: kv_transfer_params is not passed there
    for choice in choices:
        if choice.get("finish_reason") is not None:
            # v0.33 chat_completion/serving.py: the finishing ChatCompletionResponseStreamChoice
            # passes weight_versions= (its last field), so exclude_unset keeps the null.
            choice["weight_versions"] = None
    # v0.33 chat_completion/serving.py: ChatCompletionStreamResponse(..., kv_transfer_params=
    # res.kv_transfer_params if finish_reason_sent[i] else None) on every content chunk; the
    # field is the model's last, so it is written last, as null here (no KV connector).
    payload["kv_transfer_params"] = None
    return payload


# -- normalisation ----------------------------------------------------------------------------
_RAW_RULES = (
    # the response id (chatcmpl-/cmpl-<request id>) and tool-call ids (random in serve,
    # request-id derived in ours); a quote inside a JSON string is escaped, so never matches.
    (re.compile(rb'(?<!\\)"id":"[^"\\]*"'), b'"id":"<id>"'),
    (re.compile(rb'(?<!\\)"created":\d+'), b'"created":0'),
    (re.compile(rb'(?<!\\)"system_fingerprint":"[^"\\]*"'), b'"system_fingerprint":"<fp>"'),
)


def _normalise_raw(raw: bytes) -> bytes:
    for pattern, replacement in _RAW_RULES:
        raw = pattern.sub(replacement, raw)
    return raw


def _normalise(value: Any) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "id" and isinstance(item, str):
                item = "<id>"
            elif key == "created" and isinstance(item, int):
                item = 0
            elif key == "system_fingerprint" and isinstance(item, str):
                item = "<fp>"
            out[key] = _normalise(item)
        return out
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def _paths_differing(expected: Any, ours: Any, path: str = "") -> list[str]:
    if isinstance(expected, dict) and isinstance(ours, dict):
        lines = []
        for key in list(expected) + [k for k in ours if k not in expected]:
            where = f"{path}.{key}"
            if key not in ours:
                lines.append(f"{where}: missing in ours (expected {_show(expected[key])})")
            elif key not in expected:
                lines.append(f"{where}: unexpected in ours ({_show(ours[key])})")
            else:
                lines += _paths_differing(expected[key], ours[key], where)
        if not lines and list(expected) != list(ours):
            lines.append(f"{path or '.'}: key order expected {list(expected)} ours {list(ours)}")
        return lines
    if isinstance(expected, list) and isinstance(ours, list) and len(expected) == len(ours):
        return [line for i, (e, o) in enumerate(zip(expected, ours))
                for line in _paths_differing(e, o, f"{path}[{i}]")]
    if type(expected) is not type(ours) and not (_is_number(expected) and _is_number(ours)):
        return [f"{path}: expected {_show(expected)} ours {_show(ours)}"]
    return [] if expected == ours else [f"{path}: expected {_show(expected)} ours {_show(ours)}"]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _show(value: Any) -> str:
    text = _dumps(value)
    return text if len(text) <= 300 else text[:300] + "..."


# -- comparison -------------------------------------------------------------------------------
@dataclass
class Outcome:
    equal: bool = True
    lines: list[str] = field(default_factory=list)

    def fail(self, line: str) -> None:
        self.equal = False
        self.lines.append(line)

    def report(self) -> str:
        return "\n".join(self.lines)


def _compare(case: Case, serve: Reply, ours: Reply) -> Outcome:
    outcome = Outcome()
    if serve.status != 200:
        outcome.fail(f"vllm serve itself answered {serve.status}: {serve.body[:500]!r}")
        return outcome
    if (ours.status, ours.content_type) != (serve.status, serve.content_type):
        outcome.fail(f"status/content-type: expected {serve.status} {serve.content_type!r}, "
                     f"ours {ours.status} {ours.content_type!r}: {ours.body[:500]!r}")
        return outcome
    if not case.stream:
        _compare_payload(case, outcome, "body", serve.body, ours.body, chunk=False)
        return outcome
    try:
        ours_payloads = _sse_payloads(ours.body)
    except FramingError as exc:
        outcome.fail(f"SSE framing (ours): {exc}")
        return outcome
    serve_payloads = _sse_payloads(serve.body)
    if ours_payloads[-1:] != [b"[DONE]"]:
        outcome.fail(f"ours does not end with `data: [DONE]`: {ours_payloads[-1:]!r}")
    assert serve_payloads[-1] == b"[DONE]"
    expected = [_v033_raw(case, p) for p in serve_payloads[:-1]]
    mine = ours_payloads[:-1] if ours_payloads[-1:] == [b"[DONE]"] else ours_payloads
    if (case.body.get("n") or 1) > 1:
        # How n > 1 choices interleave is engine timing, not protocol: v0.33 AsyncLLM.add_request
        # fans out one engine request per choice with an await between them, so a step may run
        # choice 0 alone. Each choice's own chunks are compared in order.
        expected, mine = _by_choice(expected), _by_choice(mine)
    if case.known is not None:
        KNOWN_DIFFERENCES[case.known](expected, mine, outcome)
        return outcome
    _compare_events(expected, mine, outcome)
    return outcome


def _compare_events(expected: list[bytes], mine: list[bytes], outcome: Outcome) -> None:
    """Event by event, as raw bytes after normalisation (a readable diff on failure)."""
    if len(expected) != len(mine):
        outcome.fail(f"event count: expected {len(expected)} ours {len(mine)} (before [DONE])")
    reported, differed = 0, len(expected) != len(mine)
    for i in range(max(len(expected), len(mine))):
        if reported >= MAX_REPORTED_EVENTS:
            outcome.fail("... (more differing events not shown)")
            break
        exp = expected[i] if i < len(expected) else None
        got = mine[i] if i < len(mine) else None
        if exp is not None and got is not None and _normalise_raw(exp) == _normalise_raw(got):
            continue
        reported, differed = reported + 1, True
        outcome.fail(f"event {i}:\n  expected: {_text(exp)}\n  ours:     {_text(got)}")
        if exp is not None and got is not None:
            for line in _paths_differing(_normalise(_loads(exp)), _normalise(_loads(got))):
                outcome.fail(f"    {line}")
    if differed:
        same = _stream_digest(expected) == _stream_digest(mine)
        outcome.lines.insert(0, f"same assembled content per choice (chunking-only?): {same}")


# -- known differences (module docstring) -------------------------------------------------------
TOOL_CALL_ID = re.compile(r"chatcmpl-tool-[0-9a-f]{16}")


def _tool_call_fragments(expected: list[bytes], mine: list[bytes], outcome: Outcome) -> None:
    """Known difference TOOL_CALL_FRAGMENTS: both stream a call as its name, then argument
    fragments, cut differently. The calls a client assembles, each call's opening delta, the
    finish reason and every chunk that carries no tool call are vLLM's."""
    exp_events, our_events = [_loads(p) for p in expected], [_loads(p) for p in mine]
    exp_calls, our_calls = _assembled_calls(exp_events), _assembled_calls(our_events)
    if not exp_calls:
        outcome.fail("vllm serve streamed no tool call: the case no longer shows the difference")
    if [(c["name"], c["arguments"]) for c in exp_calls] != \
            [(c["name"], c["arguments"]) for c in our_calls]:
        outcome.fail(f"assembled tool calls: expected {exp_calls} ours {our_calls}")
    for side, calls in (("expected", exp_calls), ("ours", our_calls)):
        for call in calls:
            if len(call["ids"]) != 1 or not TOOL_CALL_ID.fullmatch(call["ids"][0]) \
                    or call["types"] != ["function"]:
                outcome.fail(f"{side}: tool call {call['index']} ids/types {call}")
            try:
                json.loads(call["arguments"])
            except ValueError:
                outcome.fail(f"{side}: tool call {call['index']} arguments are not JSON")
    # The shape, on our side too: the name first, then argument fragments only.
    if not all(c["deltas"][0] <= {"name", "arguments"} and "name" in c["deltas"][0]
               and all(d == {"arguments"} for d in c["deltas"][1:]) for c in our_calls):
        outcome.fail(f"ours does not stream name then argument fragments: {our_calls}")
    if not all(len(c["deltas"]) > 1 and c["deltas"][0] == {"name"}
               and all(d == {"arguments"} for d in c["deltas"][1:]) for c in exp_calls):
        outcome.fail(f"vllm serve no longer streams name then argument fragments: {exp_calls}")
    # The delta that opens a call is vLLM's (`"content": null` beside it from the hermes
    # parser, key order, id and type), once ours is stripped of the arguments it adds.
    exp_openers = [_normalise(_opening_delta(exp_events, c["index"])) for c in exp_calls]
    our_openers = [_normalise(_opening_delta(our_events, c["index"], strip_arguments=True))
                   for c in our_calls]
    if [_dumps(d) for d in exp_openers] != [_dumps(d) for d in our_openers]:
        outcome.fail(f"call-opening deltas: expected {_dumps(exp_openers)} "
                     f"ours {_dumps(our_openers)}")
    if _finish_reasons(exp_events) != _finish_reasons(our_events):
        outcome.fail(f"finish reasons: expected {_finish_reasons(exp_events)} "
                     f"ours {_finish_reasons(our_events)}")
    _compare_events(_without_tool_calls(exp_events), _without_tool_calls(our_events), outcome)


def _opening_delta(events: list[Any], key: tuple[int, int], *, strip_arguments: bool = False
                   ) -> dict[str, Any]:
    """The first delta carrying tool call `key` ((choice, call) index), that call only."""
    for event in events:
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            calls = [c for c in delta.get("tool_calls") or [] if (choice["index"], c["index"]) == key]
            if not calls:
                continue
            call = json.loads(_dumps(calls[0]), parse_float=_Float)
            if strip_arguments:
                call.get("function", {}).pop("arguments", None)
            return {**delta, "tool_calls": [call]}
    raise AssertionError(f"no delta opens tool call {key}")


def _assembled_calls(events: list[Any]) -> list[dict[str, Any]]:
    """Per tool-call index: name and arguments concatenated, ids, types, and which function
    fields each of its deltas carried."""
    calls: dict[tuple[int, int], dict[str, Any]] = {}
    for event in events:
        for choice in event.get("choices") or []:
            for call in (choice.get("delta") or {}).get("tool_calls") or []:
                key = (choice["index"], call["index"])
                acc = calls.setdefault(key, {"index": key, "name": "", "arguments": "",
                                             "ids": [], "types": [], "deltas": []})
                function = call.get("function") or {}
                acc["name"] += function.get("name") or ""
                acc["arguments"] += function.get("arguments") or ""
                acc["ids"] += [call["id"]] if "id" in call else []
                acc["types"] += [call["type"]] if "type" in call else []
                acc["deltas"].append(set(function))
    return [calls[k] for k in sorted(calls)]


def _finish_reasons(events: list[Any]) -> list[tuple[int, Any, Any]]:
    return [(c["index"], c["finish_reason"], c.get("stop_reason")) for e in events
            for c in e.get("choices") or [] if c.get("finish_reason") is not None]


def _without_tool_calls(events: list[Any]) -> list[bytes]:
    """The chunks as they would be without tool calls: a delta loses `tool_calls` (and the
    `"content": null` the hermes parser sets beside them); a chunk left with nothing serve
    would send (empty delta, no finish, logprobs or token ids) goes."""
    out = []
    for event in events:
        event = json.loads(_dumps(event), parse_float=_Float)  # a copy: callers keep theirs
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            if "tool_calls" in delta:
                delta.pop("tool_calls")
                if delta.get("content", "") is None:
                    delta.pop("content")
        choices = event.get("choices") or []
        if choices and all(not c.get("delta") and c.get("finish_reason") is None
                           and c.get("logprobs") is None and c.get("token_ids") is None
                           for c in choices):
            continue
        out.append(_dumps(event).encode())
    return out


def _stop_string_holdback(expected: list[bytes], mine: list[bytes], outcome: Outcome) -> None:
    """Known difference STOP_STRING_HOLDBACK: while a stream runs, vLLM holds back the last
    (longest stop string - 1) characters; ours holds back only text that may begin a stop
    string. The text a client assembles, finish_reason and stop_reason are vLLM's, and so are
    the first and the final chunk apart from their text."""
    exp_events, our_events = [_loads(p) for p in expected], [_loads(p) for p in mine]
    exp_texts, our_texts = _chunk_texts(exp_events), _chunk_texts(our_events)
    if "".join(exp_texts) != "".join(our_texts):
        outcome.fail(f"assembled text: expected {''.join(exp_texts)!r} ours {''.join(our_texts)!r}")
    if _finish_reasons(exp_events) != _finish_reasons(our_events) or not any(
            isinstance(r[2], str) for r in _finish_reasons(exp_events)):
        outcome.fail(f"finish/stop reasons: expected {_finish_reasons(exp_events)} "
                     f"ours {_finish_reasons(our_events)}")
    if exp_texts == our_texts:
        outcome.fail(f"the streams are cut alike ({exp_texts!r}): the known difference is gone, "
                     "compare this case exactly")
    for where, exp, ours in (("first", _textless(exp_events[0]), _textless(our_events[0])),
                             ("final", _textless(exp_events[-1]), _textless(our_events[-1]))):
        if _normalise_raw(exp) != _normalise_raw(ours):
            outcome.fail(f"{where} chunk:\n  expected: {_text(exp)}\n  ours:     {_text(ours)}")


def _chunk_texts(events: list[Any]) -> list[str]:
    return [(c.get("text") or "") + ((c.get("delta") or {}).get("content") or "")
            for e in events for c in e.get("choices") or []
            if c.get("text") or (c.get("delta") or {}).get("content")]


def _textless(event: Any) -> bytes:
    event = json.loads(_dumps(event), parse_float=_Float)
    for choice in event.get("choices") or []:
        if "text" in choice:
            choice["text"] = ""
        (choice.get("delta") or {}).pop("content", None)
    return _dumps(event).encode()


KNOWN_DIFFERENCES = {TOOL_CALL_FRAGMENTS: _tool_call_fragments,
                     STOP_STRING_HOLDBACK: _stop_string_holdback}


def _by_choice(payloads: list[bytes]) -> list[bytes]:
    """Stable regroup: role chunks, then each choice's chunks in order, then choice-less ones."""

    def key(raw: bytes) -> tuple[int, int]:
        choices = json.loads(raw).get("choices") or []
        if not choices:
            return (2, 0)
        return (0 if "role" in (choices[0].get("delta") or {}) else 1, choices[0]["index"])

    return sorted(payloads, key=key)


def _text(raw: bytes | None) -> str:
    if raw is None:
        return "(none)"
    text = _normalise_raw(raw).decode("utf-8", "replace")
    return text if len(text) <= 1500 else text[:1500] + "..."


def _v033_raw(case: Case, raw: bytes) -> bytes:
    """vLLM 0.32's payload -> 0.33's, re-serialised (checked to round-trip first)."""
    value = _loads(raw)
    assert _dumps(value).encode() == raw, f"serialiser does not reproduce vLLM's bytes: {raw!r}"
    return _dumps(_as_v033(case, value, chunk=case.stream)).encode()


def _compare_payload(case: Case, outcome: Outcome, where: str, serve_raw: bytes,
                     ours_raw: bytes, *, chunk: bool) -> None:
    expected = _v033_raw(case, serve_raw)
    if _normalise_raw(expected) == _normalise_raw(ours_raw):
        return
    outcome.fail(f"{where}:\n  expected: {_text(expected)}\n  ours:     {_text(ours_raw)}")
    try:
        ours_value = _loads(ours_raw)
    except ValueError:
        outcome.fail("    ours is not JSON")
        return
    for line in _paths_differing(_normalise(_loads(expected)), _normalise(ours_value)):
        outcome.fail(f"    {line}")


def _stream_digest(payloads: list[bytes]) -> dict[Any, Any]:
    """What a client assembles per choice, ignoring how it was cut into chunks."""
    digest: dict[Any, Any] = {}
    for raw in payloads:
        try:
            event = json.loads(raw)
        except ValueError:
            return {"unparseable": raw}
        if not isinstance(event, dict) or not event.get("choices"):
            digest.setdefault("other", []).append(_normalise(event))
            continue
        for choice in event["choices"]:
            acc = digest.setdefault(choice.get("index"), {
                "text": "", "reasoning": "", "calls": "", "lp": 0, "finish": None, "ids": []})
            delta = choice.get("delta") or {}
            acc["text"] += (choice.get("text") or "") + (delta.get("content") or "")
            acc["reasoning"] += delta.get("reasoning") or ""
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                acc["calls"] += (function.get("name") or "") + (function.get("arguments") or "")
            logprobs = choice.get("logprobs") or {}
            acc["lp"] += len(logprobs.get("content") or logprobs.get("tokens") or [])
            acc["ids"] += choice.get("token_ids") or []
            acc["finish"] = choice.get("finish_reason") or acc["finish"]
    return digest
