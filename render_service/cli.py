"""`render-service serve [MODEL]` and `render-service gateway`: flags -> ServiceConfig -> servers.

Flag names follow `vllm launch render`. Every flag can also come from the environment as
RENDER_SERVICE_<FLAG> (e.g. RENDER_SERVICE_WORKERS=4); a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from render_service.config import Limits, ServiceConfig, parse_json_flag
from render_service.errors import ConfigError

__all__ = ["build_parser", "config_from_args", "main"]

ENV_PREFIX = "RENDER_SERVICE_"
SECRET_ENV = "RENDER_SERVICE_STREAM_STATE_SECRET"
# The embedded default model gets the parsers its family needs.
DEFAULT_MODEL_PARSERS = {"reasoning_parser": "qwen3", "tool_call_parser": "hermes"}

log = logging.getLogger("render_service")


def _env_default(name: str, default: Any = None) -> Any:
    # An empty variable means "unset" (charts and shells often export VAR="").
    return os.environ.get(ENV_PREFIX + name.upper().replace("-", "_")) or default


def _env_flag(name: str) -> bool:
    return str(_env_default(name, "")).lower() in ("1", "true", "yes", "on")


def _add_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default=_env_default("model"),
                   help="model folder or hub id (omit for the embedded Qwen3 default)")
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--tokenizer", default=_env_default("tokenizer"))
    p.add_argument("--revision", default=_env_default("revision"))
    p.add_argument("--trust-remote-code", action="store_true", default=_env_flag("trust_remote_code"))
    p.add_argument("--max-model-len", type=int, default=_env_default("max_model_len"))
    p.add_argument("--max-logprobs", type=int, default=int(_env_default("max_logprobs", 20)))
    p.add_argument("--generation-config", default=_env_default("generation_config", "auto"))
    p.add_argument("--chat-template", default=_env_default("chat_template"))
    p.add_argument("--chat-template-content-format", default=_env_default("chat_template_content_format", "auto"),
                   choices=("auto", "string", "openai"))
    p.add_argument("--trust-request-chat-template", action="store_true",
                   default=_env_flag("trust_request_chat_template"))
    p.add_argument("--trust-request-mm-kwargs", action="store_true",
                   default=_env_flag("trust_request_mm_kwargs"))
    p.add_argument("--default-chat-template-kwargs", default=_env_default("default_chat_template_kwargs"))
    p.add_argument("--reasoning-parser", default=_env_default("reasoning_parser"))
    p.add_argument("--tool-call-parser", default=_env_default("tool_call_parser"))
    p.add_argument("--enable-auto-tool-choice", action="store_true",
                   default=_env_flag("enable_auto_tool_choice"))
    p.add_argument("--exclude-tools-when-tool-choice-none", action="store_true",
                   default=_env_flag("exclude_tools_when_tool_choice_none"))
    p.add_argument("--reasoning-effort-map", default=_env_default("reasoning_effort_map"))
    _add_multimodal_flags(p)


def _add_multimodal_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allowed-local-media-path", default=_env_default("allowed_local_media_path"),
                   help="folder that file:// image URLs may be read from (default: none)")
    p.add_argument("--allowed-media-domains", nargs="+", default=(_env_default("allowed_media_domains") or "").split(),
                   help="hosts http(s) image URLs may be fetched from ('*' any, '*.x.com' subdomains); "
                        "default: none, fetching is off")
    p.add_argument("--mm-hasher-algorithm", default=_env_default("mm_hasher_algorithm", "blake3"),
                   choices=("blake3", "sha256", "sha512"))
    p.add_argument("--mm-processor-cache-gb", type=float, default=float(_env_default("mm_processor_cache_gb", 4.0)),
                   help="processed-image cache per worker process, GiB (0 disables it)")
    p.add_argument("--interleave-mm-strings", action="store_true", default=_env_flag("interleave_mm_strings"))
    p.add_argument("--dtype", default=_env_default("dtype", "auto"),
                   choices=("auto", "half", "float16", "bfloat16", "float", "float32"),
                   help="the engines' model dtype; processed image tensors are sent in it")
    p.add_argument("--limit-mm-per-prompt", default=_env_default("limit_mm_per_prompt"),
                   help='vLLM\'s JSON form of --max-images, e.g. \'{"image": 4}\'')


def _add_server_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=_env_default("host", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(_env_default("port", 8000)))
    p.add_argument("--workers", type=int, default=int(_env_default("workers", 1)),
                   help="worker processes (uvicorn workers sharing the port)")
    p.add_argument("--renderer-num-workers", type=int,
                   default=int(_env_default("renderer_num_workers", 1)),
                   help="render threads per worker process")
    p.add_argument("--api-key", default=_env_default("api_key"))
    p.add_argument("--stream-state-secret-file", default=_env_default("stream_state_secret_file"),
                   help=f"file holding the stream_state MAC key shared by all replicas (or ${SECRET_ENV})")
    p.add_argument("--enable-request-id-headers", action="store_true",
                   default=_env_flag("enable_request_id_headers"))
    p.add_argument("--log-level", default=_env_default("log_level", "info"))
    limits = Limits()
    p.add_argument("--max-body-bytes", type=int, default=int(_env_default("max_body_bytes", limits.max_body_bytes)))
    p.add_argument("--max-messages", type=int, default=int(_env_default("max_messages", limits.max_messages)))
    p.add_argument("--max-tools", type=int, default=int(_env_default("max_tools", limits.max_tools)))
    p.add_argument("--render-timeout", type=float,
                   default=float(_env_default("render_timeout", limits.render_timeout_s)))
    p.add_argument("--max-tool-call-chars", type=int,
                   default=int(_env_default("max_tool_call_chars", limits.max_tool_call_chars)))
    p.add_argument("--max-template-output-chars", type=int,
                   default=int(_env_default("max_template_output_chars", limits.max_template_output_chars)))
    p.add_argument("--max-stream-state-bytes", type=int,
                   default=int(_env_default("max_stream_state_bytes", limits.max_stream_state_bytes)))
    p.add_argument("--max-concurrent-requests", type=int,
                   default=int(_env_default("max_concurrent_requests", limits.max_concurrent_requests)))
    p.add_argument("--max-images", type=int, default=int(_env_default("max_images", limits.max_images)))
    p.add_argument("--max-image-pixels", type=int,
                   default=int(_env_default("max_image_pixels", limits.max_image_pixels)))
    p.add_argument("--max-image-bytes", type=int,
                   default=int(_env_default("max_image_bytes", limits.max_image_bytes)))
    p.add_argument("--media-fetch-timeout", type=float,
                   default=float(_env_default("media_fetch_timeout", limits.media_fetch_timeout_s)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="render-service", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve /render, /derender, /tokenize, ... (a drop-in for `vllm launch render`)")
    _add_model_flags(serve)
    _add_server_flags(serve)
    from render_service.gateway.cli import add_gateway_parser

    add_gateway_parser(sub, _add_model_flags, _add_server_flags)
    return parser


def _read_secret(path: str | None) -> str | None:
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                secret = fh.read().strip()
        except OSError as exc:
            raise ConfigError(f"--stream-state-secret-file: {exc}") from exc
        if len(secret) < 16:
            raise ConfigError("--stream-state-secret-file: the secret must be at least 16 characters")
        return secret
    return os.environ.get(SECRET_ENV) or None


def _parser_settings(args: argparse.Namespace) -> dict[str, Any]:
    reasoning, tool = args.reasoning_parser, args.tool_call_parser
    auto = args.enable_auto_tool_choice
    if args.model is None:  # the embedded default turns on its family's parsers
        reasoning = reasoning or DEFAULT_MODEL_PARSERS["reasoning_parser"]
        if tool is None:
            tool, auto = DEFAULT_MODEL_PARSERS["tool_call_parser"], True
    reasoning = None if reasoning is None or reasoning.lower() in ("", "none") else reasoning
    tool = None if tool is None or tool.lower() in ("", "none") else tool
    _check_parser_names(reasoning, tool)
    return {"reasoning_parser": reasoning, "tool_call_parser": tool, "enable_auto_tool_choice": auto}


def _check_parser_names(reasoning: str | None, tool: str | None) -> None:
    from parsers import registry

    if reasoning is not None and reasoning not in registry.reasoning_parser_names():
        raise ConfigError(
            f"--reasoning-parser {reasoning!r} is unknown; choose from "
            + ", ".join(sorted(registry.reasoning_parser_names()))
        )
    if tool is not None and tool not in registry.tool_parser_names():
        raise ConfigError(
            f"--tool-call-parser {tool!r} is unknown; choose from "
            + ", ".join(sorted(registry.tool_parser_names()))
        )


def _max_images(args: argparse.Namespace) -> int:
    """--max-images, or the "image" entry of vLLM's --limit-mm-per-prompt JSON."""
    per_prompt = parse_json_flag("--limit-mm-per-prompt", args.limit_mm_per_prompt)
    value = per_prompt.get("image", args.max_images)
    if isinstance(value, dict):  # vLLM also accepts {"image": {"count": N, ...}}
        value = value.get("count", args.max_images)
    if type(value) is not int or value < 0:
        raise ConfigError("--limit-mm-per-prompt: the image limit must be a non-negative integer")
    return value


def config_from_args(args: argparse.Namespace) -> ServiceConfig:
    limits = Limits(
        max_body_bytes=args.max_body_bytes,
        max_messages=args.max_messages,
        max_tools=args.max_tools,
        render_timeout_s=args.render_timeout,
        max_tool_call_chars=args.max_tool_call_chars,
        max_template_output_chars=args.max_template_output_chars,
        max_stream_state_bytes=args.max_stream_state_bytes,
        max_concurrent_requests=args.max_concurrent_requests,
        max_images=_max_images(args),
        max_image_pixels=args.max_image_pixels,
        max_image_bytes=args.max_image_bytes,
        media_fetch_timeout_s=args.media_fetch_timeout,
    )
    served = args.served_model_name or (_env_default("served_model_name") or "").split() or ()
    return ServiceConfig(
        model=args.model,
        served_model_name=tuple(served),
        tokenizer=args.tokenizer,
        revision=args.revision,
        trust_remote_code=args.trust_remote_code,
        max_model_len=int(args.max_model_len) if args.max_model_len else None,
        max_logprobs=args.max_logprobs,
        chat_template=args.chat_template,
        chat_template_content_format=args.chat_template_content_format,
        trust_request_chat_template=args.trust_request_chat_template,
        trust_request_mm_kwargs=args.trust_request_mm_kwargs,
        default_chat_template_kwargs=parse_json_flag("--default-chat-template-kwargs", args.default_chat_template_kwargs),
        reasoning_effort_map=parse_json_flag("--reasoning-effort-map", args.reasoning_effort_map),
        exclude_tools_when_tool_choice_none=args.exclude_tools_when_tool_choice_none,
        generation_config=args.generation_config,
        allowed_local_media_path=args.allowed_local_media_path,
        allowed_media_domains=tuple(args.allowed_media_domains),
        mm_hasher_algorithm=args.mm_hasher_algorithm,
        mm_processor_cache_gb=args.mm_processor_cache_gb,
        interleave_mm_strings=args.interleave_mm_strings,
        dtype=args.dtype,
        renderer_num_workers=args.renderer_num_workers,
        api_key=args.api_key,
        host=args.host,
        port=args.port,
        workers=args.workers,
        stream_state_secret=_read_secret(args.stream_state_secret_file),
        enable_request_id_headers=args.enable_request_id_headers,
        limits=limits,
        **_parser_settings(args),
    )


def _with_process_secret(config: ServiceConfig) -> ServiceConfig:
    if config.stream_state_secret:
        return config
    log.warning(
        "no stream-state secret given: using a random one for this replica only; replicas behind "
        "one load balancer must share --stream-state-secret-file or $%s", SECRET_ENV,
    )
    return config.replace(stream_state_secret=secrets.token_hex(32))


def serve(config: ServiceConfig, log_level: str) -> None:
    import uvicorn

    from render_service.app import CONFIG_ENV, create_app
    from render_service.config_io import config_to_json

    if config.workers == 1:
        app = create_app(config)  # loads the model: a bad folder or template fails here
        uvicorn.run(app, host=config.host, port=config.port, log_level=log_level)
        return
    from render_service.model import ModelBundle

    ModelBundle.load(config)  # fail once, in the parent, before forking workers
    os.environ[CONFIG_ENV] = config_to_json(config)
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="render-service-metrics-"))
    uvicorn.run("render_service.app:app_from_env", factory=True, host=config.host, port=config.port,
                workers=config.workers, log_level=log_level)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = _with_process_secret(config_from_args(args))
        if args.command == "gateway":
            from render_service.gateway.cli import run_gateway

            run_gateway(config, args)
        else:
            serve(config, args.log_level)
    except ConfigError as exc:
        print(f"render-service: error: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
