"""Multi-turn P/D over scripted engines: what the prefill is told to load, and every fallback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import REGISTRY

from render_service.gateway.config import ConversationSettings
from render_service.gateway.context import KV_PREFILL_PARAMS
from render_service.gateway.testing import Fault, ScriptedEngine

from .conftest import Harness, running_gateway
from .gateway_fakes import MODEL, ids_of

BS = 4
SETTINGS = ConversationSettings(enabled=True, kv_recompute_threshold=8)


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(f"render_service_gateway_continuation_{name}", labels) or 0.0


def pd_engines(answers: list[str]) -> dict[str, ScriptedEngine]:
    """A prefill engine and a bidirectional decoder answering `answers` in turn."""
    turn = iter(answers)
    return {
        "http://p0": ScriptedEngine("http://p0"),
        "http://d0": ScriptedEngine(
            "http://d0",
            bidirectional=True,
            block_size=BS,
            tokens=lambda body, index: ids_of(next(turn)),
        ),
    }


def pd_gateway(engines: dict[str, ScriptedEngine], **settings: Any):  # type: ignore[no-untyped-def]
    conversations = (
        SETTINGS
        if not settings
        else ConversationSettings(enabled=True, **{"kv_recompute_threshold": 8, **settings})
    )
    return running_gateway(
        engines,
        prefill=("http://p0",),
        decode=("http://d0",),
        block_size=BS,
        conversations=conversations,
    )


async def turn(
    h: Harness, messages: list[dict[str, str]], cid: str | None = "conv-1", **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "messages": messages, **extra}
    if cid is not None:
        body["conversation_id"] = cid
    response = await h.client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json() if not extra.get("stream") else {}


def prefill_kv(engines: dict[str, ScriptedEngine], i: int = -1) -> dict[str, Any]:
    return engines["http://p0"].calls[i].body["kv_transfer_params"]


async def test_five_turns_each_load_the_last_turn_from_its_decoder() -> None:
    """Turns 2-5 prefill with the decoder's params cut to whole blocks of prompt + output - 1;
    every decode is JSON (its answer says where the turn's KV stays)."""
    answers = [f"Answer number {i}, told at some length." for i in range(1, 6)]
    engines = pd_engines(answers)
    full, miss = (
        metric("decisions_total", decision="full"),
        metric("decisions_total", decision="miss"),
    )
    messages: list[dict[str, str]] = []
    async with pd_gateway(engines) as h:
        for i in range(5):
            messages.append({"role": "user", "content": f"Question {i}?"})
            if i:
                previous_prompt = len(engines["http://p0"].calls[-1].body["token_ids"])
            out = await turn(h, messages)
            content = out["choices"][0]["message"]["content"]
            assert content == answers[i]
            messages.append({"role": "assistant", "content": content})
            kv = prefill_kv(engines)
            if i == 0:
                assert kv == KV_PREFILL_PARAMS
                continue
            computed = previous_prompt + len(answers[i - 1])  # + EOS - 1
            assert kv["remote_num_tokens"] == computed - computed % BS
            assert kv["remote_block_ids"] == [list(range(computed // BS))]
            assert kv["remote_engine_id"] == "http://d0" and kv["do_remote_decode"] is True
        assert len(h.gateway.conversations.store) == 1  # type: ignore[union-attr]
    assert {c.kind for c in engines["http://d0"].calls} == {"generate"}
    assert metric("decisions_total", decision="full") == full + 4
    assert metric("decisions_total", decision="miss") == miss + 1


async def test_dropped_reasoning_is_refused_and_its_blocks_released() -> None:
    """The client sends back only the answer (a reasoning template drops the thinking): the
    prompt leaves the last turn right after its prompt, so nothing is reused; the prefill
    only releases the decoder's blocks (zero tokens to load)."""
    engines = pd_engines(["<think>long thoughts</think>The answer.", "Second."])
    refused = metric("refusals_total", cause="diverged")
    async with pd_gateway(engines) as h:
        await turn(h, [{"role": "user", "content": "hi"}])
        out = await turn(
            h,
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "The answer."},
                {"role": "user", "content": "and then?"},
            ],
        )
    assert out["choices"][0]["message"]["content"] == "Second."
    kv = prefill_kv(engines)
    assert kv["remote_num_tokens"] == 0 and kv["remote_block_ids"]  # release only
    assert metric("refusals_total", cause="diverged") == refused + 1


async def test_a_rewritten_history_reuses_the_prefix_before_the_edit() -> None:
    """An edit in the last answer: the shared prefix, in whole blocks, is still reused."""
    engines = pd_engines(["A long enough first answer.", "Second."])
    first = "A first question, long enough."
    async with pd_gateway(engines) as h:
        await turn(h, [{"role": "user", "content": first}])
        await turn(
            h,
            [
                {"role": "user", "content": first},
                {"role": "assistant", "content": "A long EDITED first answer."},
                {"role": "user", "content": "?"},
            ],
        )
    common = len(first) + len("A long ")
    assert prefill_kv(engines)["remote_num_tokens"] == common - common % BS


async def test_colliding_ids_never_share_blocks_across_prompts() -> None:
    """Two clients with one id and different prompts: the guard refuses, answers stay right."""
    engines = pd_engines(["Reply to client A.", "Reply to client B.", "A again."])
    async with pd_gateway(engines) as h:
        a = await turn(h, [{"role": "user", "content": "Client A asks something long."}], "shared")
        b = await turn(h, [{"role": "user", "content": "Totally other words from B."}], "shared")
        assert prefill_kv(engines)["remote_num_tokens"] == 0
        a2 = await turn(
            h,
            [
                {"role": "user", "content": "Client A asks something long."},
                {"role": "assistant", "content": "Reply to client A."},
                {"role": "user", "content": "more"},
            ],
            "shared",
        )
    assert a["choices"][0]["message"]["content"] == "Reply to client A."
    assert b["choices"][0]["message"]["content"] == "Reply to client B."
    assert a2["choices"][0]["message"]["content"] == "A again."
    assert prefill_kv(engines)["remote_num_tokens"] == 0  # B's turn is no prefix of A's


async def two_turns(
    between: Callable[[Harness, dict[str, ScriptedEngine]], None],
) -> tuple[dict[str, ScriptedEngine], dict[str, Any]]:
    """A conversation's two turns with `between` run between them; the second answer."""
    engines = pd_engines(["First answer, fairly long.", "Second answer."])
    messages = [{"role": "user", "content": "A question of some length?"}]
    async with pd_gateway(engines) as h:
        out = await turn(h, messages)
        between(h, engines)
        messages += [
            {"role": "assistant", "content": out["choices"][0]["message"]["content"]},
            {"role": "user", "content": "Next?"},
        ]
        out = await turn(h, messages)
    assert out["choices"][0]["message"]["content"] == "Second answer."
    return engines, out


async def test_a_failed_prefill_with_the_last_turn_is_sent_again_without_it() -> None:
    """A prefill carrying the last turn fails (a refused NIXL read answers 500): the prompt is
    prefilled again with plain params, and the client sees no error."""
    fallbacks = metric("fallbacks_total")
    engines, _ = await two_turns(lambda h, e: e["http://p0"].faults.append(Fault.status(500)))
    reuse, plain = (c.body for c in engines["http://p0"].calls[1:])
    assert reuse["kv_transfer_params"]["remote_num_tokens"] > 0
    assert plain["kv_transfer_params"] == KV_PREFILL_PARAMS
    # Its own id: the failed try's abort cannot hit the prefill sent after it.
    assert reuse["request_id"] == plain["request_id"] + "-continued"
    assert metric("fallbacks_total") == fallbacks + 1


def _decoder_leaves_and_returns(h: Harness, engines: dict[str, ScriptedEngine]) -> None:
    pool = h.gateway.pools["decode"]
    pool.mark_unreachable(pool.engines[0], "scripted")
    pool.observe_health(pool.engines[0], True)


async def test_a_decoder_that_left_rotation_is_not_read() -> None:
    """The decoder went out of rotation (and back) since the turn: its blocks are gone."""
    gone = metric("refusals_total", cause="decoder_gone")
    engines, _ = await two_turns(_decoder_leaves_and_returns)
    assert prefill_kv(engines) == KV_PREFILL_PARAMS
    assert metric("refusals_total", cause="decoder_gone") == gone + 1


def _ttl_passes(h: Harness, engines: dict[str, ScriptedEngine]) -> None:
    conversations = h.gateway.conversations
    assert conversations is not None
    later = conversations.clock() + SETTINGS.reuse_window_s
    conversations.clock = conversations.store.clock = lambda: later


async def test_an_expired_turn_is_not_read() -> None:
    """Past the decoder's TTL minus the margin: plain prefill (the blocks are freed)."""
    expired = metric("refusals_total", cause="expired")
    engines, _ = await two_turns(_ttl_passes)
    assert prefill_kv(engines) == KV_PREFILL_PARAMS
    assert metric("refusals_total", cause="expired") == expired + 1


async def test_a_streamed_turn_is_not_recorded() -> None:
    """The engine's stream has no kv_transfer_params: the next turn finds nothing."""
    engines = pd_engines(["Streamed answer, long.", "Second."])
    streamed = metric("unrecorded_turns_total", cause="stream")
    async with pd_gateway(engines) as h:
        await turn(h, [{"role": "user", "content": "Stream it please."}], stream=True)
        await turn(
            h,
            [
                {"role": "user", "content": "Stream it please."},
                {"role": "assistant", "content": "Streamed answer, long."},
                {"role": "user", "content": "?"},
            ],
        )
    assert engines["http://d0"].calls[0].kind == "stream"
    assert prefill_kv(engines) == KV_PREFILL_PARAMS
    assert metric("unrecorded_turns_total", cause="stream") == streamed + 1


async def test_the_header_names_the_conversation_too() -> None:
    """X-Conversation-ID works like the body field."""
    engines = pd_engines(["First answer, fairly long.", "Second answer."])
    messages = [{"role": "user", "content": "A question of some length?"}]
    async with pd_gateway(engines) as h:
        headers = {"x-conversation-id": "via-header"}
        await h.client.post(
            "/v1/chat/completions", headers=headers, json={"model": MODEL, "messages": messages}
        )
        messages += [
            {"role": "assistant", "content": "First answer, fairly long."},
            {"role": "user", "content": "Next?"},
        ]
        await h.client.post(
            "/v1/chat/completions", headers=headers, json={"model": MODEL, "messages": messages}
        )
    assert prefill_kv(engines)["remote_num_tokens"] > 0


async def test_bad_conversation_ids_get_400_before_any_engine_call() -> None:
    """Over 256 characters or with control characters: 400, no engine touched."""
    engines = pd_engines(["unused"])
    async with pd_gateway(engines) as h:
        for cid in ("x" * 257, "a\nb"):
            response = await h.client.post(
                "/v1/chat/completions",
                json={
                    "model": MODEL,
                    "messages": [{"role": "user", "content": "hi"}],
                    "conversation_id": cid,
                },
            )
            assert response.status_code == 400
            assert "conversation_id" in response.json()["error"]["message"]
    assert not engines["http://p0"].calls and not engines["http://d0"].calls


async def test_without_the_feature_the_field_is_left_alone() -> None:
    """conversations disabled: plain P/D, conversation_id is not looked at."""
    engines = pd_engines(["Hello."])
    async with running_gateway(engines, prefill=("http://p0",), decode=("http://d0",)) as h:
        out = await turn(h, [{"role": "user", "content": "hi"}], "x" * 300)
    assert out["choices"][0]["message"]["content"] == "Hello."
    assert h.gateway.conversations is None and prefill_kv(engines) == KV_PREFILL_PARAMS
