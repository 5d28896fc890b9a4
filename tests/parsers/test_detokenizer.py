"""Incremental detokenizer: split invariance with JSON round trips, bounded state, UTF-8 safety,
special tokens, seeding, corrupted state. Equality with vLLM's own decoding is in
test_differential.py."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsers import DetokState, IncrementalDetokenizer, StateError
from parsers.detokenizer import MAX_BATCH_WINDOW_TOKENS, MAX_WINDOW_TOKENS

from .chunking import assert_chunking_invariant, collapse_text
from .tokenizers_util import TokenizerBundle, deepseek_r1, mistral_v3_sentencepiece, qwen3

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


def test_batch_has_a_larger_window_cap_than_a_stream() -> None:
    """1,100 lone continuation bytes ("¡" = 0xA1) never complete a character. vLLM's batch
    derender decodes them in one uncapped pass (nothing, or one U+FFFD each once a character
    follows), and so does ours up to MAX_BATCH_WINDOW_TOKENS; a stream's window is capped at
    MAX_WINDOW_TOKENS. Past either cap: a typed error, never minutes of quadratic work."""
    from parsers import LimitExceededError

    bundle = qwen3()
    detok = _detok(bundle)
    lone = bundle.token_id("¡")
    run = [lone] * (MAX_WINDOW_TOKENS + 76)
    hello = bundle.encode(" hello")
    assert detok.decode_all(run, [1, 2]) == ""
    assert detok.decode_all(run + hello, [1, 2]) == "\ufffd" * len(run) + " hello"
    seed = detok.initial_state([1, 2])
    assert detok.decode_segments(seed, [run[:7], run[7:] + hello, hello]) == [
        "", "\ufffd" * len(run) + " hello", " hello"]
    with pytest.raises(LimitExceededError, match="window exceeds"):
        detok.feed(seed, run)
    state = seed
    with pytest.raises(LimitExceededError):
        for k in range(0, len(run), 100):
            state, _ = detok.feed(state, run[k : k + 100])
    with pytest.raises(LimitExceededError, match="window exceeds 4096 tokens"):
        detok.decode_all([lone] * (MAX_BATCH_WINDOW_TOKENS + 1) + hello, [1, 2])


def test_decode_segments_equals_feeding_the_same_segments() -> None:
    bundle = qwen3()
    detok = _detok(bundle)
    ids = bundle.encode("中文 😀 text, emoji 👨‍👩‍👧 end")
    seed = detok.initial_state(bundle.encode("prompt:"))
    for cut in range(len(ids) + 1):
        state, head = detok.feed(seed, ids[:cut])
        _, tail = detok.feed(state, ids[cut:])
        assert detok.decode_segments(seed, [ids[:cut], ids[cut:]]) == [head, tail]


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


# -- SentencePiece: byte fallback + Metaspace (Mistral v3) ----------------------------------

SP_TEXTS = [
    "Hello world, plain ASCII.",
    "中文混合 English — 日本語のテキスト、한국어 텍스트.",
    "Emoji 😀👨‍👩‍👧🇺🇸 and rare 龘𠜎𪚥 (byte-fallback <0xNN> pieces).",
    "  leading spaces\n\n\ttabs   and  runs  ",
    "\nnewline first",
]


@pytest.mark.parametrize("seeded", [False, True], ids=["no-prompt", "prompt"])
@pytest.mark.parametrize("text", SP_TEXTS)
def test_sentencepiece_stream_equals_batch_on_every_split(text: str, seeded: bool) -> None:
    bundle = mistral_v3_sentencepiece()
    detok = _detok(bundle)
    prompt = bundle.encode("[INST] Say it [/INST]") if seeded else []
    ids = bundle.encode(text)
    expected = detok.decode_all(ids, prompt)
    # Metaspace: the dummy "▁" the encoder prepends (unless the text starts with a space) is
    # a space only after a prompt (the decoder's Strip drops one leading space); vLLM seeds
    # from the prompt the same way.
    with_space = text if text.startswith(" ") else " " + text
    assert expected == (with_space if seeded else with_space[1:])
    stats = assert_chunking_invariant(
        detok.feed, detok.finish, detok.initial_state(prompt), DetokState, ids, expected,
        collapse=collapse_text,
    )
    assert stats.max_state_bytes < 400, "window must stay a handful of tokens"


def test_sentencepiece_byte_fallback_never_yields_replacement_char() -> None:
    bundle = mistral_v3_sentencepiece()
    detok = _detok(bundle)
    for text in ["龘", "𠜎𪚥", "x龘y", "🫠🪿"]:
        ids = bundle.encode(text)
        pieces = bundle.tokenizer.encode(text, add_special_tokens=False).tokens
        assert any(p.startswith("<0x") for p in pieces), pieces  # really byte fallback
        state = detok.initial_state(bundle.encode("[INST] q [/INST]"))
        out = []
        for tid in ids:
            state, piece = detok.feed(state, [tid])
            assert "\ufffd" not in piece
            out.append(piece)
        assert "".join(out) == " " + text


def test_sentencepiece_skip_special_tokens() -> None:
    bundle = mistral_v3_sentencepiece()
    ids = bundle.encode("[INST] hi [/INST] ok</s>")
    assert _detok(bundle, skip=False).decode_all(ids) == "[INST] hi [/INST] ok</s>"
    skipped = _detok(bundle, skip=True).decode_all(ids)
    assert "[INST]" not in skipped and "</s>" not in skipped and "hi" in skipped


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_sentencepiece_random_ids_stream_like_batch(seed: int) -> None:
    """Random ids, lone <0xNN> pieces and control tokens included, stream like batch."""
    bundle = mistral_v3_sentencepiece()
    detok = _detok(bundle, skip=bool(seed % 2))
    rng = random.Random(seed)
    byte_pieces = [bundle.token_id(f"<0x{b:02X}>") for b in (0xE4, 0xBD, 0xA0, 0xF0, 0x9F, 0x0A)]
    vocab = bundle.tokenizer.get_vocab_size(True)
    ids = [rng.choice(byte_pieces) if rng.random() < 0.5 else rng.randrange(vocab)
           for _ in range(rng.randint(0, 30))]  # fmt: skip
    prompt = bundle.encode("[INST] q [/INST]")
    expected = detok.decode_all(ids, prompt)
    assert_chunking_invariant(
        detok.feed, detok.finish, detok.initial_state(prompt), DetokState, ids, expected,
        collapse=collapse_text, n_random=10, seed=seed,
    )
