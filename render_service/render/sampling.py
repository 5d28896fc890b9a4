"""vLLM's `SamplingParams` as the JSON `msgspec.to_builtins(..., omit_defaults)` produces.

vLLM builds `SamplingParams.from_optional(...)` from the request (`to_sampling_params`), runs
`__post_init__` (normalisation + validation), and the render endpoint serialises it with
msgspec, which omits a field when its value *is* the declared default: identity for scalars,
emptiness for factory defaults. In practice (CPython caches ints -5..256 and shares the
constants of one module):

- small ints equal to their default (`n: 1`, `top_k: 0`, `max_tokens: 16`, ...), bools and
  None equal to their default, and `output_kind` CUMULATIVE are omitted;
- floats that come from the request, the generation config or the OpenAI defaults table are
  distinct objects and always appear (`"presence_penalty": 0.0`); the floats greedy sampling
  resets (`top_p = 1.0`, `min_p = 0.0`) are vLLM's own constants and are omitted;
- `stop`, `stop_token_ids`, `bad_words` become lists and always appear; so does
  `skip_reading_prefix_cache`.

Fields are emitted in `SamplingParams` declaration order. Validation failures raise vLLM's
messages as 400s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from render_service.errors import BadRequestError
from render_service.protocol import vllm_validation_error

__all__ = ["SamplingInputs", "build_sampling_params", "OUTPUT_KIND_DELTA", "OUTPUT_KIND_FINAL_ONLY",
           "normalise_structured_outputs"]

OUTPUT_KIND_CUMULATIVE = 0
OUTPUT_KIND_DELTA = 1
OUTPUT_KIND_FINAL_ONLY = 2
_SAMPLING_EPS = 1e-5
_MAX_TEMP = 1e-2
_MAX_N_SEQUENCES = 16384  # VLLM_MAX_N_SEQUENCES default
# The OpenAI defaults vLLM falls back to after the request and the generation config.
OPENAI_DEFAULTS: dict[str, float | int] = {
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
}
_SMALL_INT_DEFAULTS = {
    "n": 1,
    "top_k": 0,
    "max_tokens": 16,
    "min_tokens": 0,
    "output_text_buffer_length": 0,
    "routed_experts_prompt_start": 0,
}
_BOOL_DEFAULTS = {
    "ignore_eos": False,
    "flat_logprobs": False,
    "detokenize": True,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "include_stop_str_in_output": False,
    "skip_clone": False,
}
_FIELD_ORDER = (
    "n presence_penalty frequency_penalty repetition_penalty temperature watermarking top_p "
    "top_k min_p seed stop stop_token_ids ignore_eos max_tokens min_tokens logprobs "
    "prompt_logprobs prompt_logprob_token_ids prompt_logprob_start logprob_token_ids "
    "flat_logprobs detokenize skip_special_tokens spaces_between_special_tokens "
    "include_stop_str_in_output output_kind stream_interval skip_clone "
    "output_text_buffer_length structured_outputs logit_bias allowed_token_ids extra_args "
    "bad_words skip_reading_prefix_cache thinking_token_budget repetition_detection "
    "routed_experts_prompt_start trace_decode_token_ids"
).split()
_STRUCTURED_OUTPUT_FIELDS = (
    ("json", None),
    ("regex", None),
    ("choice", None),
    ("grammar", None),
    ("json_object", None),
    ("disable_any_whitespace", False),
    ("disable_additional_properties", False),
    ("whitespace_pattern", None),
    ("structural_tag", None),
    ("_backend", None),
    ("_backend_was_auto", False),
)


@dataclass
class SamplingInputs:
    """Arguments of `SamplingParams.from_optional` as the request handlers pass them."""

    n: int | None = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    watermarking: bool | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    thinking_token_budget: int | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    output_kind: int = OUTPUT_KIND_CUMULATIVE
    stream_interval: int | None = None
    structured_outputs: dict[str, Any] | None = None
    logit_bias: dict[str, float] | None = None
    allowed_token_ids: list[int] | None = None
    extra_args: dict[str, Any] | None = None
    skip_clone: bool = False
    repetition_detection: dict[str, Any] | None = None
    routed_experts_prompt_start: int = 0
    omit: set[str] = field(default_factory=set)


def build_sampling_params(inputs: SamplingInputs) -> dict[str, Any]:
    """The JSON object vLLM's render endpoint emits under `sampling_params`.

    Raises:
        BadRequestError: a value `SamplingParams` rejects (vLLM's message).
    """
    values = _normalise(inputs)
    _verify(values)
    return {name: values[name] for name in _FIELD_ORDER if name in values and name not in inputs.omit}


def _normalise(p: SamplingInputs) -> dict[str, Any]:
    temperature = p.temperature
    if 0 < temperature < _MAX_TEMP:
        temperature = _MAX_TEMP
    stop = [] if p.stop is None else [p.stop] if isinstance(p.stop, str) else list(p.stop)
    values: dict[str, Any] = {
        "n": 1 if p.n is None else p.n,
        "presence_penalty": p.presence_penalty,
        "frequency_penalty": p.frequency_penalty,
        "repetition_penalty": p.repetition_penalty,
        "temperature": temperature,
        "watermarking": p.watermarking,
        "top_p": p.top_p,
        "top_k": p.top_k,
        "min_p": p.min_p,
        "seed": None if p.seed == -1 else p.seed,
        "stop": stop,
        "stop_token_ids": list(dict.fromkeys(p.stop_token_ids or [])),
        "ignore_eos": p.ignore_eos,
        "max_tokens": p.max_tokens,
        "min_tokens": p.min_tokens,
        "logprobs": 1 if p.logprobs is True else p.logprobs,
        "prompt_logprobs": 1 if p.prompt_logprobs is True else p.prompt_logprobs,
        "logprob_token_ids": p.logprob_token_ids,
        "skip_special_tokens": p.skip_special_tokens,
        "spaces_between_special_tokens": p.spaces_between_special_tokens,
        "include_stop_str_in_output": p.include_stop_str_in_output,
        "output_kind": p.output_kind,
        "stream_interval": p.stream_interval,
        "skip_clone": p.skip_clone,
        "output_text_buffer_length": (
            max(len(s) for s in stop) - 1 if stop and not p.include_stop_str_in_output else 0
        ),
        "structured_outputs": normalise_structured_outputs(p.structured_outputs),
        "logit_bias": _clamp_logit_bias(p.logit_bias),
        "allowed_token_ids": p.allowed_token_ids,
        "extra_args": p.extra_args,
        "bad_words": list(dict.fromkeys(p.bad_words or [])),
        "skip_reading_prefix_cache": p.prompt_logprobs is not None,
        "thinking_token_budget": p.thinking_token_budget,
        "repetition_detection": p.repetition_detection,
        "routed_experts_prompt_start": p.routed_experts_prompt_start,
    }
    omitted = _default_identical(values)
    if temperature < _SAMPLING_EPS:
        # Greedy: vLLM resets these to its own constants, which msgspec then omits.
        values["top_p"], values["top_k"], values["min_p"] = 1.0, 0, 0.0
        omitted |= {"top_p", "top_k", "min_p"}
        values["_greedy"] = True
    for name in omitted:
        values.pop(name, None)
    return values


def _default_identical(values: dict[str, Any]) -> set[str]:
    omitted = {name for name, value in values.items() if value is None}
    for name, default in _SMALL_INT_DEFAULTS.items():
        value = values.get(name)
        if type(value) is int and value == default and -5 <= value <= 256:
            omitted.add(name)
    for name, default in _BOOL_DEFAULTS.items():
        if values.get(name) is default:
            omitted.add(name)
    if values.get("output_kind") == OUTPUT_KIND_CUMULATIVE:
        omitted.add("output_kind")
    return omitted


def normalise_structured_outputs(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    unknown = set(raw) - {name for name, _ in _STRUCTURED_OUTPUT_FIELDS}
    if unknown:
        raise BadRequestError(
            f"structured_outputs: unknown field(s) {sorted(unknown)}", param="structured_outputs"
        )
    out = {name: raw.get(name, default) for name, default in _STRUCTURED_OUTPUT_FIELDS}
    count = sum(out[k] is not None for k in ("json", "regex", "choice", "grammar", "json_object", "structural_tag"))
    if count > 1:
        raise vllm_validation_error(
            "You can only use one kind of structured outputs constraint but multiple are "
            f"specified: {out}"
        )
    return out


def _clamp_logit_bias(logit_bias: dict[str, float] | None) -> dict[str, float] | None:
    if logit_bias is None:
        return None
    invalid = []
    out: dict[str, float] = {}
    for token, bias in logit_bias.items():
        try:
            token_id = int(token)
        except (TypeError, ValueError):
            invalid.append(token)
            continue
        out[str(token_id)] = min(100.0, max(-100.0, bias))
    if invalid:
        raise vllm_validation_error(
            f"logit_bias contains key(s) that cannot be converted to integer token IDs: {invalid!r}",
            parameter="logit_bias",
            value=invalid,
        )
    return out


def _get(values: dict[str, Any], name: str, default: Any) -> Any:
    return values[name] if name in values else default


def _verify(values: dict[str, Any]) -> None:  # noqa: C901 - one check per vLLM rule
    n = _get(values, "n", 1)
    if n < 1:
        raise vllm_validation_error(f"n must be at least 1, got {n}.")
    if n > _MAX_N_SEQUENCES:
        raise vllm_validation_error(
            f"n must be at most {_MAX_N_SEQUENCES}, got {n}. To increase this limit, set the "
            "VLLM_MAX_N_SEQUENCES environment variable."
        )
    _verify_extra_args(values.get("extra_args"))
    for name in ("presence_penalty", "frequency_penalty"):
        value = _get(values, name, 0.0)
        if not -2.0 <= value <= 2.0:
            raise vllm_validation_error(f"{name} must be in [-2, 2], got {value}.")
    rep = _get(values, "repetition_penalty", 1.0)
    if not math.isfinite(rep):
        raise vllm_validation_error(f"repetition_penalty must be a finite number, got {rep}.")
    if rep <= 0.0:
        raise vllm_validation_error(f"repetition_penalty must be greater than zero, got {rep}.")
    _verify_temperature(_get(values, "temperature", 1.0))
    top_p = _get(values, "top_p", 1.0)
    if not 0.0 < top_p <= 1.0:
        raise vllm_validation_error(f"top_p must be in (0, 1], got {top_p}.", parameter="top_p", value=top_p)
    top_k = _get(values, "top_k", 0)
    if top_k < -1:
        raise vllm_validation_error(f"top_k must be 0 (disable), or at least 1, got {top_k}.")
    min_p = _get(values, "min_p", 0.0)
    if not 0.0 <= min_p <= 1.0:
        raise vllm_validation_error(f"min_p must be in [0, 1], got {min_p}.")
    _verify_lengths(values)
    _verify_logprobs(values)
    if any(not s for s in values.get("stop", [])):
        raise vllm_validation_error("stop cannot contain an empty string.")
    bad_words = values.get("bad_words", [])
    if any(not w for w in bad_words):
        raise vllm_validation_error(f"bad_words cannot contain an empty string. Got bad_words={bad_words}")
    if values.pop("_greedy", False) and n > 1:
        raise vllm_validation_error(f"n must be 1 when using greedy sampling, got {n}.")


def _verify_temperature(temperature: float) -> None:
    if not math.isfinite(temperature):
        raise vllm_validation_error(
            f"temperature must be a finite number, got {temperature}.", parameter="temperature", value=temperature
        )
    if temperature < 0.0:
        raise vllm_validation_error(
            f"temperature must be non-negative, got {temperature}.", parameter="temperature", value=temperature
        )
    if temperature > 2.0:
        raise vllm_validation_error(
            f"temperature must be in [0, 2], got {temperature}.", parameter="temperature", value=temperature
        )


def _verify_lengths(values: dict[str, Any]) -> None:
    max_tokens = _get(values, "max_tokens", 16)
    min_tokens = _get(values, "min_tokens", 0)
    if max_tokens is not None and max_tokens < 1:
        raise vllm_validation_error(
            f"max_tokens must be at least 1, got {max_tokens}.", parameter="max_tokens", value=max_tokens
        )
    if min_tokens < 0:
        raise vllm_validation_error(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
    if max_tokens is not None and min_tokens > max_tokens:
        raise vllm_validation_error(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."
        )
    interval = values.get("stream_interval")
    if interval is not None and interval < 1:
        raise vllm_validation_error(
            f"stream_interval must be at least 1, got {interval}.", parameter="stream_interval", value=interval
        )


def _verify_logprobs(values: dict[str, Any]) -> None:
    for name in ("logprobs", "prompt_logprobs"):
        value = values.get(name)
        if value is not None and value != -1 and value < 0:
            raise vllm_validation_error(
                f"{name} must be non-negative or -1, got {value}.", parameter=name, value=value
            )


def _verify_extra_args(extra_args: Any) -> None:
    if not extra_args:
        return
    pending: list[Any] = [extra_args]
    while pending:
        value = pending.pop()
        if isinstance(value, int) and not -(2**63) <= value < 2**64:
            raise vllm_validation_error(
                "extra_args integers must be between -2**63 and 2**64 - 1.", parameter="extra_args"
            )
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, (list, tuple)):
            pending.extend(value)
