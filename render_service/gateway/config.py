"""GatewayConfig: which engines, how to route to them, how long to wait, how much to hold.

Built once from flags and/or a YAML/JSON file (flags win), frozen, passed explicitly. The
render/derender settings (model, parsers, limits) stay in `ServiceConfig`; this object holds
only what the gateway adds.

File shape (every key optional; URLs are the engines' base URLs):

    engines: [http://10.0.0.1:8000]           # collocated pool, or:
    prefill: [http://10.0.0.2:8000]           # P/D pools (xPyD)
    decode:  [http://10.0.0.3:8000, ...]
    routing: prefix_aware                     # the collocated pool, and prefill by default
    prefill_routing: prefix_aware             # default: `routing`
    decode_routing: least_outstanding         # default: least_outstanding (never `routing`:
                                              #   the KV comes from prefill, not a decode cache)
    block_size: 16                            # vLLM's --block-size
    prefix_cache_blocks: 65536                # remembered blocks per engine
    health: {interval_s: 2, timeout_s: 1, failure_threshold: 2}
    timeouts: {connect_s: 2, prefill_s: 60, first_token_s: 60, inter_token_s: 30, request_s: 600}
    max_retries: 2
    max_concurrent_streams: 512
    kv_lease_duration: 30                     # the prefill engines' NIXL kv_lease_duration (s)
    engine_api_key: ...                       # sent as "Authorization: Bearer"; prefer the
                                              #   RENDER_SERVICE_ENGINE_API_KEY variable
    fingerprint_mode: full                    # system_fingerprint: full | hash | custom | none
    fingerprint_value: null                   # the literal for fingerprint_mode: custom
    conversations:                            # multi-turn P/D KV reuse (see continuation.py)
      enabled: false                          #   needs bidirectional_kv_xfer on every engine
      max_conversations: 10000                #   remembered last turns (oldest evicted)
      max_stored_tokens: 50000000             #   token ids kept for the guard, all turns (4 B each)
      decoder_kv_blocks_ttl: 480              #   the decode engines' NIXL decoder_kv_blocks_ttl (s)
      ttl_margin_s: 10                        #   a turn older than ttl - margin is not reused
      kv_recompute_threshold: 64              #   reuse fewer tokens than this: recompute instead
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from render_service.errors import ConfigError

__all__ = [
    "ConversationSettings",
    "GatewayConfig",
    "HealthSettings",
    "Timeouts",
    "ROUTING_POLICIES",
    "FINGERPRINT_MODES",
    "load_config_file",
]

ROUTING_POLICIES = ("round_robin", "least_outstanding", "prefix_aware")
FINGERPRINT_MODES = ("full", "hash", "custom", "none")  # vLLM's --fingerprint-mode


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-phase bounds, in seconds (see README "Gateway" for what each covers)."""

    connect_s: float = 2.0  # TCP connect to an engine
    prefill_s: float = 60.0  # whole prefill leg (max_tokens=1, non-streaming)
    first_token_s: float = 60.0  # decode request sent -> first engine event
    inter_token_s: float = 30.0  # between two engine events of one stream
    request_s: float = 600.0  # a whole non-streaming decode

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) <= 0:
                raise ConfigError(f"timeouts.{f.name} must be > 0")


@dataclass(frozen=True, slots=True)
class HealthSettings:
    interval_s: float = 2.0  # GET /health period per engine
    timeout_s: float = 1.0
    failure_threshold: int = 2  # consecutive failures before an engine leaves the pool

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.timeout_s <= 0:
            raise ConfigError("health interval and timeout must be > 0")
        if self.failure_threshold < 1:
            raise ConfigError("health failure_threshold must be >= 1")


@dataclass(frozen=True, slots=True)
class ConversationSettings:
    """Multi-turn P/D: turn N+1's prefill loads turn N's KV back from its decoder (README
    "Multi-turn P/D"). The engines must run NIXL with `bidirectional_kv_xfer: true`."""

    enabled: bool = False
    # Bounds of the conversation table: its entry count, and the token ids it keeps for the
    # guard (4 bytes each; 50M tokens = 200 MB, ~1,500 conversations at 32k tokens).
    max_conversations: int = 10_000
    max_stored_tokens: int = 50_000_000
    # The decode engines' `kv_connector_extra_config.decoder_kv_blocks_ttl` (vLLM default 480 s):
    # how long a decoder pins a finished turn's blocks. A turn is reused only while younger than
    # the TTL minus the margin (the prefill still has to start its read; vLLM's own worker
    # declines a read 5 s before expiry).
    decoder_kv_blocks_ttl: float = 480.0
    ttl_margin_s: float = 10.0
    # Fewer reusable tokens than this are recomputed (the engines' `kv_recompute_threshold`,
    # default 64: a transfer has a fixed cost that a few tokens do not repay).
    kv_recompute_threshold: int = 64

    def __post_init__(self) -> None:
        if self.max_conversations < 1 or self.max_stored_tokens < 1:
            raise ConfigError("conversations.max_conversations and max_stored_tokens must be >= 1")
        if self.ttl_margin_s < 0 or self.decoder_kv_blocks_ttl <= self.ttl_margin_s:
            raise ConfigError("conversations.decoder_kv_blocks_ttl must exceed ttl_margin_s >= 0")
        if self.kv_recompute_threshold < 0:
            raise ConfigError("conversations.kv_recompute_threshold must be >= 0")

    @property
    def reuse_window_s(self) -> float:
        return self.decoder_kv_blocks_ttl - self.ttl_margin_s


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    engines: tuple[str, ...] = ()
    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()
    routing: str = "prefix_aware"
    prefill_routing: str | None = None  # None: `routing`
    decode_routing: str | None = None  # None: least_outstanding (KV arrives by NIXL anyway)
    block_size: int = 16
    prefix_cache_blocks: int = 65536
    health: HealthSettings = field(default_factory=HealthSettings)
    timeouts: Timeouts = field(default_factory=Timeouts)
    max_retries: int = 2
    max_concurrent_streams: int = 512
    # How long a prefill engine keeps a finished prefill's KV for a decoder (vLLM NIXL
    # `kv_connector_extra_config.kv_lease_duration`, default 30 s); bounds KV reuse on retries.
    kv_lease_duration: float = 30.0
    engine_api_key: str | None = field(default=None, repr=False)
    fingerprint_mode: str = "full"
    fingerprint_value: str | None = None
    conversations: ConversationSettings = field(default_factory=ConversationSettings)

    def __post_init__(self) -> None:
        if self.engines and (self.prefill or self.decode):
            raise ConfigError("give either --engine (collocated) or --prefill/--decode (P/D), not both")
        if not self.engines and not (self.prefill and self.decode):
            raise ConfigError("the gateway needs --engine URL..., or both --prefill URL... and --decode URL...")
        for name in ("routing", "prefill_routing", "decode_routing"):
            value = getattr(self, name)
            if value is not None and value not in ROUTING_POLICIES:
                raise ConfigError(f"--{name.replace('_', '-')} {value!r}: choose from {', '.join(ROUTING_POLICIES)}")
        if self.block_size < 1 or self.prefix_cache_blocks < 1:
            raise ConfigError("--block-size and prefix_cache_blocks must be >= 1")
        if self.max_retries < 0:
            raise ConfigError("--max-retries must be >= 0")
        if self.max_concurrent_streams < 1:
            raise ConfigError("--max-concurrent-streams must be >= 1")
        if self.kv_lease_duration <= 0:
            raise ConfigError("--kv-lease-duration must be > 0")
        if self.fingerprint_mode not in FINGERPRINT_MODES:
            raise ConfigError(f"--fingerprint-mode {self.fingerprint_mode!r}: choose from "
                              f"{', '.join(FINGERPRINT_MODES)}")
        if self.fingerprint_mode == "custom" and not self.fingerprint_value:
            raise ConfigError("--fingerprint-mode custom needs --fingerprint-value")
        if self.conversations.enabled and not self.disaggregated:
            raise ConfigError("conversations.enabled needs a P/D layout (--prefill and --decode)")
        for url in (*self.engines, *self.prefill, *self.decode):
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"engine URL {url!r} must start with http:// or https://")

    @property
    def disaggregated(self) -> bool:
        return bool(self.prefill)

    def policy_for(self, pool: str) -> str:
        if pool == "prefill":
            return self.prefill_routing or self.routing
        if pool == "decode":
            return self.decode_routing or "least_outstanding"
        return self.routing

    def replace(self, **changes: Any) -> GatewayConfig:
        return replace(self, **changes)

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> GatewayConfig:
        """Build from a file-shaped dict; unknown keys are an error (typos must not pass)."""
        data = dict(data)
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"gateway config: unknown keys {sorted(unknown)}")
        for key in ("engines", "prefill", "decode"):
            if key in data:
                data[key] = _url_tuple(key, data[key])
        try:
            if "health" in data:
                data["health"] = HealthSettings(**data["health"])
            if "timeouts" in data:
                data["timeouts"] = Timeouts(**data["timeouts"])
            if "conversations" in data:
                data["conversations"] = ConversationSettings(**data["conversations"])
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"gateway config: {exc}") from exc


def _url_tuple(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"gateway config: {key} must be a list of URLs")
    return tuple(v.rstrip("/") for v in value)


def load_config_file(path: str) -> dict[str, Any]:
    """Read a YAML (.yaml/.yml) or JSON gateway config file into a dict."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc}") from exc
    if path.endswith((".yaml", ".yml")):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--config {path}: invalid YAML ({exc})") from exc
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--config {path}: invalid JSON ({exc.msg})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping at the top level")
    return data
