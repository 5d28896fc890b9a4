"""The start-up summary `serve` and `gateway` log once, as vLLM logs its non-default args.

vLLM prints `non-default args: {...}` at start; operators also want the resolved facts a flag
does not show (the model's context length, the tokenizer backend, parsers a model type turns
on). One INFO line each, so a log grep finds them.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from render_service.config import Limits, ServiceConfig
from render_service.model import ModelBundle

__all__ = ["LEAN_RECORD_FIELDS", "lean_log_records", "log_startup_summary",
           "non_default_settings", "quiet_http_client_logs"]

log = logging.getLogger("render_service")

_SECRET_FIELDS = frozenset({"api_key", "stream_state_secret"})
# The LogRecord fields `lean_log_records` leaves unset: no format a server process uses shows them.
LEAN_RECORD_FIELDS = ("pathname", "filename", "module", "lineno", "funcName", "thread", "threadName",
                      "process", "processName")


def non_default_settings(config: ServiceConfig) -> dict[str, Any]:
    """Config fields that differ from ServiceConfig's defaults (secrets masked), limits flattened."""
    defaults = ServiceConfig()
    changed: dict[str, Any] = {}
    for f in dataclasses.fields(ServiceConfig):
        value, default = getattr(config, f.name), getattr(defaults, f.name)
        if f.name == "limits":
            changed.update({
                k: v for k, v in dataclasses.asdict(value).items() if v != getattr(Limits(), k)
            })
        elif value != default:
            changed[f.name] = "<set>" if f.name in _SECRET_FIELDS else value
    return changed


def log_startup_summary(kind: str, config: ServiceConfig, bundle: ModelBundle) -> None:
    """`kind`: "serve" or "gateway"; `bundle`: the loaded model."""
    resolved = config.for_model(bundle.model_type)  # gpt_oss turns on openai_gptoss, as vLLM
    log.info(
        "render-service %s: model %s, served as %s, model_type %s, context length %d, "
        "tokenizer backend %s, reasoning parser %s, tool parser %s (auto tool choice %s), "
        "%d worker process(es) x %d render thread(s), listening on %s:%d",
        kind, bundle.model, ", ".join(bundle.served_model_names), bundle.model_type,
        bundle.max_model_len, bundle.encoder.backend_name, resolved.reasoning_parser,
        resolved.tool_call_parser, "on" if resolved.enable_auto_tool_choice else "off",
        config.workers if kind == "serve" else 1, config.renderer_num_workers, config.host, config.port,
    )
    log.info("non-default args: %s", non_default_settings(config))


def quiet_http_client_logs() -> None:
    """httpx logs every request at INFO ("HTTP Request: GET .../health"): that is every
    health poll of every engine. The pool logs health *changes*; polls stay at httpx's DEBUG."""
    if logging.getLogger().getEffectiveLevel() <= logging.DEBUG:
        return  # --log-level debug: every poll, as asked
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


def lean_log_records() -> None:
    """In a server process: skip the LogRecord fields none of its formats show (ours and
    uvicorn's: LEAN_RECORD_FIELDS), the logging HOWTO's "Optimization" switches. Finding the
    caller walks the stack on every record; with the thread and process lookups it was 60% of
    an access-log line (60 -> 24 us here), and uvicorn writes one per request."""
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
