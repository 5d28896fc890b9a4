"""Streaming chat derender cost: ours vs the vLLM 0.33 reference render server, over HTTP.

The same engine output (reasoning, then content, then two hermes tool calls, ~4,000 tokens) is
sent one token per chunk, after a ~32k-token prompt, to both servers (qwen3 + hermes parsers,
the same weightless Qwen3 model folder). vLLM needs `chat_request` (the user's document and
the tools) and the full `prompt_token_ids` on every chunk; ours only on the first, and
`--protocol vllm` makes our client resend them anyway, as an unchanged vLLM client does.

Measured per server: server CPU seconds (user+system of the server process tree, from /proc,
over the streaming phase only), mean request bytes per chunk, wall seconds. The reference
replays the whole stream on every chunk (O(n^2) calls), so its run is bounded by
--ref-tokens (default 1000 tokens); ours runs the full --tokens. Nothing is extrapolated: the
JSON reports the token counts actually measured for each, and the CPU ratio is computed on the
same prefix length (ours is also measured on the reference's prefix). `--ref-sample-every N`
also measures the reference's cost of single chunks k (every N-th and the last; its state is
plain JSON, so the state after k one-token chunks is built by one setup request) and reports
their trapezoidal integral over the whole output, beside the whole-output ratio.

`--case agentic`: after a ~16,000-token prompt, a ~12,800-token output dominated by one `write_file` call carrying a whole
file, with 30 tools declared (bench/stream_parse.py builds it); additionally reports our
per-chunk server CPU over the last 1,000 chunks against the first 1,000 (target <= 1.2) and the
largest `stream_state` (target < 1 KB).

Final stdout line: JSON with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.render.ref_server import PARSER_FLAGS, RefRenderServer, build_render_model_dir, free_port  # noqa: E402

REQUEST_ID = "generate-tokens-chatcmpl-bench"
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather by city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
]  # fmt: skip


def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def _tree_pids(root: int) -> list[int]:
    pids, frontier = [root], [root]
    while frontier:
        pid = frontier.pop()
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            pids.append(child)
            frontier.append(child)
    return pids


def cpu_seconds(root: int) -> float:
    """user+system CPU of a process tree (live processes only), from /proc/<pid>/stat."""
    total = 0
    for pid in _tree_pids(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _clock_ticks()


def task_cpu_ns(root: int) -> int:
    """CPU nanoseconds of a process tree's threads (schedstat: ns-precise, unlike the 10 ms
    ticks of /proc/<pid>/stat, so a sub-millisecond chunk can be timed on its own)."""
    total = 0
    for pid in _tree_pids(root):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # a thread that just ended
    return total


def build_output(tokenizer, n_tokens: int) -> list[int]:  # noqa: ANN001
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    reasoning = "Thinking about the weather in 中文 and emoji 😀, step by step. "
    content = "Here is a long answer sentence with some detail. "
    body_tokens = n_tokens - 80
    half = tokenizer.encode("<think>\n" + reasoning * (body_tokens // 10), add_special_tokens=False)
    rest = tokenizer.encode("</think>\n\n" + content * (body_tokens // 10), add_special_tokens=False)
    ids = half[: body_tokens // 2] + rest[: body_tokens - body_tokens // 2]
    ids += tokenizer.encode("\nDone.\n" + call + "\n" + call, add_special_tokens=False)
    return ids + [151645]


def build_prompt(tokenizer, n_tokens: int) -> list[int]:  # noqa: ANN001
    head = tokenizer.encode("<|im_start|>user\n", add_special_tokens=False)
    tail = tokenizer.encode("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    filler = tokenizer.encode("A long document about many things. ", add_special_tokens=False)
    body = (filler * (n_tokens // len(filler) + 1))[: n_tokens - len(head) - len(tail)]
    return head + body + tail


def run_stream(url: str, ids: list[int], prompt: list[int], every_chunk: bool, limit: int,
               client: httpx.Client, chat_request: dict, sizes: list[int] | None = None,
               latencies: list[float] | None = None, server_pid: int | None = None,
               chunk_cpu_ms: list[float] | None = None) -> tuple[int, int, int]:  # fmt: skip
    """Send ids[:limit] one per chunk; returns (requests, total bytes, first request bytes).
    `sizes`: filled with each returned stream_state's size in bytes; `latencies` with each
    request's wall seconds; `chunk_cpu_ms` with each chunk's server CPU (of `server_pid`'s tree)."""
    state, total_bytes, first_bytes = None, 0, 0
    ids = ids[:limit]
    for k, token in enumerate(ids):
        last = k == len(ids) - 1
        body = {"stream": True, "stream_state": state, "generate_chunk": {"request_id": REQUEST_ID,
                "choices": [{"index": 0, "token_ids": [token], "finish_reason": "stop" if last else None}]}}  # fmt: skip
        if every_chunk or k == 0:
            body["chat_request"] = chat_request
            body["prompt_token_ids"] = prompt
        raw = orjson.dumps(body)
        total_bytes += len(raw)
        first_bytes = first_bytes or len(raw)
        cpu0 = task_cpu_ns(server_pid) if chunk_cpu_ms is not None and server_pid else 0
        t0 = time.perf_counter()
        response = client.post(url, content=raw, headers={"content-type": "application/json"})
        if latencies is not None:
            latencies.append(time.perf_counter() - t0)
        if chunk_cpu_ms is not None and server_pid:
            chunk_cpu_ms.append((task_cpu_ns(server_pid) - cpu0) / 1e6)
        if response.status_code != 200:
            raise SystemExit(f"chunk {k}: HTTP {response.status_code}: {response.text[:500]}")
        state = response.json()["stream_state"]
        if sizes is not None:
            sizes.append(len(orjson.dumps(state)))
    return len(ids), total_bytes, first_bytes


class OurServer:
    """`render-service serve` (uvicorn); `server="granian"`: the same app under granian (bench
    extra), with its access log on as uvicorn's is, to compare the two servers."""

    def __init__(self, model_dir: Path, max_model_len: int, log_dir: Path, server: str = "uvicorn") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        flags = [str(model_dir), "--host", "127.0.0.1", "--port", str(self.port), "--served-model-name",
                 "Qwen/Qwen3-8B", "--max-model-len", str(max_model_len), *PARSER_FLAGS]  # fmt: skip
        self.cmd = [sys.executable, "-m", "render_service.cli", "serve", *flags]
        self.env: dict[str, str] = {}
        if server == "granian":
            from render_service.cli import build_parser, config_from_args
            from render_service.config import config_to_json
            from render_service.http.app import CONFIG_ENV

            config = config_from_args(build_parser().parse_args(["serve", *flags]))
            self.env = {CONFIG_ENV: config_to_json(config)}
            self.cmd = [sys.executable, "-m", "granian", "--interface", "asgi", "--factory", "--host", "127.0.0.1",
                        "--port", str(self.port), "--workers", "1", "--loop", "uvloop", "--access-log",
                        "render_service.http.app:app_from_env"]  # fmt: skip
        self.log_path = log_dir / f"ours-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> OurServer:
        env = {**os.environ, "RENDER_SERVICE_STREAM_STATE_SECRET": "bench-stream-state-secret-0123456789", **self.env}
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, env=env, stdout=self.log_path.open("wb"),
                                     stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"our server exited; see {self.log_path}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError("our server did not become healthy")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


def measure(server_pid: int, url: str, ids, prompt, every_chunk: bool, limit: int, chat_request: dict,  # noqa: ANN001
            chunk_cpu_ms: list[float] | None = None) -> dict:  # fmt: skip
    """The stream's totals; `chunk_cpu_ms` (if given) gets each chunk's server CPU, for the
    picture (the reading between chunks adds client time, no server CPU)."""
    sizes: list[int] = []
    latencies: list[float] = []
    with httpx.Client(timeout=600) as client:
        cpu0, t0 = cpu_seconds(server_pid), time.monotonic()
        n, total_bytes, first_bytes = run_stream(url, ids, prompt, every_chunk, limit, client,
                                                 chat_request, sizes, latencies, server_pid, chunk_cpu_ms)
        cpu1, t1 = cpu_seconds(server_pid), time.monotonic()
    latencies.sort()
    return {"tokens": n, "cpu_s": round(cpu1 - cpu0, 3), "wall_s": round(t1 - t0, 3),
            "resent_every_chunk": every_chunk,
            "chunk_latency_p50_ms": round(latencies[len(latencies) // 2] * 1e3, 3),
            "chunk_latency_p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1e3, 3),
            "mean_request_bytes": round(total_bytes / n, 1),
            "mean_request_bytes_after_first": round((total_bytes - first_bytes) / max(n - 1, 1), 1),
            "max_state_bytes": max(sizes)}  # fmt: skip


def cpu_of_window(server_pid: int, url: str, ids, prompt, chat_request: dict, window: int) -> dict:  # noqa: ANN001
    """Our server CPU over the first and the last `window` chunks of one stream."""
    state, marks = None, {}
    with httpx.Client(timeout=600) as client:
        for k, token in enumerate(ids):
            if k in (0, window, len(ids) - window):
                marks[k] = cpu_seconds(server_pid)
            body = {"stream": True, "stream_state": state, "generate_chunk": {"request_id": REQUEST_ID,
                    "choices": [{"index": 0, "token_ids": [token], "finish_reason": "stop" if k == len(ids) - 1 else None}]}}  # fmt: skip
            if k == 0:
                body |= {"chat_request": chat_request, "prompt_token_ids": prompt}
            response = client.post(url, content=orjson.dumps(body), headers={"content-type": "application/json"})
            response.raise_for_status()
            state = response.json()["stream_state"]
        end = cpu_seconds(server_pid)
    first = marks[window] - marks[0]
    last = end - marks[len(ids) - window]
    return {"first_cpu_s": round(first, 3), "last_cpu_s": round(last, 3),
            "last_over_first": round(last / max(first, 1e-9), 3), "target": 1.2}


def ref_chunk_cpu(server_pid: int, url: str, ids, prompt, chat_request: dict, k: int, repeats: int = 3) -> float:  # noqa: ANN001
    """vLLM's server CPU for chunk k alone of a one-token-per-chunk stream. Its state is plain
    JSON: one request carrying ids[:k] as a single chunk yields the state after k tokens, whose
    `output_chunk_lens` is then rewritten to k one-token chunks (what the real stream carries),
    so the measured request replays exactly what chunk k of the real stream replays."""

    def body(tokens: list[int], state, last: bool) -> bytes:  # noqa: ANN001
        return orjson.dumps({"stream": True, "stream_state": state, "chat_request": chat_request,
                             "prompt_token_ids": prompt, "generate_chunk": {"request_id": REQUEST_ID,
                             "choices": [{"index": 0, "token_ids": tokens, "finish_reason": "stop" if last else None}]}})  # fmt: skip

    headers = {"content-type": "application/json"}
    with httpx.Client(timeout=600) as client:
        setup = client.post(url, content=body(ids[:k], None, False), headers=headers)
        setup.raise_for_status()
        state = setup.json()["stream_state"]
        if not isinstance(state, dict) or len(state.get("output_chunk_lens") or []) != 1:
            raise SystemExit(f"unexpected reference stream_state shape: {str(state)[:200]}")
        state["output_chunk_lens"] = [1] * k
        raw = body([ids[k]], state, k == len(ids) - 1)
        cpu0 = cpu_seconds(server_pid)
        for _ in range(repeats):
            client.post(url, content=raw, headers=headers).raise_for_status()
        return (cpu_seconds(server_pid) - cpu0) / repeats


def ref_sampled(server_pid: int, url: str, ids, prompt, chat_request: dict, every: int) -> dict:  # noqa: ANN001
    """vLLM's whole-stream CPU as the trapezoidal integral of its per-chunk cost sampled at
    every `every`-th chunk and the last (the cost grows smoothly with k: a replay of k chunks)."""
    positions = sorted({1, *range(every, len(ids) - 1, every), len(ids) - 1})
    costs = [ref_chunk_cpu(server_pid, url, ids, prompt, chat_request, k) for k in positions]
    total = costs[0] * positions[0]
    for (k0, c0), (k1, c1) in zip(zip(positions, costs), zip(positions[1:], costs[1:])):
        total += (k1 - k0) * (c0 + c1) / 2
    return {"tokens": len(ids), "cpu_s_integrated": round(total, 1),
            "sampled_chunks": {k: round(c, 4) for k, c in zip(positions, costs)}}


def _window_means(values: list[float], width: int) -> tuple[list[float], list[float]]:
    """Means over consecutive windows of `width` chunks, at each window's middle chunk."""
    xs, ys = [], []
    for start in range(0, len(values) - width + 1, width):
        xs.append(start + width / 2)
        ys.append(sum(values[start:start + width]) / width)
    return xs, ys


def plot_chunks(path: Path, ours: list[float], ref: list[float], sampled: dict[int, float],
                args: argparse.Namespace, prompt_tokens: int) -> None:  # fmt: skip
    """`sampled`: the reference's CPU seconds for single chunks k (--ref-sample-every)."""
    from bench.plots import save_png

    width = 25
    protocol = ("prompt and chat_request resent with every chunk (vLLM's protocol)" if args.protocol == "vllm"
                else "prompt on the first chunk only (lean protocol)")  # fmt: skip
    series = [("render-service", *_window_means(ours, width)), ("vLLM 0.33 render server", *_window_means(ref, width))]
    if sampled:
        series.append(("vLLM 0.33, single chunks k (sampled)", list(sampled), [c * 1e3 for c in sampled.values()]))
    save_png(path, series,
             title=f"Streaming derender: server CPU per chunk, {prompt_tokens:,}-token prompt, one token per chunk",
             xlabel="chunk index (output tokens so far)", ylabel=f"server CPU per chunk, ms (mean of {width})",
             note=f"python bench/stream_derender.py --case {args.case} --protocol {args.protocol} --tokens {args.tokens} "
                  f"--ref-tokens {args.ref_tokens} --ref-sample-every {args.ref_sample_every}; {len(ours)} chunks; "
                  f"{protocol}; load average {os.getloadavg()[0]:.1f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    # The agentic output is ~12,800 tokens: with a 16k prompt it stays inside the 40,960-token
    # max_model_len of the model folder (which the derender checks).
    parser.add_argument("--prompt-tokens", type=int, default=None, help="32000; agentic: 16000")
    parser.add_argument("--tokens", type=int, default=4000)
    parser.add_argument("--ref-tokens", type=int, default=1000)
    parser.add_argument("--case", choices=("mixed", "agentic"), default="mixed")
    parser.add_argument("--ref-sample-every", type=int, default=0,
                        help="also integrate vLLM's cost over the whole output from chunks sampled this often")
    parser.add_argument("--ours-only", action="store_true", help="skip the reference (no ratios)")
    parser.add_argument("--server", choices=("uvicorn", "granian"), default="uvicorn",
                        help="the HTTP server our app runs under (granian: from the bench extra)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="PNG of per-chunk server CPU, ours against vLLM's "
                             "(default: docs/bench/stream_derender_<case>_<protocol>.png)")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--protocol", choices=("lean", "vllm"), default="lean",
                        help="what our client sends: prompt and request on the first chunk only "
                             "(lean), or with every chunk, as a vLLM client does unchanged (vllm)")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    model_dir = build_render_model_dir(REPO / ".cache" / "bench-derender-model")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    prompt_tokens = args.prompt_tokens or (16000 if args.case == "agentic" else 32000)
    prompt = build_prompt(tokenizer, prompt_tokens)
    tools = TOOLS
    if args.case == "agentic":
        from bench.stream_parse import agent_tools, build_agentic_output

        tools = agent_tools()
        tokens = args.tokens if args.tokens != 4000 else 12000
        text = build_agentic_output(tokens, tokenizer.backend_tokenizer)
        ids = tokenizer.encode(text, add_special_tokens=False) + [151645]
    else:
        ids = build_output(tokenizer, args.tokens)
    max_len = 40960
    log_dir = REPO / ".cache" / "bench-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    path = "/v1/chat/completions/derender"
    # The request the prompt was rendered from: the user's document as text (what a vLLM
    # client resends as chat_request with every chunk), and the tools.
    document = tokenizer.decode(prompt[4:-5])
    chat_request = {"messages": [{"role": "user", "content": document}], "tools": tools}
    resend = args.protocol == "vllm"
    ours_chunks: list[float] = []
    ref_chunks: list[float] = []
    with OurServer(model_dir, max_len, log_dir, args.server) as ours:
        assert ours.proc is not None
        ours_full = measure(ours.proc.pid, ours.url + path, ids, prompt, resend, len(ids), chat_request, ours_chunks)
        ours_prefix = measure(ours.proc.pid, ours.url + path, ids, prompt, resend, args.ref_tokens, chat_request)
        window = (cpu_of_window(ours.proc.pid, ours.url + path, ids, prompt, chat_request, 1000)
                  if args.case == "agentic" else None)  # fmt: skip
    ours_full["chunk_cpu_p50_ms"] = round(sorted(ours_chunks)[len(ours_chunks) // 2], 3)
    if args.ours_only:
        print(json.dumps({"bench": "stream_derender", "case": args.case, "protocol": args.protocol, "server": args.server,
                          "prompt_tokens": len(prompt), "ours": ours_full, "ours_on_ref_prefix": ours_prefix,
                          "load_average": os.getloadavg()}))  # fmt: skip
        return
    with RefRenderServer(model_dir, PARSER_FLAGS + ("--max-model-len", str(max_len)), log_dir) as ref:
        assert ref._proc is not None
        ref_prefix = measure(ref._proc.pid, ref.url + path, ids, prompt, True, args.ref_tokens, chat_request,
                             ref_chunks)  # fmt: skip
        ref_whole = (ref_sampled(ref._proc.pid, ref.url + path, ids, prompt, chat_request, args.ref_sample_every)
                     if args.ref_sample_every else None)  # fmt: skip
    ref_prefix["chunk_cpu_p50_ms"] = round(sorted(ref_chunks)[len(ref_chunks) // 2], 3)
    if not args.no_plot:
        sampled = ref_whole["sampled_chunks"] if ref_whole else {}
        plot_chunks(args.plot or REPO / "docs" / "bench" / f"stream_derender_{args.case}_{args.protocol}.png",
                    ours_chunks, ref_chunks, sampled, args, len(prompt))  # fmt: skip
    result = {
        "bench": "stream_derender",
        "case": args.case,
        "protocol": args.protocol,
        "server": args.server,
        "ours_cpu_last1000_over_first1000": window,
        "prompt_tokens": len(prompt),
        "ours": ours_full,
        "ours_on_ref_prefix": ours_prefix,
        "vllm_0_33": ref_prefix,
        "cpu_ratio_same_prefix": round(ref_prefix["cpu_s"] / max(ours_prefix["cpu_s"], 1e-9), 1),
        "note": f"reference measured whole on {ref_prefix['tokens']} tokens (O(n^2) replay)",
        "load_average": os.getloadavg(),
    }
    if ref_whole is not None:
        result["vllm_0_33_whole_output_sampled"] = ref_whole
        result["cpu_ratio_whole_output"] = round(ref_whole["cpu_s_integrated"] / max(ours_full["cpu_s"], 1e-9), 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
