"""Image chat render latency: ours vs `vllm launch render` 0.33 with 1, 4 and 16 images.

Model: the tiny weightless Qwen2-VL folder of the multimodal tests (tests/multimodal/tiny_vlm.py)
with a realistic processor budget: `max_pixels` 28*28*1280 (the budget Qwen2-VL's model card
recommends; larger images are scaled down to at most 1280 image tokens) and a 32k context.
Images: photo-like JPEGs (smooth colour fields plus sensor-like noise, quality 85), 1024x768
and 640x480, plus a screenshot-like PNG as every 4th image; all sent as data URIs.

Both servers run on 127.0.0.1 with one worker and get the same bodies, one request at a time
(the machine has 2 cores), alternating ours / reference:
- cold: every body has images neither server has seen (no cache can help);
- warm: one body again and again. Both sides then skip the image processor: ours through its
  processed-image cache (keyed by a content hash), vLLM through its processor-only cache
  (render passes `skip_mm_cache=True`, which selects `_mm_processor_only_cache`, an LRU keyed by
  mm_hash: vllm/renderers/base.py `_process_multimodal`). Both get the same --cache-gb budget.
Our in-process `Renderer.render_chat` (no HTTP, no JSON encoding) is an extra line.

Sanity before any timing: the warmup bodies must give equal token_ids, mm_hashes,
mm_placeholders and kwargs_data item sizes on both servers (the tensors themselves are
compared after decoding by tests/multimodal/test_render_differential.py); every timed response
pair is checked the same way afterwards, so a wrong answer is never benchmarked.

Final stdout line: JSON with p50/p90 per case, response bytes and the ratios ref/ours (latency).
Usage: `.venv/bin/python bench/multimodal.py [--iterations 10 --warmup 2 --counts 1,4,16] [--quick]`
(defaults take about 3 minutes on 2 cores; --quick about 40 s).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from render_service.api import Renderer
from render_service.config import ServiceConfig
from tests.multimodal.ref import start_ref_render
from tests.multimodal.tiny_vlm import build_qwen2_vl_dir, data_uri
from tests.render.ref_server import free_port, stop_process, wait_http_healthy

SERVED = "Qwen/Qwen3-8B"  # the name RefRenderServer serves
MAX_PIXELS = 28 * 28 * 1280
CONTEXT = 32768  # Qwen2-VL-7B's max_position_embeddings; 16 images are ~11k tokens
# The i-th image of a body: (format, (width, height)), cycling.
IMAGE_CYCLE = (
    ("jpeg", (1024, 768)),
    ("jpeg", (640, 480)),
    ("jpeg", (1024, 768)),
    ("png", (640, 480)),
)
START_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 300.0

Call = Callable[[dict[str, Any]], bytes]


# --- model folder and images -----------------------------------------------------------------


def build_model_dir(dst: Path) -> Path:
    """The tiny Qwen2-VL folder with a real image budget and a context that fits 16 images."""
    build_qwen2_vl_dir(dst)
    processor = json.loads((dst / "preprocessor_config.json").read_text())
    processor["max_pixels"] = MAX_PIXELS
    (dst / "preprocessor_config.json").write_text(json.dumps(processor, indent=1))
    config = json.loads((dst / "config.json").read_text())
    config["text_config"]["max_position_embeddings"] = CONTEXT
    (dst / "config.json").write_text(json.dumps(config, indent=1))
    return dst


def photo_jpeg(size: tuple[int, int], seed: int) -> bytes:
    """Smooth random colour fields plus noise: compresses and decodes like a camera photo."""
    width, height = size
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (max(height // 48, 2), max(width // 48, 2), 3), dtype=np.uint8)
    smooth = np.asarray(
        Image.fromarray(coarse, "RGB").resize(size, Image.BICUBIC), dtype=np.float32
    )
    noisy = np.clip(smooth + rng.normal(0.0, 8.0, smooth.shape), 0, 255).astype(np.uint8)
    buffer = BytesIO()
    Image.fromarray(noisy, "RGB").save(buffer, "JPEG", quality=85)
    return buffer.getvalue()


def screenshot_png(size: tuple[int, int], seed: int) -> bytes:
    """Flat-coloured panels and thin lines on white: a UI screenshot's PNG."""
    width, height = size
    rng = np.random.default_rng(seed)
    pixels = np.full((height, width, 3), 255, dtype=np.uint8)
    for _ in range(40):
        x0, y0 = int(rng.integers(0, width - 8)), int(rng.integers(0, height - 8))
        x1, y1 = x0 + int(rng.integers(8, width // 3)), y0 + int(rng.integers(2, height // 4))
        pixels[y0:y1, x0:x1] = rng.integers(0, 256, 3, dtype=np.uint8)
    buffer = BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, "PNG")
    return buffer.getvalue()


def image_part(index: int, seed: int) -> dict[str, Any]:
    kind, size = IMAGE_CYCLE[index % len(IMAGE_CYCLE)]
    if kind == "png":
        url = data_uri(screenshot_png(size, seed), "image/png")
    else:
        url = data_uri(photo_jpeg(size, seed), "image/jpeg")
    return {"type": "image_url", "image_url": {"url": url}}


def chat_body(count: int, seed: int) -> dict[str, Any]:
    """One user turn: a question and `count` images no other body shares (seeded)."""
    parts = [{"type": "text", "text": f"[{seed}] What differs between these pictures?"}]
    parts += [image_part(i, seed * 1000 + i) for i in range(count)]
    return {"messages": [{"role": "user", "content": parts}], "max_tokens": 256}


# --- servers ---------------------------------------------------------------------------------


def our_server_cmd(model_dir: Path, port: int, cache_gb: float) -> list[str]:
    script = REPO / ".venv" / "bin" / "render-service"
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", "render_service.cli"]
    return [
        *launcher, "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", SERVED, "--log-level", "warning", "--mm-processor-cache-gb", str(cache_gb),
    ]  # fmt: skip


def wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    wait_http_healthy(proc, url, log, START_TIMEOUT_S, "our server", 0.5)


def stop(proc: subprocess.Popen[bytes]) -> None:
    stop_process(proc)


def http_caller(client: httpx.Client, url: str) -> Call:
    def call(body: dict[str, Any]) -> bytes:
        response = client.post(f"{url}/v1/chat/completions/render", json=body)
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.text[:2000]}")
        return response.content

    return call


# --- measuring -------------------------------------------------------------------------------


def summary(content: bytes | dict[str, Any]) -> tuple[Any, ...]:
    """What must be equal between ours and the reference for one body."""
    result = orjson.loads(content) if isinstance(content, bytes) else content
    features = result["features"]
    sizes = [len(item) for item in features["kwargs_data"]["image"]]
    return (result["token_ids"], features["mm_hashes"], features["mm_placeholders"], sizes)


def check_equal(label: str, ours: tuple[Any, ...], ref: tuple[Any, ...]) -> None:
    for name, a, b in zip(
        ("token_ids", "mm_hashes", "mm_placeholders", "kwargs_data sizes"), ours, ref, strict=True
    ):
        if a != b:
            raise AssertionError(
                f"{label}: ours and the reference differ in {name}; not benchmarking a wrong answer"
            )


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50 (median) and p90 (nearest rank) in ms."""
    ordered = sorted(samples)
    p90 = ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 2),
        "p90_ms": round(p90 * 1e3, 2),
        "n": len(ordered),
    }


def timed(call: Call, body: dict[str, Any]) -> tuple[float, bytes]:
    start = time.perf_counter()
    content = call(body)
    return time.perf_counter() - start, content


def run_pair(ours: Call, ref: Call, bodies: list[dict[str, Any]], label: str) -> dict[str, Any]:
    """Each body to ours then the reference; latencies, response bytes, answers checked after."""
    times: dict[str, list[float]] = {"ours_http": [], "ref_http": []}
    sizes: dict[str, int] = {}
    for index, body in enumerate(bodies):
        ours_s, ours_content = timed(ours, body)
        ref_s, ref_content = timed(ref, body)
        times["ours_http"].append(ours_s)
        times["ref_http"].append(ref_s)
        sizes = {"ours_http": len(ours_content), "ref_http": len(ref_content)}
        check_equal(f"{label} body {index}", summary(ours_content), summary(ref_content))
        del ours_content, ref_content
    out: dict[str, Any] = {side: percentiles(samples) for side, samples in times.items()}
    out["response_bytes"] = sizes
    return out


def run_inproc(renderer: Renderer, bodies: list[dict[str, Any]]) -> dict[str, float]:
    samples = []
    for body in bodies:
        request = copy.deepcopy(body)  # the renderer may normalise the body in place
        start = time.perf_counter()
        renderer.render_chat(request)
        samples.append(time.perf_counter() - start)
    return percentiles(samples)


def measure_count(
    count: int, ours: Call, ref: Call, renderer: Renderer, args: argparse.Namespace
) -> dict[str, Any]:
    warmups = [chat_body(count, seed=10_000 * count + i) for i in range(args.warmup)]
    cold = [chat_body(count, seed=10_000 * count + 100 + i) for i in range(args.iterations)]
    request_bytes = len(orjson.dumps(cold[0]))
    # Sanity first: both servers agree on every warmup body (this also warms both up).
    for index, body in enumerate(warmups):
        check_equal(f"{count} images warmup {index}", summary(ours(body)), summary(ref(body)))
    result: dict[str, Any] = {"request_bytes": request_bytes}
    result["cold"] = run_pair(ours, ref, cold, f"{count} images cold")
    warm_body = warmups[0]
    ours(warm_body)  # back in both caches if the cold bodies evicted it
    ref(warm_body)
    result["warm"] = run_pair(ours, ref, [warm_body] * args.iterations, f"{count} images warm")
    for body in warmups:
        renderer.render_chat(copy.deepcopy(body))
    expected = summary(ref(warm_body))
    check_equal(
        f"{count} images in-process",
        summary(renderer.render_chat(copy.deepcopy(warm_body))),
        expected,
    )
    result["cold"]["ours_inproc"] = run_inproc(renderer, cold)
    result["warm"]["ours_inproc"] = run_inproc(renderer, [warm_body] * args.iterations)
    result["tokens"] = len(expected[0])
    return result


def print_case(count: int, case: dict[str, Any]) -> None:
    for temp in ("cold", "warm"):
        row = case[temp]
        speedup = row["ref_http"]["p50_ms"] / row["ours_http"]["p50_ms"]
        print(
            f"{count:>2} images {temp}: ours http p50 {row['ours_http']['p50_ms']:.1f} ms "
            f"p90 {row['ours_http']['p90_ms']:.1f} | ref p50 {row['ref_http']['p50_ms']:.1f} ms "
            f"p90 {row['ref_http']['p90_ms']:.1f} | ref/ours {speedup:.2f}x | ours in-process p50 "
            f"{row['ours_inproc']['p50_ms']:.1f} ms | response MB ours {row['response_bytes']['ours_http'] / 1e6:.1f} "
            f"ref {row['response_bytes']['ref_http'] / 1e6:.1f}",
            file=sys.stderr,
            flush=True,
        )


def ratios(cases: dict[str, Any]) -> dict[str, float]:
    """ref p50 / ours p50 and ref p90 / ours p90 (>1: ours is faster)."""
    out = {}
    for count, case in cases.items():
        for temp in ("cold", "warm"):
            row = case[temp]
            for mode in ("ours_http", "ours_inproc"):
                for stat in ("p50_ms", "p90_ms"):
                    key = f"{count}img.{temp}.{mode}.{stat.removesuffix('_ms')}_speedup"
                    out[key] = round(row["ref_http"][stat] / row[mode][stat], 2)
    return out


# --- main ------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--iterations", type=int, default=10, help="timed requests per case and side"
    )
    parser.add_argument(
        "--warmup", type=int, default=2, help="untimed (but checked) requests per image count"
    )
    parser.add_argument("--counts", default="1,4,16", help="images per request, comma-separated")
    parser.add_argument(
        "--cache-gb",
        type=float,
        default=1.0,
        help="processed-image cache of both servers and the in-process renderer, GiB",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 1 and 4 images, 2 iterations"
    )
    args = parser.parse_args()
    if args.quick:
        args.iterations, args.warmup, args.counts = 2, 1, "1,4"
    args.counts = [int(c) for c in args.counts.split(",")]
    if args.iterations < 1 or args.warmup < 1 or min(args.counts) < 1:
        parser.error("--iterations, --warmup and every count must be >= 1")
    return args


def main() -> None:
    args = parse_args()
    work = REPO / ".cache" / "bench-multimodal"
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="tiny-qwen2-vl-", dir=work))
    started = time.monotonic()
    try:
        results = run(args, build_model_dir(folder), logs)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    results["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(results))


def run(args: argparse.Namespace, model_dir: Path, logs: Path) -> dict[str, Any]:
    port = free_port()
    log_path = logs / f"ours-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            our_server_cmd(model_dir, port, args.cache_gb),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
        )
    ref_server = None
    try:
        cache_flag = ("--mm-processor-cache-gb", str(args.cache_gb))
        ref_server = start_ref_render(model_dir, cache_flag, logs)  # starts while ours loads
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, url, log_path)
        renderer = Renderer(
            ServiceConfig(
                model=str(model_dir),
                served_model_name=(SERVED,),
                mm_processor_cache_gb=args.cache_gb,
            )
        )
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
            ours, ref = http_caller(client, url), http_caller(client, ref_server.url)
            cases = {}
            for count in args.counts:
                cases[str(count)] = measure_count(count, ours, ref, renderer, args)
                print_case(count, cases[str(count)])
    finally:
        stop(proc)
        if ref_server is not None:
            ref_server.stop()
    return {
        "model": {
            "max_pixels": MAX_PIXELS,
            "context": CONTEXT,
            "image_cycle": [list(c) for c in IMAGE_CYCLE],
        },
        "iterations": args.iterations,
        "warmup": args.warmup,
        "cache_gb": args.cache_gb,
        "cases": cases,
        "ratios": ratios(cases),
        "load_average": os.getloadavg(),
    }


if __name__ == "__main__":
    main()
