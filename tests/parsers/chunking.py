"""Shared harness: a streaming parser's concatenated events equal its batch result on any split.

Used by the detokenizer, reasoning, combined-parser and tool-parser tests. Import it from any
test under tests/parsers/ with `from chunking import ...` (pytest puts this directory on
sys.path through conftest.py).

    assert_chunking_invariant(
        feed_fn=lambda state, text: parser.feed(state, text, "req-1"),
        finish_fn=lambda state: parser.finish(state, "req-1"),
        initial_state=parser.initial_state(),
        state_type=type(parser).state_type(),
        pieces=token_texts,                # one entry per token (str) or per token id (int)
        expected=collapse_batch(result),   # what the concatenated events must equal
    )

Splits checked: the whole output at once, one piece per chunk, every two-chunk split at a
piece boundary, and `n_random` seeded random splits. At every chunk boundary the state is
serialised with json.dumps, parsed back with json.loads and rebuilt with
`state_type.from_json`, and the rebuilt value must equal the original (exact round trip).

`pieces` of str are joined with "" into chunks; pieces of int (token ids) are joined into lists.
Events are folded with `collapse` (default `collapse_events`, for parser events; pass
`collapse_text` for a detokenizer whose feed returns a str).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from parsers._events import ContentDelta, ReasoningDelta, ToolArgsDelta, ToolCallStart
from parsers._state import JsonState

__all__ = [
    "Collapsed",
    "CollapsedCall",
    "assert_chunking_invariant",
    "collapse_events",
    "collapse_text",
    "splits_of",
    "ChunkingStats",
]


@dataclass(frozen=True)
class CollapsedCall:
    index: int
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Collapsed:
    """What a client sees after concatenating every delta of a stream."""

    reasoning: str = ""
    content: str = ""
    tool_calls: tuple[CollapsedCall, ...] = ()


@dataclass
class ChunkingStats:
    splits_checked: int = 0
    max_state_bytes: int = 0
    state_sizes: list[int] = field(default_factory=list)


def collapse_events(events: Sequence[Any]) -> Collapsed:
    """Fold parser events into one value; a malformed event sequence fails the test."""
    reasoning: list[str] = []
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    for event in events:
        if isinstance(event, ReasoningDelta):
            reasoning.append(event.text)
        elif isinstance(event, ContentDelta):
            content.append(event.text)
        elif isinstance(event, ToolCallStart):
            assert event.index not in calls, f"tool call {event.index} started twice"
            assert event.index == len(calls), f"tool call index {event.index} out of order"
            calls[event.index] = [event.id, event.name, ""]
        elif isinstance(event, ToolArgsDelta):
            assert event.index in calls, f"arguments for tool call {event.index} before its start"
            calls[event.index][2] += event.text
        else:  # pragma: no cover - a new event type must be added here
            raise AssertionError(f"unknown event {event!r}")
    return Collapsed(
        reasoning="".join(reasoning),
        content="".join(content),
        tool_calls=tuple(CollapsedCall(i, *calls[i]) for i in sorted(calls)),
    )


def collapse_text(events: Sequence[str]) -> str:
    return "".join(events)


def _join(pieces: Sequence[Any]) -> Any:
    if all(isinstance(p, str) for p in pieces):
        return "".join(pieces)
    return list(pieces)


# Two-chunk splits are every cut for outputs up to this many pieces; a longer output gets its
# first and last EDGE_CUTS cuts and a seeded sample of the rest: each of its n two-chunk
# splits reads all n pieces (n^2 work, minutes for one 4,000-token case), and the one-piece
# split already restores the state at every boundary.
MAX_SINGLE_CUTS = 128
EDGE_CUTS = 32


def splits_of(n_pieces: int, *, n_random: int = 100, seed: int = 0) -> list[tuple[int, ...]]:
    """Cut-point sets (strictly increasing piece offsets in 1..n-1) to check, deduplicated."""
    splits: list[tuple[int, ...]] = [(), tuple(range(1, n_pieces))]
    rng = random.Random(seed)
    splits.extend((cut,) for cut in _single_cuts(n_pieces, rng))
    for _ in range(n_random):
        if n_pieces <= 1:
            break
        k = rng.randint(1, n_pieces - 1)
        splits.append(tuple(sorted(rng.sample(range(1, n_pieces), k))))
    seen: set[tuple[int, ...]] = set()
    unique = []
    for cuts in splits:
        if cuts not in seen:
            seen.add(cuts)
            unique.append(cuts)
    return unique


def _single_cuts(n_pieces: int, rng: random.Random) -> list[int]:
    cuts = list(range(1, n_pieces))
    if len(cuts) <= MAX_SINGLE_CUTS:
        return cuts
    middle = cuts[EDGE_CUTS:-EDGE_CUTS]
    sample = rng.sample(middle, MAX_SINGLE_CUTS - 2 * EDGE_CUTS)
    return cuts[:EDGE_CUTS] + sorted(sample) + cuts[-EDGE_CUTS:]


def _round_trip(state: JsonState, state_type: type[JsonState], stats: ChunkingStats) -> JsonState:
    wire = json.dumps(state.to_json(), ensure_ascii=False)
    stats.state_sizes.append(len(wire.encode()))
    stats.max_state_bytes = max(stats.max_state_bytes, len(wire.encode()))
    restored = state_type.from_json(json.loads(wire))
    assert restored == state, "state does not round-trip through JSON exactly"
    assert type(restored) is type(state)
    return restored


def run_split(
    feed_fn: Callable[[Any, Any], tuple[Any, list[Any]]],
    finish_fn: Callable[[Any], tuple[Any, list[Any]]],
    initial_state: JsonState,
    state_type: type[JsonState],
    pieces: Sequence[Any],
    cuts: tuple[int, ...],
    stats: ChunkingStats | None = None,
) -> list[Any]:
    """Feed `pieces` cut at `cuts`, round-tripping the state at every boundary; return events."""
    stats = stats if stats is not None else ChunkingStats()
    bounds = (0, *cuts, len(pieces))
    state = _round_trip(initial_state, state_type, stats)
    events: list[Any] = []
    for start, end in zip(bounds, bounds[1:]):
        state, out = feed_fn(state, _join(pieces[start:end]))
        events.extend(out)
        state = _round_trip(state, state_type, stats)
    state, out = finish_fn(state)
    events.extend(out)
    _round_trip(state, state_type, stats)
    return events


def assert_chunking_invariant(
    feed_fn: Callable[[Any, Any], tuple[Any, list[Any]]],
    finish_fn: Callable[[Any], tuple[Any, list[Any]]],
    initial_state: JsonState,
    state_type: type[JsonState],
    pieces: Sequence[Any],
    expected: Any,
    *,
    collapse: Callable[[Sequence[Any]], Any] = collapse_events,
    n_random: int = 100,
    seed: int = 0,
) -> ChunkingStats:
    """Every split of `pieces` streams to `expected`; returns sizes seen (for bounds checks)."""
    stats = ChunkingStats()
    for cuts in splits_of(len(pieces), n_random=n_random, seed=seed):
        events = run_split(feed_fn, finish_fn, initial_state, state_type, pieces, cuts, stats)
        got = collapse(events)
        assert got == expected, (
            f"split at {cuts[:20]}{'...' if len(cuts) > 20 else ''} of {len(pieces)} pieces: "
            f"streamed {got!r} != batch {expected!r}"
        )
        stats.splits_checked += 1
    return stats
