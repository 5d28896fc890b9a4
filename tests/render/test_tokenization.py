"""The fast tokenization path is exact: fastokens and the segment cache never change ids.

Reference: HF `tokenizers` (the Rust backend transformers configured) encoding the whole text.
Corpora: every golden case rendered for every family, plus seeded random strings that mix the
family's added tokens (and fragments of them) with unicode, whitespace runs and digits.
"""

from __future__ import annotations

import random

import pytest

from render_service.render.chat_prompt import render_prompt_text, server_template_kwargs
from render_service.render.tokenization import (
    PROBE_STRINGS,
    SegmentCache,
    TokenEncoder,
    segment_cache_supported,
)

from .cases import chat_cases
from .test_golden import PARSERS

FAMILIES = list(PARSERS)
_ALPHABET = list("abcXYZ  \t\n\r0123456789.,;:!?'\"-_()[]{}<>|/\\") + [
    "é", "ß", "日本", "語", "😀", "👍🏽", "e\u0301", "\u00a0", "\u200b", "  ", "\n\n", "'s", "'ll",
]


def random_texts(encoder: TokenEncoder, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    added = [token for token in encoder._added_ids] or ["<s>"]
    pieces = _ALPHABET + added + [token[: max(1, len(token) // 2)] for token in added[:20]]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 60))) for _ in range(count)]


def golden_texts(renderer) -> list[str]:
    texts = []
    for case in chat_cases():
        kwargs = {**server_template_kwargs(renderer.config), **case.hf_kwargs}
        if case.hf_tools:
            kwargs["tools"] = case.hf_tools
        try:
            texts.append(render_prompt_text(renderer.bundle, renderer.config, case.request()["messages"], None, kwargs))
        except Exception:  # noqa: BLE001 - templates that refuse a case have no text to check
            continue
    return texts


def reference_ids(encoder: TokenEncoder, text: str, add_special_tokens: bool = False) -> list[int]:
    return list(encoder.hf_backend.encode(text, add_special_tokens=add_special_tokens).ids)


@pytest.mark.parametrize("family", FAMILIES)
def test_fast_path_equals_hf_tokenizers(family: str, family_renderer) -> None:
    """encode() (fastokens and/or segment cache) == HF tokenizers on golden + random corpora."""
    renderer = family_renderer(family, **PARSERS[family])
    encoder = renderer.bundle.encoder
    corpus = golden_texts(renderer) + random_texts(encoder, 400, seed=sum(map(ord, family))) + list(PROBE_STRINGS)
    assert len(corpus) > 400
    for text in corpus:
        want = reference_ids(encoder, text)
        assert encoder.encode(text) == want, repr(text)
        assert encoder.encode(text) == want, repr(text)  # second time: served from the cache
        assert encoder.encode_full(text, add_special_tokens=True) == reference_ids(encoder, text, True)
        if encoder.fast_backend is not None:
            assert list(encoder.fast_backend.encode(text, add_special_tokens=False).ids) == want


@pytest.mark.parametrize("family", FAMILIES)
def test_segment_cache_enabled_only_where_provably_equivalent(family: str, family_renderer) -> None:
    """Metaspace prepend_scheme=first (Mistral v3) disables the cache; byte-level BPE enables it."""
    encoder = family_renderer(family, **PARSERS[family]).bundle.encoder
    if family == "mistral":
        assert encoder.cache is None
    else:
        assert encoder.cache is not None


def test_multi_turn_reuses_segments(qwen3_renderer) -> None:
    """Turn N+1 of a conversation hits the cache for every earlier message."""
    encoder = qwen3_renderer.bundle.encoder
    messages = [{"role": "system", "content": "System prompt " + "x" * 500}]
    for turn in range(5):
        messages.append({"role": "user", "content": f"question {turn} " * 50})
        before = encoder.cache.misses
        ids = qwen3_renderer.render_chat({"messages": messages})["token_ids"]
        new_misses = encoder.cache.misses - before
        if turn:
            assert new_misses <= 3, new_misses  # last assistant reply + new user message
        kwargs = {**server_template_kwargs(qwen3_renderer.config), "add_generation_prompt": True}
        text = render_prompt_text(qwen3_renderer.bundle, qwen3_renderer.config, messages, None, kwargs)
        assert ids == reference_ids(encoder, text)
        messages.append({"role": "assistant", "content": f"answer {turn} " * 40})


def test_segment_cache_is_bounded() -> None:
    """The LRU evicts oldest segments to stay within its token budget."""
    cache = SegmentCache(max_tokens=10)
    for i in range(10):
        cache.put(f"s{i}", [i, i, i])
    assert cache.cached_tokens <= 10
    assert cache.get("s0") is None and cache.get("s9") == [9, 9, 9]
    cache.put("huge", list(range(11)))
    assert cache.get("huge") is None


def test_cache_refused_for_position_dependent_tokenizers() -> None:
    """lstrip/rstrip added tokens and Metaspace(prepend_scheme=first) make per-segment unsafe."""
    assert not segment_cache_supported({"added_tokens": [{"content": "<x>", "lstrip": True}]})[0]
    metaspace = {"pre_tokenizer": {"type": "Metaspace", "prepend_scheme": "first"}}
    assert not segment_cache_supported(metaspace)[0]
    byte_level = {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}]}}
    assert segment_cache_supported(byte_level)[0]
