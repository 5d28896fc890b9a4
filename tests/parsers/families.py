"""Builds each reasoning family on a real (or realistically augmented) tokenizer, for tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from parsers import ReasoningResult
from parsers._base import ReasoningParser
from parsers.registry import get_reasoning_parser

from .corpus import GRANITE_CORPUS, reasoning_corpus
from .tokenizers_util import TokenizerBundle, deepseek_r1, glm_like, mistral_like, qwen3

__all__ = ["FAMILIES", "bundle_for", "build", "corpus_for", "expected_collapsed"]

# family -> (tokenizer loader, loader name for the vLLM helper, default chat template kwargs)
FAMILIES: dict[str, tuple[Any, str, dict[str, Any]]] = {
    "qwen3": (qwen3, "auto", {}),
    "deepseek_r1": (deepseek_r1, "backend", {}),
    "deepseek_v3": (deepseek_r1, "backend", {"thinking": True}),
    "glm45": (glm_like, "auto", {}),
    "granite": (qwen3, "auto", {}),
    "mistral": (mistral_like, "auto", {}),
}


def bundle_for(family: str) -> TokenizerBundle:
    return FAMILIES[family][0]()


def build(family: str, kwargs: Mapping[str, Any] | None = None) -> ReasoningParser:
    bundle = bundle_for(family)
    chat_kwargs = FAMILIES[family][2] if kwargs is None else kwargs
    cls = get_reasoning_parser(family)
    return cls(bundle.tokenizer, chat_kwargs, special_tokens=bundle.special_tokens)


def corpus_for(family: str) -> list[tuple[str, str]]:
    if family == "granite":
        return GRANITE_CORPUS
    if family == "mistral":
        return reasoning_corpus("[THINK]", "[/THINK]", "[TOOL_CALLS]")
    return reasoning_corpus("<think>", "</think>")


def expected_collapsed(result: ReasoningResult):
    from .chunking import Collapsed

    return Collapsed(result.reasoning or "", result.content or "")
