"""Where an output ends: the stop token the engine's detokenizer leaves out, and stop strings.

Batch (`cut_at_stop_string`) reproduces vLLM 0.33 derender: the stop string is the reported
`stop_reason` string, else the request's `stop` list when the engine reported nothing; it only
counts when it ends past the text of the first `min_tokens` tokens; the earliest-ending match
wins (ties: list order); the text is cut before it (after it with
`include_stop_str_in_output`).

Streaming (`StopScan`) is ours (vLLM 0.33 refuses stop strings when streaming). Theory:
the scan keeps `tail`, the last `longest_stop - 1` characters already examined, of which the
last `held` characters were not released to the client yet. New text is appended to the tail
and searched for matches that end in the new text (earlier ones were already ruled out). With
no match, only the longest suffix that is a proper prefix of some stop string is held back
(nothing is held with `include_stop_str_in_output`, since the stop string is shown anyway), so
the client sees text as early as possible. On a match the released text is cut exactly as the
batch cut does, so the concatenated stream equals the batch text. State: two short strings
and three integers, bounded by the longest stop string.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from parsers._state import JsonState
from parsers._text import partial_marker_len

__all__ = [
    "StopRules",
    "drop_stop_token",
    "find_stop",
    "cut_text",
    "StopScan",
    "StopScanState",
    "ScanResult",
]


@dataclass(frozen=True, slots=True)
class StopRules:
    """The request's stop settings that derender reads (vLLM field names)."""

    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0


def drop_stop_token(
    token_ids: Sequence[int],
    finish_reason: str | None,
    stop_reason: int | str | None,
    rules: StopRules | None,
    eos_token_id: int | None,
    model_eos_ids: frozenset[int],
) -> tuple[list[int], int | str | None]:
    """The ids to decode and the stop_reason, leaving out the token that stopped generation.

    An int stop_reason names the token; a null one is the primary EOS (unless ignore_eos) or,
    for hosts that never report it, one of the request's stop_token_ids or the model's EOS ids
    (then stop_reason becomes that id). With include_stop_str_in_output nothing is dropped.
    """
    ids = list(token_ids)
    if finish_reason != "stop" or isinstance(stop_reason, str) or not ids:
        return ids, stop_reason
    last = ids[-1]
    if stop_reason is None:
        honor_eos = rules is None or not rules.ignore_eos
        if honor_eos and last == eos_token_id:
            stopped = True
        elif (rules is not None and last in rules.stop_token_ids) or (
            honor_eos and last in model_eos_ids
        ):
            stopped, stop_reason = True, last
        else:
            stopped = False
    else:
        stopped = last == stop_reason
    if not stopped or (rules is not None and rules.include_stop_str_in_output):
        return ids, stop_reason
    return ids[:-1], stop_reason


def find_stop(text: str, search_from: int, stops: Sequence[str]) -> tuple[str, int] | None:
    """The stop string ending earliest among matches ending after `search_from`: (string, start)."""
    best: tuple[str, int] | None = None
    best_end = sys.maxsize
    for stop in stops:
        if not stop:
            continue
        start = text.find(stop, max(search_from - len(stop) + 1, 0))
        if start != -1 and start + len(stop) < best_end:
            best, best_end = (stop, start), start + len(stop)
    return best


def cut_text(text: str, match: tuple[str, int], include: bool) -> str:
    stop, start = match
    return text[: start + len(stop)] if include else text[:start]


def _held_suffix(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of a stop string."""
    return partial_marker_len(text, stops)


@dataclass(frozen=True, slots=True)
class StopScanState(JsonState):
    VERSION: ClassVar[int] = 1

    tail: str = ""  # the last (longest stop - 1) characters examined
    held: int = 0  # how many characters at the end of `tail` are not released yet
    total_chars: int = 0  # characters examined so far (absolute offset of the end of `tail`)
    tokens: int = 0  # output tokens decoded so far (for min_tokens)
    min_end: int = -1  # char offset where the min_tokens-th token ends; -1 until reached

    def __post_init__(self) -> None:
        if not 0 <= self.held <= len(self.tail) or self.tokens < 0 or self.total_chars < 0:
            raise ValueError("inconsistent stop scan counters")


@dataclass(frozen=True, slots=True)
class ScanResult:
    state: StopScanState
    released: str
    stop: str | None  # the stop string that matched (the choice ends here)


@dataclass(frozen=True, slots=True)
class StopScan:
    """Streaming stop-string scanner over decoded text (see the module docstring).

    The caller feeds the text of whole tokens and says how many tokens it covers; it splits a
    chunk at the `min_tokens` boundary (`tokens_before_min`) so the boundary offset is exact.
    """

    stops: tuple[str, ...]
    include: bool
    min_tokens: int

    def initial_state(self) -> StopScanState:
        return StopScanState(min_end=0 if self.min_tokens <= 0 else -1)

    def tokens_before_min(self, state: StopScanState) -> int:
        """How many of the next tokens still fall inside the first `min_tokens`."""
        return max(self.min_tokens - state.tokens, 0)

    def feed(self, state: StopScanState, text: str, n_tokens: int) -> ScanResult:
        combined = state.tail + text
        base = state.total_chars - len(state.tail)  # absolute offset of combined[0]
        unreleased_from = len(state.tail) - state.held
        tokens = state.tokens + n_tokens
        total = state.total_chars + len(text)
        min_end = state.min_end
        if min_end < 0 and tokens >= self.min_tokens:
            min_end = total
        match = None
        if state.min_end >= 0 and text:
            # A match must end in the new text and past the min_tokens boundary.
            search_from = max(len(state.tail), state.min_end - base)
            match = find_stop(combined, search_from, self.stops)
        if match is not None:
            kept = cut_text(combined, match, self.include)
            done = state.replace(held=0, tokens=tokens, total_chars=total, min_end=min_end)
            return ScanResult(done, kept[unreleased_from:], match[0])
        hold = 0 if self.include else _held_suffix(combined, self.stops)
        keep = max(len(s) for s in self.stops) - 1
        new_tail = combined[max(len(combined) - keep, 0) :] if keep > 0 else ""
        new_state = StopScanState(new_tail, hold, total, tokens, min_end)
        return ScanResult(new_state, combined[unreleased_from : len(combined) - hold], None)

    def flush(self, state: StopScanState) -> tuple[StopScanState, str]:
        """Release what is held at the end of the output."""
        held = state.tail[len(state.tail) - state.held :] if state.held else ""
        return state.replace(held=0), held
