"""Incremental detokenizer: split invariance with JSON round trips, bounded state, UTF-8 safety,
special tokens, seeding, corrupted state. Equality with vLLM's own decoding is in
test_differential.py."""

from __future__ import annotations

import json
import random

import pytest
from .chunking import assert_chunking_invariant, collapse_text
from hypothesis import given, settings
from hypothesis import strategies as st
from .tokenizers_util import TokenizerBundle, deepseek_r1, qwen3

from parsers import DetokState, IncrementalDetokenizer, StateError
from parsers.detokenizer import MAX_WINDOW_TOKENS

TEXTS = [
    "Hello world, plain ASCII.",
    "中文混合 English — 日本語のテキスト、한국어 텍스트.",
    "Emoji 😀👨‍👩‍👧🇺🇸 and symbols ∑∫√ and accents éàü.",
    "<think>\nReasoning\n</think>\n\n<tool_call>\n{\"a\": 1}\n</tool_call>",
    "   leading spaces\n\n\ttabs and trailing   ",
]


def bundles() -> list[TokenizerBundle]:
    return [qwen3(), deepseek_r1()]


def _detok(bundle: TokenizerBundle, skip: bool = False) -> IncrementalDetokenizer:
    return IncrementalDetokenizer(bundle.tokenizer, bundle.special_ids, skip_special_tokens=skip)


@pytest.mark.parametrize("bundle_name", ["qwen3", "deepseek_r1"])
@pytest.mark.parametrize("text", TEXTS)
def test_stream_equals_batch_on_every_split(bundle_name: str, text: str) -> None:
    bundle = {"qwen3": qwen3, "deepseek_r1": deepseek_r1}[bundle_name]()
    detok = _detok(bundle)
    prompt = bundle.encode("A prompt that ends here:")
    ids = bundle.encode(text)
    expected = detok.decode_all(ids, prompt)
    assert expected == text, "byte-level tokenizers decode their own encoding exactly"
    stats = assert_chunking_invariant(
        detok.feed,
        detok.finish,
        detok.initial_state(prompt),
        DetokState,
        ids,
        expected,
        collapse=collapse_text,
    )
    assert stats.max_state_bytes < 400, "window must stay a handful of tokens"


@pytest.mark.parametrize("bundle_name", ["qwen3", "deepseek_r1"])
def test_split_utf8_never_yields_replacement_char(bundle_name: str) -> None:
    """Byte-level pieces of one emoji / CJK char are held until the character completes."""
    bundle = {"qwen3": qwen3, "deepseek_r1": deepseek_r1}[bundle_name]()
    detok = _detok(bundle)
    for text in ["😀", "👨‍👩‍👧", "你好世界", "🇺🇸🇯🇵"]:
        ids = bundle.encode(text)
        state = detok.initial_state(())
        pieces = []
        for tid in ids:
            state, piece = detok.feed(state, [tid])
            assert "\ufffd" not in piece
            pieces.append(piece)
        assert "".join(pieces) == text


def test_skip_special_tokens_uses_the_transformers_special_set() -> None:
    bundle = qwen3()
    ids = bundle.encode("<|im_start|>hi<think>x</think><|im_end|>")
    assert _detok(bundle, skip=True).decode_all(ids) == "hi<think>x</think>"
    assert _detok(bundle, skip=False).decode_all(ids) == "<|im_start|>hi<think>x</think><|im_end|>"


def test_seed_takes_the_last_seven_prompt_ids_with_vllm_offsets() -> None:
    bundle = qwen3()
    detok = _detok(bundle)
    prompt = bundle.encode("one two three four five six seven eight nine ten")
    state = detok.initial_state(prompt)
    assert len(state.prev_tokens) == 7
    assert (state.prefix_offset, state.read_offset) == (2, 7)
    assert list(state.prev_tokens) == [bundle.tokenizer.id_to_token(i) for i in prompt[-7:]]
    assert detok.initial_state(()) == DetokState()
    assert detok.initial_state(None) == DetokState()


def test_out_of_vocab_ids_decode_to_nothing() -> None:
    bundle = qwen3()
    detok = _detok(bundle)
    huge = bundle.tokenizer.get_vocab_size(True) + 10
    assert detok.decode_all([*bundle.encode("a"), huge, *bundle.encode("b")]) == "ab"


def test_window_stays_bounded_on_a_long_output() -> None:
    bundle = qwen3()
    detok = _detok(bundle)
    ids = bundle.encode("x 你好 😀 " * 500)
    state = detok.initial_state(bundle.encode("prompt"))
    longest = 0
    for tid in ids:
        state, _ = detok.feed(state, [tid])
        longest = max(longest, len(state.prev_tokens))
    assert longest <= 8


def test_corrupt_state_is_a_state_error() -> None:
    bundle = qwen3()
    detok = _detok(bundle)
    with pytest.raises(StateError):
        DetokState.from_json({"v": 1, "prev_tokens": ["a"], "prefix_offset": 2, "read_offset": 1})
    with pytest.raises(StateError):
        DetokState.from_json({"v": 1, "prev_tokens": ["a"] * (MAX_WINDOW_TOKENS + 1),
                              "prefix_offset": 0, "read_offset": 0})
    with pytest.raises(StateError):
        detok.feed(DetokState(("not-a-token\u2603\u2603",), 0, 1), [1])


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_byte_corruption_is_state_error_or_valid(data: st.DataObject) -> None:
    bundle = qwen3()
    detok = _detok(bundle)
    state, _ = detok.feed(detok.initial_state(bundle.encode("prompt here")), bundle.encode("你好"))
    wire = bytearray(json.dumps(state.to_json()).encode())
    for _ in range(data.draw(st.integers(1, 4))):
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    try:
        loaded = json.loads(wire.decode("utf-8", errors="replace"))
    except json.JSONDecodeError:
        return
    try:
        restored = DetokState.from_json(loaded)
        detok.feed(restored, bundle.encode(" more"))
    except StateError:
        pass


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_id_sequences_round_trip_state(seed: int) -> None:
    """Arbitrary ids (byte-level pieces that form invalid UTF-8 included) stream like batch."""
    bundle = qwen3()
    detok = _detok(bundle, skip=bool(seed % 2))
    rng = random.Random(seed)
    vocab = bundle.tokenizer.get_vocab_size(True)
    ids = [rng.randrange(vocab) for _ in range(rng.randint(0, 30))]
    expected = detok.decode_all(ids, [1, 2, 3])
    assert_chunking_invariant(
        detok.feed, detok.finish, detok.initial_state([1, 2, 3]), DetokState, ids, expected,
        collapse=collapse_text, n_random=10, seed=seed,
    )
