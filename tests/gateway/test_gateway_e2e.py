"""End to end: the openai SDK -> gateway (in-process uvicorn) -> a real tokens-only vLLM engine.

Outputs are scripted by the engine's test logits processor (`vllm_xargs.rs_script`), so the
expected text is known exactly; n = 2 uses seeded sampling instead.
"""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from prometheus_client import REGISTRY

from render_service.gateway.config import Timeouts
from tests.harness.engine_api import metric_total, metrics_text
from tests.harness.script_protocol import PACE_KEY, PACE_MS

from .e2e_support import CuttableProxy, HangingEngine, running

pytestmark = pytest.mark.engine

MODEL = "tiny-qwen3"
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
# After a script the engine forces this token (" the") until max_tokens: a long stream that
# only an abort (or max_tokens) ends. vllm_xargs values cannot be null.
FILLER = 279
PACED = {PACE_KEY: PACE_MS}  # long requests outlast any abort latency (script_protocol)
TOOL_CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def generated_tokens(url: str) -> float:
    return metric_total(metrics_text(url), "vllm:generation_tokens_total")


def assert_engine_stopped_early(url: str, generated_before: float) -> None:
    """The engine has nothing running soon, far short of the 1500 filler tokens asked for.

    vLLM does not count aborted requests in request_success_total, so the evidence is: the
    request left the engine's running set long before max_tokens (the requests are PACED: a
    full run takes over 15 s on any machine, 400 tokens at least 4 s)."""
    _eventually(lambda: metric_total(metrics_text(url), "vllm:num_requests_running") == 0)
    assert generated_tokens(url) - generated_before < 400


@pytest.fixture(scope="module")
def gw(e2e_config, e2e_codec, tokens_engine):  # type: ignore[no-untyped-def]
    with running(e2e_config, e2e_codec, engines=(tokens_engine,)) as gateway:
        yield gateway


def test_plain_chat(gw, scripts) -> None:  # type: ignore[no-untyped-def]
    """Non-streaming chat: the scripted text comes back as content, finish_reason stop."""
    out = gw.client().chat.completions.create(
        model=MODEL, messages=user("Say hello"), extra_body=scripts.xargs("Hello there, friend."))
    assert out.choices[0].message.content == "Hello there, friend."
    assert out.choices[0].finish_reason == "stop"
    assert out.id.startswith("chatcmpl-") and out.model == MODEL
    assert out.usage.completion_tokens == len(scripts.ids("Hello there, friend.")) + 1  # + EOS


def test_streaming_chat(gw, scripts) -> None:  # type: ignore[no-untyped-def]
    """Streaming chat: role first, deltas concatenate to the script, one finish, usage last."""
    stream = gw.client().chat.completions.create(
        model=MODEL, messages=user("Say hello"), stream=True,
        stream_options={"include_usage": True}, extra_body=scripts.xargs("Hi! How are you?"))
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hi! How are you?"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert len({c.id for c in chunks}) == 1


def test_completions_batch_and_stream(gw, scripts) -> None:  # type: ignore[no-untyped-def]
    """/v1/completions, both ways, give the scripted continuation."""
    client = gw.client()
    out = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=20,
                                    extra_body=scripts.xargs(" blue today"))
    assert out.choices[0].text == " blue today"
    stream = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=20,
                                       stream=True, extra_body=scripts.xargs(" blue today"))
    assert "".join(c.choices[0].text for c in stream) == " blue today"


def test_streamed_tool_call_assembles(gw, scripts) -> None:  # type: ignore[no-untyped-def]
    """Hermes tool call streamed: deltas assemble to get_weather({"city": "Paris"})."""
    stream = gw.client().chat.completions.create(
        model=MODEL, messages=user("Weather in Paris?"), tools=[WEATHER_TOOL], stream=True,
        extra_body=scripts.xargs(TOOL_CALL_TEXT))
    name, arguments, ids, finish = "", "", set(), None
    for chunk in stream:
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                assert call.index == 0
                ids.add(call.id) if call.id else None
                name += call.function.name or "" if call.function else ""
                arguments += call.function.arguments or "" if call.function else ""
            finish = choice.finish_reason or finish
    assert name == "get_weather" and json.loads(arguments) == {"city": "Paris"}
    assert len(ids) == 1 and finish == "tool_calls"


def test_tool_call_non_streaming(gw, scripts) -> None:  # type: ignore[no-untyped-def]
    """The same tool call, non-streaming."""
    out = gw.client().chat.completions.create(
        model=MODEL, messages=user("Weather in Paris?"), tools=[WEATHER_TOOL],
        extra_body=scripts.xargs(TOOL_CALL_TEXT))
    (call,) = out.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert out.choices[0].finish_reason == "tool_calls"


def test_structured_outputs_refused_by_tokens_only_engine(gw) -> None:  # type: ignore[no-untyped-def]
    """A `--tokens-only` engine has no tokenizer for a grammar: its 400 reaches the client
    (README: run `--enable-scale-out` engines for structured outputs)."""
    with pytest.raises(openai.BadRequestError) as refused:
        gw.client().chat.completions.create(
            model=MODEL, messages=user("Yes or no?"), max_tokens=4,
            response_format={"type": "json_object"})
    assert "Structured outputs requires a tokenizer" in str(refused.value)


def test_reasoning_split(gw, scripts) -> None:  # type: ignore[no-untyped-def]
    """qwen3 reasoning: thinking goes to `reasoning`, the rest to content (stream and not)."""
    script = scripts.xargs("<think>\nThe capital is Paris.\n</think>\n\nParis.", thinking=True)
    client = gw.client()
    out = client.chat.completions.create(model=MODEL, messages=user("Capital of France?"),
                                         extra_body=script)
    message = out.choices[0].message
    assert "The capital is Paris." in message.model_extra["reasoning"]
    assert message.content.strip() == "Paris."
    stream = client.chat.completions.create(model=MODEL, messages=user("Capital of France?"),
                                            stream=True, extra_body=script)
    reasoning, content = "", ""
    for chunk in stream:
        for choice in chunk.choices:
            reasoning += (choice.delta.model_extra or {}).get("reasoning") or ""
            content += choice.delta.content or ""
    assert reasoning == message.model_extra["reasoning"] and content == message.content


def test_stop_string_cut_and_engine_aborted(gw, scripts, tokens_engine) -> None:  # type: ignore[no-untyped-def]
    """A stop string: text cut right before it, finish stop, the engine request aborted."""
    script = {"vllm_xargs": {"rs_script": scripts.ids("one two three four five"),
                             "rs_script_after": FILLER, **PACED},  # then filler: only the abort stops it
              "chat_template_kwargs": {"enable_thinking": False}}
    before = generated_tokens(tokens_engine)
    stream = gw.client().chat.completions.create(
        model=MODEL, messages=user("count"), stream=True, stop=["three"], max_tokens=1500,
        extra_body={**script, "ignore_eos": True})
    chunks = [c for c in stream if c.choices]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "one two "
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].choices[0].model_extra["stop_reason"] == "three"
    gw.wait_idle()
    assert_engine_stopped_early(tokens_engine, before)
    before = generated_tokens(tokens_engine)
    batch = gw.client().chat.completions.create(
        model=MODEL, messages=user("count"), stop=["three"], max_tokens=1500,
        extra_body={**script, "ignore_eos": True})
    assert batch.choices[0].message.content == "one two "
    gw.wait_idle()
    assert_engine_stopped_early(tokens_engine, before)


def test_n2_seeded_stream_equals_batch(gw) -> None:  # type: ignore[no-untyped-def]
    """n = 2 with a seed: two independent choices; streaming assembles to the batch answer."""
    client = gw.client()
    kwargs = dict(model=MODEL, messages=user("Tell me something"), n=2, seed=1234, max_tokens=12,
                  temperature=1.0, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    batch = client.chat.completions.create(**kwargs)
    assert sorted(c.index for c in batch.choices) == [0, 1]
    texts = {0: "", 1: ""}
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == {c.index: c.message.content for c in batch.choices}
    assert texts[0] != texts[1]  # seeded sampling gives each choice its own tokens


def test_client_disconnect_aborts_engine_request(gw, scripts, tokens_engine) -> None:  # type: ignore[no-untyped-def]
    """Closing the HTTP stream mid-way aborts the engine request; nothing stays in flight."""
    before = generated_tokens(tokens_engine)
    body = {"model": MODEL, "messages": user("go"), "stream": True, "max_tokens": 1500,
            "ignore_eos": True, "vllm_xargs": {"rs_script": scripts.ids("a b c"), "rs_script_after": FILLER, **PACED}}
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", gw.url + "/v1/chat/completions", json=body) as response:
            for i, _ in enumerate(response.iter_lines()):
                if i > 10:
                    break
    gw.wait_idle()
    assert_engine_stopped_early(tokens_engine, before)
    assert gw.gateway.aborter._tasks == set()
    assert REGISTRY.get_sample_value("render_service_gateway_requests_in_flight") == 0


def test_engine_connection_killed_mid_stream(e2e_config, e2e_codec, scripts, tokens_engine) -> None:  # type: ignore[no-untyped-def]
    """The engine link dies mid-stream: the client gets an error event and [DONE], no hang."""
    proxy = CuttableProxy(tokens_engine)
    body = {"model": MODEL, "messages": user("go"), "stream": True, "max_tokens": 1500,
            "ignore_eos": True, "vllm_xargs": {"rs_script": scripts.ids("x y z"), "rs_script_after": FILLER, **PACED}}
    with running(e2e_config, e2e_codec, engines=(proxy.url,)) as gateway:
        lines = []
        with httpx.Client(timeout=30) as client:
            with client.stream("POST", gateway.url + "/v1/chat/completions", json=body) as response:
                assert response.status_code == 200
                for line in response.iter_lines():
                    lines.append(line)
                    if len(lines) == 12:
                        proxy.cut()
        events = [line for line in lines if line]
        assert events[-1] == "data: [DONE]"
        error = json.loads(events[-2].removeprefix("data: "))["error"]
        assert error["code"] == 502 and "dropped the stream" in error["message"]
        with pytest.raises(openai.APIStatusError) as refused:  # engine gone: clean 503
            gateway.client().chat.completions.create(model=MODEL, messages=user("again"))
        assert refused.value.status_code in (502, 503)
        gateway.wait_idle()


def test_engine_that_never_answers(e2e_config, e2e_codec) -> None:  # type: ignore[no-untyped-def]
    """An engine that accepts but never answers: a 504 within the deadlines, aborts sent."""
    engine = HangingEngine()
    timeouts = Timeouts(connect_s=1.0, first_token_s=1.0, inter_token_s=1.0, request_s=1.0)
    try:
        with running(e2e_config, e2e_codec, engines=(engine.url,), timeouts=timeouts,
                     max_retries=1) as gateway:
            started = time.monotonic()
            with pytest.raises(openai.APIStatusError) as stream_err:
                gateway.client().chat.completions.create(model=MODEL, messages=user("hi"), stream=True)
            with pytest.raises(openai.APIStatusError) as batch_err:
                gateway.client().chat.completions.create(model=MODEL, messages=user("hi"))
            assert time.monotonic() - started < 10
            gateway.wait_idle()
        assert stream_err.value.status_code == 504 and batch_err.value.status_code == 504
        # streaming: two first-token tries (max_retries=1); batch: one, since a decode that ran
        # into its whole-request deadline is not sent again
        assert len(engine.aborted) == 3
        assert all(rid.startswith("generate-tokens-chatcmpl-") for rid in engine.aborted)
    finally:
        engine.close()


def _eventually(check, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.1)
