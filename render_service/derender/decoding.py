"""Token ids -> output text: detokenizers per decode mode, the batch decode with stop handling,
and the streaming step (detokenize a delta, then the stop-string scan).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parsers.detokenizer import DetokState, IncrementalDetokenizer
from parsers.mistral_detokenizer import MistralSpmDetokenizer, MistralTekkenDetokenizer
from render_service.derender.stops import (
    StopRules,
    StopScan,
    StopScanState,
    cut_text,
    drop_stop_token,
    find_stop,
)

__all__ = ["Decoders", "EosIds", "decode_batch", "StreamText", "stream_text_step"]


@dataclass(frozen=True, slots=True)
class EosIds:
    """The primary EOS and every EOS id the engine stops on (tokenizer + generation config)."""

    primary: int | None
    all: frozenset[int]

    @classmethod
    def from_bundle(cls, eos_token_id: int | None, generation_config: dict[str, Any]) -> EosIds:
        ids: set[int] = set()
        configured = generation_config.get("eos_token_id")
        if configured is not None:
            ids.update([configured] if isinstance(configured, int) else configured)
        if eos_token_id is not None:
            ids.add(eos_token_id)
        return cls(eos_token_id, frozenset(ids))


class Decoders:
    """One `IncrementalDetokenizer` per skip_special_tokens value (they are immutable)."""

    def __init__(self, tokenizer: Any, special_token_ids: Sequence[int], *, mistral: Any = None) -> None:
        """`mistral`: mistral-common's own tokenizer (--tokenizer-mode mistral), which vLLM
        decodes with: a SentencePieceTokenizer or a Tekkenizer."""
        self._by_skip = {
            skip: _mistral_decoder(mistral, skip)
            if mistral is not None
            else IncrementalDetokenizer(tokenizer, special_token_ids, skip_special_tokens=skip)
            for skip in (False, True)
        }

    def get(self, skip_special_tokens: bool) -> IncrementalDetokenizer:
        return self._by_skip[skip_special_tokens]


def _mistral_decoder(mistral: Any, skip_special_tokens: bool) -> IncrementalDetokenizer:
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    if isinstance(mistral, Tekkenizer):
        return MistralTekkenDetokenizer(mistral, skip_special_tokens=skip_special_tokens)
    return MistralSpmDetokenizer(mistral, skip_special_tokens=skip_special_tokens)


def _batch_stop_strings(
    finish_reason: str | None, reported: int | str | None, rules: StopRules | None, eos: EosIds
) -> tuple[str, ...]:
    """Which stop strings cut a complete output.

    vLLM 0.33: only on a "stop" finish; a reported string wins; an int stop_reason (a stop
    token) means none. Deliberate divergence: an int stop_reason that is one of the model's
    EOS ids counts as an EOS finish, because tokens-only engines (no tokenizer, so no primary
    EOS) report EOS that way; vLLM 0.33 then never cuts the request's stop strings.
    """
    if finish_reason != "stop":
        return ()
    if isinstance(reported, int) and reported not in eos.all:
        return ()
    if isinstance(reported, str):
        return (reported,)
    return rules.stop if rules is not None else ()


def decode_batch(
    detok: IncrementalDetokenizer,
    seed: DetokState,
    token_ids: Sequence[int],
    finish_reason: str | None,
    stop_reason: int | str | None,
    rules: StopRules | None,
    eos: EosIds,
) -> tuple[str, int | str | None]:
    """The engine's text for a complete output, and the stop_reason (vLLM `_decode_output`)."""
    reported = stop_reason
    ids, stop_reason = drop_stop_token(
        token_ids, finish_reason, stop_reason, rules, eos.primary, eos.all
    )
    stops = _batch_stop_strings(finish_reason, reported, rules, eos)
    min_tokens = rules.min_tokens if rules is not None else 0
    # One uncapped pass like vLLM's batch path (a stream's window cap does not apply here).
    head, tail = detok.decode_segments(seed, [ids[:min_tokens], ids[min_tokens:]])
    text = head + tail
    if not stops or not tail:
        return text, stop_reason
    match = find_stop(text, len(head), stops)
    if match is None:
        return text, stop_reason
    include = rules is not None and rules.include_stop_str_in_output
    return cut_text(text, match, include), match[0]


@dataclass(frozen=True, slots=True)
class StreamText:
    detok: DetokState
    scan: StopScanState | None
    text: str  # text released to the client (or the parser) by this step
    stop: str | None  # a stop string ended the output in this step


def stream_text_step(
    detok: IncrementalDetokenizer,
    state: DetokState,
    scanner: StopScan | None,
    scan: StopScanState | None,
    ids: Sequence[int],
    finishing: bool,
) -> StreamText:
    """Detokenize one chunk's ids and run the stop scan; `finishing` releases held text."""
    if scanner is None or scan is None:
        state, text = detok.feed(state, ids)
        return StreamText(state, None, text, None)
    released: list[str] = []
    # Split at the min_tokens boundary so the scan knows where stop strings may end.
    split = min(scanner.tokens_before_min(scan), len(ids))
    for part in (ids[:split], ids[split:]):
        if not part:
            continue
        state, text = detok.feed(state, part)
        result = scanner.feed(scan, text, len(part))
        scan = result.state
        released.append(result.released)
        if result.stop is not None:
            return StreamText(state, scan, "".join(released), result.stop)
    if finishing:
        scan, held = scanner.flush(scan)
        released.append(held)
    return StreamText(state, scan, "".join(released), None)
