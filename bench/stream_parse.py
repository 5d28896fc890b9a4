"""Streaming parse cost: our JSON-state parsers vs vLLM 0.33's replay algorithm.

A ~4,000-token Qwen3 output (reasoning, content, two hermes tool calls) is fed one token per
chunk through:

(a) ours: IncrementalDetokenizer + ChatParser(qwen3, hermes), with both states serialised to
    JSON (json.dumps) and restored (json.loads + from_json) at every chunk, as a stateless
    replica would;
(b) vLLM 0.33's streaming derender algorithm (vllm/renderers/online_derenderer.py
    `_derender_chat_stream_parsed`): for chunk k a fresh parser + ChatStreamProcessor, a
    detokenizer re-seeded from the prompt, replay of chunks 0..k-1, then chunk k - run in the
    vLLM reference venv with vLLM's own parsers.

(b) is quadratic in chunks (cubic in characters for hermes), so it is measured on a sample of
chunk indices k (every `--sample-every` chunks, plus the last) and its total is the
trapezoidal integral of the sampled per-chunk cost; the JSON says so ("vllm_sampled_chunks").

Reports total CPU seconds of each, their ratio (target >= 50), our cost of the last 100 chunks
over the first 100 (target <= 1.5) and the largest serialised state in bytes. The final stdout
line is JSON.

Run: .venv/bin/python bench/stream_parse.py   (needs .cache/vllm-ref, see tests/run.sh)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parsers import ChatOptions, ChatParser, DetokState, IncrementalDetokenizer  # noqa: E402
from parsers.registry import get_reasoning_parser, get_tool_parser  # noqa: E402
from tests.parsers.chunking import collapse_events  # noqa: E402
from tests.parsers.tokenizers_util import qwen3  # noqa: E402
from tests.parsers.vllm_ref import VllmRef  # noqa: E402

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "search_flights", "parameters": {
        "type": "object", "properties": {"from": {"type": "string"}, "to": {"type": "string"}}}}},
]
REQUEST_ID = "chatcmpl-bench"

_WORDS = (
    "the weather forecast for the coming week suggests that we should compare several cities "
    "before deciding where to travel, considering temperature, rain, wind and flight prices "
    "让我想想 天气 东京 巴黎 旅行 计划 😀 🌧️ ☀️ ✈️ 42 3.14 (a, b) [x] {y}"
).split()


def build_output(target_tokens: int, tok) -> str:
    """Deterministic reasoning + content + two hermes calls of about `target_tokens` tokens."""
    rng = random.Random(1234)
    calls = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "東京", "days": 5}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search_flights", "arguments": {"from": "Paris", "to": "Tokyo"}}\n'
        "</tool_call>"
    )

    def prose(n_tokens: int) -> str:
        words: list[str] = []
        while len(tok.encode(" ".join(words), add_special_tokens=False).ids) < n_tokens:
            words.extend(rng.choice(_WORDS) for _ in range(20))
            if rng.random() < 0.3:
                words.append("\n\n")
        return " ".join(words)

    reasoning = prose(int(target_tokens * 0.74))
    content = prose(int(target_tokens * 0.24))
    return f"{reasoning}\n</think>\n\n{content}\n\n{calls}"


def run_ours(ids: list[int], prompt: list[int], bundle) -> dict:
    detok = IncrementalDetokenizer(bundle.tokenizer, bundle.special_ids, skip_special_tokens=False)
    reasoning = get_reasoning_parser("qwen3")(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    tools = get_tool_parser("hermes")(bundle.tokenizer, TOOLS)
    chat = ChatParser(reasoning, tools, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    chat_state_type = chat.state_type()

    wire = json.dumps({"detok": detok.initial_state(prompt).to_json(),
                       "parse": chat.initial_state(prompt).to_json()})
    per_chunk: list[float] = []
    events: list = []
    texts: list[str] = []
    max_state = len(wire.encode())
    for index, token_id in enumerate(ids):
        t0 = time.process_time()
        data = json.loads(wire)
        d_state = DetokState.from_json(data["detok"])
        c_state = chat_state_type.from_json(data["parse"])
        d_state, text = detok.feed(d_state, [token_id])
        c_state, out = chat.feed(c_state, text, REQUEST_ID)
        if index == len(ids) - 1:
            c_state, tail = chat.finish(c_state, REQUEST_ID)
            out = out + tail
        wire = json.dumps({"detok": d_state.to_json(), "parse": c_state.to_json()})
        per_chunk.append(time.process_time() - t0)
        max_state = max(max_state, len(wire.encode()))
        events.extend(out)
        texts.append(text)

    text = "".join(texts)
    batch = chat.parse(text, REQUEST_ID, prompt)
    streamed = collapse_events(events)
    assert streamed.reasoning == (batch.reasoning or "") and streamed.content == (batch.content or "")
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [
        (c.name, c.arguments) for c in batch.tool_calls]
    assert len(batch.tool_calls) == 2, batch.tool_calls
    return {"per_chunk": per_chunk, "max_state_bytes": max_state, "text": text}


def run_vllm(ids: list[int], prompt: list[int], bundle, sample_every: int) -> dict:
    ks = sorted({*range(0, len(ids), sample_every), len(ids) - 1})
    ref = VllmRef()
    try:
        result = ref.call(
            "replay_cpu", tokenizer_dir=str(bundle.directory), reasoning_parser="qwen3",
            tool_parser="hermes", enable_auto_tools=True, prompt_token_ids=prompt, ids=ids,
            sample_ks=ks, request={"tools": TOOLS, "tool_choice": "auto"},
        )
    finally:
        ref.close()
    samples = result["per_chunk_cpu_s"]
    total = 0.0
    for (k0, c0), (k1, c1) in zip(samples, samples[1:]):
        total += (c0 + c1) / 2 * (k1 - k0)
    total += samples[-1][1]  # the last chunk itself
    return {"estimated_total_cpu_s": total, "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=4000)
    parser.add_argument("--sample-every", type=int, default=100)
    args = parser.parse_args()

    bundle = qwen3()
    output = build_output(args.tokens, bundle.tokenizer)
    ids = bundle.encode(output)
    prompt = bundle.encode(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nPlan a trip to Tokyo and check the weather.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )

    ours = run_ours(ids, prompt, bundle)
    assert ours["text"] == output, "detokenizer must reproduce the output exactly"
    ours_total = sum(ours["per_chunk"])
    first, last = sum(ours["per_chunk"][:100]), sum(ours["per_chunk"][-100:])

    vllm = run_vllm(ids, prompt, bundle, args.sample_every)
    report = {
        "bench": "stream_parse",
        "tokens": len(ids),
        "parsers": "qwen3 + hermes (tool_choice=auto)",
        "ours_cpu_s": round(ours_total, 4),
        "vllm_replay_cpu_s": round(vllm["estimated_total_cpu_s"], 3),
        "vllm_sampled_chunks": len(vllm["samples"]),
        "ratio_vllm_over_ours": round(vllm["estimated_total_cpu_s"] / ours_total, 1),
        "target_ratio": 50,
        "ours_last100_over_first100": round(last / first, 3),
        "target_last_over_first": 1.5,
        "ours_max_state_bytes": ours["max_state_bytes"],
        "ours_mean_chunk_us": round(ours_total / len(ids) * 1e6, 1),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
