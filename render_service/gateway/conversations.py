"""Conversation affinity for multi-turn P/D: the continuation guard wired to the stages.

    plan(ctx)                       after render, before prefill: take the conversation's last
                                    turn, run the guard, and give the leg the prefill's
                                    kv_transfer_params (load the reusable prefix, or only
                                    release the blocks); counted and logged per decision
    record(leg, engine, response)   after a JSON decode: remember where this turn's KV stays

The guard and the table are sans-IO (continuation.py); this module adds the pools, the clock,
metrics and logs. A turn is recorded only from a JSON decode (`RequestContext.records_turn`):
vLLM's token stream carries no kv_transfer_params, so a streamed turn can use its predecessor's
KV but leaves nothing for its successor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from render_service.gateway.config import ConversationSettings
from render_service.gateway.context import Leg, RequestContext
from render_service.gateway.continuation import (
    ConversationStore,
    Decision,
    Turn,
    decide,
    release_params,
    reuse_params,
    token_array,
)
from render_service.gateway.metrics import GATEWAY_METRICS
from render_service.gateway.pool import Engine, EnginePool

__all__ = ["Conversations"]

log = logging.getLogger(__name__)

# Refusals after which the decoder holds no blocks to release (freed at its TTL, or gone).
_NOTHING_TO_RELEASE = frozenset({"expired", "decoder_gone"})


class Conversations:
    def __init__(
        self,
        settings: ConversationSettings,
        decode_pool: EnginePool,
        block_size: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.decode_pool = decode_pool
        self.block_size = block_size
        self.clock = clock
        self.store = ConversationStore(
            settings.max_conversations, settings.max_stored_tokens, clock
        )

    def plan(self, ctx: RequestContext) -> None:
        """Decide how the conversation's next turn (this request) uses the last one's KV."""
        key = ctx.conversation_id
        if key is None:
            return
        if len(ctx.legs) != 1 or ctx.legs[0].n != 1:
            GATEWAY_METRICS.continuation_unrecorded.labels("fanout").inc()
            return
        leg = ctx.legs[0]
        leg.conversation = key
        if ctx.stream:
            GATEWAY_METRICS.continuation_unrecorded.labels("stream").inc()
        started = time.perf_counter()
        leg.prompt_array = token_array(leg.token_ids)
        turn = self.store.take(key)
        decision = None if turn is None else self._decide(leg, turn)
        GATEWAY_METRICS.continuation_guard.observe(time.perf_counter() - started)
        GATEWAY_METRICS.conversations.set(len(self.store))
        self._count(leg, turn, decision)
        if turn is None or decision is None:
            return
        if decision.reused:
            leg.prefill_kv = reuse_params(turn, decision.reuse, self.block_size)
        elif decision.cause not in _NOTHING_TO_RELEASE:
            leg.prefill_kv = release_params(turn)

    def record(self, leg: Leg, engine: Engine, response: dict[str, Any]) -> None:
        """A JSON decode of a conversation turn answered: keep where its blocks stay."""
        if leg.conversation is None or leg.prompt_array is None:
            return
        choices = response.get("choices") or [{}]
        turn = Turn.maybe_from_decode(
            response.get("kv_transfer_params"),
            decoder=engine.url,
            epoch=engine.epoch,
            prompt=leg.prompt_array,
            output=choices[0].get("token_ids") or [],
            expires_at=self.clock() + self.settings.reuse_window_s,
            cache_salt=leg.blocks.cache_salt,
            mm_ranges=leg.blocks.mm_ranges,
        )
        if turn is None:
            GATEWAY_METRICS.continuation_unrecorded.labels("no_kv").inc()
            log.debug(
                "conversation %s: decode %s on %s kept no KV blocks",
                leg.conversation,
                leg.request_id,
                engine.url,
            )
            return
        self.store.put(leg.conversation, turn)
        GATEWAY_METRICS.conversations.set(len(self.store))

    def _decide(self, leg: Leg, turn: Turn) -> Decision:
        assert leg.prompt_array is not None
        decoder = self.decode_pool.find(turn.decoder)
        alive = decoder is not None and decoder.healthy and decoder.epoch == turn.decoder_epoch
        return decide(
            leg.prompt_array,
            turn,
            block_size=self.block_size,
            threshold=self.settings.kv_recompute_threshold,
            now=self.clock(),
            decoder_alive=alive,
            cache_salt=leg.blocks.cache_salt,
            mm_ranges=leg.blocks.mm_ranges,
        )

    def _count(self, leg: Leg, turn: Turn | None, decision: Decision | None) -> None:
        prompt = len(leg.token_ids)
        reuse = decision.reuse if decision is not None else 0
        if turn is None or decision is None:
            label = "miss"
        elif not decision.reused:
            label = "refused"
            GATEWAY_METRICS.continuation_refusals.labels(decision.cause).inc()
        else:
            label = "full" if decision.common >= min(turn.covered, prompt - 1) else "partial"
        GATEWAY_METRICS.continuation_decisions.labels(label).inc()
        GATEWAY_METRICS.continuation_reused_tokens.inc(reuse)
        GATEWAY_METRICS.continuation_recomputed_tokens.inc(prompt - reuse)
        log.debug(
            "conversation %s request %s: %s; prompt %d tokens, common prefix %d of the "
            "last turn's %d, reused %d, cause %s, decoder %s",
            leg.conversation,
            leg.request_id,
            label,
            prompt,
            decision.common if decision else 0,
            len(turn.token_ids) if turn else 0,
            reuse,
            decision.cause if decision else None,
            turn.decoder if turn else None,
        )
