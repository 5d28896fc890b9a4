"""Prometheus metrics of the gateway (`render_service_gateway_*`), in the default registry.

Names follow what a vLLM user reads on an engine's /metrics (time_to_first_token_seconds,
inter_token_latency_seconds, e2e_request_latency_seconds), measured at the gateway, i.e.
including render, prefill, KV handoff and derender. Phases (`phase` label):
  render     OpenAI body -> GenerateRequest
  prefill    the prefill leg (P/D only), retries included
  kv_handoff prefill answered -> first decode event (KV pull + first decode step); P/D only,
             streaming or not (non-streaming P/D decodes are streamed from the engine for it),
             except a non-streaming request asking for prompt_logprobs (a JSON decode)
  decode     decode request sent -> last engine event
  derender   engine output -> OpenAI chunks/response (summed over a stream's chunks)
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

__all__ = ["GATEWAY_METRICS", "GatewayMetrics"]

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
            5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_ITL = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
        0.75, 1.0, 2.5, 5.0)
_PHASE = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
          2.5, 5.0, 10.0, 30.0, 60.0)


class GatewayMetrics:
    def __init__(self) -> None:
        p = "render_service_gateway_"
        self.ttft = Histogram(p + "time_to_first_token_seconds",
                              "Client request received -> first content chunk sent.",
                              ["endpoint"], buckets=_LATENCY)
        self.itl = Histogram(p + "inter_token_latency_seconds",
                             "Time between two chunks sent to a streaming client.",
                             ["endpoint"], buckets=_ITL)
        self.e2e = Histogram(p + "e2e_request_latency_seconds",
                             "Client request received -> response finished.",
                             ["endpoint", "outcome"], buckets=_LATENCY)
        self.phase = Histogram(p + "phase_duration_seconds", "Duration of one request phase.",
                               ["phase"], buckets=_PHASE)
        self.engine_choices = Counter(p + "engine_requests_total",
                                      "Engine legs sent, by pool and engine.", ["pool", "engine"])
        self.errors = Counter(p + "errors_total", "Failed requests or legs, by cause.", ["cause"])
        self.retries = Counter(p + "retries_total", "Legs sent again, by phase.", ["phase"])
        self.fallbacks = Counter(p + "recompute_fallbacks_total",
                                 "P/D legs decoded without remote KV (prefill unavailable, or a "
                                 "decode retry that could not safely pull the prefill's KV).")
        self.aborts = Counter(p + "engine_aborts_total",
                              "abort_requests sent to engines, by reason.", ["reason"])
        self.in_flight = Gauge(p + "requests_in_flight", "Generation requests being served.")
        self.engine_outstanding = Gauge(p + "engine_outstanding_requests",
                                        "Legs in flight per engine.", ["pool", "engine"])
        self.engine_healthy = Gauge(p + "engine_healthy", "1 if the engine is in rotation.",
                                    ["pool", "engine"])
        self.rejected = Counter(p + "rejected_total", "Requests refused before any work.",
                                ["reason"])
        # Multi-turn P/D (conversations.py): the continuation guard's decisions.
        c = p + "continuation_"
        self.continuation_decisions = Counter(
            c + "decisions_total", "Conversation turns by the guard's decision: full (the whole "
            "last turn reused), partial (a shorter common prefix), refused, miss (no last turn).",
            ["decision"])
        self.continuation_refusals = Counter(c + "refusals_total",
                                             "Turns the guard did not reuse, by cause.", ["cause"])
        self.continuation_reused_tokens = Counter(
            c + "reused_tokens_total", "Prompt tokens the prefill was told to load from the "
            "last turn's decoder (it loads fewer when its own prefix cache has them).")
        self.continuation_recomputed_tokens = Counter(
            c + "recomputed_tokens_total",
            "Prompt tokens of conversation turns outside the reused prefix.")
        self.continuation_fallbacks = Counter(
            c + "fallbacks_total", "Prefills carrying a last turn's KV that failed and were "
            "sent again without it.")
        self.continuation_unrecorded = Counter(
            c + "unrecorded_turns_total", "Conversation turns that cannot be continued, by "
            "cause: stream (the token stream has no kv_transfer_params), no_kv (the decoder "
            "kept no blocks), fanout (n > 1 or several prompts).", ["cause"])
        self.continuation_guard = Histogram(c + "guard_seconds", "The continuation guard's time.",
                                            buckets=_PHASE)
        self.conversations = Gauge(p + "conversations", "Conversations whose last turn is held.")


GATEWAY_METRICS = GatewayMetrics()
