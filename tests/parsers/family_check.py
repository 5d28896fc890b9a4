"""One family's combined parser against vLLM's composed batch, in one oracle call, and its
chunking invariance on the family tokenizer's pieces.

    chat = family_chat(tool="ernie45", reasoning="ernie45")
    check_family_vs_vllm(vllm_ref, chat, tool="ernie45", reasoning="ernie45",
                         cases={name: text_or_entry}, divergences={name: why})

A case named in `divergences` must differ from vLLM's batch (a stale entry fails); every other
case must equal it: reasoning, content and the calls' names and argument strings, exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from parsers import ChatOptions, ChatParser, ChatParseResult
from parsers.registry import get_reasoning_parser, get_tool_parser

from .chunking import Collapsed, CollapsedCall, assert_chunking_invariant
from .family_oracle import WEATHER_TOOLS, vllm_family
from .family_tokenizers import family_tokenizer
from .tokenizers_util import TokenizerBundle

__all__ = ["REQ", "family_chat", "check_family_vs_vllm", "check_chunking", "family_cases_of"]

REQ = "chatcmpl-family-1"


def family_chat(
    *,
    tool: str | None,
    reasoning: str | None,
    bundle: TokenizerBundle | None = None,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = "auto",
    chat_template_kwargs: dict[str, Any] | None = None,
) -> ChatParser:
    kind, name = ("tool", tool) if tool else ("reasoning", reasoning)
    assert name is not None
    bundle = bundle or family_tokenizer(kind, name)
    r_parser = (
        get_reasoning_parser(reasoning)(bundle.tokenizer, chat_template_kwargs or {},
                                        special_tokens=bundle.special_tokens)
        if reasoning else None
    )
    t_parser = get_tool_parser(tool)(bundle.tokenizer, WEATHER_TOOLS if tools is None else tools) if tool else None
    return ChatParser(r_parser, t_parser, ChatOptions(tool_choice=tool_choice, enable_auto_tools=True))


def _ours(result: ChatParseResult) -> dict[str, Any]:
    return {"reasoning": result.reasoning, "content": result.content,
            "calls": [(c.name, c.arguments) for c in result.tool_calls]}


def _theirs(batch: Mapping[str, Any]) -> dict[str, Any]:
    return {"reasoning": batch["reasoning"], "content": batch["content"],
            "calls": [(c["name"], c["arguments"]) for c in batch["tool_calls"]]}


def family_cases_of(cases: Mapping[str, str | dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {k: ({"text": v} if isinstance(v, str) else dict(v)) for k, v in cases.items()}


def check_family_vs_vllm(
    vllm_ref: Any,
    chat: ChatParser,
    *,
    tool: str | None,
    reasoning: str | None,
    cases: Mapping[str, str | dict[str, Any]],
    divergences: Mapping[str, str],
    bundle: TokenizerBundle | None = None,
    vllm_errors: Mapping[str, str] = {},
) -> dict[str, dict[str, Any]]:
    """Returns {case: vLLM's result}. `vllm_errors`: cases where vLLM's batch raises (the
    substring expected in its error); ours must still give a result."""
    kind, name = ("tool", tool) if tool else ("reasoning", reasoning)
    assert name is not None
    bundle = bundle or family_tokenizer(kind, name)
    entries = family_cases_of(cases)
    unknown = (set(divergences) | set(vllm_errors)) - set(entries)
    assert not unknown, f"divergences/errors name no case: {sorted(unknown)}"
    out = vllm_family(vllm_ref, tool=tool, reasoning=reasoning, bundle=bundle,
                      cases=list(entries.values()))
    assert not out.infra_errors(), out.infra_errors()
    mismatches, stale = {}, []
    results = {}
    for (case, entry), res, sent in zip(entries.items(), out.results, out.cases, strict=True):
        results[case] = res
        prompt = sent.get("prompt_token_ids", [])
        kwargs = entry.get("chat_template_kwargs")
        parser = chat if kwargs is None else family_chat(
            tool=tool, reasoning=reasoning, bundle=bundle, chat_template_kwargs=kwargs)
        ours = _ours(parser.parse(entry["text"], REQ, prompt))
        if case in vllm_errors:
            assert vllm_errors[case] in res.get("batch_error", ""), (case, res)
            continue
        assert "batch" in res, (case, res.get("batch_error"))
        theirs = _theirs(res["batch"])
        if case in divergences:
            if ours == theirs:
                stale.append(case)
        elif ours != theirs:
            mismatches[case] = {"text": entry["text"], "ours": ours, "vllm": theirs}
    assert not mismatches, mismatches
    assert not stale, f"named divergences that now equal vLLM: {stale}"
    return results


def _collapsed(result: ChatParseResult) -> Collapsed:
    return Collapsed(
        result.reasoning or "",
        result.content or "",
        tuple(CollapsedCall(i, c.id, c.name, c.arguments) for i, c in enumerate(result.tool_calls)),
    )


def check_chunking(
    chat: ChatParser, bundle: TokenizerBundle, text: str, prompt: list[int] | None = None,
    n_random: int = 8,  # per case; with one-token and whole splits (CI budget: ~80 families)
) -> ChatParseResult:
    """One-token, whole and random splits of `text`'s tokens, the state round-tripped through
    JSON at every boundary, all stream to the batch result."""
    prompt = prompt or []
    result = chat.parse(text, REQ, prompt)
    assert_chunking_invariant(
        lambda s, t: chat.feed(s, t, REQ),
        lambda s: chat.finish(s, REQ),
        chat.initial_state(prompt),
        chat.state_type(),
        bundle.pieces(text),
        _collapsed(result),
        n_random=n_random,
    )
    return result
