"""Chat render latency and throughput: ours vs the vLLM 0.33 reference render server.

Workloads (Qwen3 tokenizer, qwen3 + hermes parsers, one tool, weightless Qwen3 folder):

- chat_9k:   system prompt + one ~9k-token user message.
- agent_50k: a 5-turn agent conversation (~50k tokens: user turns, assistant tool calls, big
             tool results); the request rendered is the 5th turn.

Each is measured cold and warm:
- cold: every request is unique (a unique tag starts each message), so no cache can help;
- warm: chat_9k repeats the same prompt; agent_50k renders turn 5 right after turns 1-4 of the
  same conversation (the agent pattern the segment cache is for).

The reference has no cross-request cache, so it is measured on the cold requests only (its
warm numbers would be the same work). Ours: in-process `Renderer` (one thread) and HTTP
(`render_service.app`, one uvicorn worker) when available. Latency: p50/p99 of sequential
requests. Throughput (one worker): requests/s with --concurrency clients.

Final stdout line: JSON with all numbers and the ratios ref/ours (latency) and ours/ref
(throughput). Usage: `.venv/bin/python bench/render.py [--n9k 30 --n50k 8]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.render.ref_server import PARSER_FLAGS, RefRenderServer, build_render_model_dir, free_port  # noqa: E402

from render_service.api import Renderer  # noqa: E402
from render_service.config import ServiceConfig  # noqa: E402

TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}


def corpus() -> str:
    """Deterministic English+code text (the transformers sources in the project venv)."""
    import transformers

    root = Path(transformers.__file__).resolve().parent
    return "".join(p.read_text(errors="replace") for p in sorted(root.glob("*.py"))[:40])


def tokens_to_chars(text: str, renderer: Renderer, n_tokens: int) -> str:
    ids = renderer.bundle.encoder.encode(text[: n_tokens * 6])
    return renderer.bundle.hf_tokenizer.decode(ids[:n_tokens])


def chat_9k(text: str, tag: str) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "system", "content": "You are a careful code reviewer."},
            {"role": "user", "content": f"[{tag}] Review this code:\n{text}"},
        ],
        "tools": [TOOL],
    }


def agent_turns(chunks: list[str], tag: str) -> list[dict[str, Any]]:
    """Bodies of turns 1..5 of one agent conversation (each turn adds ~10k tokens)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"[{tag}] You are a coding agent.\n{chunks[0]}"},
        {"role": "user", "content": f"[{tag}] Fix the bug in the tokenizer module."},
    ]
    bodies = []
    for turn in range(5):
        bodies.append({"messages": [dict(m) for m in messages], "tools": [TOOL]})
        call_id = f"call_{tag}_{turn}"
        messages.append(
            {
                "role": "assistant",
                "content": f"[{tag}] Let me read file {turn}.",
                "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/f{turn}.py"})}}
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": f"[{tag}]\n{chunks[turn + 1]}"})
    return bodies


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {"p50_ms": round(statistics.median(ordered) * 1e3, 3), "p99_ms": round(p99 * 1e3, 3), "n": len(ordered)}


def time_calls(call: Any, bodies: list[Any]) -> list[float]:
    out = []
    for body in bodies:
        start = time.perf_counter()
        call(body)
        out.append(time.perf_counter() - start)
    return out


def throughput(call: Any, bodies: list[Any], concurrency: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(call, bodies))
    return round(len(bodies) / (time.perf_counter() - start), 3)


def http_caller(url: str) -> Any:
    client = httpx.Client(timeout=600.0)

    def call(body: dict[str, Any]) -> Any:
        response = client.post(f"{url}/v1/chat/completions/render", json=body)
        response.raise_for_status()
        return response.content

    return call


def start_our_http(config: ServiceConfig, log_dir: Path) -> tuple[subprocess.Popen[bytes], str] | None:
    try:
        from render_service.app import CONFIG_ENV
        from render_service.config_io import config_to_json
    except ImportError:
        return None
    port = free_port()
    env = {**os.environ, CONFIG_ENV: config_to_json(config)}
    cmd = [sys.executable, "-m", "uvicorn", "render_service.app:app_from_env", "--factory",
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--log-level", "warning"]
    log = (log_dir / f"ours-{port}.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    return None


def measure(name: str, call: Any, cold: list[Any], warm: list[Any] | None, concurrency: int) -> dict[str, Any]:
    result: dict[str, Any] = {"cold": percentiles(time_calls(call, cold[: len(cold) // 2]))}
    result["cold"]["rps"] = throughput(call, cold[len(cold) // 2:], concurrency)
    if warm is not None:
        time_calls(call, warm[:1])  # fill caches
        result["warm"] = percentiles(time_calls(call, warm))
        result["warm"]["rps"] = throughput(call, warm, concurrency)
    print(name, json.dumps(result), file=sys.stderr, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n9k", type=int, default=30)
    parser.add_argument("--n50k", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()

    work = REPO / ".cache" / "bench-render"
    work.mkdir(parents=True, exist_ok=True)
    model_dir = build_render_model_dir(work / "model")
    # The 5-turn agent prompt is ~50k tokens: give the folder a 64k context (both servers).
    hf_config = json.loads((model_dir / "config.json").read_text())
    hf_config["max_position_embeddings"] = 65536
    (model_dir / "config.json").write_text(json.dumps(hf_config, indent=2))
    config = ServiceConfig(
        model=str(model_dir), served_model_name=("Qwen/Qwen3-8B",),
        reasoning_parser="qwen3", tool_call_parser="hermes", enable_auto_tool_choice=True,
    )
    renderer = Renderer(config)
    text = corpus()
    big = tokens_to_chars(text, renderer, 9000)
    chunk_chars = len(big)
    chunks = [text[i * chunk_chars:(i + 1) * chunk_chars] for i in range(6)]

    cold_9k = [chat_9k(big, f"c{i}") for i in range(args.n9k)]
    warm_9k = [chat_9k(big, "warm")] * args.n9k
    cold_50k = [agent_turns(chunks, f"a{i}")[-1] for i in range(args.n50k)]
    warm_conversations = [agent_turns(chunks, f"w{i}") for i in range(args.n50k)]
    sizes = {
        "chat_9k_tokens": len(renderer.render_chat(cold_9k[0])["token_ids"]),
        "agent_50k_tokens": len(renderer.render_chat(cold_50k[0])["token_ids"]),
    }

    results: dict[str, Any] = {"sizes": sizes, "tokenizer_backend": renderer.bundle.encoder.backend_name}
    ours = renderer.render_chat
    results["ours_inproc"] = {
        "chat_9k": measure("ours chat_9k", ours, cold_9k, warm_9k, 1),
        "agent_50k": measure("ours agent_50k", ours, cold_50k, None, 1),
    }
    # Agent warm: render turns 1-4 first (untimed), then time turn 5.
    for conversation in warm_conversations:
        for body in conversation[:-1]:
            ours(body)
    warm_turn5 = time_calls(ours, [conv[-1] for conv in warm_conversations])
    results["ours_inproc"]["agent_50k"]["warm_turn5"] = percentiles(warm_turn5)

    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    http = start_our_http(config, logs)
    if http is not None:
        proc, url = http
        try:
            call = http_caller(url)
            results["ours_http"] = {
                "chat_9k": measure("ours-http chat_9k", call, [chat_9k(big, f"h{i}") for i in range(args.n9k)], warm_9k, args.concurrency),
                "agent_50k": measure("ours-http agent_50k", call, [agent_turns(chunks, f"h{i}")[-1] for i in range(args.n50k)], None, args.concurrency),
            }
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    with RefRenderServer(model_dir, PARSER_FLAGS, logs) as ref:
        call = http_caller(ref.url)
        call(cold_9k[0])  # warm up the server (imports, template compile)
        results["vllm_ref_http"] = {
            "chat_9k": measure("ref chat_9k", call, [chat_9k(big, f"r{i}") for i in range(args.n9k)], None, args.concurrency),
            "agent_50k": measure("ref agent_50k", call, [agent_turns(chunks, f"r{i}")[-1] for i in range(args.n50k)], None, args.concurrency),
        }

    results["ratios"] = ratios(results)
    results["load_average"] = os.getloadavg()
    print(json.dumps(results))


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    """latency: ref_p50 / ours_p50 (>=5 meets the target); throughput: ours_rps / ref_rps."""
    ref = results["vllm_ref_http"]
    out: dict[str, Any] = {}
    for mode in ("ours_inproc", "ours_http"):
        if mode not in results:
            continue
        for workload in ("chat_9k", "agent_50k"):
            ours = results[mode][workload]
            for temp in ("cold", "warm", "warm_turn5"):
                if temp not in ours:
                    continue
                key = f"{mode}.{workload}.{temp}"
                out[f"{key}.latency_speedup_p50"] = round(ref[workload]["cold"]["p50_ms"] / ours[temp]["p50_ms"], 2)
                if "rps" in ours[temp]:
                    out[f"{key}.throughput_ratio"] = round(ours[temp]["rps"] / ref[workload]["cold"]["rps"], 2)
    return out


if __name__ == "__main__":
    main()
