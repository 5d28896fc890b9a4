"""Gateway benchmark; the last stdout line is one JSON object.

1. Added latency on the same real engine (a `vllm serve --tokens-only` CPU engine, started here
   from tests/harness unless --engine is given): the same rendered, scripted request streamed
   (a) straight to /inference/v1/generate and (b) through the gateway's /v1/chat/completions
   (render + derender in-process). TTFT = request sent -> first event with a token;
   ITL = gap between token events. p50/p99 of each and the difference (gateway - direct).
2. Concurrent streams held: an engine stand-in (a small asyncio HTTP server streaming one token
   every --standin-interval-ms) behind the gateway, C streaming clients at once for C in
   --levels. A level is "held" when every stream completes at >= 2/3 of the stand-in's token
   rate (p50/p99 ITL and chunks/s are reported too). Gateway, stand-in and load client run as separate
   processes on this machine's cores, loopback only.

    .venv/bin/python bench/gateway.py [--engine URL] [--requests 30] [--levels 50,100,200,400]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCRIPT_TEXT = " the" * 48  # 48 tokens, one per event
STANDIN_TOKEN = 279  # " the" in Qwen3
STANDIN_TOKENS = 40


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# -- engine stand-in (subprocess role) ---------------------------------------------------------
async def _standin_handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          interval_s: float) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            length = next((int(line.split(":")[1]) for line in lines
                           if line.lower().startswith("content-length")), 0)
            body = await reader.readexactly(length) if length else b""
            path = lines[0].split(" ")[1]
            if path == "/inference/v1/generate":
                await _standin_stream(writer, json.loads(body), interval_s)
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def _standin_stream(writer: asyncio.StreamWriter, body: dict, interval_s: float) -> None:
    rid = "generate-tokens-" + body["request_id"]
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                 b"transfer-encoding: chunked\r\n\r\n")
    for i in range(STANDIN_TOKENS):
        await asyncio.sleep(interval_s)
        last = i == STANDIN_TOKENS - 1
        event = {"request_id": rid, "usage": None, "output_mode": "tokens", "choices": [{
            "index": 0, "finish_reason": "length" if last else None, "stop_reason": None,
            "token_ids": [STANDIN_TOKEN], "routed_experts": None, "sampling_mask": None,
            "weight_versions": None, "logprobs": None}]}
        _chunk(writer, b"data: " + json.dumps(event).encode() + b"\n\n")
        await writer.drain()
    _chunk(writer, b"data: [DONE]\n\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def serve_standin(port: int, interval_s: float) -> None:
    async def main() -> None:
        server = await asyncio.start_server(
            lambda r, w: _standin_handle(r, w, interval_s), "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# -- gateway (subprocess role) -----------------------------------------------------------------
def serve_gateway(port: int, engine: str, model_dir: str | None, max_streams: int) -> None:
    import uvicorn

    from render_service.config import Limits
    from render_service.gateway.app import create_gateway_app
    from render_service.gateway.config import GatewayConfig
    from tests.gateway.e2e_support import service_config

    # The e2e settings (qwen3 reasoning + hermes tool parsers on): what a real deployment runs.
    config = service_config(Path(model_dir)).replace(limits=Limits(max_concurrent_requests=100000))
    gateway_config = GatewayConfig(engines=(engine,), max_concurrent_streams=max_streams)
    app = create_gateway_app(config, gateway_config)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", backlog=4096)


def start_role(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_http(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not up after {timeout_s} s")


# -- measurements ------------------------------------------------------------------------------
async def timed_stream(client: httpx.AsyncClient, url: str, body: dict, token_event: bytes
                       ) -> tuple[float, list[float], bool]:
    """(TTFT, ITLs, completed) of one SSE request; a token event contains `token_event`."""
    started = time.perf_counter()
    stamps: list[float] = []
    done = False
    async with client.stream("POST", url, json=body) as response:
        async for line in response.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif token_event in line.encode():
                stamps.append(time.perf_counter())
    if not stamps:
        return float("nan"), [], False
    return stamps[0] - started, [b - a for a, b in zip(stamps, stamps[1:])], done


async def added_latency(engine: str, gateway: str, model_dir: Path, requests: int) -> dict:
    from render_service.gateway.codec import InProcessCodec
    from render_service.gateway.context import Leg, engine_body
    from tests.gateway.e2e_support import Scripts, service_config

    codec = InProcessCodec(service_config(model_dir))
    script = Scripts(model_dir).ids(SCRIPT_TEXT)
    chat = {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "Say the."}],
            "stream": True, "max_tokens": len(script) + 1, "vllm_xargs": {"rs_script": script},
            "chat_template_kwargs": {"enable_thinking": False}}
    results: dict[str, dict[str, list[float]]] = {"direct": {"ttft": [], "itl": []},
                                                  "gateway": {"ttft": [], "itl": []}}
    async with httpx.AsyncClient(timeout=60) as client:
        for i in range(requests + 2):  # two warm-ups
            rendered = codec.render_chat({**chat, "request_id": f"bench-{i}"}, None)
            direct = engine_body(Leg(0, rendered), stream=True, request_id=f"bench-direct-{i}")
            for kind, url, body, marker in (
                    ("direct", engine + "/inference/v1/generate", direct, b'"token_ids":['),
                    ("gateway", gateway + "/v1/chat/completions", chat, b'"content":" the"')):
                ttft, itl, ok = await timed_stream(client, url, body, marker)
                assert ok, f"{kind} stream did not finish"
                if i >= 2:
                    results[kind]["ttft"].append(ttft)
                    results[kind]["itl"].extend(itl)
    out: dict = {}
    for metric in ("ttft", "itl"):
        for q, name in ((0.5, "p50"), (0.99, "p99")):
            d = pct(results["direct"][metric], q) * 1000
            g = pct(results["gateway"][metric], q) * 1000
            out[f"{metric}_{name}_ms"] = {"direct": round(d, 3), "gateway": round(g, 3),
                                         "added": round(g - d, 3)}
    return out


async def hold_level(gateway: str, concurrency: int, interval_s: float) -> dict:
    body = {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "x"}], "stream": True,
            "max_tokens": STANDIN_TOKENS, "chat_template_kwargs": {"enable_thinking": False}}
    limits = httpx.Limits(max_connections=concurrency + 10, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        started = time.perf_counter()
        results = await asyncio.gather(*(
            timed_stream(client, gateway + "/v1/chat/completions", body, b'"content":" the"')
            for _ in range(concurrency)), return_exceptions=True)
        elapsed = time.perf_counter() - started
    ok = [r for r in results if isinstance(r, tuple) and r[2]]
    itl = [x for r in ok for x in r[1]]
    p99 = pct(itl, 0.99)
    return {"concurrency": concurrency, "completed": len(ok), "wall_s": round(elapsed, 2),
            "itl_p50_ms": round(pct(itl, 0.5) * 1000, 2), "itl_p99_ms": round(p99 * 1000, 2),
            "chunks_per_s": round(sum(len(r[1]) + 1 for r in ok) / elapsed, 1),
            # Held: every stream completes at >= 2/3 of the engine's token rate (the whole run
            # within 1.5x one stream's ideal duration) on this shared 2-core machine.
            "held": len(ok) == concurrency and elapsed < 1.5 * STANDIN_TOKENS * interval_s}


def start_real_engine() -> tuple[str, Path, object]:
    from tests.harness.engines import EngineFleet, tokens_only_spec
    from tests.harness.tiny_model import tiny_qwen3_dir

    model_dir = tiny_qwen3_dir()
    fleet = EngineFleet()
    engine = fleet.launch(tokens_only_spec(model_dir, name="bench"))
    engine.wait_healthy()
    return engine.url, model_dir, fleet


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", help="tokens-only engine URL (default: start one)")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--levels", default="50,100,200,400,800")
    parser.add_argument("--standin-interval-ms", type=float, default=50.0)
    parser.add_argument("--role", choices=("standin", "gateway"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    interval_s = args.standin_interval_ms / 1000
    if args.role == "standin":
        return serve_standin(args.port, interval_s)
    if args.role == "gateway":
        return serve_gateway(args.port, args.engine, args.model_dir, 100000)

    fleet = None
    engine_url, model_dir = args.engine, None
    if engine_url is None:
        engine_url, model_dir, fleet = start_real_engine()
    else:
        from tests.harness.tiny_model import tiny_qwen3_dir
        model_dir = tiny_qwen3_dir()
    procs = []
    try:
        gw_port = free_port()
        procs.append(start_role("--role", "gateway", "--port", str(gw_port), "--engine", engine_url,
                                "--model-dir", str(model_dir)))
        gw = f"http://127.0.0.1:{gw_port}"
        wait_http(gw + "/ready")
        latency = asyncio.run(added_latency(engine_url, gw, model_dir, args.requests))
        print("added latency:", json.dumps(latency), flush=True)
        if fleet is not None:
            fleet.stop_all()  # free the cores for the capacity run
            fleet = None
        sd_port, gw2_port = free_port(), free_port()
        procs.append(start_role("--role", "standin", "--port", str(sd_port),
                                "--standin-interval-ms", str(args.standin_interval_ms)))
        procs.append(start_role("--role", "gateway", "--port", str(gw2_port),
                                "--engine", f"http://127.0.0.1:{sd_port}", "--model-dir", str(model_dir)))
        gw2 = f"http://127.0.0.1:{gw2_port}"
        wait_http(gw2 + "/ready")
        levels = []
        for concurrency in (int(x) for x in args.levels.split(",")):
            level = asyncio.run(hold_level(gw2, concurrency, interval_s))
            print("capacity:", json.dumps(level), flush=True)
            levels.append(level)
            if not level["held"]:
                break
        held = max((lv["concurrency"] for lv in levels if lv["held"]), default=0)
        print(json.dumps({"bench": "gateway", "cores": os.cpu_count(), **latency,
                          "standin_interval_ms": args.standin_interval_ms,
                          "standin_tokens_per_stream": STANDIN_TOKENS,
                          "max_concurrent_streams_held": held, "levels": levels}))
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        if fleet is not None:
            fleet.stop_all()


if __name__ == "__main__":
    main()
