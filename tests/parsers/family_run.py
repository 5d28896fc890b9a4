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

import json
import random
from collections.abc import Callable, Mapping
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


def assert_stream_invariant(run: FamilyRun, name: str, *, n_random: int = 8) -> int:
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


def assert_batches_match(
    run: FamilyRun,
    divergences: Mapping[str, str] = {},
    classify: Callable[[dict[str, Any], dict[str, Any]], set[str]] | None = None,
) -> int:
    """Every case's composed batch equals vLLM's, except documented divergences.

    `divergences` maps a case name, or (with `classify`) a divergence kind, to its reason.
    `classify(theirs, ours)` names the documented kinds that explain a difference (an empty
    set: unexplained). A named case must really differ, and every named kind must occur at
    least once (a stale entry fails). Returns the number of cases compared."""
    mismatches, seen_kinds = {}, set()
    for name in run.names:
        theirs, mine = vllm_batch(run, name), our_batch(run, name)
        if name in divergences:
            assert theirs != mine, f"{name}: listed as a divergence but equals vLLM"
            continue
        if theirs == mine:
            continue
        kinds = classify(theirs, mine) if classify else set()
        if kinds and kinds <= set(divergences):
            seen_kinds |= kinds
            continue
        mismatches[name] = {"text": run.cases[name]["text"], "vllm": theirs, "ours": mine}
    assert not mismatches, mismatches
    unused = set(divergences) - set(run.names) - seen_kinds
    assert not unused, f"divergences that occur nowhere: {sorted(unused)}"
    return len(run.names)


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def xml_params_classify(theirs: dict[str, Any], ours: dict[str, Any]) -> set[str]:
    """The Qwen3-Coder XML families' documented divergences (parsers/tools/qwen3_coder.py,
    parsers/tools/_engine.py): `leading_ws` (content whitespace that streamed before a call),
    `open_value_kept` (a parameter the output cut), `repeated_parameter` (written twice, the
    same object)."""
    kinds: set[str] = set()
    if theirs["reasoning"] != ours["reasoning"]:
        return set()
    t_content, o_content = theirs["content"], ours["content"]
    if t_content != o_content:
        if not (o_content and (o_content.lstrip() or None) == t_content):
            return set()
        kinds.add("leading_ws")
    if len(theirs["tool_calls"]) != len(ours["tool_calls"]):
        return set()
    for (t_name, t_args), (o_name, o_args) in zip(theirs["tool_calls"], ours["tool_calls"]):
        if t_name != o_name:
            return set()
        if t_args == o_args:
            continue
        t_obj, o_obj = _loads(t_args), _loads(o_args)
        if t_obj == o_obj:
            kinds.add("repeated_parameter")
        elif (isinstance(t_obj, dict) and isinstance(o_obj, dict)
              and all(o_obj.get(k) == v for k, v in t_obj.items())
              and list(o_obj)[: len(t_obj)] == list(t_obj)):
            kinds.add("open_value_kept")
        else:
            return set()
    return kinds


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


def xml_call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


_W = xml_call("get_weather", city="Paris", days="3")
# Hostile outputs for Qwen3-Coder XML families (after `</think>\n` where reasoning runs first).
XML_CASES: dict[str, str] = {
    "x:cjk_emoji_params": xml_call("get_weather", city="北京 🌧️ ☂️", days="七"),
    "x:unknown_function": xml_call("no_such_tool", anything="42"),
    "x:unknown_parameter": xml_call("get_weather", city="Oslo", colour="blue"),
    "x:text_after_calls": _W + "\nThe call above fetches the forecast.",
    "x:two_calls": _W + "\n" + xml_call("search", query='say "hi"', filters='{"n": 2}'),
    "x:truncated_value": "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPa",
    "x:missing_tool_call_end": _W.removesuffix("</tool_call>"),
    "x:function_without_tool_call": "Sure: <function=get_weather>\n<parameter=city>\nBern\n"
                                    "</parameter>\n</function>",
    "x:name_not_closed": "<tool_call>\n<function=get_weather</tool_call> after",
    "x:empty_tool_call": "a <tool_call></tool_call> b",
    "x:whitespace_only_content": "  \n<tool_call>\n</tool_call>\n  ",
    "x:partial_marker_at_end": "I will call a tool <tool_",
    "x:marker_in_content": "Use the <parameter=x> tag and </function> like this.",
    "x:long_value": xml_call("search", query="λ" * 1500 + "\n" + "x" * 1500),
    "x:empty_params": "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>",
    "x:name_from_json_body": '<function=>{"name": "get_weather", "arguments": {"city": "X"}}'
                             "</function>",
    "x:typed_fallbacks": xml_call("get_weather", days="three", unit="c"),
}
