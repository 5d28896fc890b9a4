"""ScriptedEngine: an in-memory EngineClient for unit tests (no GPU, no sockets, no vLLM).

It answers like a vLLM 0.33 tokens-only engine (`GenerateTokensResponse` / stream events of one
choice each, `[DONE]` implied by the iterator ending; JSON answers carry `prompt_logprobs` when
the sampling params ask, streams never do) and can be told to misbehave:

    engine = ScriptedEngine("http://p0", tokens=[11, 12, 13])   # then EOS, finish "stop"
    engine.faults.append(Fault.status(500))      # next call answers HTTP 500
    engine.faults.append(Fault.unreachable())    # next call: connection refused
    engine.faults.append(Fault.hang())           # next call never answers
    engine.faults.append(Fault.die_after(2))     # next stream: 2 events, then the socket drops
    engine.faults.append(Fault.error_event_after(1))  # 1 event, then an SSE error event
    engine.faults.append(Fault.stall_after(1))   # 1 event, then silence
    ScriptedEngine("http://d0", bidirectional=True)  # a decoder keeping its KV for the next
                                                     # turn (NIXL bidirectional_kv_xfer)

Everything it saw is recorded (`calls`, `aborts`), and `live` holds the engine request ids
still running, so tests can assert that nothing leaked. An abort of a live stream ends it the
way vLLM does: one last event with `finish_reason: "abort"`.

`scripted_transport(engines, api_key=...)` puts scripted engines behind HTTP (an
`httpx.MockTransport` for the gateway's real `HttpEngineClient`), with vLLM's `--api-key`
check on the /inference paths. Faults are not translated to HTTP there; use it for the happy
path of the HTTP client (headers, bodies, SSE framing).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from render_service.gateway.engine_client import (
    ABORT_PATH,
    GENERATE_PATH,
    HEALTH_PATH,
    EngineClient,
    engine_request_id,
)
from render_service.gateway.errors import (
    EngineFailedError,
    EngineUnavailableError,
    EngineUnreachableError,
    error_from_status,
)

__all__ = ["ScriptedEngine", "Fault", "EOS_ID", "Call", "scripted_transport"]

EOS_ID = 151645  # Qwen3 <|im_end|>


@dataclass(frozen=True)
class Fault:
    kind: str
    arg: int = 0

    @classmethod
    def status(cls, code: int) -> Fault:
        return cls("status", code)

    @classmethod
    def unreachable(cls) -> Fault:
        """Connection refused: the request never reaches the engine."""
        return cls("unreachable")

    @classmethod
    def hang(cls) -> Fault:
        return cls("hang")

    @classmethod
    def die_after(cls, events: int) -> Fault:
        return cls("die_after", events)

    @classmethod
    def error_event_after(cls, events: int) -> Fault:
        return cls("error_event_after", events)

    @classmethod
    def stall_after(cls, events: int) -> Fault:
        """Send `events` events, then nothing (the connection stays open)."""
        return cls("stall_after", events)


@dataclass
class Call:
    kind: str  # "generate" | "stream"
    body: dict[str, Any]


TokensFn = Callable[[dict[str, Any], int], list[int]]


@dataclass
class ScriptedEngine(EngineClient):
    url: str
    tokens: list[int] | TokensFn = field(default_factory=lambda: [101, 102, 103])
    token_delay_s: float = 0.0
    healthy: bool = True
    eos_id: int = EOS_ID
    bidirectional: bool = False
    block_size: int = 16
    faults: list[Fault] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    aborts: list[str] = field(default_factory=list)
    live: set[str] = field(default_factory=set)
    _aborted: set[str] = field(default_factory=set)

    # -- EngineClient ---------------------------------------------------------------------
    async def generate(self, body: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        self.calls.append(Call("generate", body))
        rid = engine_request_id(body["request_id"])
        fault = await self._take_fault(rid)
        if fault is not None and fault.kind == "hang":
            await asyncio.Event().wait()  # the caller's deadline must end this
        self.live.add(rid)
        try:
            choices = [self._final_choice(body, i) for i in range(_n(body))]
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s * max(len(c["token_ids"]) for c in choices))
        finally:
            self.live.discard(rid)
        return self._response(body, rid, choices)

    async def stream(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        self.calls.append(Call("stream", body))
        rid = engine_request_id(body["request_id"])
        fault = await self._take_fault(rid)
        if fault is not None and fault.kind == "hang":
            await asyncio.Event().wait()
        self.live.add(rid)
        try:
            async with aclosing(self._events(body, rid, fault)) as events:
                async for event in events:
                    yield event
        finally:
            self.live.discard(rid)

    async def abort(self, request_ids: list[str]) -> bool:
        self.aborts.extend(request_ids)
        self._aborted.update(request_ids)
        return True

    async def check_health(self, *, timeout_s: float) -> bool:
        return self.healthy

    # -- behaviour ------------------------------------------------------------------------
    async def _take_fault(self, rid: str) -> Fault | None:
        fault = self.faults.pop(0) if self.faults else None
        if fault is None:
            return None
        if fault.kind == "status":
            body = {"error": {"message": f"scripted {fault.arg}", "type": "X", "param": None,
                              "code": fault.arg}}
            raise error_from_status(fault.arg, body, f"engine {self.url}")
        if fault.kind == "unreachable":
            raise EngineUnreachableError(f"engine {self.url} unreachable: scripted")
        return fault

    def _script(self, body: dict[str, Any], index: int) -> list[int]:
        extra = (body.get("sampling_params") or {}).get("extra_args") or {}
        if "rs_script" in extra:
            return list(extra["rs_script"]) + [self.eos_id]
        if callable(self.tokens):
            return list(self.tokens(body, index)) + [self.eos_id]
        return list(self.tokens) + [self.eos_id]

    def _final_choice(self, body: dict[str, Any], index: int) -> dict[str, Any]:
        script = self._script(body, index)
        max_tokens = _max_tokens(body)
        finish = "stop" if len(script) <= max_tokens else "length"
        return _choice(index, script[:max_tokens], finish)

    async def _events(self, body: dict[str, Any], rid: str, fault: Fault | None
                      ) -> AsyncGenerator[dict[str, Any], None]:
        max_tokens = _max_tokens(body)
        scripts = [self._script(body, i)[:max_tokens] for i in range(_n(body))]
        sent = 0
        for step in range(max(len(s) for s in scripts)):
            for index, script in enumerate(scripts):
                if step >= len(script):
                    continue
                if self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
                if fault is not None and sent == fault.arg:
                    if fault.kind == "die_after":
                        raise EngineUnavailableError(f"engine {self.url} dropped the stream: scripted")
                    if fault.kind == "error_event_after":
                        raise EngineFailedError(f"engine {self.url}: Internal server error")
                    if fault.kind == "stall_after":
                        await asyncio.Event().wait()
                if rid in self._aborted:
                    yield _event(rid, _choice(index, [], "abort"))
                    return
                last = step == len(script) - 1
                finish = None if not last else ("stop" if script[-1] == self.eos_id else "length")
                yield _event(rid, _choice(index, [script[step]], finish))
                sent += 1
        if (body.get("stream_options") or {}).get("include_usage"):
            completion = sum(len(s) for s in scripts)
            yield {"request_id": rid, "usage": _usage(body, completion), "output_mode": "tokens",
                   "choices": []}

    def _response(self, body: dict[str, Any], rid: str, choices: list[dict[str, Any]]
                  ) -> dict[str, Any]:
        completion = sum(len(c["token_ids"]) for c in choices)
        kv = None
        params = body.get("kv_transfer_params") or {}
        if params.get("do_remote_decode"):
            kv = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": self.url,
                  "remote_block_ids": [[1, 2]], "remote_request_id": rid, "remote_host": "127.0.0.1",
                  "remote_port": 5600, "tp_size": 1}
        elif self.bidirectional and params and len(choices) == 1:
            # vLLM's decoder: the blocks of prompt + output - 1 tokens pinned.
            computed = len(body["token_ids"]) + len(choices[0]["token_ids"]) - 1
            blocks = list(range(-(-computed // self.block_size)))
            kv = {"do_remote_prefill": False, "do_remote_decode": True, "remote_engine_id": self.url,
                  "remote_block_ids": [blocks], "remote_request_id": rid,
                  "remote_host": "127.0.0.1", "remote_port": 5601, "tp_size": 1,
                  "remote_num_tokens": computed, "remote_blocks_expiry_time": 1e9}
        return {"request_id": rid, "model": "scripted", "created": 0,
                "usage": _usage(body, completion), "prompt_logprobs": _prompt_logprobs(body),
                "prompt_token_id_logprobs": None, "kv_transfer_params": kv,
                "ec_transfer_params": None, "output_mode": "tokens", "choices": choices}


def _prompt_logprobs(body: dict[str, Any]) -> list[Any] | None:
    """Like vLLM's JSON answer when sampling_params.prompt_logprobs is set (streams have none):
    null for the first prompt token, then {token id: Logprob} per token."""
    if (body.get("sampling_params") or {}).get("prompt_logprobs") is None:
        return None
    return [None] + [{str(t): {"logprob": -1.0, "rank": 1, "decoded_token": None}}
                     for t in body["token_ids"][1:]]


def _n(body: dict[str, Any]) -> int:
    return int((body.get("sampling_params") or {}).get("n", 1))


def _max_tokens(body: dict[str, Any]) -> int:
    value = (body.get("sampling_params") or {}).get("max_tokens")
    return 1 << 30 if value is None else int(value)


def _usage(body: dict[str, Any], completion: int) -> dict[str, Any]:
    prompt = len(body["token_ids"])
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion,
            "completion_tokens": completion, "prompt_tokens_details": None,
            "completion_tokens_details": None}


def _choice(index: int, token_ids: list[int], finish: str | None) -> dict[str, Any]:
    return {"index": index, "finish_reason": finish, "stop_reason": None, "token_ids": token_ids,
            "routed_experts": None, "sampling_mask": None, "weight_versions": None,
            "logprobs": None}


def _event(rid: str, choice: dict[str, Any]) -> dict[str, Any]:
    return {"request_id": rid, "usage": None, "output_mode": "tokens", "choices": [choice]}


def scripted_transport(engines: Mapping[str, ScriptedEngine], *, api_key: str | None = None
                       ) -> httpx.MockTransport:
    """Scripted engines behind HTTP, keyed by base URL, answering like vLLM --tokens-only."""

    async def handle(request: httpx.Request) -> httpx.Response:
        engine = engines[f"{request.url.scheme}://{request.url.netloc.decode()}"]
        path = request.url.path
        if api_key is not None and path.startswith("/inference") and (
                request.headers.get("authorization") != f"Bearer {api_key}"):
            return httpx.Response(401, json={"error": "Unauthorized"})  # vLLM's exact answer
        if path == HEALTH_PATH:
            return httpx.Response(200 if await engine.check_health(timeout_s=1) else 503)
        body = orjson.loads(request.content)
        if path == ABORT_PATH:
            await engine.abort(body["request_ids"])
            return httpx.Response(200)
        if path != GENERATE_PATH:
            return httpx.Response(404)
        if body.get("stream"):
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  content=_sse_bytes(engine.stream(body)))
        return httpx.Response(200, json=await engine.generate(body, timeout_s=60))

    return httpx.MockTransport(handle)


async def _sse_bytes(events: AsyncGenerator[dict[str, Any], None]) -> AsyncGenerator[bytes, None]:
    async with aclosing(events) as stream:
        async for event in stream:
            yield b"data: " + orjson.dumps(event) + b"\n\n"
    yield b"data: [DONE]\n\n"
