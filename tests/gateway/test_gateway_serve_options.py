"""What `vllm serve` 0.33 applies around generation, through the gateway: `echo`,
`stream_options.continuous_usage_stats`, `system_fingerprint` and the response role.

Expected shapes follow vLLM 0.33's openai/chat_completion/serving.py and
completion/serving.py (pydantic dumps: `exclude_unset` for chunks, `exclude_none` for the
usage chunk), as cited per test.
"""

from __future__ import annotations

import orjson

from .conftest import fake_engines, running_gateway
from .gateway_fakes import MODEL, ids_of
from .test_gateway_flow import sse_payloads

FINGERPRINT = "vllm-0.33.0-01234567"  # FakeCodec.fingerprint[:8]


def chunks_of(raw: bytes) -> list[dict]:
    return [orjson.loads(p) for p in sse_payloads(raw)[:-1]]


def chat(*messages: tuple[str, str], **extra: object) -> dict:
    return {"model": MODEL, "messages": [{"role": r, "content": c} for r, c in messages], **extra}


async def test_continuous_usage_stats_on_every_chat_chunk() -> None:
    """Role chunk: 0 completion tokens; each content chunk: its choice's running count, with
    `completion_tokens_details` (set, null without a reasoning parser); `usage` right after
    `choices`. The final usage chunk is unchanged."""
    engines = fake_engines("http://e0", tokens=ids_of("abc"))
    body = chat(("user", "hi"), stream=True,
                stream_options={"include_usage": True, "continuous_usage_stats": True})
    async with running_gateway(engines) as h:
        chunks = chunks_of((await h.client.post("/v1/chat/completions", json=body)).content)
    role, *content, final = chunks
    assert list(role) == ["id", "object", "created", "model", "choices", "usage",
                          "prompt_token_ids", "prompt_text"]
    assert role["usage"] == {"prompt_tokens": 2, "total_tokens": 2, "completion_tokens": 0,
                             "completion_tokens_details": None}
    assert [c["usage"]["completion_tokens"] for c in content] == [1, 2, 3, 4]  # a, b, c, EOS
    assert all(list(c)[4:6] == ["choices", "usage"] for c in content)
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 4


async def test_continuous_usage_needs_include_usage() -> None:
    """continuous_usage_stats alone does nothing (vLLM's should_include_usage)."""
    engines = fake_engines("http://e0", tokens=ids_of("ab"))
    body = chat(("user", "hi"), stream=True, stream_options={"continuous_usage_stats": True})
    async with running_gateway(engines) as h:
        chunks = chunks_of((await h.client.post("/v1/chat/completions", json=body)).content)
    assert not any("usage" in c for c in chunks)


async def test_continuous_usage_on_completion_chunks_without_details() -> None:
    """Completions' running usage has no completion_tokens_details key; per-prompt counts."""
    engines = fake_engines("http://e0", tokens=ids_of("xy"))
    body = {"model": MODEL, "prompt": ["a", "bcd"], "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    async with running_gateway(engines) as h:
        chunks = chunks_of((await h.client.post("/v1/completions", json=body)).content)
    by_choice: dict[int, list[dict]] = {}
    for c in chunks[:-1]:
        by_choice.setdefault(c["choices"][0]["index"], []).append(c["usage"])
    assert by_choice[0][-1] == {"prompt_tokens": 1, "total_tokens": 4, "completion_tokens": 3}
    assert by_choice[1][-1] == {"prompt_tokens": 3, "total_tokens": 6, "completion_tokens": 3}
    assert [u["completion_tokens"] for u in by_choice[1]] == [1, 2, 3]


async def test_system_fingerprint_batch_and_stream() -> None:
    """Batch: on the response. Stream: on each terminal chunk when no usage chunk follows,
    else only on the usage chunk (chat serving.py: "Stamp the fingerprint on terminal
    chunks only ... the trailing usage chunk below overrides this")."""
    engines = fake_engines("http://e0", tokens=ids_of("ok"))
    async with running_gateway(engines) as h:
        batch = (await h.client.post("/v1/chat/completions", json=chat(("user", "hi")))).json()
        completion = (await h.client.post("/v1/completions",
                                          json={"model": MODEL, "prompt": "p"})).json()
        plain = chunks_of((await h.client.post("/v1/chat/completions", json=chat(
            ("user", "hi"), stream=True, n=2))).content)
        with_usage = chunks_of((await h.client.post("/v1/completions", json={
            "model": MODEL, "prompt": "p", "stream": True,
            "stream_options": {"include_usage": True}})).content)
    assert batch["system_fingerprint"] == completion["system_fingerprint"] == FINGERPRINT
    stamped = [c for c in plain if "system_fingerprint" in c]
    assert len(stamped) == 2 and all(c["choices"][0]["finish_reason"] == "stop" for c in stamped)
    assert list(stamped[0])[-2:] == ["system_fingerprint", "kv_transfer_params"]
    *content, usage = [c.get("system_fingerprint") for c in with_usage]
    assert content == [None] * len(content) and usage == FINGERPRINT


async def test_fingerprint_modes_none_and_custom() -> None:
    """--fingerprint-mode none: null, like vLLM; custom: the given value."""
    engines = fake_engines("http://e0")
    async with running_gateway(engines, fingerprint_mode="none") as h:
        none = (await h.client.post("/v1/chat/completions", json=chat(("user", "hi")))).json()
    async with running_gateway(engines, fingerprint_mode="custom", fingerprint_value="fp-1") as h:
        custom = (await h.client.post("/v1/chat/completions", json=chat(("user", "hi")))).json()
    assert none["system_fingerprint"] is None and custom["system_fingerprint"] == "fp-1"


async def test_chat_echo_of_the_final_assistant_message() -> None:
    """echo prepends the last message when it has the response role: batch content, and one
    extra `{"content": ...}` delta per choice after the role chunks when streaming."""
    engines = fake_engines("http://e0", tokens=ids_of(" 42."))
    messages = (("user", "Answer?"), ("assistant", "It is"))
    async with running_gateway(engines) as h:
        batch = (await h.client.post("/v1/chat/completions", json=chat(
            *messages, echo=True, add_generation_prompt=False, continue_final_message=True))).json()
        chunks = chunks_of((await h.client.post("/v1/chat/completions", json=chat(
            *messages, echo=True, add_generation_prompt=False, continue_final_message=True,
            stream=True, n=2))).content)
    assert batch["choices"][0]["message"]["content"] == "It is 42."
    assert [c["choices"][0]["delta"] for c in chunks[:4]] == [
        {"role": "assistant", "content": ""}, {"role": "assistant", "content": ""},
        {"content": "It is"}, {"content": "It is"}]
    assert [c["choices"][0]["index"] for c in chunks[2:4]] == [0, 1]
    assert list(chunks[2]) == ["id", "object", "created", "model", "choices"]
    assert list(chunks[2]["choices"][0]) == ["index", "delta", "logprobs", "finish_reason"]


async def test_chat_echo_and_role_follow_add_generation_prompt() -> None:
    """With add_generation_prompt (default) the response role is "assistant": a last user
    message is not echoed. Without it the role is the last message's own ("user"), in the
    role chunk and the batch message, and that message is echoed."""
    engines = fake_engines("http://e0", tokens=ids_of("!"))
    async with running_gateway(engines) as h:
        plain = (await h.client.post("/v1/chat/completions",
                                     json=chat(("user", "hey"), echo=True))).json()
        as_user = (await h.client.post("/v1/chat/completions", json=chat(
            ("user", "hey"), echo=True, add_generation_prompt=False))).json()
        stream = chunks_of((await h.client.post("/v1/chat/completions", json=chat(
            ("user", "hey"), add_generation_prompt=False, stream=True))).content)
    assert plain["choices"][0]["message"] == {"role": "assistant", "content": "!"}
    assert as_user["choices"][0]["message"] == {"role": "user", "content": "hey!"}
    assert stream[0]["choices"][0]["delta"] == {"role": "user", "content": ""}


async def test_completion_echo_batch_stream_and_prompt_only() -> None:
    """The prompt text before the output (token-id prompts decoded); streaming puts it and the
    prompt ids on each choice's first chunk; max_tokens 0 returns the prompt alone."""
    engines = fake_engines("http://e0", tokens=ids_of("!!"))
    async with running_gateway(engines) as h:
        batch = (await h.client.post("/v1/completions", json={
            "model": MODEL, "prompt": ["Hi", ids_of("Yo")], "echo": True})).json()
        only = (await h.client.post("/v1/completions", json={
            "model": MODEL, "prompt": "Hi", "echo": True, "max_tokens": 0})).json()
        chunks = chunks_of((await h.client.post("/v1/completions", json={
            "model": MODEL, "prompt": "Hi", "echo": True, "stream": True})).content)
    assert [c["text"] for c in batch["choices"]] == ["Hi!!", "Yo!!"]
    assert only["choices"][0]["text"] == "Hi"
    first, *rest = [c["choices"][0] for c in chunks]
    assert first["text"] == "Hi!" and first["prompt_token_ids"] == ids_of("Hi")
    assert [c["text"] for c in rest] == ["!", ""]
    assert all(c["prompt_token_ids"] is None for c in rest)


async def test_completion_echo_with_logprobs_is_refused() -> None:
    """vLLM answers it with prompt logprobs a tokens-only stream cannot give: a 400 naming
    `echo`, before any engine work."""
    engines = fake_engines("http://e0")
    async with running_gateway(engines) as h:
        response = await h.client.post("/v1/completions", json={
            "model": MODEL, "prompt": "Hi", "echo": True, "logprobs": 1})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "echo"
    assert engines["http://e0"].calls == []
