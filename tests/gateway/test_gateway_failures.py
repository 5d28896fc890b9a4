"""Failure handling over scripted engines: retries, P/D fallback, timeouts, aborts, 503s."""

from __future__ import annotations

import asyncio

import orjson
from prometheus_client import REGISTRY

from render_service.gateway.testing import Fault

from .conftest import FAST_TIMEOUTS, fake_engines, running_gateway
from .gateway_fakes import MODEL, ids_of


def chat(**extra: object) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def last_events(raw: bytes) -> list[bytes]:
    return raw.split(b"\n\n")[-3:-1]


async def test_decode_retried_on_another_engine_before_first_token() -> None:
    """A 500 before any token: the same request goes to the other engine; the client sees 200."""
    engines = fake_engines("http://e0", "http://e1", tokens=ids_of("ok"))
    engines["http://e0"].faults.append(Fault.status(500))
    engines["http://e1"].faults.append(Fault.status(500))
    before = metric("render_service_gateway_retries_total", phase="decode")
    async with running_gateway(engines, routing="round_robin") as h:
        response = await h.client.post("/v1/chat/completions", json=chat(stream=True, request_id="a"))
    assert response.status_code == 200 and response.content.endswith(b"data: [DONE]\n\n")
    assert b'"finish_reason":"stop"' in response.content
    ids = [c.body["request_id"] for e in engines.values() for c in e.calls]
    assert sorted(ids) == ["chatcmpl-a", "chatcmpl-a-retry1", "chatcmpl-a-retry2"]
    assert metric("render_service_gateway_retries_total", phase="decode") == before + 2


async def test_engine_rejection_is_relayed_not_retried() -> None:
    """An engine 400 is the request's fault: relayed with its status, sent once."""
    engines = fake_engines("http://e0", "http://e1")
    engines["http://e0"].faults.append(Fault.status(400))
    async with running_gateway(engines, routing="round_robin") as h:
        response = await h.client.post("/v1/chat/completions", json=chat(stream=True))
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "scripted 400"
    assert len(engines["http://e0"].calls) + len(engines["http://e1"].calls) == 1


async def test_engine_killed_mid_stream_ends_with_error_event_and_done() -> None:
    """Connection drops after 2 tokens: error event + [DONE], engine out of rotation, no retry."""
    engines = fake_engines("http://e0", "http://e1", tokens=ids_of("abcdef"))
    engines["http://e0"].faults.append(Fault.die_after(2))
    async with running_gateway(engines, routing="round_robin") as h:
        response = await h.client.post("/v1/chat/completions", json=chat(stream=True))
        assert not h.gateway.pools["collocated"].engines[0].healthy
    error, done = last_events(response.content)
    assert done == b"data: [DONE]"
    body = orjson.loads(error[len(b"data: "):])
    assert body["error"]["type"] == "BadGatewayError" and body["error"]["code"] == 502
    assert len(engines["http://e1"].calls) == 0
    assert b'"content":"a"' in response.content and b'"content":"c"' not in response.content


async def test_error_event_mid_stream_aborts_engine_request() -> None:
    """An engine error event after a token: client gets the error; the engine request is aborted."""
    engines = fake_engines("http://e0", tokens=ids_of("abc"))
    engines["http://e0"].faults.append(Fault.error_event_after(1))
    async with running_gateway(engines) as h:
        response = await h.client.post("/v1/chat/completions", json=chat(stream=True, request_id="m"))
        await h.settle()
    assert last_events(response.content)[1] == b"data: [DONE]"
    assert b'"code":502' in response.content
    assert engines["http://e0"].aborts == ["generate-tokens-chatcmpl-m"]


async def test_engine_that_never_answers_times_out_without_hanging() -> None:
    """First-token deadline on every try: a 504 in bounded time, hung requests aborted."""
    engines = fake_engines("http://e0")
    engines["http://e0"].faults.extend([Fault.hang()] * 3)
    async with running_gateway(engines, max_retries=2) as h:
        async with asyncio.timeout(5):
            response = await h.client.post("/v1/chat/completions", json=chat(stream=True, request_id="h"))
        await h.settle()
    assert response.status_code == 504
    assert response.json()["error"]["type"] == "GatewayTimeoutError"
    assert engines["http://e0"].aborts == [
        "generate-tokens-chatcmpl-h", "generate-tokens-chatcmpl-h-retry1",
        "generate-tokens-chatcmpl-h-retry2"]
    assert not engines["http://e0"].live


async def test_non_streaming_hang_times_out() -> None:
    """A non-streaming decode past --timeouts.request_s is a 504, and aborted."""
    engines = fake_engines("http://e0")
    engines["http://e0"].faults.append(Fault.hang())
    async with running_gateway(engines, max_retries=0) as h:
        async with asyncio.timeout(5):
            response = await h.client.post("/v1/chat/completions", json=chat(request_id="nh"))
        await h.settle()
    assert response.status_code == 504
    assert engines["http://e0"].aborts == ["generate-tokens-chatcmpl-nh"]


async def test_stall_mid_stream_hits_inter_token_deadline() -> None:
    """Silence after a token: the inter-token deadline ends the stream with an error + [DONE]."""
    engines = fake_engines("http://e0", tokens=ids_of("abc"))
    engines["http://e0"].faults.append(Fault.stall_after(1))
    async with running_gateway(engines) as h:
        async with asyncio.timeout(5):
            response = await h.client.post("/v1/chat/completions", json=chat(stream=True, request_id="st"))
        await h.settle()
    error, done = last_events(response.content)
    assert done == b"data: [DONE]" and b"GatewayTimeoutError" in error
    assert engines["http://e0"].aborts == ["generate-tokens-chatcmpl-st"]
    assert not engines["http://e0"].live


async def test_prefill_retried_on_another_prefill_engine() -> None:
    """A failed prefill goes to the next prefill engine; decode gets that engine's KV params."""
    engines = fake_engines("http://p0", "http://p1", "http://d0", tokens=ids_of("x"))
    engines["http://p0"].faults.append(Fault.status(503))
    async with running_gateway(engines, prefill=("http://p0", "http://p1"), decode=("http://d0",),
                               prefill_routing="round_robin") as h:
        response = await h.client.post("/v1/chat/completions", json=chat(stream=True))
    assert response.status_code == 200
    (decode,) = engines["http://d0"].calls
    assert decode.body["kv_transfer_params"]["remote_engine_id"] == "http://p1"


async def test_prefill_pool_down_decodes_alone() -> None:
    """No prefill engine reachable: the decode engine recomputes (no KV params), answer intact."""
    engines = fake_engines("http://p0", "http://d0", tokens=ids_of("ok"))
    engines["http://p0"].faults.extend([Fault.unreachable()] * 5)
    before = metric("render_service_gateway_recompute_fallbacks_total")
    async with running_gateway(engines, prefill=("http://p0",), decode=("http://d0",)) as h:
        first = await h.client.post("/v1/chat/completions", json=chat())
        second = await h.client.post("/v1/chat/completions", json=chat())
    assert first.json()["choices"][0]["message"]["content"] == "ok"
    assert second.json()["choices"][0]["message"]["content"] == "ok"
    assert [c.body["kv_transfer_params"] for c in engines["http://d0"].calls] == [None, None]
    assert len(engines["http://p0"].calls) == 1  # out of rotation after the first refusal
    assert metric("render_service_gateway_recompute_fallbacks_total") == before + 2


async def test_pd_decode_unreachable_retries_with_the_same_kv() -> None:
    """The decode engine refuses the connection: the request never reached it, so the prefill's
    KV is still leased to it on the prefill engine; the retry pulls the same kv_transfer_params."""
    engines = fake_engines("http://p0", "http://d0", "http://d1", tokens=ids_of("y"))
    engines["http://d0"].faults.append(Fault.unreachable())
    async with running_gateway(engines, prefill=("http://p0",), decode=("http://d0", "http://d1"),
                               decode_routing="round_robin") as h:
        response = await h.client.post("/v1/chat/completions", json=chat(stream=True, request_id="pf"))
        await h.settle()
    assert response.status_code == 200
    (refused,) = engines["http://d0"].calls
    (retry,) = engines["http://d1"].calls
    prefilled = await engines["http://p0"].generate(engines["http://p0"].calls[0].body, timeout_s=1)
    assert retry.body["kv_transfer_params"] == refused.body["kv_transfer_params"]
    assert retry.body["kv_transfer_params"] == prefilled["kv_transfer_params"]
    # No abort anywhere: the prefill already finished (abort is a no-op there) and d0 never
    # saw its request.
    assert engines["http://p0"].aborts == [] and engines["http://d0"].aborts == []


async def test_pd_decode_failed_on_the_engine_retries_without_kv() -> None:
    """A decode engine that got the request and failed (500) may have pulled the KV and freed
    it on the prefill engine; pulling those block ids again could read another request's KV,
    so the retry recomputes. The failed decode request is aborted; the prefill one is not."""
    engines = fake_engines("http://p0", "http://d0", "http://d1", tokens=ids_of("y"))
    engines["http://d0"].faults.append(Fault.status(500))
    before = metric("render_service_gateway_recompute_fallbacks_total")
    async with running_gateway(engines, prefill=("http://p0",), decode=("http://d0", "http://d1"),
                               decode_routing="round_robin") as h:
        response = await h.client.post("/v1/chat/completions", json=chat(stream=True, request_id="pg"))
        await h.settle()
    assert response.status_code == 200
    (failed,) = engines["http://d0"].calls
    (retry,) = engines["http://d1"].calls
    assert failed.body["kv_transfer_params"]["do_remote_prefill"] is True
    assert retry.body["kv_transfer_params"] is None
    assert engines["http://p0"].aborts == []
    assert engines["http://d0"].aborts == ["generate-tokens-chatcmpl-pg"]
    assert metric("render_service_gateway_recompute_fallbacks_total") == before + 1


async def test_pd_decode_retry_after_the_lease_recomputes() -> None:
    """Even an unreachable decode engine gets no KV reuse once the prefill's lease may be over."""
    engines = fake_engines("http://p0", "http://d0", "http://d1", tokens=ids_of("y"))
    engines["http://d0"].faults.append(Fault.unreachable())
    async with running_gateway(engines, prefill=("http://p0",), decode=("http://d0", "http://d1"),
                               decode_routing="round_robin", kv_lease_duration=1e-6) as h:
        response = await h.client.post("/v1/chat/completions", json=chat(request_id="pl"))
    assert response.status_code == 200
    (retry,) = engines["http://d1"].calls
    assert retry.body["kv_transfer_params"] is None


async def test_decode_past_its_whole_request_deadline_is_not_retried() -> None:
    """A JSON decode that hits timeouts.request_s: 504 at once, one try, aborted; a first-token
    failure of the same engine pool would have been retried (max_retries=2)."""
    engines = fake_engines("http://e0", "http://e1")
    engines["http://e0"].faults.append(Fault.hang())
    engines["http://e1"].faults.append(Fault.hang())
    before = metric("render_service_gateway_retries_total", phase="decode")
    async with running_gateway(engines, routing="round_robin", max_retries=2) as h:
        async with asyncio.timeout(5):
            response = await h.client.post("/v1/chat/completions", json=chat(request_id="dl"))
        await h.settle()
    assert response.status_code == 504
    assert response.json()["error"]["type"] == "GatewayTimeoutError"
    assert len(engines["http://e0"].calls) + len(engines["http://e1"].calls) == 1
    assert metric("render_service_gateway_retries_total", phase="decode") == before
    assert [a for e in engines.values() for a in e.aborts] == ["generate-tokens-chatcmpl-dl"]


async def test_saturation_gives_a_clear_503() -> None:
    """Over --max-concurrent-streams: 503 ServiceUnavailableError at once; the slot comes back."""
    engines = fake_engines("http://e0", tokens=ids_of("abc"))
    engines["http://e0"].faults.append(Fault.hang())
    async with running_gateway(engines, max_concurrent_streams=1, max_retries=0) as h:
        held = asyncio.ensure_future(h.client.post("/v1/chat/completions", json=chat(stream=True)))
        await asyncio.sleep(0.1)
        refused = await h.client.post("/v1/chat/completions", json=chat(stream=True))
        assert (await held).status_code == 504
        again = await h.client.post("/v1/chat/completions", json=chat(stream=True))
    assert refused.status_code == 503
    assert refused.json()["error"]["type"] == "ServiceUnavailableError"
    assert "saturated" in refused.json()["error"]["message"]
    assert again.status_code == 200
    assert h.gateway.admission.active == 0


async def test_no_healthy_engine_is_503() -> None:
    """Every engine out of rotation: 503, nothing sent; not ready, but alive."""
    engines = fake_engines("http://e0")
    engines["http://e0"].healthy = False
    async with running_gateway(engines) as h:
        response = await h.client.post("/v1/chat/completions", json=chat())
        health = await h.client.get("/health")
        ready = await h.client.get("/ready")
    assert response.status_code == 503 and ready.status_code == 503
    assert health.status_code == 200
    assert engines["http://e0"].calls == []


async def test_health_checks_remove_and_return_engines() -> None:
    """failure_threshold failed polls take an engine out; one good poll brings it back."""
    engines = fake_engines("http://e0", "http://e1")
    async with running_gateway(engines, routing="round_robin") as h:
        pool = h.gateway.pools["collocated"]
        engines["http://e0"].healthy = False
        await h.gateway.health.check_once()
        assert pool.engines[0].healthy  # one failure is below the threshold of 2
        await h.gateway.health.check_once()
        assert not pool.engines[0].healthy
        for _ in range(3):
            await h.client.post("/v1/chat/completions", json=chat())
        assert len(engines["http://e0"].calls) == 0 and len(engines["http://e1"].calls) == 3
        engines["http://e0"].healthy = True
        await h.gateway.health.check_once()
        assert pool.engines[0].healthy
        await h.client.post("/v1/chat/completions", json=chat())
        await h.client.post("/v1/chat/completions", json=chat())
        assert len(engines["http://e0"].calls) == 1
    assert metric("render_service_gateway_engine_healthy", pool="collocated", engine="http://e0") == 1


async def test_health_loop_runs_in_background() -> None:
    """The checker polls on its own every interval."""
    from render_service.gateway.config import HealthSettings

    engines = fake_engines("http://e0", "http://e1")
    async with running_gateway(engines, health=HealthSettings(interval_s=0.05, failure_threshold=1)) as h:
        engines["http://e1"].healthy = False
        await asyncio.sleep(0.3)
        assert not h.gateway.pools["collocated"].engines[1].healthy


async def test_client_disconnect_mid_stream_aborts_engine() -> None:
    """The client hangs up while tokens flow: the engine request is aborted promptly."""
    engines = fake_engines("http://e0", tokens=ids_of("x" * 200), token_delay_s=0.01)
    async with running_gateway(engines) as h:
        sent: list[dict] = []
        body = orjson.dumps(chat(stream=True, request_id="dc"))
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict:
            if messages:
                return messages.pop()
            await asyncio.sleep(0.15)
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
                 "http_version": "1.1", "method": "POST", "scheme": "http",
                 "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
                 "query_string": b"", "root_path": "",
                 "headers": [(b"content-type", b"application/json")],
                 "client": ("127.0.0.1", 1), "server": ("gw", 80)}
        async with asyncio.timeout(5):
            await h.app(scope, receive, send)  # type: ignore[operator]
        await h.settle()
        assert h.gateway.admission.active == 0
    engine = engines["http://e0"]
    assert engine.aborts == ["generate-tokens-chatcmpl-dc"] and not engine.live
    streamed = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert 0 < streamed.count(b'"content":"x"') < 200
    assert metric("render_service_gateway_engine_aborts_total", reason="client_gone") >= 1


async def test_client_disconnect_during_non_streaming_aborts_engine() -> None:
    """A non-streaming client leaving while the engine works: the engine request is aborted."""
    engines = fake_engines("http://e0")
    engines["http://e0"].faults.append(Fault.hang())
    timeouts = FAST_TIMEOUTS.__class__(request_s=30.0)
    async with running_gateway(engines, timeouts=timeouts) as h:
        body = orjson.dumps(chat(request_id="dn"))
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict:
            if messages:
                return messages.pop()
            await asyncio.sleep(0.1)
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            pass

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/v1/chat/completions",
                 "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
                 "headers": [(b"content-type", b"application/json")],
                 "client": ("127.0.0.1", 1), "server": ("gw", 80)}
        async with asyncio.timeout(5):
            await h.app(scope, receive, send)  # type: ignore[operator]
        await h.settle()
    assert engines["http://e0"].aborts == ["generate-tokens-chatcmpl-dn"]
