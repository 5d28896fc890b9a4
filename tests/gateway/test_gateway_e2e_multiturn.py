"""Multi-turn P/D end to end: a real prefill + decode pair over NIXL, both ways.

Each turn forces an answer (a token script, so the next turn's history re-renders to the same
ids) followed by a few *free* seeded tokens, which depend on every KV block of the prompt: they
must equal what the decode engine alone (collocated) gives for the same rendered request. The
prefill engine's `external_kv_transfer` prompt tokens show the blocks it read back from the
decoder; the gateway's metrics show the guard's decisions.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY

from render_service.config import ServiceConfig
from render_service.gateway.codec import InProcessCodec
from render_service.gateway.config import ConversationSettings, HealthSettings
from render_service.gateway.context import Leg, engine_body
from tests.harness.engine_api import generate
from tests.harness.engines import PD_BLOCK_SIZE
from tests.harness.script_protocol import FREE_AFTER

from .e2e_support import ENGINE_MAX_MODEL_LEN, external_kv_tokens, running

pytestmark = pytest.mark.engine

MODEL = "tiny-qwen3"
FREE_TOKENS = 6  # seeded, unconstrained, after each scripted answer
# ChatML without any reasoning handling: an answer re-renders exactly as it was generated.
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# A decoder that leaves rotation loses its conversations (the guard cannot tell a slow /health
# from a restart); engines on 2 loaded cores answer /health slowly at times.
PATIENT_HEALTH = HealthSettings(interval_s=2.0, timeout_s=10.0, failure_threshold=5)
# ~50 tokens each: more than a block past the prompt's last whole block, so turn N+1 has a
# block of turn N's answer to read that the prefill engine never computed.
ANSWERS = [
    f"Turn {i} answer: the lighthouse keeper counted ships, gulls, waves and stars "
    f"until the tide turned at dawn, then wrote every one of them down, slowly and "
    f"carefully, in the old leather ledger numbered {i}."
    for i in range(1, 6)
]


@pytest.fixture(scope="module")
def chatml_config(tiny_model_dir):  # type: ignore[no-untyped-def]
    return ServiceConfig(
        model=str(tiny_model_dir),
        chat_template=CHATML,
        max_model_len=ENGINE_MAX_MODEL_LEN,
        served_model_name=(MODEL,),
        stream_state_secret="e2e-secret-" * 4,
    )


@pytest.fixture(scope="module")
def chatml_codec(chatml_config):  # type: ignore[no-untyped-def]
    return InProcessCodec(chatml_config)


def multiturn_gateway(config: ServiceConfig, codec: InProcessCodec, pd_engines):  # type: ignore[no-untyped-def]
    return running(
        config,
        codec,
        prefill=(pd_engines.prefill_url,),
        decode=(pd_engines.decode_url,),
        health=PATIENT_HEALTH,
        block_size=PD_BLOCK_SIZE,
        conversations=ConversationSettings(enabled=True, kv_recompute_threshold=PD_BLOCK_SIZE),
    )


@pytest.fixture(scope="module")
def chatml_gateway(chatml_config, chatml_codec, pd_engines, scripts):  # type: ignore[no-untyped-def]
    """One gateway for the ChatML tests, its prefill engine's first read from the decoder
    (a NIXL handshake) done."""
    with multiturn_gateway(chatml_config, chatml_codec, pd_engines) as gateway:
        _warm_bidirectional_read(gateway, chatml_codec, pd_engines, scripts)
        yield gateway


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(f"render_service_gateway_continuation_{name}", labels) or 0.0


def turn_body(
    scripts,
    messages: list[dict[str, Any]],
    answer: str,
    seed: int,
    *,
    thinking: bool = False,
) -> dict[str, Any]:
    script = scripts.ids(answer)
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": messages,
        "seed": seed,
        "temperature": 1.0,
        "max_tokens": len(script) + FREE_TOKENS,
        "return_token_ids": True,
        "vllm_xargs": {"rs_script": script, "rs_script_after": FREE_AFTER},
    }
    if thinking:
        body["chat_template_kwargs"] = {"enable_thinking": True}
    return body


def collocated(codec: InProcessCodec, pd_engines, body: dict[str, Any], rid: str) -> list[int]:  # type: ignore[no-untyped-def]
    """The decode engine alone (no remote KV) on the same rendered request."""
    rendered = codec.render_chat({**body, "request_id": rid}, None)
    answer = generate(
        pd_engines.decode_url, engine_body(Leg(0, rendered), stream=False, request_id=rid)
    )
    ids: list[int] = answer["choices"][0]["token_ids"]
    return ids


def converse(  # type: ignore[no-untyped-def]
    gateway,
    codec,
    pd_engines,
    scripts,
    cid: str,
    answers: list[str],
    *,
    thinking: bool = False,
    before_turn=None,
    check: bool = True,
) -> list[dict[str, Any]]:
    """One turn per answer, each checked against the collocated engine. Returns per turn the
    prompt length, the tokens the prefill engine read over NIXL, and the reasoning."""
    client = gateway.client()
    messages: list[dict[str, Any]] = []
    turns = []
    for i, answer in enumerate(answers):
        if before_turn is not None:
            before_turn(i)
        # The conversation's name in its first message: no two conversations share a prefix
        # (the prefill engine's own cache would hold it, and nothing would need reading).
        messages.append({"role": "user", "content": f"{cid}: tell me about turn {i}, please."})
        body = turn_body(scripts, messages, answer, seed=100 + i, thinking=thinking)
        pulled = external_kv_tokens(pd_engines.prefill_url)
        started = time.perf_counter()
        extra = {
            k: v
            for k, v in body.items()
            if k not in ("model", "messages", "seed", "temperature", "max_tokens")
        }
        out = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            seed=body["seed"],
            temperature=1.0,
            max_tokens=body["max_tokens"],
            extra_body={**extra, "conversation_id": cid},
        )
        choice = out.choices[0]
        tokens = choice.model_extra["token_ids"]
        took = time.perf_counter() - started
        if check and i:  # turn 1 is plain P/D (test_gateway_e2e_pd.py checks that)
            assert tokens == collocated(codec, pd_engines, body, f"{cid}-ref-{i}"), f"turn {i}"
        prompt = len(codec.render_chat({**body, "request_id": "len"}, None)["token_ids"])
        turns.append(
            {
                "took_s": round(took, 2),
                "prompt": prompt,
                "pulled": external_kv_tokens(pd_engines.prefill_url) - pulled,
                "reasoning": (choice.message.model_extra or {}).get("reasoning"),
            }
        )
        messages.append({"role": "assistant", "content": choice.message.content})
    return turns


def test_history_kept_each_turn_reads_the_last_from_the_decoder(
    chatml_gateway, chatml_codec, pd_engines, scripts
) -> None:
    """A template that keeps history: turns 2-5 read turn N's answer blocks from the decoder
    (the prefill had only the prompt), and every turn equals the collocated engine."""
    reused = metric("reused_tokens_total")
    full = metric("decisions_total", decision="full") + metric(
        "decisions_total", decision="partial"
    )
    turns = converse(chatml_gateway, chatml_codec, pd_engines, scripts, "history-kept", ANSWERS)
    for n, turn in enumerate(turns[1:], 1):
        assert turn["pulled"] >= PD_BLOCK_SIZE, (n, turns)  # the answer's blocks came back
    reusing = metric("decisions_total", decision="full") + metric(
        "decisions_total", decision="partial"
    )
    assert reusing == full + 4
    assert metric("reused_tokens_total") > reused


def test_qwen3_drops_thinking_and_the_guard_reads_only_the_prompt(
    e2e_config, e2e_codec, pd_engines, scripts
) -> None:
    """Qwen3's template drops earlier thinking: turn N+1 leaves turn N right after its prompt,
    so the guard offers no more than that prompt's blocks (which the prefill engine holds
    already): nothing of the decoder's answer is read, and every turn is still right."""
    answers = [
        f"<think>\nLet me think about turn {i} for a while, step by step.\n</think>\n\n"
        f"It is turn {i}."
        for i in range(1, 6)
    ]
    partial = metric("decisions_total", decision="partial") + metric(
        "decisions_total", decision="refused"
    )
    with multiturn_gateway(e2e_config, e2e_codec, pd_engines) as gateway:
        turns = converse(
            gateway, e2e_codec, pd_engines, scripts, "qwen3-thinking", answers, thinking=True
        )
    assert all(t["reasoning"] for t in turns)  # the thinking was there, and is dropped
    assert all(t["pulled"] == 0 for t in turns[1:]), turns
    assert (
        metric("decisions_total", decision="partial")
        + metric("decisions_total", decision="refused")
        == partial + 4
    )


def test_an_expired_read_falls_back_to_recompute(
    chatml_gateway, chatml_codec, pd_engines, scripts
) -> None:
    """The prefill engine declines to read blocks past their expiry (here a turn whose expiry
    the engine sees as passed, as with clocks or TTLs out of step): that prefill fails, the
    gateway prefills again without the last turn, and the client gets the right answer."""
    fallbacks = metric("fallbacks_total")
    store = chatml_gateway.gateway.conversations.store

    def expire(i: int) -> None:
        if i == 1:
            turn = store.take("expiring")
            params = {**turn.kv_transfer_params, "remote_blocks_expiry_time": 0.0}
            store.put("expiring", dataclasses.replace(turn, kv_transfer_params=params))

    turns = converse(
        chatml_gateway,
        chatml_codec,
        pd_engines,
        scripts,
        "expiring",
        ANSWERS[:2],
        before_turn=expire,
    )
    assert turns[1]["pulled"] == 0
    assert metric("fallbacks_total") == fallbacks + 1


def _warm_bidirectional_read(gateway, codec, pd_engines, scripts, attempts: int = 3) -> None:  # type: ignore[no-untyped-def]
    """The first read back from the decoder makes the prefill engine handshake with it over
    NIXL; on a loaded machine that can time out (the gateway then recomputes, correctly).
    Warm it until one read came back."""
    for attempt in range(attempts):
        before = external_kv_tokens(pd_engines.prefill_url)
        converse(gateway, codec, pd_engines, scripts, f"warm-{attempt}", ANSWERS[:2], check=False)
        if external_kv_tokens(pd_engines.prefill_url) > before:
            return
