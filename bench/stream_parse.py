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

Reports total CPU seconds of each, their ratio (target >= 50), our cost of the last chunks
over the first (100 each, target <= 1.5; `--case agentic`: 1,000 each, target <= 1.2) and the
largest serialised state in bytes. The final stdout line is JSON.

`--case harmony`: a ~4,000-token gpt-oss output (analysis, a commentary preamble, one tool
call) through openai_gptoss + openai against vLLM's HarmonyParser replay.

`--case agentic`: a ~12,000-token output dominated by one `write_file` call whose content is
a whole file (the shape of agent traffic), with 30 tools declared.

Run: .venv/bin/python bench/stream_parse.py [--case agentic]   (needs .cache/vllm-ref)
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
from tests.parsers.tokenizers_util import gpt_oss, qwen3  # noqa: E402
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


_CODE_LINES = (
    "def handle(self, request):\n", "    return self.process(request.body)  # ok\n",
    '    log.info("processing %s", request.id)\n', "\tvalues = {'a': [1, 2], 'b': None}\n",
    '    # a \\ backslash and a " quote\n',
)


def build_agentic_output(target_tokens: int, tok) -> str:
    """Reasoning, a sentence, then one write_file call carrying a whole source file."""
    rng = random.Random(99)
    lines: list[str] = []
    head = "I need to write the module now.\n</think>\n\nWriting the file.\n\n"
    while len(tok.encode("".join(lines), add_special_tokens=False).ids) < target_tokens - 60:
        lines.extend(rng.choice(_CODE_LINES) for _ in range(50))
    arguments = json.dumps({"path": "src/app.py", "content": "".join(lines)}, ensure_ascii=False)
    return head + '<tool_call>\n{"name": "write_file", "arguments": ' + arguments + "}\n</tool_call>"


def agent_tools() -> list[dict]:
    """30 tools with long descriptions, `write_file` among them (45+ KB of JSON)."""
    words = "read write list search fetch update delete create move copy run query".split()
    rng = random.Random(5)
    tools = [{"type": "function", "function": {"name": "write_file", "description": "Write a file. " * 30,
              "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                              "content": {"type": "string"}}}}}]  # fmt: skip
    for i in range(29):
        props = {f"{rng.choice(words)}_{j}": {"type": rng.choice(["string", "integer"]),
                                              "description": " ".join(rng.choices(words, k=60))}
                 for j in range(4)}  # fmt: skip
        tools.append({"type": "function", "function": {"name": f"tool_{i}",
                      "description": " ".join(rng.choices(words, k=250)),
                      "parameters": {"type": "object", "properties": props}}})  # fmt: skip
    return tools


def build_harmony_output(target_tokens: int, tok) -> str:
    """gpt-oss: a long analysis message, a commentary preamble and one tool call (Harmony)."""
    rng = random.Random(99)

    def prose(n_tokens: int) -> str:
        words: list[str] = []
        while len(tok.encode(" ".join(words), add_special_tokens=False).ids) < n_tokens:
            words.extend(rng.choice(_WORDS) for _ in range(20))
        return " ".join(words)

    args = json.dumps({"from": "Paris", "to": "Tokyo", "notes": prose(int(target_tokens * 0.1))},
                      ensure_ascii=False, separators=(",", ":"))
    return (f"<|channel|>analysis<|message|>{prose(int(target_tokens * 0.85))}<|end|>"
            f"<|start|>assistant<|channel|>commentary<|message|>Let me check flights.<|end|>"
            f"<|start|>assistant<|channel|>commentary to=functions.search_flights <|constrain|>json"
            f"<|message|>{args}<|call|>")


# case -> (output builder, tools, calls, window, tokenizer, reasoning, tool parser, prompt)
QWEN3_PROMPT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                "<|im_start|>user\nPlan a trip to Tokyo and check the weather.<|im_end|>\n"
                "<|im_start|>assistant\n<think>\n")
HARMONY_PROMPT = "<|start|>user<|message|>Plan a trip to Tokyo and check the flights.<|end|><|start|>assistant"
CASES = {
    "mixed": (build_output, TOOLS, 2, 100, qwen3, "qwen3", "hermes", QWEN3_PROMPT),
    "agentic": (build_agentic_output, agent_tools(), 1, 1000, qwen3, "qwen3", "hermes", QWEN3_PROMPT),
    "harmony": (build_harmony_output, TOOLS, 1, 100, gpt_oss, "openai_gptoss", "openai", HARMONY_PROMPT),
}


def run_ours(ids: list[int], prompt: list[int], bundle, tool_defs: list, n_calls: int,
             names: tuple[str, str]) -> dict:
    detok = IncrementalDetokenizer(bundle.tokenizer, bundle.special_ids, skip_special_tokens=False)
    reasoning = get_reasoning_parser(names[0])(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    tools = get_tool_parser(names[1])(bundle.tokenizer, tool_defs)
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
    assert len(batch.tool_calls) == n_calls, batch.tool_calls
    return {"per_chunk": per_chunk, "max_state_bytes": max_state, "text": text}


def run_vllm(ids: list[int], prompt: list[int], bundle, sample_every: int, tool_defs: list,
             names: tuple[str, str]) -> dict:
    ks = sorted({*range(0, len(ids), sample_every), len(ids) - 1})
    ref = VllmRef()
    try:
        result = ref.call(
            "replay_cpu", tokenizer_dir=str(bundle.directory), reasoning_parser=names[0],
            tool_parser=names[1], enable_auto_tools=True, prompt_token_ids=prompt, ids=ids,
            sample_ks=ks, request={"tools": tool_defs, "tool_choice": "auto"},
            is_harmony=names[1] == "openai",
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
    parser.add_argument("--case", choices=sorted(CASES), default="mixed")
    parser.add_argument("--tokens", type=int, default=None, help="4,000 (mixed) / 12,000 (agentic)")
    parser.add_argument("--sample-every", type=int, default=None, help="100 (mixed) / 1,000 (agentic)")
    args = parser.parse_args()
    build, tool_defs, n_calls, window, tokenizer, reasoning_name, tool_name, prompt_text = CASES[args.case]
    names = (reasoning_name, tool_name)
    tokens = args.tokens or (12000 if args.case == "agentic" else 4000)
    sample_every = args.sample_every or (1000 if args.case == "agentic" else 100)

    bundle = tokenizer()
    output = build(tokens, bundle.tokenizer)
    ids = bundle.encode(output)
    prompt = bundle.encode(prompt_text)

    ours = run_ours(ids, prompt, bundle, tool_defs, n_calls, names)
    assert ours["text"] == output, "detokenizer must reproduce the output exactly"
    ours_total = sum(ours["per_chunk"])
    first, last = sum(ours["per_chunk"][:window]), sum(ours["per_chunk"][-window:])

    vllm = run_vllm(ids, prompt, bundle, sample_every, tool_defs, names)
    report = {
        "bench": "stream_parse",
        "case": args.case,
        "tokens": len(ids),
        "parsers": f"{reasoning_name} + {tool_name} (tool_choice=auto)",
        "ours_cpu_s": round(ours_total, 4),
        "vllm_replay_cpu_s": round(vllm["estimated_total_cpu_s"], 3),
        "vllm_sampled_chunks": len(vllm["samples"]),
        "ratio_vllm_over_ours": round(vllm["estimated_total_cpu_s"] / ours_total, 1),
        "target_ratio": 50,
        f"ours_last{window}_over_first{window}": round(last / first, 3),
        "target_last_over_first": 1.2 if args.case == "agentic" else 1.5,
        "ours_max_state_bytes": ours["max_state_bytes"],
        "ours_mean_chunk_us": round(ours_total / len(ids) * 1e6, 1),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
