"""Test-only vLLM v1 logits processor that forces a scripted token sequence.

Loaded INSIDE the engine (`vllm serve ... --logits-processors scripted_logits:ScriptedLogits`
with this folder on PYTHONPATH); it needs vLLM and torch, so the project venv never imports it.

Theory of operation: vLLM 0.32's `AdapterLogitsProcessor` keeps one per-request callable
per batch row, built by `new_req_logits_processor(params)` when the request joins the batch,
and called as `fn(output_token_ids, logits_row)` before sampling. `output_token_ids` is the
request's live output list, so its length is the step number. At step n we set every logit
to -inf except the script's token n (logit 0), so greedy and seeded random sampling, with any
temperature/top-k/top-p, all pick it. Requests whose `extra_args` carry no script get no
callable and are untouched. On the decode side of P/D the request arrives with an empty
output list (the prefill's token is discarded), so the script starts at step 0 there too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

if __package__:
    from .script_protocol import (
        AFTER_KEY,
        DEFAULT_AFTER_ID,
        MAX_PACE_MS,
        PACE_KEY,
        SCRIPT_KEY,
        VOCAB_SIZE,
    )
else:  # imported as a top-level module by the engine
    from script_protocol import (
        AFTER_KEY,
        DEFAULT_AFTER_ID,
        MAX_PACE_MS,
        PACE_KEY,
        SCRIPT_KEY,
        VOCAB_SIZE,
    )

_MISSING = object()


def _read_script(params: SamplingParams) -> tuple[list[int], int | None] | None:
    extra = params.extra_args or {}
    script = extra.get(SCRIPT_KEY)
    if script is None:
        return None
    if not isinstance(script, list):
        raise ValueError(f"{SCRIPT_KEY} must be a list of token ids")
    after = extra.get(AFTER_KEY, _MISSING)
    return list(script), (DEFAULT_AFTER_ID if after is _MISSING else after)


def _read_pace_s(params: SamplingParams) -> float:
    delay_ms = (params.extra_args or {}).get(PACE_KEY, 0)
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int | float):
        raise ValueError(f"{PACE_KEY} must be a number of milliseconds")
    if not 0 <= delay_ms <= MAX_PACE_MS:
        raise ValueError(f"{PACE_KEY} must be in [0, {MAX_PACE_MS}]")
    return delay_ms / 1000


def _is_token_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < VOCAB_SIZE


def _forcing_fn(script: list[int], after: int | None, pace_s: float = 0.0) -> Callable:
    def force(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        if pace_s:
            time.sleep(pace_s)  # blocks the engine step: the request is paced, as intended
        step = len(output_ids)
        token = script[step] if step < len(script) else after
        if token is None:
            return logits
        logits.fill_(-math.inf)
        logits[token] = 0.0
        return logits

    return force


class ScriptedLogits(AdapterLogitsProcessor):
    """Forces `extra_args["rs_script"][n]` at output step n, paced by `rs_step_delay_ms`
    (see script_protocol)."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        # ValueError here becomes an HTTP 400, so a bad script fails loudly, not silently.
        _read_pace_s(sampling_params)
        parsed = _read_script(sampling_params)
        if parsed is None:
            return
        script, after = parsed
        if not all(_is_token_id(t) for t in script) or not (after is None or _is_token_id(after)):
            raise ValueError(f"{SCRIPT_KEY}/{AFTER_KEY} must be token ids in [0, {VOCAB_SIZE})")

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params: SamplingParams) -> Callable | None:
        parsed, pace_s = _read_script(params), _read_pace_s(params)
        if parsed is None:
            # Paced but free: an empty script with an unconstrained "after".
            return _forcing_fn([], None, pace_s) if pace_s else None
        return _forcing_fn(*parsed, pace_s)
