"""Multi-turn P/D: where a conversation's last turn decoded, and whether the next may reuse it.

Theory of operation. With `bidirectional_kv_xfer` on both NIXL engines (vLLM 0.32
`nixl/pull_scheduler.py`), a decode engine that finishes a request by `stop` or `length` keeps
its KV blocks for `decoder_kv_blocks_ttl` and answers, in its JSON response only (the token
stream has no field for it), with `kv_transfer_params` that point at them:
`do_remote_decode: true`, `remote_block_ids`, `remote_engine_id`, `remote_request_id`,
`remote_host`, `remote_port`, `remote_num_tokens` (the tokens it computed: prompt + output - 1,
the last sampled token has no KV yet) and `remote_blocks_expiry_time`. Sent as the next turn's
prefill `kv_transfer_params`, the prefill engine loads min(remote_num_tokens, prompt length)
tokens minus its own prefix-cache hits from the decoder (unless that is fewer than its own
`kv_recompute_threshold`), computes the rest, and notifies the decoder, which frees the blocks.
A read of nothing (remote_num_tokens 0) still sends the notification: that is how a turn the
guard refuses gives its blocks back at once instead of at the TTL (`release_params`).

The engines check nothing about *which* tokens the blocks hold. The pulling worker pairs the
remote blocks with its local ones from the end (`remote[-n:]`, `_apply_prefix_caching`), so a
prompt that is not a continuation (a template that drops earlier reasoning, as Qwen3's does;
an edited history; another system prompt) silently gets KV computed for other tokens
(vLLM #43094). The guard closes that: it compares turn N+1's rendered prompt ids with turn N's
prompt + output ids, and offers only the token-exact common prefix, cut to whole KV blocks, and
only when that reaches the threshold. The params it sends are cut to match (`reuse_params`:
the first k block ids, remote_num_tokens = k * block_size), so the pairing from the end lines
up with the prefix. Images: equal placeholder ids do not mean equal images, so the prefix also
stops at the first image the two prompts do not share (offset, length and hash), and a
different `cache_salt` shares nothing.

Cost: the prompt is copied into an `array('I')` once (~0.1 ms at 32k tokens); the comparison
is memcmp over slices, narrowing 4096 -> 256 -> 16 -> 1 tokens at the first mismatch. The table
is bounded by count and by the token ids it holds (oldest first out), and by time (a turn
older than the decoder's TTL minus a margin is dropped: its blocks are gone).
"""

from __future__ import annotations

import re
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from render_service.errors import BadRequestError
from render_service.gateway.prefix_index import MMRange

__all__ = [
    "ConversationStore",
    "Decision",
    "Turn",
    "common_prefix",
    "conversation_id",
    "decide",
    "release_params",
    "reuse_params",
    "token_array",
    "MAX_CONVERSATION_ID",
    "REFUSAL_CAUSES",
    "CONVERSATION_HEADER",
]

# vLLM's multi-turn proxy and NIXL docs name it a top-level body field; the header is ours.
CONVERSATION_FIELD = "conversation_id"
CONVERSATION_HEADER = "x-conversation-id"
MAX_CONVERSATION_ID = 256  # an id is a key, not a payload; 256 fits any UUID/ULID/session key
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

# Why a turn was not reused (metrics label `cause`).
REFUSAL_CAUSES = (
    "expired",  # older than the decoder's block TTL minus the margin
    "decoder_gone",  # the decoder left rotation (or restarted) since the turn
    "cache_salt",  # another cache_salt: nothing is shared
    "layout",  # block lists not one block per block_size tokens (a block_size mismatch, or
    #            clipped sliding-window / hybrid groups): cutting them would misalign
    "diverged",  # the prompt leaves the last turn before the threshold
    "below_threshold",  # it continues the last turn, but too little of it is reusable
)
_NEEDED_KEYS = (
    "remote_block_ids",
    "remote_engine_id",
    "remote_request_id",
    "remote_host",
    "remote_port",
)
_WIDTHS = (4096, 256, 16, 1)


def conversation_id(body: dict[str, Any], header: str | None) -> str | None:
    """The request's conversation id (body `conversation_id`, else the header), removed from
    the body. BadRequestError (400) for a non-string, an empty, an over-long one, one with
    control characters, or a body and header that disagree."""
    value = body.pop(CONVERSATION_FIELD, None)
    if value is None:
        value = header
    elif header is not None and header != value:
        raise BadRequestError(
            "conversation_id and the X-Conversation-ID header differ", param=CONVERSATION_FIELD
        )
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise BadRequestError(
            "conversation_id must be a non-empty string", param=CONVERSATION_FIELD
        )
    if len(value) > MAX_CONVERSATION_ID:
        raise BadRequestError(
            f"conversation_id is longer than {MAX_CONVERSATION_ID} characters",
            param=CONVERSATION_FIELD,
        )
    if _CONTROL.search(value):
        raise BadRequestError(
            "conversation_id must not contain control characters", param=CONVERSATION_FIELD
        )
    return value


def token_array(token_ids: Sequence[int]) -> array[int]:
    return array("I", token_ids)


def common_prefix(a: array[int], b: array[int]) -> int:
    """Length of the longest common prefix of two token arrays (memcmp over slices)."""
    hi = min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    lo = 0  # a[:lo] == b[:lo], and the first mismatch is in [lo, hi)
    for width in _WIDTHS:
        while lo + width <= hi and a[lo : lo + width] == b[lo : lo + width]:
            lo += width
        hi = min(hi, lo + width)
    return lo


@dataclass(frozen=True, slots=True)
class Turn:
    """What a finished turn left on its decoder."""

    decoder: str  # the decode engine's URL
    decoder_epoch: int  # its pool epoch then (an engine that left rotation lost its blocks)
    token_ids: array[int]  # the turn's prompt + output
    covered: int  # tokens whose KV the decoder holds (its remote_num_tokens)
    kv_transfer_params: Mapping[str, Any]
    expires_at: float  # on the store's clock: when reuse stops (TTL minus the margin)
    cache_salt: str | None = None
    mm_ranges: tuple[MMRange, ...] = ()

    @classmethod
    def maybe_from_decode(
        cls,
        params: Mapping[str, Any] | None,
        *,
        decoder: str,
        epoch: int,
        prompt: array[int],
        output: Sequence[int],
        expires_at: float,
        cache_salt: str | None = None,
        mm_ranges: tuple[MMRange, ...] = (),
    ) -> Turn | None:
        """The turn a decode answer describes; None unless its params point at pinned blocks
        (bidirectional off, an aborted request, a decoder with nothing to keep)."""
        if (
            not params
            or not params.get("do_remote_decode")
            or not all(params.get(k) is not None for k in _NEEDED_KEYS)
        ):
            return None
        tokens = prompt + token_array(output)
        covered = min(int(params.get("remote_num_tokens") or 0), len(tokens))
        return cls(decoder, epoch, tokens, covered, dict(params), expires_at, cache_salt, mm_ranges)


@dataclass(frozen=True, slots=True)
class Decision:
    """The guard's verdict on one turn: `reuse` tokens may be loaded from the decoder."""

    reuse: int  # whole blocks of the common prefix (0: refused)
    common: int  # token-exact common prefix with the last turn's prompt + output
    cause: str | None = None  # the refusal cause (REFUSAL_CAUSES); None: reused

    @property
    def reused(self) -> bool:
        return self.cause is None


def decide(
    prompt: array[int],
    turn: Turn,
    *,
    block_size: int,
    threshold: int,
    now: float,
    decoder_alive: bool,
    cache_salt: str | None = None,
    mm_ranges: Sequence[MMRange] = (),
) -> Decision:
    """May this prompt reuse `turn`'s KV, and how much of it (the continuation guard)."""
    if now >= turn.expires_at:
        return Decision(0, 0, "expired")
    if not decoder_alive:
        return Decision(0, 0, "decoder_gone")
    if cache_salt != turn.cache_salt:
        return Decision(0, 0, "cache_salt")
    blocks = -(-turn.covered // block_size)
    if any(len(group) != blocks for group in turn.kv_transfer_params["remote_block_ids"]):
        return Decision(0, 0, "layout")
    common = common_prefix(prompt, turn.token_ids)
    shared = _before_first_unshared_image(common, mm_ranges, turn.mm_ranges)
    # At least one prompt token is left for the prefill to compute (it must sample one).
    usable = min(shared, turn.covered, len(prompt) - 1)
    reuse = usable - usable % block_size
    if reuse < max(threshold, 1):
        diverged = shared < min(turn.covered, len(prompt) - 1)
        return Decision(0, common, "diverged" if diverged else "below_threshold")
    return Decision(reuse, common)


def _before_first_unshared_image(
    common: int, new: Sequence[MMRange], old: Sequence[MMRange]
) -> int:
    shared = set(new) & set(old)
    for r in (*new, *old):
        if r not in shared and r.offset < common:
            common = r.offset
    return common


def reuse_params(turn: Turn, tokens: int, block_size: int) -> dict[str, Any]:
    """The prefill's kv_transfer_params loading the first `tokens` (whole blocks) from the
    decoder: its own params with the block lists and the token count cut to that prefix."""
    blocks = tokens // block_size
    params = dict(turn.kv_transfer_params)
    params.update(
        do_remote_decode=True,
        do_remote_prefill=False,
        remote_num_tokens=tokens,
        remote_block_ids=[list(group[:blocks]) for group in params["remote_block_ids"]],
    )
    params.pop("_remote_blocks_processed", None)
    return params


def release_params(turn: Turn) -> dict[str, Any]:
    """kv_transfer_params that load nothing but make the prefill notify the decoder, which
    then frees the turn's blocks now rather than at its TTL (the engine's "full local hit"
    path: zero tokens to load, the block list kept)."""
    params = dict(turn.kv_transfer_params)
    params.update(do_remote_decode=True, do_remote_prefill=False, remote_num_tokens=0)
    params.pop("_remote_blocks_processed", None)
    return params


class ConversationStore:
    """conversation id -> its last Turn; bounded in count, in stored tokens, and in time.

    `take` removes the turn (a decoder's blocks serve one pull; concurrent turns of one
    conversation get nothing and recompute). All turns live the same time, so insertion order
    is expiry order and the expired ones are dropped from the front."""

    def __init__(
        self, max_conversations: int, max_tokens: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_conversations = max_conversations
        self.max_tokens = max_tokens
        self.clock = clock
        self._turns: OrderedDict[str, Turn] = OrderedDict()
        self.tokens = 0

    def __len__(self) -> int:
        return len(self._turns)

    def take(self, key: str) -> Turn | None:
        """The conversation's last turn, removed (expired ones too: the guard counts them)."""
        turn = self._turns.pop(key, None)
        if turn is not None:
            self.tokens -= len(turn.token_ids)
        self._drop_expired()
        return turn

    def put(self, key: str, turn: Turn) -> None:
        self.take(key)
        if len(turn.token_ids) > self.max_tokens:
            return
        self._turns[key] = turn
        self.tokens += len(turn.token_ids)
        while len(self._turns) > self.max_conversations or self.tokens > self.max_tokens:
            self._pop_oldest()

    def _drop_expired(self) -> None:
        now = self.clock()
        while self._turns and next(iter(self._turns.values())).expires_at <= now:
            self._pop_oldest()

    def _pop_oldest(self) -> None:
        _, turn = self._turns.popitem(last=False)
        self.tokens -= len(turn.token_ids)
