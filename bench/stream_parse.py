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

`--case families`: one row per registered parser name, on the family's own markup (its corpus
entry grown by bench/family_outputs.py, its tokenizer): every tool parser with its reasoning
parser on a ~2,000-token output with calls, then every reasoning parser alone on ~4,000 tokens;
vLLM's replay sampled at 5 chunk positions per row. `--only NAME...` picks rows, `--kind
tool` (or `reasoning`) keeps rows of that kind.

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

from bench.family_outputs import (  # noqa: E402
    ARG,
    CONTENT,
    LEAD,
    REASONING,
    FamilyOutput,
    grow_entry,
    growable,
    pick_entry,
)
from parsers import ChatOptions, ChatParser, DetokState, IncrementalDetokenizer  # noqa: E402
from parsers._errors import ParserError  # noqa: E402
from parsers.registry import (  # noqa: E402
    get_reasoning_parser,
    get_tool_parser,
    reasoning_parser_names,
    tool_parser_names,
)
from tests.parsers.chunking import collapse_events  # noqa: E402
from tests.parsers.family_corpus import REASONING_FORMATS, TOOL_FORMATS  # noqa: E402
from tests.parsers.family_oracle import WEATHER_TOOLS  # noqa: E402
from tests.parsers.family_outputs.generate import FORMATS  # noqa: E402
from tests.parsers.family_tokenizers import family_loader, family_tokenizer  # noqa: E402
from tests.parsers.tokenizers_util import gpt_oss, qwen3  # noqa: E402
from tests.parsers.vllm_ref import VllmRef, VllmRefError  # noqa: E402

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


def chat_for(bundle, names: tuple[str | None, str | None], tool_defs: list,
             chat_template_kwargs: dict | None = None) -> ChatParser:
    reasoning_name, tool_name = names
    extra = _template_metadata(bundle) if {"hf", "beam"} & {reasoning_name, tool_name} else {}
    reasoning_cls = get_reasoning_parser(reasoning_name) if reasoning_name else None
    # As derender builds it: a parser that reads the request's tools gets them (kimi_k3).
    asks = {"request_tools": bool(tool_defs), "tool_choice": "auto"} if getattr(
        reasoning_cls, "takes_tool_request", False) else {}
    reasoning = (reasoning_cls(bundle.tokenizer, chat_template_kwargs or {},
                               special_tokens=bundle.special_tokens, **extra, **asks)
                 if reasoning_cls else None)
    tools = get_tool_parser(tool_name)(bundle.tokenizer, tool_defs, **extra) if tool_name else None
    return ChatParser(reasoning, tools, ChatOptions(tool_choice="auto", enable_auto_tools=True))


def _template_metadata(bundle) -> dict:
    """The response_template the hf/beam parsers read (derender passes it from the tokenizer
    configuration, as vLLM's resolve_response_template does)."""
    config = json.loads((bundle.directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    return {"response_template": config["response_template"]}


def run_ours(ids: list[int], prompt: list[int], bundle, chat: ChatParser,
             n_calls: int | None = None) -> dict:
    """One token per chunk, both states JSON round-tripped at every chunk; checks that the
    stream concatenates to the batch parse."""
    detok = IncrementalDetokenizer(bundle.tokenizer, bundle.special_ids, skip_special_tokens=False)
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
    assert n_calls is None or len(batch.tool_calls) == n_calls, batch.tool_calls
    return {"per_chunk": per_chunk, "max_state_bytes": max_state, "text": text,
            "calls": len(batch.tool_calls), "arguments_chars": sum(len(c.arguments) for c in batch.tool_calls)}


def run_vllm(ref: VllmRef, ids: list[int], prompt: list[int], bundle, sample_every: int,
             tool_defs: list, names: tuple[str | None, str | None], loader: str = "auto",
             chat_template_kwargs: dict | None = None) -> dict:
    ks = sorted({*range(0, len(ids), sample_every), len(ids) - 1})
    result = ref.call(
        "replay_cpu", tokenizer_dir=str(bundle.directory), loader=loader,
        reasoning_parser=names[0], tool_parser=names[1], enable_auto_tools=True,
        prompt_token_ids=prompt, ids=ids, sample_ks=ks,
        request={"tools": tool_defs, "tool_choice": "auto"} if names[1] else {},
        chat_template_kwargs=chat_template_kwargs, is_harmony=names[1] == "openai",
    )
    samples = result["per_chunk_cpu_s"]
    total = 0.0
    for (k0, c0), (k1, c1) in zip(samples, samples[1:]):
        total += (c0 + c1) / 2 * (k1 - k0)
    total += samples[-1][1]  # the last chunk itself
    return {"estimated_total_cpu_s": total, "samples": samples}


# Tool parsers whose models reason under a reasoning parser of another name.
PAIRED = {"hermes": "qwen3", "qwen3_json": "qwen3", "qwen3_coder": "qwen3", "qwen3_xml": "qwen3",
          "deepseek_v3": "deepseek_r1", "deepseek_v31": "deepseek_v3", "deepseek_v32": "deepseek_v3",
          "openai": "openai_gptoss", "ling3": "ling3", "granite4": "granite_thinking_parser"}


def family_rows() -> list[tuple[str, str | None, str | None, int]]:
    """(kind, reasoning name, tool name, tokens): every tool name with its same-named
    reasoning parser if there is one (2,000 tokens, with calls), then every reasoning name
    alone (4,000 tokens)."""
    reasoning_names = set(reasoning_parser_names())
    rows: list[tuple[str, str | None, str | None, int]] = []
    for tool in tool_parser_names():
        paired = PAIRED.get(tool, tool if tool in reasoning_names else None)
        rows.append(("tool", paired, tool, 2000))
    rows.extend(("reasoning", name, None, 4000) for name in sorted(reasoning_names))
    return rows


def _template_kwargs(kind: str, name: str) -> dict | None:
    """The chat_template_kwargs the family's corpus was rendered with (thinking switches)."""
    formats = (TOOL_FORMATS if kind == "tool" else REASONING_FORMATS)[name]
    return next((FORMATS[f]["kwargs"] for f in formats if FORMATS.get(f, {}).get("kwargs")), None)


def family_output(kind: str, name: str, bundle, chat: ChatParser, tokens: int) -> FamilyOutput:
    def count(text: str) -> int:
        return len(bundle.encode(text))

    def score(entry: dict) -> tuple[int, ...]:
        text = entry["text"]
        result = chat.parse(text, REQUEST_ID, bundle.encode(entry.get("prompt") or ""))
        wanted = len(result.tool_calls) if kind == "tool" else len(result.reasoning or "")
        # (an entry the prose can grow first: a family whose corpus has none of the fixed
        # pieces, e.g. Muse's, grows through a sentence between tags)
        return (wanted > 0, growable(text), *(piece in text for piece in (REASONING, CONTENT, LEAD, ARG)),
                len(text))

    if name in ("openai", "openai_gptoss"):
        return FamilyOutput("harmony", build_harmony_output(tokens, bundle.tokenizer), HARMONY_PROMPT)
    picked = pick_entry(kind, name, score)
    return FamilyOutput(picked.entry, grow_entry(picked.text, tokens, count), picked.prompt)


def run_family(ref: VllmRef, kind: str, reasoning: str | None, tool: str | None,
               tokens: int) -> dict:
    name = tool or reasoning
    assert name
    harmony = name in ("openai", "openai_gptoss")
    bundle = gpt_oss() if harmony else family_tokenizer(kind, name)
    kwargs = None if harmony else _template_kwargs(kind, name)
    tool_defs = WEATHER_TOOLS if tool else []
    chat = chat_for(bundle, (reasoning, tool), tool_defs, kwargs)
    out = family_output(kind, name, bundle, chat, tokens)
    if tool and reasoning and not chat.parse(out.text, REQUEST_ID, bundle.encode(out.prompt or "")).tool_calls:
        # The corpus' calls sit in what this reasoning parser calls reasoning (no end tag
        # in the template's turn): measure the tool parser alone, with its calls.
        reasoning = None
        chat = chat_for(bundle, (None, tool), tool_defs, kwargs)
        out = family_output(kind, name, bundle, chat, tokens)
    ids, prompt = bundle.encode(out.text), bundle.encode(out.prompt or "")
    ours = run_ours(ids, prompt, bundle, chat)
    assert ours["text"] == out.text, f"{name}: the detokenizer must reproduce the output"
    loader = "auto" if harmony or bundle.name == "qwen3" else family_loader(kind, name)
    vllm = run_vllm(ref, ids, prompt, bundle, max(len(ids) // 4, 1), tool_defs,
                    (reasoning, tool), loader, kwargs)
    ours_total = sum(ours["per_chunk"])
    return {"kind": kind, "tool": tool, "reasoning": reasoning, "entry": out.entry,
            "tokens": len(ids), "calls": ours["calls"], "arguments_chars": ours["arguments_chars"],
            "ours_cpu_s": round(ours_total, 4),
            "vllm_replay_cpu_s": round(vllm["estimated_total_cpu_s"], 3),
            "ratio_vllm_over_ours": round(vllm["estimated_total_cpu_s"] / ours_total, 1),
            "ours_max_state_bytes": ours["max_state_bytes"]}


def main_families(only: list[str], kinds: list[str]) -> None:
    """One row per family (one vLLM reference process for all): a markdown table, then JSON."""
    ref = VllmRef()
    rows = []
    print("| kind | tool parser | reasoning parser | tokens | calls | ours CPU s | vLLM replay CPU s "
          "| ratio | largest state B |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    try:
        for kind, reasoning, tool, tokens in family_rows():
            if (only and not {tool, reasoning} & set(only)) or (kinds and kind not in kinds):
                continue
            try:
                row = run_family(ref, kind, reasoning, tool, tokens)
            except (AssertionError, VllmRefError, ValueError, ParserError) as exc:  # a row, not the table
                row = {"kind": kind, "tool": tool, "reasoning": reasoning, "error": str(exc)[:300]}
                print(f"| {kind} | {tool or '-'} | {reasoning or '-'} | error: {row['error'][:120]} |")
            else:
                print(f"| {kind} | {tool or '-'} | {row['reasoning'] or '-'} | {row['tokens']:,} | {row['calls']} "
                      f"| {row['ours_cpu_s']:.2f} | {row['vllm_replay_cpu_s']:.1f} "
                      f"| {row['ratio_vllm_over_ours']:,.0f}x | {row['ours_max_state_bytes']:,} |", flush=True)
            rows.append(row)
    finally:
        ref.close()
    ok = [r for r in rows if "error" not in r]
    ratios = sorted(r["ratio_vllm_over_ours"] for r in ok)
    print(json.dumps({"bench": "stream_parse", "case": "families", "rows": rows,
                      "families": len(rows), "errors": len(rows) - len(ok),
                      "min_ratio": ratios[0] if ratios else None,
                      "median_ratio": ratios[len(ratios) // 2] if ratios else None,
                      "max_state_bytes": max((r["ours_max_state_bytes"] for r in ok), default=None)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=[*sorted(CASES), "families"], default="mixed")
    parser.add_argument("--only", nargs="*", default=[], help="families: these parser names only")
    parser.add_argument("--kind", nargs="*", default=[], choices=["tool", "reasoning"],
                        help="families: these row kinds only (a name can be both)")
    parser.add_argument("--tokens", type=int, default=None, help="4,000 (mixed) / 12,000 (agentic)")
    parser.add_argument("--sample-every", type=int, default=None, help="100 (mixed) / 1,000 (agentic)")
    args = parser.parse_args()
    if args.case == "families":
        main_families(args.only, args.kind)
        return
    build, tool_defs, n_calls, window, tokenizer, reasoning_name, tool_name, prompt_text = CASES[args.case]
    names = (reasoning_name, tool_name)
    tokens = args.tokens or (12000 if args.case == "agentic" else 4000)
    sample_every = args.sample_every or (1000 if args.case == "agentic" else 100)

    bundle = tokenizer()
    output = build(tokens, bundle.tokenizer)
    ids = bundle.encode(output)
    prompt = bundle.encode(prompt_text)

    ours = run_ours(ids, prompt, bundle, chat_for(bundle, names, tool_defs), n_calls)
    assert ours["text"] == output, "detokenizer must reproduce the output exactly"
    ours_total = sum(ours["per_chunk"])
    first, last = sum(ours["per_chunk"][:window]), sum(ours["per_chunk"][-window:])

    ref = VllmRef()
    try:
        vllm = run_vllm(ref, ids, prompt, bundle, sample_every, tool_defs, names)
    finally:
        ref.close()
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
