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
(`render_service.http.app`, one uvicorn worker). Every row times --n9k / --n50k sequential
requests (p50/p99; 100+ samples make the p99 the 99th percentile of real data, not the
maximum) and then as many other unique requests from --concurrency client threads (req/s of one
worker). Before timing, ours and the reference must return the same token ids for the same
request; a server that does not start, a failed request or a mismatch stops the run.

Then a sweep over prompt lengths (--sweep-tokens, --sweep-n cold requests each, sequential):
p50 latency of ours (in-process and HTTP) and of the reference, drawn as a PNG
(--plot, default docs/bench/render_latency.png; `--no-plot` skips it).

Final stdout line: JSON with all numbers and, per row, the ratios ref/ours for p50 and p99
latency and ours/ref for throughput. Usage:
    .venv/bin/python bench/render.py               # full: ~100-200 samples per row
    .venv/bin/python bench/render.py --quick       # smoke test: a few requests per row
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self

import httpx
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from render_service.api import Renderer
from render_service.config import ServiceConfig, config_to_json
from render_service.http.app import CONFIG_ENV
from tests.render.ref_server import (
    PARSER_FLAGS,
    RefRenderServer,
    build_render_model_dir,
    free_port,
    stop_process,
    wait_http_healthy,
)

Call = Callable[[dict[str, Any]], Any]
CHAT_PATH = "/v1/chat/completions/render"
TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file of the repository.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
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
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"src/f{turn}.py"}),
                        },
                    }
                ],
            }
        )
        messages.append(
            {"role": "tool", "tool_call_id": call_id, "content": f"[{tag}]\n{chunks[turn + 1]}"}
        )
    return bodies


class Workloads:
    """Request bodies; every `prefix` gives requests no other prefix shares (cold)."""

    def __init__(self, big: str, chunks: list[str], n9k: int, n50k: int) -> None:
        self.big, self.chunks, self.n9k, self.n50k = big, chunks, n9k, n50k

    def cold_9k(self, prefix: str) -> list[dict[str, Any]]:
        return [chat_9k(self.big, f"{prefix}{i}") for i in range(self.n9k)]

    def warm_9k(self) -> list[dict[str, Any]]:
        return [chat_9k(self.big, "warm")] * self.n9k

    def cold_50k(self, prefix: str) -> list[dict[str, Any]]:
        return [agent_turns(self.chunks, f"{prefix}{i}")[-1] for i in range(self.n50k)]

    def conversations_50k(self, prefix: str) -> list[list[dict[str, Any]]]:
        return [agent_turns(self.chunks, f"{prefix}{i}") for i in range(self.n50k)]


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 3),
        "p99_ms": round(p99 * 1e3, 3),
        "n": len(ordered),
    }


def time_calls(call: Call, bodies: list[Any]) -> list[float]:
    out = []
    for body in bodies:
        start = time.perf_counter()
        call(body)
        out.append(time.perf_counter() - start)
    return out


def throughput(call: Call, bodies: list[Any], concurrency: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(call, bodies))
    return round(len(bodies) / (time.perf_counter() - start), 3)


def row(
    name: str, call: Call, latency_bodies: list[Any], rps_bodies: list[Any] | None, concurrency: int
) -> dict[str, Any]:
    """p50/p99 of sequential calls, then req/s of `rps_bodies` from `concurrency` clients."""
    stats: dict[str, Any] = percentiles(time_calls(call, latency_bodies))
    if rps_bodies is not None:
        stats["rps"] = throughput(call, rps_bodies, concurrency)
    print(name, json.dumps(stats), file=sys.stderr, flush=True)
    return stats


def warm_turn5(name: str, call: Call, conversations: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Turn 5 timed right after turns 1-4 of the same conversation (untimed)."""
    for conversation in conversations:
        for body in conversation[:-1]:
            call(body)
    return row(name, call, [conversation[-1] for conversation in conversations], None, 1)


def measure_ours(label: str, call: Call, work: Workloads, concurrency: int) -> dict[str, Any]:
    call(work.warm_9k()[0])  # warm up (first-call imports, template compile) and fill caches
    return {
        "chat_9k": {
            "cold": row(
                f"{label} chat_9k cold",
                call,
                work.cold_9k(f"{label}-c"),
                work.cold_9k(f"{label}-t"),
                concurrency,
            ),
            "warm": row(f"{label} chat_9k warm", call, work.warm_9k(), work.warm_9k(), concurrency),
        },
        "agent_50k": {
            "cold": row(
                f"{label} agent_50k cold",
                call,
                work.cold_50k(f"{label}-c"),
                work.cold_50k(f"{label}-t"),
                concurrency,
            ),
            "warm_turn5": warm_turn5(
                f"{label} agent_50k warm_turn5", call, work.conversations_50k(f"{label}-w")
            ),
        },
    }


def measure_ref(call: Call, work: Workloads, concurrency: int) -> dict[str, Any]:
    call(work.warm_9k()[0])  # warm up the server (imports, template compile)
    return {
        "chat_9k": {
            "cold": row(
                "ref chat_9k cold", call, work.cold_9k("r-c"), work.cold_9k("r-t"), concurrency
            )
        },
        "agent_50k": {
            "cold": row(
                "ref agent_50k cold", call, work.cold_50k("r-c"), work.cold_50k("r-t"), concurrency
            )
        },
    }


def http_caller(url: str) -> Call:
    client = httpx.Client(timeout=600.0)
    headers = {"content-type": "application/json"}

    def call(body: dict[str, Any]) -> Any:
        response = client.post(f"{url}{CHAT_PATH}", content=orjson.dumps(body), headers=headers)
        response.raise_for_status()
        return response.content

    return call


class OurHttpServer:
    """`render_service.http.app` under one uvicorn worker; raises with the log tail if it fails."""

    def __init__(self, config: ServiceConfig, log_dir: Path, workers: int = 1) -> None:
        self.config = config
        self.workers = workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"ours-{self.port}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        env = {**os.environ, CONFIG_ENV: config_to_json(self.config)}
        cmd = [
            sys.executable,
            "-m",
            "uvicorn",
            "render_service.http.app:app_from_env",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
        ]  # uvicorn's default log level: an access-log line per request, as the reference writes
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO)
            )
        try:
            wait_http_healthy(
                self._proc, self.url, self.log_path, 300.0, "render-service (uvicorn)", 0.5
            )
        except RuntimeError:
            stop_process(self._proc)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            stop_process(self._proc)


def check_same_tokens(ours: Call, ref: Call, bodies: list[dict[str, Any]]) -> None:
    """Benchmarking different work would be meaningless: ids must be equal first."""
    for body in bodies:
        mine = ours(copy.deepcopy(body))["token_ids"]
        theirs = json.loads(ref(copy.deepcopy(body)))["token_ids"]
        if mine != theirs:
            raise SystemExit(
                f"token ids differ from the reference ({len(mine)} vs {len(theirs)} tokens)"
            )


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    """Per row: latency ref/ours at p50 and p99 (>= 5 meets the target), throughput ours/ref."""
    ref = results["vllm_ref_http"]
    out: dict[str, Any] = {}
    for mode in ("ours_inproc", "ours_http"):
        for workload, temps in results[mode].items():
            base = ref[workload]["cold"]
            for temp, ours in temps.items():
                key = f"{mode}.{workload}.{temp}"
                out[f"{key}.latency_speedup_p50"] = round(base["p50_ms"] / ours["p50_ms"], 2)
                out[f"{key}.latency_speedup_p99"] = round(base["p99_ms"] / ours["p99_ms"], 2)
                if "rps" in ours:
                    out[f"{key}.throughput_ratio"] = round(ours["rps"] / base["rps"], 2)
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--n9k",
        type=int,
        default=200,
        help="requests per 9k row (latency; as many again for req/s)",
    )
    parser.add_argument(
        "--n50k",
        type=int,
        default=100,
        help="requests per 50k row (latency; as many again for req/s)",
    )
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes of our HTTP server")
    parser.add_argument("--ours-only", action="store_true", help="skip the reference (no ratios, no picture)")
    parser.add_argument("--sweep-tokens", type=int, nargs="*", default=[1000, 2000, 4000, 9000, 16000, 32000, 48000],
                        help="prompt lengths of the latency sweep (none: no sweep)")
    parser.add_argument("--sweep-n", type=int, default=20, help="cold requests per sweep length")
    parser.add_argument("--plot", type=Path, default=REPO / "docs" / "bench" / "render_latency.png")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--quick", action="store_true", help="smoke test: 4 requests per row")
    args = parser.parse_args()
    if args.quick:
        args.n9k = args.n50k = 4
        args.sweep_n = 2
    if min(args.n9k, args.n50k) < 2:
        parser.error("--n9k and --n50k must be >= 2")
    return args


def sweep(call: Call, prompts: dict[int, str], n: int, label: str) -> dict[int, float]:
    """p50 ms of `n` cold (unique) requests per prompt length."""
    if not prompts:
        return {}
    call(chat_9k(next(iter(prompts.values())), f"{label}-sweep-warm"))
    out = {}
    for tokens, text in prompts.items():
        out[tokens] = percentiles(time_calls(call, [chat_9k(text, f"{label}-s{tokens}-{i}") for i in range(n)]))["p50_ms"]
    print(label, "sweep p50 ms", json.dumps(out), file=sys.stderr, flush=True)
    return out


def plot_sweep(path: Path, results: dict[str, Any]) -> None:
    from bench.plots import save_png

    names = {"ours_inproc": "render-service, in-process", "ours_http": "render-service over HTTP",
             "vllm_ref_http": "vLLM 0.33 render server over HTTP"}  # fmt: skip
    sizes = results["sweep"]["prompt_tokens"]
    series = [(label, sizes, [results["sweep"][key][str(n)] for n in sizes]) for key, label in names.items()]
    save_png(path, series, title="Chat render latency against prompt length (cold, p50)",
             xlabel="prompt tokens", ylabel="p50 latency, ms",
             note=f"python bench/render.py; {results['sweep']['n']} unique requests per point, sequential; "
                  f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip


def build_model_dir(work: Path) -> Path:
    model_dir = build_render_model_dir(work / "model")
    # The 5-turn agent prompt is ~50k tokens: give the folder a 64k context (both servers).
    hf_config = json.loads((model_dir / "config.json").read_text())
    hf_config["max_position_embeddings"] = 65536
    (model_dir / "config.json").write_text(json.dumps(hf_config, indent=2))
    return model_dir


def main() -> None:
    args = parse_args()
    work_dir = REPO / ".cache" / "bench-render"
    logs = work_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    model_dir = build_model_dir(work_dir)
    config = ServiceConfig(
        model=str(model_dir),
        served_model_name=("Qwen/Qwen3-8B",),
        reasoning_parser="qwen3",
        tool_call_parser="hermes",
        enable_auto_tool_choice=True,
    )
    renderer = Renderer(config)
    text = corpus()
    big = tokens_to_chars(text, renderer, 9000)
    chunks = [text[i * len(big) : (i + 1) * len(big)] for i in range(6)]
    work = Workloads(big, chunks, args.n9k, args.n50k)
    probe = [chat_9k(big, "probe"), agent_turns(chunks, "probe")[-1]]
    sweep_prompts = {n: tokens_to_chars(text, renderer, n) for n in args.sweep_tokens}
    sweeps: dict[str, dict[int, float]] = {}

    results: dict[str, Any] = {
        "args": {"n9k": args.n9k, "n50k": args.n50k, "concurrency": args.concurrency, "workers": args.workers},
        "sizes": {
            "chat_9k_tokens": len(renderer.render_chat(probe[0])["token_ids"]),
            "agent_50k_tokens": len(renderer.render_chat(probe[1])["token_ids"]),
        },
        "tokenizer_backend": renderer.bundle.encoder.backend_name,
    }
    results["ours_inproc"] = measure_ours("ours", renderer.render_chat, work, 1)
    sweeps["ours_inproc"] = sweep(renderer.render_chat, sweep_prompts, args.sweep_n, "ours")
    with OurHttpServer(config, logs, args.workers) as server:
        http_call = http_caller(server.url)
        results["ours_http"] = measure_ours("ours-http", http_call, work, args.concurrency)
        sweeps["ours_http"] = sweep(http_call, sweep_prompts, args.sweep_n, "ours-http")
    if args.ours_only:
        results["load_average"] = os.getloadavg()
        print(json.dumps(results))
        return
    with RefRenderServer(model_dir, PARSER_FLAGS, logs) as ref:
        ref_call = http_caller(ref.url)
        check_same_tokens(renderer.render_chat, ref_call, probe)
        results["vllm_ref_http"] = measure_ref(ref_call, work, args.concurrency)
        sweeps["vllm_ref_http"] = sweep(ref_call, sweep_prompts, args.sweep_n, "ref")

    results["ratios"] = ratios(results)
    if sweep_prompts:
        results["sweep"] = {"prompt_tokens": list(sweep_prompts), "n": args.sweep_n,
                            **{key: {str(k): v for k, v in values.items()} for key, values in sweeps.items()}}
        results["sweep"]["http_p50_over_ref"] = {
            str(n): round(sweeps["ours_http"][n] / sweeps["vllm_ref_http"][n], 3) for n in sweep_prompts}
        if not args.no_plot:
            plot_sweep(args.plot, results)
    results["load_average"] = os.getloadavg()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
