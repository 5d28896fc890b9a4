"""`render-service serve [MODEL]` and `render-service gateway`: flags -> ServiceConfig -> servers.

Flag names follow `vllm launch render`. Every flag can also come from the environment as
RENDER_SERVICE_<FLAG> (e.g. RENDER_SERVICE_WORKERS=4); a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import secrets
import sys
from collections.abc import Callable, Sequence
from typing import Any

from render_service import __version__
from render_service.config import (
    ANTHROPIC_DISABLED_EFFORTS,
    EMBEDDED_DEFAULT_PARSERS,
    TOOL_STRICT_LEVELS,
    HttpOptions,
    Limits,
    ServiceConfig,
    parse_json_flag,
)
from render_service.errors import ConfigError

# Our log lines (the root logger's format; see http.startup_log.lean_log_records).
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

__all__ = ["build_parser", "config_from_args", "main"]

ENV_PREFIX = "RENDER_SERVICE_"
SECRET_ENV = "RENDER_SERVICE_STREAM_STATE_SECRET"
# The embedded default model gets the parsers its family needs (ServiceConfig.embedded_default).
DEFAULT_MODEL_PARSERS = EMBEDDED_DEFAULT_PARSERS

log = logging.getLogger("render_service")

# `serve` and `gateway` both default to vLLM's port 8000 (each replaces a vLLM server on its
# host); run them on one host with different --port values.
SERVE_DEFAULT_PORT = 8000


class _EnvValue(str):
    """A flag default taken from RENDER_SERVICE_<FLAG>: argparse converts a string default
    with the flag's `type`, so a bad value fails like a bad flag, naming its variable."""

    var: str


def _env_default(name: str, default: Any = None) -> Any:
    # An empty variable means "unset" (charts and shells often export VAR="").
    var = ENV_PREFIX + name.upper().replace("-", "_")
    raw = os.environ.get(var)
    if not raw:
        return default
    value = _EnvValue(raw)
    value.var = var
    return value


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _env_flag(name: str) -> bool:
    """A boolean RENDER_SERVICE_<FLAG>; a typo is a start-up error, not a silent False."""
    value = _env_default(name)
    if value is None:
        return False
    if value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigError(
        f"${value.var}={str(value)!r} is not a boolean; accepted values: {', '.join(_TRUE)} "
        f"(on), {', '.join(_FALSE)} (off), or empty (unset)"
    )


def _flag_type(parse: Callable[[str], Any], expected: str) -> Callable[[str], Any]:
    """An argparse `type` whose error names what is expected and, for an environment
    default, the variable it came from."""

    def convert(value: str) -> Any:
        try:
            return parse(value)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            source = f" (from ${value.var})" if isinstance(value, _EnvValue) else ""
            detail = f": {exc}" if isinstance(exc, argparse.ArgumentTypeError) else ""
            raise argparse.ArgumentTypeError(f"expected {expected}, got {str(value)!r}{source}{detail}") from None

    convert.__name__ = expected  # argparse shows it in some messages
    return convert


def _human_readable_int(value: str) -> int:
    """vLLM's human_readable_int: 25.6k = 25600 (k m g t decimal), 2K = 2048 (K M G T binary)."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if not match:
        return int(value)
    number, suffix = match.groups()
    if suffix.islower():
        return int(float(number) * 1000 ** ("kmgt".index(suffix) + 1))
    if "." in number:
        raise argparse.ArgumentTypeError(
            f"decimals are not allowed with binary suffixes like {suffix}; did you mean {number}{suffix.lower()}?"
        )
    return int(number) * (1 << 10 * ("KMGT".index(suffix) + 1))  # 1024 ** k


def _max_model_len(value: str) -> int:
    """vLLM's human_readable_int_or_auto: -1 and "auto" (derive from the model) are -1."""
    return -1 if value.strip() == "-1" or value.strip().lower() == "auto" else _human_readable_int(value)


INT = _flag_type(int, "an integer")
FLOAT = _flag_type(float, "a number")
MAX_MODEL_LEN = _flag_type(_max_model_len, "an integer (e.g. 40960, 32k, 32K), -1 or auto")


def _add_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default=_env_default("model"),
                   help="model folder or hub id (omit for the embedded Qwen3 default)")
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--tokenizer", default=_env_default("tokenizer"))
    p.add_argument("--revision", default=_env_default("revision"))
    p.add_argument("--tokenizer-mode", default=_env_default("tokenizer_mode", "auto"))
    p.add_argument("--trust-remote-code", action="store_true", default=_env_flag("trust_remote_code"))
    p.add_argument("--max-model-len", type=MAX_MODEL_LEN, default=_env_default("max_model_len"),
                   help="context length: an integer with an optional k/m (x1000) or K/M (x1024) suffix, "
                        "or -1/auto for the model's own (default)")
    p.add_argument("--max-logprobs", type=INT, default=_env_default("max_logprobs", 20))
    p.add_argument("--generation-config", default=_env_default("generation_config", "auto"))
    p.add_argument("--chat-template", default=_env_default("chat_template"))
    p.add_argument("--chat-template-content-format", default=_env_default("chat_template_content_format", "auto"),
                   choices=("auto", "string", "openai"))
    p.add_argument("--trust-request-chat-template", action="store_true",
                   default=_env_flag("trust_request_chat_template"))
    p.add_argument("--trust-request-mm-kwargs", action="store_true",
                   default=_env_flag("trust_request_mm_kwargs"))
    p.add_argument("--default-chat-template-kwargs", default=_env_default("default_chat_template_kwargs"))
    from parsers import registry

    p.add_argument("--reasoning-parser", default=_env_default("reasoning_parser"),
                   help="one of: " + ", ".join(sorted(registry.reasoning_parser_names())) + "; or none")
    p.add_argument("--tool-call-parser", default=_env_default("tool_call_parser"),
                   help="one of: " + ", ".join(sorted(registry.tool_parser_names())) + "; or none")
    p.add_argument("--tool-strict-level", default=_env_default("tool_strict_level"), choices=TOOL_STRICT_LEVELS,
                   help="floor for tool-call structural tags: auto (per request), function (constrain every "
                        "call envelope) or parameter (every tool strict); default: the parser's (auto)")
    p.add_argument("--enable-auto-tool-choice", action="store_true",
                   default=_env_flag("enable_auto_tool_choice"))
    p.add_argument("--exclude-tools-when-tool-choice-none", action="store_true",
                   default=_env_flag("exclude_tools_when_tool_choice_none"))
    p.add_argument("--reasoning-effort-map", default=_env_default("reasoning_effort_map"),
                   help='JSON rewriting request efforts for the template, e.g. \'{"xhigh": "max"}\'')
    p.add_argument("--anthropic-disabled-thinking-effort", choices=ANTHROPIC_DISABLED_EFFORTS,
                   default=_env_default("anthropic_disabled_thinking_effort", "auto"),
                   help="reasoning_effort for Anthropic thinking.type=disabled (auto: probe the template, as vLLM)")
    _add_multimodal_flags(p)


def _add_multimodal_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allowed-local-media-path", default=_env_default("allowed_local_media_path"),
                   help="folder that file:// image URLs may be read from (default: none)")
    p.add_argument("--allowed-media-domains", nargs="+", default=(_env_default("allowed_media_domains") or "").split(),
                   help="hosts http(s) image URLs may be fetched from ('*' any, '*.x.com' subdomains); "
                        "default: none, fetching is off")
    p.add_argument("--mm-hasher-algorithm", default=_env_default("mm_hasher_algorithm", "blake3"),
                   choices=("blake3", "sha256", "sha512"))
    p.add_argument("--mm-processor-cache-gb", type=FLOAT, default=_env_default("mm_processor_cache_gb", 4.0),
                   help="processed-image cache per worker process, GiB (0 disables it)")
    p.add_argument("--interleave-mm-strings", action="store_true", default=_env_flag("interleave_mm_strings"))
    p.add_argument("--dtype", default=_env_default("dtype", "auto"),
                   choices=("auto", "half", "float16", "bfloat16", "float", "float32"),
                   help="the engines' model dtype; processed image tensors are sent in it")
    p.add_argument("--enable-prompt-embeds", action="store_true", default=_env_flag("enable_prompt_embeds"),
                   help="accept prompt_embeds (completions) and prompt_embeds chat parts, as vLLM: "
                        "validated, rendered as placeholder-token spans")
    p.add_argument("--limit-mm-per-prompt", default=_env_default("limit_mm_per_prompt"),
                   help='vLLM\'s JSON form of --max-images, e.g. \'{"image": 4}\'')


# (flag, Limits field, type): the named limits on untrusted input; ranges are checked by Limits.
_LIMIT_OPTIONS = (
    ("--max-body-bytes", "max_body_bytes", INT),
    ("--max-messages", "max_messages", INT),
    ("--max-tools", "max_tools", INT),
    ("--render-timeout", "render_timeout_s", FLOAT),
    ("--max-tool-call-chars", "max_tool_call_chars", INT),
    ("--max-template-output-chars", "max_template_output_chars", INT),
    ("--max-stream-state-bytes", "max_stream_state_bytes", INT),
    ("--max-concurrent-requests", "max_concurrent_requests", INT),
    ("--max-images", "max_images", INT),
    ("--max-image-pixels", "max_image_pixels", INT),
    ("--max-image-bytes", "max_image_bytes", INT),
    ("--media-fetch-timeout", "media_fetch_timeout_s", FLOAT),
)


def _add_server_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=_env_default("host", "127.0.0.1"))
    p.add_argument("--port", type=INT, default=_env_default("port", SERVE_DEFAULT_PORT),
                   help="listening port; serve and gateway both default to vLLM's 8000")
    p.add_argument("--workers", type=INT, default=_env_default("workers", 1),
                   help="worker processes (uvicorn workers sharing the port)")
    p.add_argument("--renderer-num-workers", type=INT, default=_env_default("renderer_num_workers", 1),
                   help="render threads per worker process")
    p.add_argument("--api-key", nargs="+", default=(_env_default("api_key") or "").split(),
                   help="accepted bearer key(s), as vLLM: one or several (env: whitespace-separated)")
    p.add_argument("--stream-state-secret-file", default=_env_default("stream_state_secret_file"),
                   help=f"file holding the stream_state MAC key shared by all replicas (or ${SECRET_ENV})")
    p.add_argument("--enable-request-id-headers", action="store_true",
                   default=_env_flag("enable_request_id_headers"))
    p.add_argument("--log-level", default=_env_default("log_level", "info"))
    p.add_argument("--enable-log-requests", action="store_true", default=_env_flag("enable_log_requests"),
                   help="log each request at INFO (id, route) and its body at DEBUG, as vLLM")
    p.add_argument("--max-log-len", type=INT, default=_env_default("max_log_len"),
                   help="characters of a logged request body (default: all)")
    _add_uvicorn_flags(p)
    limits = Limits()
    for flag, field_name, kind in _LIMIT_OPTIONS:
        env_name = flag.removeprefix("--").replace("-", "_")
        p.add_argument(flag, type=kind, dest=env_name, default=_env_default(env_name, getattr(limits, field_name)))


def _add_uvicorn_flags(p: argparse.ArgumentParser) -> None:
    """vLLM's HTTP-server flags, handed to uvicorn as `vllm launch render` does."""
    p.add_argument("--uvicorn-log-level", default=_env_default("uvicorn_log_level", "info"),
                   choices=("critical", "error", "warning", "info", "debug", "trace"))
    p.add_argument("--disable-uvicorn-access-log", action="store_true",
                   default=_env_flag("disable_uvicorn_access_log"))
    p.add_argument("--ssl-keyfile", default=_env_default("ssl_keyfile"))
    p.add_argument("--ssl-certfile", default=_env_default("ssl_certfile"))
    p.add_argument("--ssl-ca-certs", default=_env_default("ssl_ca_certs"))
    p.add_argument("--ssl-cert-reqs", type=INT, default=_env_default("ssl_cert_reqs", 0),
                   help="whether a client certificate is required (see the stdlib ssl module)")
    p.add_argument("--ssl-ciphers", default=_env_default("ssl_ciphers"))
    p.add_argument("--root-path", default=_env_default("root_path"),
                   help="FastAPI root_path when behind a path-based routing proxy")
    p.add_argument("--h11-max-incomplete-event-size", type=INT,
                   default=_env_default("h11_max_incomplete_event_size", 4 * 1024 * 1024))


_NO_EFFECT_DEST = "vllm_no_effect__"


def _add_vllm_flags(p: argparse.ArgumentParser) -> None:
    """Accept every other option of `vllm launch render` 0.33 (render_service.vllm_flags).

    A spelling we define is ours; the other spellings of a switch we define (vLLM's --no-x /
    --disable-x) turn it off. The rest have no effect on a render tier: they are recorded under
    a private dest and logged once at start-up (`no_effect_flags`).
    """
    from render_service.vllm_flags import VLLM_RENDER_OPTIONS

    group = p.add_argument_group("vLLM flags with no effect on a render tier (accepted, logged once)")
    defined = p._option_string_actions
    for entry in VLLM_RENDER_OPTIONS:
        kind = entry[-1] if entry[-1] in "=+?" else ""
        spellings = entry.rstrip("=+?").split(",")
        ours = next((defined[s] for s in spellings if s in defined), None)
        missing = [s for s in spellings if s not in defined]
        if not missing:
            continue
        if ours is not None:  # e.g. --disable-auto-tool-choice next to our --enable-auto-tool-choice
            if kind == "" and isinstance(ours, argparse._StoreTrueAction):
                p.add_argument(*missing, dest=ours.dest, action="store_false", help=argparse.SUPPRESS)
            continue
        options: dict[str, Any] = {"dest": _NO_EFFECT_DEST + spellings[0].lstrip("-"),
                                   "default": argparse.SUPPRESS, "help": argparse.SUPPRESS}
        if kind == "":
            options["action"] = "store_true"
        elif kind in "+?":
            options["nargs"] = "+" if kind == "+" else "?"
        group.add_argument(*spellings, **options)


def _has_default(action: argparse.Action) -> bool:
    return action.default not in (None, argparse.SUPPRESS, False, [], "")


class _DefaultsFormatter(argparse.HelpFormatter):
    """Help lines end with the option's default, when it has one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if _has_default(action) and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def _show_defaults(p: argparse.ArgumentParser) -> None:
    """Options without help text still show their default (argparse skips empty help)."""
    for action in p._actions:
        if action.help is None and _has_default(action):
            action.help = "default: %(default)s"


# vLLM flags that would change output but that we cannot honour: refused, never ignored.
_REFUSED_VLLM_FLAGS = {
    "config": "vLLM's YAML file of flags is not read by serve; pass the flags themselves",
    "tool-parser-plugin": "plugins are vLLM Python classes; use a registered --tool-call-parser",
    "reasoning-parser-plugin": "plugins are vLLM Python classes; use a registered --reasoning-parser",
    "hf-overrides": "not implemented here yet (it can change max_model_len and the model type); "
                    "edit the model folder's config.json instead",
    "override-generation-config": "not implemented here yet (it changes the default sampling "
                                  "parameters); put them in the folder's generation_config.json",
}


def _refuse_unsupported(args: argparse.Namespace) -> None:
    for name, reason in _REFUSED_VLLM_FLAGS.items():
        if getattr(args, _NO_EFFECT_DEST + name, None) not in (None, "", "{}"):
            raise ConfigError(f"--{name}: {reason}")


def no_effect_flags(args: argparse.Namespace) -> list[str]:
    """The vLLM flags given that a render tier does not use (for the start-up warning)."""
    return sorted("--" + name.removeprefix(_NO_EFFECT_DEST) for name in vars(args) if name.startswith(_NO_EFFECT_DEST))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="render-service", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve", formatter_class=_DefaultsFormatter,
        help=f"serve /render, /derender, /tokenize, ... (a drop-in for `vllm launch render`; "
             f"default port {SERVE_DEFAULT_PORT})")
    _add_model_flags(serve)
    _add_server_flags(serve)
    serve.add_argument("--model", dest="model_option", default=None,
                       help="the model, as vLLM's --model (the positional MODEL wins)")
    _add_vllm_flags(serve)
    _show_defaults(serve)
    from render_service.gateway.cli import add_gateway_parser

    add_gateway_parser(sub, _add_model_flags, _add_server_flags)
    return parser


def _read_secret(path: str | None) -> str | None:
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return _checked_secret(fh.read().strip(), "--stream-state-secret-file")
        except OSError as exc:
            raise ConfigError(f"--stream-state-secret-file: {exc}") from exc
    secret = os.environ.get(SECRET_ENV)
    return _checked_secret(secret, f"${SECRET_ENV}") if secret else None


def _checked_secret(secret: str, source: str) -> str:
    if len(secret) < 16:
        raise ConfigError(f"{source}: the secret must be at least 16 characters")
    return secret


def _parser_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The parser flags that were given ("none" turns a parser off); the rest is left to the
    config's defaults (ServiceConfig, or ServiceConfig.embedded_default with no MODEL)."""
    settings: dict[str, Any] = {}
    for name in ("reasoning_parser", "tool_call_parser"):
        value = getattr(args, name)
        if value is not None:
            settings[name] = None if value.lower() in ("", "none") else value
    if args.enable_auto_tool_choice:
        settings["enable_auto_tool_choice"] = True
    return settings


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
    if "image" not in per_prompt:
        limit: int = args.max_images  # range-checked by Limits, under its own flag name
        return limit
    value = per_prompt["image"]
    if isinstance(value, dict):  # vLLM also accepts {"image": {"count": N, ...}}
        value = value.get("count", args.max_images)
    if type(value) is not int or value < 0:
        raise ConfigError("--limit-mm-per-prompt: the image limit must be a non-negative integer")
    return value


def config_from_args(args: argparse.Namespace) -> ServiceConfig:
    _refuse_unsupported(args)
    limits = Limits(**{
        field_name: getattr(args, flag.removeprefix("--").replace("-", "_")) for flag, field_name, _ in _LIMIT_OPTIONS
    } | {"max_images": _max_images(args)})
    served = args.served_model_name or (_env_default("served_model_name") or "").split() or ()
    options = dict(
        served_model_name=tuple(served),
        tokenizer=args.tokenizer,
        revision=args.revision,
        tokenizer_mode=args.tokenizer_mode,
        trust_remote_code=args.trust_remote_code,
        max_model_len=args.max_model_len,
        max_logprobs=args.max_logprobs,
        chat_template=args.chat_template,
        chat_template_content_format=args.chat_template_content_format,
        trust_request_chat_template=args.trust_request_chat_template,
        trust_request_mm_kwargs=args.trust_request_mm_kwargs,
        default_chat_template_kwargs=parse_json_flag("--default-chat-template-kwargs", args.default_chat_template_kwargs),
        reasoning_effort_map=parse_json_flag("--reasoning-effort-map", args.reasoning_effort_map),
        anthropic_disabled_thinking_effort=args.anthropic_disabled_thinking_effort,
        tool_strict_level=args.tool_strict_level,
        exclude_tools_when_tool_choice_none=args.exclude_tools_when_tool_choice_none,
        generation_config=args.generation_config,
        allowed_local_media_path=args.allowed_local_media_path,
        allowed_media_domains=tuple(args.allowed_media_domains),
        mm_hasher_algorithm=args.mm_hasher_algorithm,
        mm_processor_cache_gb=args.mm_processor_cache_gb,
        interleave_mm_strings=args.interleave_mm_strings,
        dtype=args.dtype,
        enable_prompt_embeds=args.enable_prompt_embeds,
        renderer_num_workers=args.renderer_num_workers,
        api_key=tuple(args.api_key),
        host=args.host,
        port=args.port,
        workers=args.workers,
        stream_state_secret=_read_secret(args.stream_state_secret_file),
        enable_request_id_headers=args.enable_request_id_headers,
        enable_log_requests=args.enable_log_requests,
        max_log_len=args.max_log_len,
        http=HttpOptions(
            uvicorn_log_level=args.uvicorn_log_level,
            access_log=not args.disable_uvicorn_access_log,
            ssl_keyfile=args.ssl_keyfile,
            ssl_certfile=args.ssl_certfile,
            ssl_ca_certs=args.ssl_ca_certs,
            ssl_cert_reqs=args.ssl_cert_reqs,
            ssl_ciphers=args.ssl_ciphers,
            root_path=args.root_path or "",
            h11_max_incomplete_event_size=args.h11_max_incomplete_event_size,
        ),
        limits=limits,
        **_parser_settings(args),
    )
    model = args.model if args.model is not None else getattr(args, "model_option", None)
    if model is None:  # the embedded default, with its family's parsers unless overridden
        config = ServiceConfig.embedded_default(**options)
    else:
        config = ServiceConfig(model=model, **options)
    _check_parser_names(config.reasoning_parser, config.tool_call_parser)
    return config


def _with_process_secret(config: ServiceConfig) -> ServiceConfig:
    if config.stream_state_secret:
        return config
    log.warning(
        "no stream-state secret given: using a random one for this replica only; replicas behind "
        "one load balancer must share --stream-state-secret-file or $%s", SECRET_ENV,
    )
    return config.replace(stream_state_secret=secrets.token_hex(32))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()  # reads the boolean RENDER_SERVICE_* variables
    except ConfigError as exc:
        print(f"render-service: error: {exc.message}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)  # a bad flag or variable value exits 2 with usage
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)
    ignored = no_effect_flags(args)
    if ignored:
        log.warning("these vLLM flags have no effect on a render tier (no engine runs here): %s", " ".join(ignored))
    try:
        config = _with_process_secret(config_from_args(args))
        if args.command == "gateway":
            from render_service.gateway.cli import run_gateway

            run_gateway(config, args)
        else:
            from render_service.http.server import serve

            serve(config)
    except ConfigError as exc:
        print(f"render-service: error: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
