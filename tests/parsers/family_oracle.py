"""Test-side client of the reference helper's `family` op: any vLLM 0.33 parser, many cases
per call (the reference process is shared by the whole session, so batch).

    from tests.parsers.family_oracle import vllm_family
    out = vllm_family(vllm_ref, tool="kimi_k2", reasoning="kimi_k2", cases=["...", "..."])
    for case in out.results:
        case["batch"]      # composed Parser.parse + assemble_chat_message_fields
        case["tool"]       # ToolParser.extract_tool_calls alone
        case["reasoning"]  # ReasoningParser.extract_reasoning alone
        case["stream"]     # ChatStreamProcessor.step per token chunk, incl. "deltas"

Each key is replaced by "<key>_error" (a string) when vLLM raised on that case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .family_tokenizers import FAMILIES, family_key, family_tokenizer, token_chunks
from .tokenizers_util import TokenizerBundle

__all__ = ["FamilyResult", "WEATHER_TOOLS", "family_cases", "vllm_family"]

# Tools the corpus' calls use (get_weather / search), with unicode-friendly schemas.
WEATHER_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]},
            "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Web search",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "filters": {"type": "object"}}}}},
]  # fmt: skip


@dataclass
class FamilyResult:
    construct: dict[str, str | None]
    composed_class: list[str] | None
    results: list[dict[str, Any]]
    cases: list[dict[str, Any]]

    def infra_errors(self) -> list[str]:
        """Results missing altogether (never an error vLLM raised: those are data)."""
        missing = []
        for i, res in enumerate(self.results):
            for key in ("batch", "stream"):
                if key not in res and f"{key}_error" not in res:
                    missing.append(f"case {i}: no {key}")
        if len(self.results) != len(self.cases):
            missing.append(f"{len(self.results)} results for {len(self.cases)} cases")
        return missing


def family_cases(
    bundle: TokenizerBundle,
    texts: Sequence[str | dict] | Mapping[str, str],
) -> list[dict]:
    """Cases for the op: each text with its token-aligned chunks on `bundle`. An item may be
    a corpus entry {text, prompt?}: its prompt (the template's generation prompt) is
    encoded on `bundle` as that case's prompt_token_ids; its chat_template_kwargs, if any,
    override the call's for that case."""
    items = texts.values() if isinstance(texts, Mapping) else texts
    out = []
    for item in items:
        entry = {"text": item} if isinstance(item, str) else item
        case = {"text": entry["text"],
                "chunks": [[p, ids] for p, ids in token_chunks(bundle, entry["text"])]}
        if entry.get("prompt") is not None:
            case["prompt_token_ids"] = bundle.encode(entry["prompt"])
        if entry.get("chat_template_kwargs") is not None:
            case["chat_template_kwargs"] = entry["chat_template_kwargs"]
        out.append(case)
    return out


def vllm_family(
    vllm_ref: Any,
    *,
    tool: str | None = None,
    reasoning: str | None = None,
    cases: Sequence[str | dict] | Mapping[str, str],
    bundle: TokenizerBundle | None = None,
    tools: list[dict] | None = None,
    request: dict[str, Any] | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    prompt_token_ids: list[int] | None = None,
    enable_auto_tools: bool = True,
    adjust_request: bool = False,
    loader: str | None = None,
) -> FamilyResult:
    """Run vLLM's parsers for `tool` and/or `reasoning` on every case in one call.

    `cases` are texts (chunked on `bundle` token by token), corpus entries {text, prompt}
    (corpus_entries(...)) or ready dicts {text, chunks: [[text, ids], ...], token_ids?,
    prompt_token_ids?}. `prompt_token_ids` defaults to [] (vLLM's composed stream parses
    no tool call at all when it is None); a case's own prompt wins. `bundle` defaults to the family tokenizer
    of `tool` (else `reasoning`); `tools` defaults to WEATHER_TOOLS when a tool parser runs.
    """
    assert tool or reasoning, "name a tool parser, a reasoning parser or both"
    kind, name = ("tool", tool) if tool else ("reasoning", reasoning)
    if bundle is None:
        bundle = family_tokenizer(kind, name)
    if loader is None:
        loader = FAMILIES[family_key(kind, name)].loader if bundle.name != "qwen3" else "auto"
    texts = list(cases.values()) if isinstance(cases, Mapping) else list(cases)
    ready = [c if isinstance(c, dict) and "chunks" in c else family_cases(bundle, [c])[0]
             for c in texts]
    out = vllm_ref.call(
        "family",
        tool_parser=tool,
        reasoning_parser=reasoning,
        tokenizer_dir=str(bundle.directory),
        loader=loader,
        tools=(WEATHER_TOOLS if tool else None) if tools is None else tools,
        request=request or {},
        chat_template_kwargs=chat_template_kwargs,
        prompt_token_ids=[] if prompt_token_ids is None else prompt_token_ids,
        enable_auto_tools=enable_auto_tools,
        adjust_request=adjust_request,
        cases=ready,
    )
    return FamilyResult(out["construct"], out["composed_class"], out["results"], ready)
