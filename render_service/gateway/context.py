"""The request context the stages work on, and the per-prompt `Leg`.

A chat request has one leg; a completion with k prompts has k legs (vLLM renders one
GenerateRequest per prompt). A leg carries the rendered request, the body each engine gets,
the KV handoff from prefill to decode, and which engine requests may still be running (so a
failure or a hang-up can abort exactly those).
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from render_service.gateway.prefix_index import PromptBlocks
from render_service.gateway.serve_options import ServeOptions

__all__ = ["Leg", "RequestContext", "engine_body", "prefill_body", "KV_PREFILL_PARAMS"]

# What the prefill leg asks the NIXL connector for (as vLLM's toy proxy sends it).
KV_PREFILL_PARAMS: dict[str, Any] = {
    "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
    "remote_block_ids": None, "remote_host": None, "remote_port": None,
}
# Sampling keys a tokens-only engine must not get: stop strings are checked here (the engine
# has no detokenizer and answers 400), and the text-buffer length only serves them.
_GATEWAY_ONLY_SAMPLING_KEYS = ("stop", "output_text_buffer_length")
# Render always decides max_tokens, but SamplingParams JSON omits a value equal to the
# dataclass default, so max_tokens=16 is *absent* from the rendered dict; and generate reads
# an absent max_tokens as "not sent" and lets the request run to max_model_len. So the gateway
# writes the omitted default back.
_SAMPLING_DEFAULT_MAX_TOKENS = 16


@dataclass
class Leg:
    prompt_index: int
    rendered: dict[str, Any]
    kv_transfer_params: dict[str, Any] | None = None
    attempts: int = 0  # decode attempts so far (each gets its own engine request id)
    prefill_done_at: float | None = None  # when the prefill answered (None: no remote KV)
    # Why the decode request is aborted if its stream is closed before the engine finished;
    # responders set "stop_string", errors set their own; else the client went away.
    close_reason: str = "client_gone"
    # Multi-turn P/D (conversations.py): the conversation this leg continues, the prefill's
    # kv_transfer_params that load (or release) the last turn's blocks, and the prompt ids.
    conversation: str | None = None
    prefill_kv: dict[str, Any] | None = None
    prompt_array: array[int] | None = None

    @property
    def request_id(self) -> str:
        return str(self.rendered["request_id"])

    @property
    def token_ids(self) -> list[int]:
        ids: list[int] = self.rendered["token_ids"]
        return ids

    @property
    def n(self) -> int:
        return int(self.rendered.get("sampling_params", {}).get("n", 1) or 1)

    @cached_property
    def blocks(self) -> PromptBlocks:
        """The prompt as prefix-aware routing sees it (tokens, cache_salt, image hashes)."""
        return PromptBlocks.of_request(self.rendered)

    @property
    def wants_prompt_logprobs(self) -> bool:
        """Only a JSON engine answer carries prompt logprobs (the token stream has none)."""
        return self.rendered.get("sampling_params", {}).get("prompt_logprobs") is not None

    def attempt_request_id(self) -> str:
        """A fresh id per decode attempt, so aborting a failed try never hits its retry."""
        return self.request_id if self.attempts == 0 else f"{self.request_id}-retry{self.attempts}"


@dataclass
class RequestContext:
    endpoint: str  # "chat" | "completion"
    body: dict[str, Any]
    request_id_header: str | None = None
    received_at: float = field(default_factory=time.perf_counter)
    created: int = field(default_factory=lambda: int(time.time()))
    legs: list[Leg] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    conversation_id: str | None = None

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def records_turn(self) -> bool:
        """The decode answer must come as JSON: it carries where this turn's KV stays."""
        return any(leg.conversation is not None for leg in self.legs) and not self.stream

    @cached_property
    def options(self) -> ServeOptions:
        return ServeOptions.of(self.endpoint, self.body)

    @property
    def stop_strings(self) -> list[str]:
        stop = self.body.get("stop")
        if isinstance(stop, str):
            return [stop] if stop else []
        return [s for s in stop or [] if s]

    def add_phase(self, phase: str, seconds: float) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds

    def response_id(self) -> str:
        """`chatcmpl-<id>` / `cmpl-<id>`: what vLLM serve calls the request."""
        rid = self.legs[0].request_id
        if self.endpoint == "completion" and len(self.legs) > 1:
            rid = rid.rsplit("-", 1)[0]  # render names prompt i "cmpl-<id>-<i>"
        return rid


def engine_body(leg: Leg, *, stream: bool, request_id: str) -> dict[str, Any]:
    """The decode (or collocated) engine's GenerateRequest."""
    body = dict(leg.rendered)
    sampling = {k: v for k, v in body.get("sampling_params", {}).items()
                if k not in _GATEWAY_ONLY_SAMPLING_KEYS}
    sampling.setdefault("max_tokens", _SAMPLING_DEFAULT_MAX_TOKENS)
    body.update(request_id=request_id, sampling_params=sampling, stream=stream,
                stream_options=None, model=None, kv_transfer_params=leg.kv_transfer_params)
    return body


def prefill_body(leg: Leg, kv_transfer_params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The prefill leg: one token, non-streaming, KV kept for a remote decoder.
    `kv_transfer_params`: a conversation's last turn to load (conversations.py); that try gets
    its own request id, so aborting it if it fails never hits the prefill sent after it."""
    request_id = leg.request_id if kv_transfer_params is None else f"{leg.request_id}-continued"
    body = engine_body(leg, stream=False, request_id=request_id)
    sampling = dict(body["sampling_params"])
    sampling.pop("min_tokens", None)  # vLLM's proxy: "not supported for P"
    sampling.update(max_tokens=1, n=1)
    body.update(sampling_params=sampling,
                kv_transfer_params=dict(kv_transfer_params or KV_PREFILL_PARAMS))
    return body
