"""The continuation guard and the conversation table (continuation.py), without engines."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from render_service.errors import BadRequestError
from render_service.gateway.continuation import (
    MAX_CONVERSATION_ID,
    ConversationStore,
    Turn,
    common_prefix,
    conversation_id,
    decide,
    release_params,
    reuse_params,
    token_array,
)
from render_service.gateway.prefix_index import MMRange

BS = 16  # block size


def decoder_params(computed: int) -> dict:
    """A bidirectional decoder's answer: the blocks of `computed` tokens pinned."""
    return {
        "do_remote_prefill": False,
        "do_remote_decode": True,
        "remote_engine_id": "d-engine",
        "remote_block_ids": [list(range(100, 100 + -(-computed // BS)))],
        "remote_request_id": "generate-tokens-x-1",
        "remote_host": "127.0.0.1",
        "remote_port": 5601,
        "tp_size": 1,
        "remote_num_tokens": computed,
        "remote_blocks_expiry_time": 123.0,
    }


def turn_of(
    prompt: list[int], output: list[int], *, expires_at: float = 100.0, **kwargs: object
) -> Turn:
    computed = len(prompt) + len(output) - 1
    turn = Turn.maybe_from_decode(
        decoder_params(computed),
        decoder="http://d0",
        epoch=0,
        prompt=token_array(prompt),
        output=output,
        expires_at=expires_at,
        **kwargs,
    )  # type: ignore[arg-type]
    assert turn is not None
    return turn


def guard(
    prompt: list[int],
    turn: Turn,
    *,
    threshold: int = 32,
    now: float = 0.0,
    alive: bool = True,
    **kwargs: object,
):  # type: ignore[no-untyped-def]
    return decide(
        token_array(prompt),
        turn,
        block_size=BS,
        threshold=threshold,
        now=now,
        decoder_alive=alive,
        **kwargs,
    )  # type: ignore[arg-type]


PROMPT = list(range(1, 101))  # 100 tokens
OUTPUT = list(range(1001, 1051))  # 50 tokens


# -- common_prefix --------------------------------------------------------------------------
@given(st.lists(st.integers(0, 5), max_size=300), st.lists(st.integers(0, 5), max_size=300))
def test_common_prefix_equals_the_naive_scan(a: list[int], b: list[int]) -> None:
    """The slice-narrowing prefix equals a token-by-token scan."""
    naive = 0
    while naive < min(len(a), len(b)) and a[naive] == b[naive]:
        naive += 1
    assert common_prefix(token_array(a), token_array(b)) == naive


@pytest.mark.parametrize("at", [0, 1, 15, 16, 255, 256, 4095, 4096, 5000, 9999])
def test_common_prefix_finds_a_late_mismatch(at: int) -> None:
    """A single differing token anywhere in 10k tokens is found exactly."""
    a = list(range(10_000))
    b = list(a)
    b[at] = -1 % (1 << 32)
    assert common_prefix(token_array(a), token_array(b)) == at


# -- decide ---------------------------------------------------------------------------------
def test_a_continuation_reuses_whole_blocks_of_what_the_decoder_computed() -> None:
    """History kept: all of prompt + output - 1 is covered, cut to whole blocks."""
    turn = turn_of(PROMPT, OUTPUT)
    decision = guard(PROMPT + OUTPUT + [7, 8, 9], turn)
    assert decision.reused and decision.common == 150
    assert decision.reuse == 144  # 149 computed tokens -> 9 whole blocks


def test_a_rewritten_history_reuses_only_the_prefix_before_it() -> None:
    """The prompt leaves the last turn at token 120: the reuse stops at block 112."""
    turn = turn_of(PROMPT, OUTPUT)
    new = PROMPT + OUTPUT[:20] + [5, 5, 5] + OUTPUT[20:]
    decision = guard(new, turn)
    assert decision.reused and decision.common == 120 and decision.reuse == 112


def test_dropped_reasoning_below_the_threshold_is_refused() -> None:
    """The divergence comes before the threshold: refused as diverged, nothing reused."""
    turn = turn_of(PROMPT[:20], OUTPUT)
    new = PROMPT[:20] + [9, 9] + OUTPUT[5:] + [1, 2]  # the output's first tokens dropped
    decision = guard(new, turn, threshold=32)
    assert not decision.reused and decision.cause == "diverged" and decision.reuse == 0
    assert decision.common == 20


def test_a_short_continuation_is_below_the_threshold() -> None:
    """It continues the turn, but fewer than `threshold` tokens are reusable."""
    turn = turn_of([1, 2, 3], [4, 5, 6])
    decision = guard([1, 2, 3, 4, 5, 6, 7], turn, threshold=0)
    assert decision.cause == "below_threshold"  # no whole block at all
    turn = turn_of(PROMPT[:30], OUTPUT[:10])
    assert guard(PROMPT[:30] + OUTPUT[:10] + [1], turn, threshold=64).cause == "below_threshold"


def test_the_prefill_always_keeps_a_token_to_compute() -> None:
    """A prompt equal to the covered span reuses one block less than all of it."""
    turn = turn_of(PROMPT[:64], OUTPUT[:33])  # 96 tokens computed
    decision = guard(PROMPT[:64] + OUTPUT[:32], turn, threshold=16)  # 96-token prompt
    assert decision.reuse == 80


@pytest.mark.parametrize(
    ("kwargs", "cause"),
    [
        ({"now": 100.0}, "expired"),
        ({"alive": False}, "decoder_gone"),
        ({"cache_salt": "tenant-b"}, "cache_salt"),
    ],
)
def test_refusals_before_any_comparison(kwargs: dict, cause: str) -> None:
    """Expired, a decoder gone, another cache_salt: refused whatever the tokens."""
    turn = turn_of(PROMPT, OUTPUT)
    assert guard(PROMPT + OUTPUT + [1], turn, **kwargs).cause == cause


def test_block_lists_of_another_block_size_are_refused() -> None:
    """The decoder's blocks are not block_size tokens each (a config mismatch, or clipped
    sliding-window groups): cutting the list would pair the wrong blocks, so refused."""
    turn = turn_of(PROMPT, OUTPUT)  # 149 tokens in 10 blocks of 16
    decision = decide(
        token_array(PROMPT + OUTPUT + [1]),
        turn,
        block_size=32,
        threshold=32,
        now=0.0,
        decoder_alive=True,
    )
    assert decision.cause == "layout"


def test_an_image_the_prompts_do_not_share_ends_the_prefix() -> None:
    """Same placeholder ids, another image hash: the prefix stops at that image."""
    image = MMRange(40, 20, "hash-a")
    turn = turn_of(PROMPT, OUTPUT, mm_ranges=(image,))
    same = guard(PROMPT + OUTPUT + [1], turn, mm_ranges=(image,))
    other = guard(PROMPT + OUTPUT + [1], turn, mm_ranges=(MMRange(40, 20, "hash-b"),))
    assert same.reuse == 144
    assert other.reuse == 32  # block-cut below offset 40


# -- the params sent to the prefill -----------------------------------------------------------
def test_reuse_params_cut_blocks_and_tokens_to_the_prefix() -> None:
    """The first k block ids and k * block_size tokens, as a prefill-side (P) request."""
    turn = turn_of(PROMPT, OUTPUT)
    params = reuse_params(turn, 112, BS)
    assert params["remote_block_ids"] == [list(range(100, 107))]
    assert params["remote_num_tokens"] == 112
    assert params["do_remote_decode"] is True and params["do_remote_prefill"] is False
    assert params["remote_engine_id"] == "d-engine"
    assert turn.kv_transfer_params["remote_num_tokens"] == 149  # the turn is not changed


def test_release_params_load_nothing_and_keep_the_blocks() -> None:
    """Zero tokens to load (the engine only notifies the decoder), the block list whole."""
    turn = turn_of(PROMPT, OUTPUT)
    params = release_params(turn)
    assert params["remote_num_tokens"] == 0
    assert params["remote_block_ids"] == turn.kv_transfer_params["remote_block_ids"]


@pytest.mark.parametrize(
    "params",
    [
        None,
        {},
        {**decoder_params(10), "do_remote_decode": False},
        {k: v for k, v in decoder_params(10).items() if k != "remote_host"},
        {**decoder_params(10), "remote_block_ids": None},
    ],
)
def test_a_decode_answer_without_pinned_blocks_is_no_turn(params: dict | None) -> None:
    """Bidirectional off, an abort, missing fields: nothing to continue from."""
    assert (
        Turn.maybe_from_decode(
            params, decoder="d", epoch=0, prompt=token_array([1]), output=[2], expires_at=1.0
        )
        is None
    )


# -- ConversationStore ----------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_store_take_removes_the_turn() -> None:
    """A turn serves one next turn (its blocks serve one pull)."""
    store = ConversationStore(10, 10_000, Clock())
    store.put("c", turn_of(PROMPT, OUTPUT))
    assert store.take("c") is not None
    assert store.take("c") is None and len(store) == 0 and store.tokens == 0


def test_store_is_bounded_in_count_under_many_ids() -> None:
    """10,000+ distinct ids never hold more than max_conversations turns (oldest out)."""
    store = ConversationStore(1000, 10**9, Clock())
    turn = turn_of(PROMPT, OUTPUT)
    for i in range(12_000):
        store.put(f"id-{i}", turn)
    assert len(store) == 1000
    assert store.take("id-11999") is not None and store.take("id-10999") is None


def test_store_is_bounded_in_tokens() -> None:
    """The token budget evicts the oldest; a turn larger than the budget is not kept."""
    store = ConversationStore(100, 400, Clock())
    turn = turn_of(PROMPT, OUTPUT)  # 150 tokens
    for key in "abc":
        store.put(key, turn)
    assert len(store) == 2 and store.tokens == 300 and store.take("a") is None
    store.put("big", turn_of(PROMPT * 5, OUTPUT))
    assert store.take("big") is None


def test_store_drops_expired_turns() -> None:
    """Turns past their expiry leave the table on the next put/take."""
    clock = Clock()
    store = ConversationStore(100, 10**6, clock)
    store.put("old", turn_of(PROMPT, OUTPUT, expires_at=10.0))
    store.put("new", turn_of(PROMPT, OUTPUT, expires_at=20.0))
    clock.now = 15.0
    store.take("missing")
    assert len(store) == 1 and store.take("new") is not None


def test_store_put_replaces_the_conversation() -> None:
    """A newer turn of the same conversation replaces the old one (tokens recounted)."""
    store = ConversationStore(10, 10_000, Clock())
    store.put("c", turn_of(PROMPT, OUTPUT))
    store.put("c", turn_of(PROMPT[:10], OUTPUT[:10]))
    assert len(store) == 1 and store.tokens == 20


# -- conversation ids -----------------------------------------------------------------------
def test_conversation_id_from_body_or_header() -> None:
    """The body field is consumed (not rendered); the header is the fallback."""
    body = {"conversation_id": "session-42", "messages": []}
    assert conversation_id(body, None) == "session-42" and "conversation_id" not in body
    assert conversation_id({}, "from-header") == "from-header"
    assert conversation_id({}, None) is None
    assert conversation_id({"conversation_id": "same"}, "same") == "same"


@pytest.mark.parametrize(
    ("body", "header"),
    [
        ({"conversation_id": "x" * (MAX_CONVERSATION_ID + 1)}, None),
        ({"conversation_id": "line\nbreak"}, None),
        ({"conversation_id": "nul\x00"}, None),
        ({"conversation_id": "c1\x85"}, None),
        ({"conversation_id": ""}, None),
        ({"conversation_id": 42}, None),
        ({}, "tab\there"),
        ({"conversation_id": "a"}, "b"),
    ],
)
def test_bad_conversation_ids_are_400(body: dict, header: str | None) -> None:
    """Over 256 characters, control characters, not a string, or body != header: 400."""
    with pytest.raises(BadRequestError):
        conversation_id(body, header)


def test_a_256_character_id_is_accepted() -> None:
    """The bound is inclusive."""
    assert conversation_id({"conversation_id": "é" * MAX_CONVERSATION_ID}, None)
