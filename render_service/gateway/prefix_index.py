"""Which engine probably still holds a prompt's prefix in its KV cache (approximate, bounded).

Theory of operation. vLLM's prefix cache keys full blocks of `block_size` tokens by a hash
chain: block i's key covers block i's tokens *and* block i-1's key, so equal keys mean equal
prefixes up to that block, and a cached block implies its whole prefix was there when it was
cached. We mirror that with `block_hashes(token_ids)` (full blocks only, like vLLM; the
partial tail block is never shared) and remember, per engine, the keys of the prompts an
engine served, in LRU order. Like vLLM's extra keys, a block's key also covers the mm_hash of
every image whose placeholder tokens overlap it (two different images expand to the same
placeholder ids, so the ids alone would call them a shared prefix), and the chain starts from
the request's `cache_salt` (vLLM salts the first block, so salted prompts share nothing with
other salts). An engine's score for a new prompt is the number of leading blocks whose key
it remembers; since keys chain, the walk stops at the first miss.

It is an estimate: the engine evicts on its own schedule, and other clients may warm it. So the
memory is bounded (`capacity` keys per engine, least recently used evicted first) and a
restarted or unhealthy engine is forgotten. Cost: O(prompt_len) to hash and O(blocks) dict
lookups per engine per request.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PrefixIndex", "PromptBlocks", "MMRange", "block_hashes"]

_ROOT = 0x5EED  # parent key of the first block


@dataclass(frozen=True, slots=True)
class MMRange:
    """One image's placeholder tokens in the prompt, and its content hash."""

    offset: int
    length: int
    mm_hash: str


def block_hashes(token_ids: Sequence[int], block_size: int, *, cache_salt: str | None = None,
                 mm_ranges: Sequence[MMRange] = ()) -> list[int]:
    """Chained keys of the full blocks of `token_ids`."""
    keys: list[int] = []
    parent = _ROOT if cache_salt is None else hash((_ROOT, cache_salt))
    full = len(token_ids) - len(token_ids) % block_size
    for start in range(0, full, block_size):
        end = start + block_size
        images = tuple(r.mm_hash for r in mm_ranges
                       if r.offset < end and r.offset + r.length > start)
        parent = hash((parent, tuple(token_ids[start:end]), images))
        keys.append(parent)
    return keys


@dataclass
class PromptBlocks:
    """What identifies a prompt's KV blocks; keys computed once per block size."""

    token_ids: Sequence[int]
    cache_salt: str | None = None
    mm_ranges: tuple[MMRange, ...] = ()
    _keys: dict[int, list[int]] = field(default_factory=dict, repr=False)

    @classmethod
    def of_request(cls, rendered: Mapping[str, Any]) -> PromptBlocks:
        """From a GenerateRequest dict (its `features` carry the image hashes and ranges)."""
        return cls(rendered["token_ids"], rendered.get("cache_salt"),
                   _mm_ranges(rendered.get("features")))

    def keys(self, block_size: int) -> list[int]:
        if block_size not in self._keys:
            self._keys[block_size] = block_hashes(
                self.token_ids, block_size, cache_salt=self.cache_salt, mm_ranges=self.mm_ranges)
        return self._keys[block_size]


def _mm_ranges(features: Mapping[str, Any] | None) -> tuple[MMRange, ...]:
    if not features:
        return ()
    hashes = features.get("mm_hashes") or {}
    places = features.get("mm_placeholders") or {}
    return tuple(MMRange(int(p["offset"]), int(p["length"]), str(h))
                 for modality in sorted(hashes)
                 for h, p in zip(hashes[modality], places.get(modality) or ()))


class PrefixIndex:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._by_engine: dict[str, OrderedDict[int, None]] = {}

    def match_blocks(self, engine: str, keys: Sequence[int]) -> int:
        """How many leading blocks of `keys` this engine was recently sent."""
        seen = self._by_engine.get(engine)
        if not seen:
            return 0
        count = 0
        for key in keys:
            if key not in seen:
                break
            count += 1
        return count

    def record(self, engine: str, keys: Sequence[int]) -> None:
        seen = self._by_engine.setdefault(engine, OrderedDict())
        for key in keys:
            seen[key] = None
            seen.move_to_end(key)
        while len(seen) > self.capacity:
            seen.popitem(last=False)

    def forget(self, engine: str) -> None:
        self._by_engine.pop(engine, None)

    def size(self, engine: str) -> int:
        return len(self._by_engine.get(engine, ()))
