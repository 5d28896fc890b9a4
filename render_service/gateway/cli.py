"""`render-service gateway`: the model/server flags of `serve`, plus engines and routing.

    render-service gateway --engine http://10.0.0.1:8000 http://10.0.0.2:8000
    render-service gateway --prefill http://p:8000 --decode http://d1:8000 http://d2:8000
    render-service gateway --config gateway.yaml [--routing least_outstanding ...]

Flags given on the command line override the --config file; the file overrides defaults.
`--engine-api-key` also comes from RENDER_SERVICE_ENGINE_API_KEY (so it can live in a Secret);
the variable, like a flag, overrides the file.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from typing import Any

from render_service.config import ServiceConfig
from render_service.gateway.config import (
    FINGERPRINT_MODES,
    ROUTING_POLICIES,
    GatewayConfig,
    load_config_file,
)

__all__ = ["add_gateway_parser", "run_gateway", "gateway_config_from_args"]

log = logging.getLogger("render_service.gateway")

ENGINE_API_KEY_ENV = "RENDER_SERVICE_ENGINE_API_KEY"

AddFlags = Callable[[argparse.ArgumentParser], None]

# flag dest -> (section, key) in the config file's nested mappings
_NESTED = {
    "health_interval": ("health", "interval_s"),
    "health_timeout": ("health", "timeout_s"),
    "health_failure_threshold": ("health", "failure_threshold"),
    "connect_timeout": ("timeouts", "connect_s"),
    "prefill_timeout": ("timeouts", "prefill_s"),
    "first_token_timeout": ("timeouts", "first_token_s"),
    "inter_token_timeout": ("timeouts", "inter_token_s"),
    "request_timeout": ("timeouts", "request_s"),
    "enable_conversations": ("conversations", "enabled"),
    "max_conversations": ("conversations", "max_conversations"),
    "decoder_kv_blocks_ttl": ("conversations", "decoder_kv_blocks_ttl"),
    "kv_recompute_threshold": ("conversations", "kv_recompute_threshold"),
}
_FLAT = ("routing", "prefill_routing", "decode_routing", "block_size", "prefix_cache_blocks",
         "max_retries", "max_concurrent_streams", "kv_lease_duration", "engine_api_key",
         "fingerprint_mode", "fingerprint_value")


def add_gateway_parser(subparsers: Any, add_model_flags: AddFlags, add_server_flags: AddFlags
                       ) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "gateway", help="serve /v1/chat/completions and /v1/completions in front of "
                        "`vllm serve --tokens-only` engines (collocated or prefill/decode); "
                        "default port 8000, as serve: give one of them another --port on a shared host")
    add_model_flags(p)
    add_server_flags(p)
    g = p.add_argument_group("gateway")
    g.add_argument("--config", dest="gateway_config", metavar="FILE",
                   help="YAML or JSON gateway config (engines, routing, health, timeouts)")
    for flag, help_text in (("--engine", "collocated engine base URL(s)"),
                            ("--prefill", "prefill (kv_producer) engine URL(s)"),
                            ("--decode", "decode (kv_consumer) engine URL(s)")):
        g.add_argument(flag, nargs="+", action="extend", default=None, metavar="URL", help=help_text)
    for flag in ("--routing", "--prefill-routing", "--decode-routing"):
        g.add_argument(flag, choices=ROUTING_POLICIES, default=None)
    g.add_argument("--block-size", type=int, default=None,
                   help="prefix-aware routing block size; match the engines' --block-size (16)")
    g.add_argument("--prefix-cache-blocks", type=int, default=None,
                   help="block hashes remembered per engine (LRU)")
    g.add_argument("--health-interval", type=float, default=None, help="seconds between polls")
    g.add_argument("--health-timeout", type=float, default=None)
    g.add_argument("--health-failure-threshold", type=int, default=None)
    g.add_argument("--connect-timeout", type=float, default=None)
    g.add_argument("--prefill-timeout", type=float, default=None)
    g.add_argument("--first-token-timeout", type=float, default=None)
    g.add_argument("--inter-token-timeout", type=float, default=None)
    g.add_argument("--request-timeout", type=float, default=None,
                   help="bound on a whole non-streaming decode")
    g.add_argument("--max-retries", type=int, default=None,
                   help="extra tries of a prefill, or of a decode before its first token")
    g.add_argument("--max-concurrent-streams", type=int, default=None,
                   help="generation requests in flight before 503")
    g.add_argument("--kv-lease-duration", type=float, default=None, metavar="SECONDS",
                   help="the prefill engines' NIXL kv_lease_duration (vLLM default 30)")
    g.add_argument("--engine-api-key", default=os.environ.get(ENGINE_API_KEY_ENV) or None,
                   help=f"sent to the engines as 'Authorization: Bearer' (env {ENGINE_API_KEY_ENV})")
    g.add_argument("--fingerprint-mode", choices=FINGERPRINT_MODES, default=None,
                   help="system_fingerprint of responses, as vLLM's flag (default full)")
    g.add_argument("--fingerprint-value", default=None, help="the literal for --fingerprint-mode custom")
    g.add_argument("--enable-conversations", action="store_true", default=None,
                   help="multi-turn P/D: a conversation_id's next turn loads the last one's KV "
                        "back from its decoder (engines need NIXL bidirectional_kv_xfer)")
    g.add_argument("--max-conversations", type=int, default=None,
                   help="conversations whose last turn is remembered (default 10000)")
    g.add_argument("--decoder-kv-blocks-ttl", type=float, default=None, metavar="SECONDS",
                   help="the decode engines' NIXL decoder_kv_blocks_ttl (vLLM default 480)")
    g.add_argument("--kv-recompute-threshold", type=int, default=None, metavar="TOKENS",
                   help="reuse no fewer tokens than this (the engines' kv_recompute_threshold, 64)")
    return p


def gateway_config_from_args(args: argparse.Namespace) -> GatewayConfig:
    data = load_config_file(args.gateway_config) if args.gateway_config else {}
    for key in ("engine", "prefill", "decode"):
        urls = getattr(args, key, None)
        if urls:
            data["engines" if key == "engine" else key] = [u.rstrip("/") for u in urls]
    for key in _FLAT:
        value = getattr(args, key, None)
        if value is not None:
            data[key] = value
    nested: dict[str, dict[str, Any]] = {
        section: dict(data.get(section) or {}) for section in ("health", "timeouts", "conversations")}
    for dest, (section, key) in _NESTED.items():
        value = getattr(args, dest, None)
        if value is not None:
            nested[section][key] = value
    data.update({section: values for section, values in nested.items() if values})
    return GatewayConfig.from_mapping(data)


def run_gateway(config: ServiceConfig, args: argparse.Namespace) -> None:
    """Build the gateway app and serve it (one process: health and prefix state are per process)."""
    import uvicorn

    from render_service.gateway.app import create_gateway_app, gateway_startup_log
    from render_service.http.startup_log import lean_log_records

    gateway_config = gateway_config_from_args(args)
    if config.workers != 1:
        log.warning("the gateway runs one process (routing state is per process); ignoring --workers")
    app = create_gateway_app(config, gateway_config)
    gateway_startup_log(config, app)
    lean_log_records()
    uvicorn.run(app, host=config.host, port=config.port, **config.http.uvicorn_kwargs())

