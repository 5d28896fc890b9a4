"""The request-side contract of the scripted logits processor (no dependencies).

Imported by the tests (project venv, no vLLM) to build requests, and by
`scripted_logits.py` inside the engine to read them, so both sides share one spelling.

A scripted request carries in `sampling_params.extra_args`:
- SCRIPT_KEY: list[int], token n is forced at output step n;
- AFTER_KEY (optional): what to force once the script is used up: a token id, or None
  for "unconstrained". Absent means DEFAULT_AFTER_ID (<|im_end|>, so the request stops).

Any request (scripted or not) may also carry PACE_KEY: milliseconds the engine sleeps per
output step. The tiny model makes over 1,000 tokens/s on a quiet machine, so a test that must
stop a long request while it runs (an abort, a disconnect, a cut link) paces it instead of
racing it: 10 ms a step gives 1,500 tokens 15 s, whatever the machine's speed.
"""

from __future__ import annotations

SCRIPT_KEY = "rs_script"
AFTER_KEY = "rs_script_after"
PACE_KEY = "rs_step_delay_ms"
MAX_PACE_MS = 1000
PACE_MS = 10  # what the tests use: long requests outlast any abort latency seen on CI
DEFAULT_AFTER_ID = 151645  # Qwen3 <|im_end|>, an EOS id in the tiny model's generation_config
# Qwen3's vocab_size: an id at or above it would crash the engine, so requests are refused.
VOCAB_SIZE = 151936
_UNSET = object()


def script_extra_args(script: list[int], after: int | None | object = _UNSET) -> dict:
    """extra_args that make the engine emit `script` (then `after`, default EOS)."""
    extra: dict = {SCRIPT_KEY: list(script)}
    if after is not _UNSET:
        extra[AFTER_KEY] = after
    return extra
