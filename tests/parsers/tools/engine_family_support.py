"""Shared steps of the engine XML family tests: the family's corpus plus hostile variants, one
batched vLLM oracle call, and the comparison of our batch with vLLM's tool parser alone
(`extract_tool_calls`, the reasoning-free content pass derender runs)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from parsers import ChatParser
from parsers._base import ReasoningParser, ToolParser

from ..family_corpus import corpus_entries, family_markers, hostile_variants
from ..family_oracle import FamilyResult, vllm_family
from ..family_tokenizers import family_tokenizer
from ..tokenizers_util import TokenizerBundle
from .tool_parser_support import assert_split_invariant

__all__ = ["XML_TOOLS", "family_cases_for", "run_oracle", "batch_mismatches", "assert_stream_equals_batch",
           "reasoning_mismatches", "composed_mismatches", "leading_ws_only", "open_value_kept"]

# The request tools of the XML family tests: typed members, so coercion shows.
XML_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]},
            "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {
            "query": {"type": "string"}, "filters": {"type": "object"},
            "exact": {"type": "boolean"}, "score": {"type": ["number", "null"]}}}}},
]  # fmt: skip


def family_cases_for(
    names: Iterable[str], own: Mapping[str, str], max_cuts: int = 24
) -> dict[str, dict[str, Any]]:
    """{case name: {text, prompt?}}: every corpus entry of the tool parser `names`, hostile
    variants of each name's richest entry, and the test's own cases."""
    cases: dict[str, dict[str, Any]] = {}
    for name in names:
        entries = corpus_entries("tool", name)
        for entry in entries:
            cases[entry["name"]] = {"text": entry["text"], "prompt": entry.get("prompt")}
        richest = max(entries, key=lambda e: len(e["text"]))
        markers = family_markers("tool", name, richest["text"])
        for key, text in hostile_variants(richest["text"], markers, max_cuts=max_cuts).items():
            cases[f"{name}:hostile:{key}"] = {"text": text, "prompt": richest.get("prompt")}
    for key, text in own.items():
        cases[key] = {"text": text}
    return cases


def run_oracle(
    vllm_ref: Any, tool: str, cases: Mapping[str, Mapping[str, Any]], tools: list[dict[str, Any]],
    bundle: TokenizerBundle | None = None, **kwargs: Any,
) -> tuple[TokenizerBundle, dict[str, dict[str, Any]]]:
    """One `family` call for every case: {case name: vLLM's results}."""
    bundle = bundle or family_tokenizer("tool", tool)
    out: FamilyResult = vllm_family(vllm_ref, tool=tool, bundle=bundle, tools=tools,
                                    cases=list(cases.values()), **kwargs)  # fmt: skip
    assert not out.infra_errors(), out.infra_errors()
    assert out.construct["tool"] is None, out.construct
    return bundle, dict(zip(cases, out.results, strict=True))


def _theirs(res: Mapping[str, Any]) -> tuple[str | None, list[tuple[str, str]]] | str:
    if "tool" not in res:
        return "error: " + str(res.get("tool_error"))
    tool = res["tool"]
    return tool["content"], [(c["name"], c["arguments"]) for c in tool["tool_calls"]]


def leading_ws_only(ours: tuple[str | None, list[tuple[str, str]]], theirs: Any) -> bool:
    """The engine's named divergence (`_engine`): with calls returned, vLLM strips whitespace
    at the very start of content that then streamed; ours keeps it."""
    if isinstance(theirs, str) or not ours[1] or ours[1] != theirs[1]:
        return False
    content = ours[0] or ""
    return content != content.lstrip() and content.lstrip() == (theirs[0] or "")


def open_value_kept(ours: tuple[str | None, list[tuple[str, str]]], theirs: Any) -> bool:
    """The XML families' named divergence: a streamed value that never closed is kept as the
    last member of the last call, where vLLM drops it (the rest is equal)."""
    import json

    if isinstance(theirs, str) or len(ours[1]) != len(theirs[1]) or not ours[1]:
        return False
    if ours[0] != theirs[0] and (ours[0] or "").lstrip() != (theirs[0] or ""):  # + leading ws
        return False
    if ours[1][:-1] != theirs[1][:-1] or ours[1][-1][0] != theirs[1][-1][0]:
        return False
    mine, vllms = json.loads(ours[1][-1][1]), json.loads(theirs[1][-1][1])
    if not mine or not isinstance(mine, dict):
        return False
    last = list(mine)[-1]
    return isinstance(mine[last], str) and {k: v for k, v in mine.items() if k != last} == vllms


def repeated_keys_same_object(ours: tuple[str | None, list[tuple[str, str]]], theirs: Any) -> bool:
    """The XML families' named divergence: a repeated key is written twice where vLLM's dict
    keeps it once; `json.loads` of both gives the same object (the rest is equal)."""
    import json

    def has_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            found.append(True)
        return dict(pairs)

    if isinstance(theirs, str) or ours[0] != theirs[0] or len(ours[1]) != len(theirs[1]):
        return False
    found: list[bool] = []
    for (name, mine), (their_name, vllms) in zip(ours[1], theirs[1], strict=True):
        try:
            if name != their_name or json.loads(mine, object_pairs_hook=has_repeats) != json.loads(vllms):
                return False
        except ValueError:  # arguments that are not JSON (a named divergence's) are no repeat
            return False
    return bool(found)


def batch_mismatches(
    parser: ToolParser,
    cases: Mapping[str, Mapping[str, Any]],
    results: Mapping[str, Mapping[str, Any]],
    divergences: Mapping[str, str] = {},
    same_object: Callable[[str], bool] = lambda name: False,
    cut_divergence: Callable[[tuple[str | None, list[tuple[str, str]]], Any], bool] = open_value_kept,
) -> dict[str, Any]:
    """Cases where our batch (content, names, argument strings) differs from vLLM's tool
    parser, and named divergences that no longer differ (a divergence must be real). The
    engine's leading-whitespace divergence is recognised by its shape (`leading_ws_only`)."""
    import json

    bad: dict[str, Any] = {}
    for name, case in cases.items():
        ours_result = parser.parse(case["text"], "req-1")
        ours = (ours_result.content, [(c.name, c.arguments) for c in ours_result.tool_calls])
        theirs = _theirs(results[name])
        equal = ours == theirs or leading_ws_only(ours, theirs) or repeated_keys_same_object(ours, theirs)
        if not equal and same_object(name) and not isinstance(theirs, str):
            equal = ours[0] == theirs[0] and [(n, json.loads(a)) for n, a in ours[1]] == [
                (n, json.loads(a)) for n, a in theirs[1]]
        if not equal and ":hostile:cut@" in name and cut_divergence(ours, theirs):
            continue  # a cut output: the divergence is recognised by its shape
        if name in divergences:
            if equal:
                bad[name] = ("named divergence does not diverge", ours)
        elif not equal:
            bad[name] = {"ours": ours, "vllm": theirs}
    return bad


def assert_stream_equals_batch(
    parser: ToolParser, bundle: TokenizerBundle, texts: Sequence[str]
) -> None:
    """Token, char, two-chunk and random splits, state restored at every boundary."""
    for text in texts:
        pieces = [(p, []) for p in bundle.pieces(text)] if text else [("", [])]
        assert_split_invariant(parser, text, pieces)


def reasoning_mismatches(
    parser: ReasoningParser,
    cases: Mapping[str, Mapping[str, Any]],
    results: Mapping[str, Mapping[str, Any]],
    bundle: TokenizerBundle,
    divergences: Mapping[str, str] = {},
) -> dict[str, Any]:
    """Cases where our reasoning split differs from vLLM's reasoning parser alone (vLLM's
    harness gives it no prompt; the composed check does)."""
    bad: dict[str, Any] = {}
    for name, case in cases.items():
        res = results[name]
        if "reasoning" not in res:
            bad[name] = "vLLM error: " + str(res.get("reasoning_error"))
            continue
        got = parser.parse(case["text"], [])
        ours = {"reasoning": got.reasoning, "content": got.content}
        equal = ours == res["reasoning"]
        if name in divergences:
            if equal:
                bad[name] = "named divergence does not diverge"
        elif not equal:
            bad[name] = {"ours": ours, "vllm": res["reasoning"]}
    return bad


def composed_mismatches(
    chat: ChatParser,
    cases: Mapping[str, Mapping[str, Any]],
    results: Mapping[str, Mapping[str, Any]],
    bundle: TokenizerBundle,
    divergences: Mapping[str, str] = {},
    same_object: Callable[[str], bool] = lambda name: False,
) -> dict[str, Any]:
    """Cases where our combined parser (reasoning, content, calls) differs from vLLM's
    composed batch; shapes of the tool divergences are recognised as in `batch_mismatches`."""
    import json

    bad: dict[str, Any] = {}
    for name, case in cases.items():
        res = results[name]
        if "batch" not in res:
            bad[name] = "vLLM error: " + str(res.get("batch_error"))
            continue
        prompt = bundle.encode(case["prompt"]) if case.get("prompt") else []
        got = chat.parse(case["text"], "req-1", prompt)
        batch = res["batch"]
        ours_t = (got.content, [(c.name, c.arguments) for c in got.tool_calls])
        theirs_t = (batch["content"], [(c["name"], c["arguments"]) for c in batch["tool_calls"]])
        equal = got.reasoning == batch["reasoning"] and (
            ours_t == theirs_t or leading_ws_only(ours_t, theirs_t) or repeated_keys_same_object(ours_t, theirs_t)
            or (":hostile:cut@" in name and open_value_kept(ours_t, theirs_t))
            or (same_object(name) and ours_t[0] == theirs_t[0]
                and [(n, json.loads(a)) for n, a in ours_t[1]]
                == [(n, json.loads(a)) for n, a in theirs_t[1]]))  # fmt: skip
        if name in divergences:
            if equal:
                bad[name] = "named divergence does not diverge"
        elif not equal:
            bad[name] = {"ours": [got.reasoning, *ours_t], "vllm": [batch["reasoning"], *theirs_t]}
    return bad
