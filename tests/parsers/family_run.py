"""One family's differential check against vLLM 0.33, shared by the per-family test modules.

    out = family_run(vllm_ref, reasoning="step3", extra={"late_think": "a<think>b"})
    for name, case, res in out.items():   # one batched oracle call for the whole module
        assert_batch_matches(out, name)   # our composed batch == vLLM's composed batch
        assert_stream_invariant(out, name)  # any split, state round-tripped == our batch

Cases are the family's corpus entries (with their rendered prompts), hostile variants of the
richest entry (same prompt) and the module's own cases. Ours is `parsers.chat.ChatParser` with
the family's reasoning and/or tool parser, built on the family tokenizer, as derender runs it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from parsers._events import ToolCall
from parsers.chat import ChatOptions, ChatParser, ChatParseResult
from parsers.registry import get_reasoning_parser, get_tool_parser

from .chunking import ChunkingStats, Collapsed, CollapsedCall, collapse_events, run_split, splits_of
from .family_corpus import corpus_entries, family_markers, hostile_variants
from .family_oracle import WEATHER_TOOLS, family_cases, vllm_family
from .family_tokenizers import family_tokenizer
from .tokenizers_util import TokenizerBundle

__all__ = ["FamilyRun", "family_run", "ours", "vllm_batch", "our_batch"]

REQUEST_ID = "req-fam"


@dataclass
class FamilyRun:
    tool: str | None
    reasoning: str | None
    bundle: TokenizerBundle
    chat_template_kwargs: dict[str, Any] | None
    tools: list[dict[str, Any]]
    names: list[str]
    cases: dict[str, dict[str, Any]] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    construct: dict[str, str | None] = field(default_factory=dict)

    def parser(self) -> ChatParser:
        return ours(self.bundle, tool=self.tool, reasoning=self.reasoning,
                    chat_template_kwargs=self.chat_template_kwargs, tools=self.tools)

    def prompt_ids(self, name: str) -> list[int]:
        return list(self.cases[name].get("prompt_token_ids") or [])


def ours(
    bundle: TokenizerBundle,
    *,
    tool: str | None,
    reasoning: str | None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    options: ChatOptions | None = None,
) -> ChatParser:
    r_parser = (
        get_reasoning_parser(reasoning)(bundle.tokenizer, chat_template_kwargs,
                                        special_tokens=bundle.special_tokens)
        if reasoning else None
    )
    t_parser = get_tool_parser(tool)(bundle.tokenizer, tools) if tool else None
    if options is None:
        options = ChatOptions(tool_choice="auto", enable_auto_tools=True)
    return ChatParser(r_parser, t_parser, options)


def family_run(
    vllm_ref: Any,
    *,
    tool: str | None = None,
    reasoning: str | None = None,
    extra: Mapping[str, str | dict[str, Any]] | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    max_cuts: int = 12,
    corpus_kind: str | None = None,
) -> FamilyRun:
    kind = corpus_kind or ("tool" if tool else "reasoning")
    name = tool if kind == "tool" else reasoning
    assert name
    bundle = family_tokenizer(kind, name)
    entries = corpus_entries(kind, name)
    if tool and reasoning and kind == "tool":
        seen = {e["text"] for e in entries}
        entries += [e for e in corpus_entries("reasoning", reasoning) if e["text"] not in seen]
    richest = max(entries, key=lambda e: len(e["text"]))
    prompt = richest.get("prompt")
    named: dict[str, dict[str, Any]] = {}
    for entry in entries:
        named.setdefault(entry["name"], entry)
    hostile = hostile_variants(richest["text"], family_markers(kind, name, richest["text"]),
                               max_cuts=max_cuts)
    for key, text in {**hostile, **(extra or {})}.items():
        # A str case runs after the richest entry's prompt; a dict brings its own.
        named[key] = {"text": text, "prompt": prompt} if isinstance(text, str) else dict(text)
    tools = WEATHER_TOOLS if tools is None and tool else (tools or [])
    cases = family_cases(bundle, list(named.values()))
    out = vllm_family(vllm_ref, tool=tool, reasoning=reasoning, bundle=bundle, cases=cases,
                      tools=tools or None, chat_template_kwargs=chat_template_kwargs)
    assert not out.infra_errors(), out.infra_errors()
    run = FamilyRun(tool, reasoning, bundle, chat_template_kwargs, tools, list(named))
    run.cases = dict(zip(named, out.cases, strict=True))
    run.results = dict(zip(named, out.results, strict=True))
    run.construct = out.construct
    return run


def _calls(calls: Any) -> list[tuple[str, str]]:
    return [(c["name"], c["arguments"]) for c in calls]


def vllm_batch(run: FamilyRun, name: str) -> dict[str, Any]:
    res = run.results[name]
    assert "batch" in res, (name, res.get("batch_error"))
    batch = res["batch"]
    return {"reasoning": batch["reasoning"], "content": batch["content"],
            "tool_calls": _calls(batch["tool_calls"])}


def _ours_calls(calls: tuple[ToolCall, ...]) -> list[tuple[str, str]]:
    return [(c.name, c.arguments) for c in calls]


def our_result(run: FamilyRun, name: str) -> ChatParseResult:
    return run.parser().parse(run.cases[name]["text"], REQUEST_ID, run.prompt_ids(name))


def our_batch(run: FamilyRun, name: str) -> dict[str, Any]:
    result = our_result(run, name)
    return {"reasoning": result.reasoning, "content": result.content,
            "tool_calls": _ours_calls(result.tool_calls)}


def assert_stream_invariant(run: FamilyRun, name: str, *, n_random: int = 20) -> int:
    """Our stream equals our batch: token pieces (whole, one per chunk, every two-chunk split
    for outputs under 200 tokens, random splits) and one character per chunk, the state
    JSON round-tripped at every boundary. Returns the largest state seen, in bytes."""
    parser = run.parser()
    result = our_result(run, name)
    expected = Collapsed(
        reasoning=result.reasoning or "",
        content=result.content or "",
        tool_calls=tuple(CollapsedCall(i, c.id, c.name, c.arguments)
                         for i, c in enumerate(result.tool_calls)),
    )
    text = run.cases[name]["text"]
    token_pieces = [t for t, _ in run.cases[name]["chunks"]] or [""]
    chars = list(text) or [""]
    rng = random.Random(name)
    plans: list[tuple[list[str], tuple[int, ...]]] = [(chars, tuple(range(1, len(chars))))]
    if len(token_pieces) < 200:
        plans += [(token_pieces, cuts) for cuts in splits_of(len(token_pieces), n_random=n_random)]
    else:
        plans += [(token_pieces, ()), (token_pieces, tuple(range(1, len(token_pieces))))]
        plans += [(token_pieces, tuple(sorted(rng.sample(range(1, len(token_pieces)), k))))
                  for k in (3, 30, min(300, len(token_pieces) - 1))]
    stats = ChunkingStats()
    for pieces, cuts in plans:
        events = run_split(
            lambda s, d: parser.feed(s, d, REQUEST_ID),
            lambda s: parser.finish(s, REQUEST_ID),
            parser.initial_state(run.prompt_ids(name)),
            parser.state_type(),
            pieces,
            cuts,
            stats,
        )
        got = collapse_events(events)
        assert got == expected, f"{name}: split {cuts[:12]}: streamed {got!r} != batch {expected!r}"
    return stats.max_state_bytes


def assert_batches_match(run: FamilyRun, divergences: Mapping[str, str] = {}) -> int:
    """Every case's composed batch equals vLLM's, except the named divergences, which must
    really differ (a stale entry fails). Returns the number of cases compared."""
    unknown = set(divergences) - set(run.names)
    assert not unknown, f"divergences name no case: {sorted(unknown)}"
    mismatches = {}
    for name in run.names:
        theirs, mine = vllm_batch(run, name), our_batch(run, name)
        if name in divergences:
            assert theirs != mine, f"{name}: listed as a divergence but equals vLLM"
        elif theirs != mine:
            mismatches[name] = {"text": run.cases[name]["text"], "vllm": theirs, "ours": mine}
    assert not mismatches, mismatches
    return len(run.names)


def assert_streams_match_batch(run: FamilyRun, *, max_state_bytes: int = 1024) -> None:
    for name in run.names:
        size = assert_stream_invariant(run, name)
        assert size < max_state_bytes, (name, size)


# Hostile outputs for `<think>`/`</think>` families (added to the corpus and its variants).
THINK_CASES: dict[str, str] = {
    "late_think": "preface <think>inner</think>after",
    "two_ends": "a</think>b</think>c",
    "think_only": "<think>",
    "end_only": "</think>",
    "cjk_emoji": "思考中 😀 東京\n</think>\n\n答案 ☀️",
    "leading_ws_think": "\n\n<think>r</think>c",
    "partial_end": "reason</thi",
    "nested": "<think>a<think>b</think>c</think>d",
    "ws_reasoning": "<think>\n  \n</think>\n",
    "tool_call_in_reasoning": "plan <tool_call>\n{\"name\": \"x\"}\n</tool_call> more</think>done",
    "long": "x" * 3000 + "</think>" + "y" * 3000,
}
