"""Incremental detokenizer equal to vLLM 0.33's derender decoding, with a bounded JSON state.

Theory of operation
-------------------
vLLM's derender (`vllm/renderers/online_derenderer.py::_detokenize_delta`) decodes one token at
a time with `detokenize_incrementally` (vllm/tokenizers/detokenizer_utils.py) over a window of
*token strings* (`convert_ids_to_tokens` output) and two offsets:

* `prefix_offset`: start of the tokens decoded only as left context (so the tokenizer's
  cleanup rules, e.g. SentencePiece leading spaces, act as they would on the full text);
* `read_offset`: end of the tokens whose text has been emitted.

For each new token it decodes `window[prefix:read]` (the prefix text) and `window[prefix:]`
(the new text). If the new text is not longer than the prefix text, or ends in U+FFFD (an
unfinished UTF-8 sequence from byte-fallback / byte-level pieces), nothing is emitted and the
offsets stay; otherwise the new text minus the prefix text is emitted and the offsets move to
`(read, len(window))`. After every token the window is trimmed to start at `prefix_offset`
(nothing before it is ever read again), which keeps the window a handful of tokens long.

The window is seeded from the last 7 prompt ids (`INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET`
5, plus 2) with `prefix_offset = max(len - 5, 0)` and `read_offset = len`, exactly as
`convert_prompt_ids_to_tokens` does, so the first output token decodes with the same left
context as upstream.

This module reproduces that algorithm over a HF `tokenizers.Tokenizer` (the Rust object that
transformers' fast tokenizers wrap): `id_to_token` is `convert_ids_to_tokens`, and
`decoder.decode(tokens)` is `convert_tokens_to_string`. `special_token_ids` must be the ids
transformers reports as `all_special_ids` for the model (vLLM skips exactly those when
`skip_special_tokens` is set); tokenizer.json's own `special` flags are not the same set.
For fast tokenizers vLLM never applies `spaces_between_special_tokens` (that knob only
affects its slow-tokenizer path), so it is accepted here for API parity and has no effect.

State: `DetokState` holds the token-string window and the two offsets, the same fields (and
meaning) as vLLM's `DerenderStreamState.prev_tokens/prefix_offset/read_offset`. Text held back
because it may be an unfinished character is never dropped while more tokens follow; text held
at the very end of the output (an unfinished UTF-8 sequence) is dropped, as upstream does.
A stream's window is capped at MAX_WINDOW_TOKENS (as vLLM caps `prev_tokens` on the wire).
Batch decoding (`decode_segments`) runs the same steps under a larger cap,
MAX_BATCH_WINDOW_TOKENS: vLLM's batch has none, but a run of tokens that never completes a
character costs time quadratic in its length, so an unbounded run from an untrusted body
could hold a worker for minutes. Below the cap a degenerate output decodes as upstream's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence

from tokenizers import Tokenizer

from parsers._errors import LimitExceededError, StateError
from parsers._state import JsonState

__all__ = [
    "DetokState",
    "IncrementalDetokenizer",
    "SEED_PROMPT_IDS",
    "PREFIX_CONTEXT_TOKENS",
    "MAX_WINDOW_TOKENS",
    "MAX_BATCH_WINDOW_TOKENS",
]

# vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET: tokens of left context kept when seeding.
PREFIX_CONTEXT_TOKENS = 5
# convert_prompt_ids_to_tokens reads the last OFFSET + 2 prompt ids ("in case we have special
# tokens").
SEED_PROMPT_IDS = PREFIX_CONTEXT_TOKENS + 2
# vLLM's DerenderStreamState caps prev_tokens at 1024 entries on the wire. The window only grows
# while tokens keep ending in an unfinished character, so real outputs stay far below it.
MAX_WINDOW_TOKENS = 1024
MAX_BATCH_WINDOW_TOKENS = 4096  # ~1.6 s of CPU for the worst run; real characters need <= 4

_REPLACEMENT_CHAR = "\ufffd"


@dataclasses.dataclass(frozen=True, slots=True)
class DetokState(JsonState):
    """Window of token strings and offsets into it (vLLM's prev_tokens/prefix/read offsets)."""

    VERSION = 1

    prev_tokens: tuple[str, ...] = ()
    prefix_offset: int = 0
    read_offset: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.prefix_offset <= self.read_offset <= len(self.prev_tokens):
            raise ValueError("offsets out of range")
        if len(self.prev_tokens) > MAX_WINDOW_TOKENS:
            raise ValueError(f"window longer than {MAX_WINDOW_TOKENS} tokens")


class IncrementalDetokenizer:
    """Token ids -> text, one delta at a time, with vLLM 0.33 derender semantics."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        special_token_ids: Collection[int],
        *,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
    ) -> None:
        self._tokenizer = tokenizer
        self._decoder = tokenizer.decoder
        self._vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self._special_ids = frozenset(special_token_ids)
        self.skip_special_tokens = skip_special_tokens
        # No effect for fast tokenizers in vLLM (see module docstring); kept for parity.
        self.spaces_between_special_tokens = spaces_between_special_tokens

    @staticmethod
    def state_type() -> type[DetokState]:
        return DetokState

    # -- seeding -----------------------------------------------------------------------

    def initial_state(self, prompt_token_ids: Sequence[int] | None = ()) -> DetokState:
        """Seed from the prompt's last ids like `convert_prompt_ids_to_tokens`; empty if none."""
        if not prompt_token_ids:
            return DetokState()
        tail = [int(t) for t in prompt_token_ids[-SEED_PROMPT_IDS:]]
        tokens = self._ids_to_tokens(tail)
        read_offset = len(tokens)
        return DetokState(
            prev_tokens=tuple(tokens),
            prefix_offset=max(read_offset - PREFIX_CONTEXT_TOKENS, 0),
            read_offset=read_offset,
        )

    # -- streaming ---------------------------------------------------------------------

    def feed(self, state: DetokState, token_ids: Iterable[int]) -> tuple[DetokState, str]:
        """Decode the next ids; returns the new state and the text they complete.

        The window a state carries is capped at MAX_WINDOW_TOKENS: past it (only a run of
        tokens that never completes a character gets there) a LimitExceededError is raised.
        """
        self._check_state(state)
        window, prefix, read, text = self._run(
            list(state.prev_tokens), state.prefix_offset, state.read_offset, token_ids,
            max_window=MAX_WINDOW_TOKENS,
        )  # fmt: skip
        return DetokState(tuple(window), prefix, read), text

    def finish(self, state: DetokState) -> tuple[DetokState, str]:
        """End of output: upstream emits nothing more (an unfinished character is dropped)."""
        self._check_state(state)
        return state, ""

    def decode_segments(self, seed: DetokState, segments: Iterable[Sequence[int]]) -> list[str]:
        """Batch decode of one complete output given as consecutive id segments; their texts.

        vLLM's batch derender decodes the whole output in one call with no cap on the window;
        here a run of tokens that never completes a character (e.g. lone UTF-8 continuation
        bytes) decodes as upstream does up to MAX_BATCH_WINDOW_TOKENS, past which a
        LimitExceededError bounds its quadratic cost. Segments let a caller cut the text at
        token boundaries (derender's min_tokens) without a second pass.
        """
        self._check_state(seed)
        window, prefix, read = list(seed.prev_tokens), seed.prefix_offset, seed.read_offset
        texts = []
        for ids in segments:
            window, prefix, read, text = self._run(
                window, prefix, read, ids, max_window=MAX_BATCH_WINDOW_TOKENS
            )
            texts.append(text)
        return texts

    def decode_all(
        self, token_ids: Sequence[int], prompt_token_ids: Sequence[int] | None = ()
    ) -> str:
        """Batch decode: the concatenation of streaming the ids in any split (where the
        stream stays within its window cap)."""
        return self.decode_segments(self.initial_state(prompt_token_ids), [token_ids])[0]

    # -- internals -----------------------------------------------------------------------

    def _check_state(self, state: object) -> None:
        if not isinstance(state, DetokState):
            raise StateError(f"expected DetokState, got {type(state).__name__}")
        token_to_id = self._tokenizer.token_to_id
        for token in state.prev_tokens:
            # "" stands for an out-of-vocabulary prompt id, as upstream writes it.
            if token and token_to_id(token) is None:
                raise StateError("detokenizer state holds a token that is not in the vocabulary")

    def _run(
        self,
        window: list[str],
        prefix: int,
        read: int,
        token_ids: Iterable[int],
        *,
        max_window: int,
    ) -> tuple[list[str], int, int, str]:
        """`_step` over each id, trimming the window as upstream's `_detokenize_delta` does."""
        parts: list[str] = []
        for token_id in token_ids:
            new_tokens, text, prefix, read = self._step(window, prefix, read, int(token_id))
            # Trim to the tail still readable (everything before prefix_offset is dead).
            window.extend(new_tokens)
            if prefix:
                del window[:prefix]
                read -= prefix
                prefix = 0
            if len(window) > max_window:
                raise LimitExceededError(
                    f"detokenizer window exceeds {max_window} tokens without completing a "
                    "character"
                )
            if text:
                parts.append(text)
        return window, prefix, read, "".join(parts)

    def _ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        """convert_ids_to_tokens(ids, skip_special_tokens) with None -> "" (upstream's guard)."""
        out = []
        for token_id in ids:
            if self.skip_special_tokens and token_id in self._special_ids:
                continue
            token = self._tokenizer.id_to_token(token_id) if token_id >= 0 else None
            out.append(token if token is not None else "")
        return out

    def _decode(self, tokens: list[str]) -> str:
        if self._decoder is None:
            return " ".join(tokens)
        text: str = self._decoder.decode(tokens)
        return text

    def _step(
        self, window: list[str], prefix: int, read: int, token_id: int
    ) -> tuple[list[str], str, int, int]:
        """One `detokenize_incrementally` call (non-first-iteration path, as derender uses)."""
        if 0 <= token_id < self._vocab_size:
            new_tokens = self._ids_to_tokens([token_id])
        else:
            new_tokens = [""]
        output_token_count = len(window) + len(new_tokens)
        start = min(prefix, read, len(window))
        output_tokens = (window[start:] if start else window) + new_tokens
        prefix_text = self._decode(output_tokens[prefix - start : read - start])
        new_text = self._decode(output_tokens[prefix - start :])
        if len(new_text) <= len(prefix_text) or new_text.endswith(_REPLACEMENT_CHAR):
            return new_tokens, "", prefix, read
        return new_tokens, new_text[len(prefix_text) :], read, output_token_count
