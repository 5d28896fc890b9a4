"""Our combined parser against one `vllm_family` result: batch fields equal, every split of
the token stream equal to our batch (state JSON-round-tripped at every boundary).

    out = vllm_family(vllm_ref, tool=..., reasoning=..., cases=cases, request=AUTO)
    for case, res in zip(out.cases, out.results):
        ours = chat_parser(tool, reasoning, case.get("chat_template_kwargs"))
        assert batch_of(ours, case) == vllm_batch(res)
        assert_streams_to_batch(ours, case)
"""

from __future__ import annotations

from typing import Any

from parsers.chat import ChatOptions, ChatParser, ChatState
from parsers.registry import get_reasoning_parser, get_tool_parser

from .chunking import Collapsed, CollapsedCall, assert_chunking_invariant
from .family_oracle import WEATHER_TOOLS
from .family_tokenizers import TokenizerBundle

__all__ = ["AUTO", "chat_parser", "batch_of", "vllm_batch", "assert_streams_to_batch"]

AUTO = {"tool_choice": "auto"}
RID = "req-family"

Split = tuple[str | None, str | None, tuple[tuple[str, str], ...]]


def chat_parser(
    bundle: TokenizerBundle,
    tool: str | None,
    reasoning: str | None,
    chat_template_kwargs: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = "auto",
) -> ChatParser:
    """Built as derender builds it (parsers.registry; engine options for engine families)."""
    kwargs = chat_template_kwargs or {}
    r_parser = (get_reasoning_parser(reasoning)(bundle.tokenizer, kwargs,
                                                special_tokens=bundle.special_tokens)
                if reasoning else None)  # fmt: skip
    t_parser = None
    if tool:
        cls = get_tool_parser(tool)
        import inspect

        accepted = inspect.signature(cls).parameters
        options: dict[str, Any] = {"special_tokens": bundle.special_tokens,
                                   "skip_reasoning_parsing": not reasoning,
                                   "chat_template_kwargs": kwargs}  # fmt: skip
        options = {k: v for k, v in options.items() if k in accepted}
        t_parser = cls(bundle.tokenizer, WEATHER_TOOLS if tools is None else tools, **options)
    return ChatParser(r_parser, t_parser, ChatOptions(tool_choice=tool_choice, enable_auto_tools=True))


def batch_of(parser: ChatParser, case: dict[str, Any]) -> Split:
    result = parser.parse(case["text"], RID, case.get("prompt_token_ids", ()))
    calls = tuple((c.name, c.arguments) for c in result.tool_calls)
    return result.reasoning, result.content, calls


def vllm_batch(res: dict[str, Any]) -> Split:
    batch = res["batch"]
    calls = tuple((c["name"], c["arguments"]) for c in batch["tool_calls"])
    return batch["reasoning"], batch["content"], calls


def assert_streams_to_batch(parser: ChatParser, case: dict[str, Any], n_random: int = 4) -> None:
    prompt = case.get("prompt_token_ids", ())
    result = parser.parse(case["text"], RID, prompt)
    expected = Collapsed(
        result.reasoning or "", result.content or "",
        tuple(CollapsedCall(i, c.id, c.name, c.arguments) for i, c in enumerate(result.tool_calls)),
    )  # fmt: skip
    pieces = [p for p, _ in case["chunks"]] or [""]
    assert_chunking_invariant(
        lambda s, t: parser.feed(s, t, RID), lambda s: parser.finish(s, RID),
        parser.initial_state(prompt), ChatState, pieces, expected, n_random=n_random,
    )  # fmt: skip
