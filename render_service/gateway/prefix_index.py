"""Which engine probably still holds a prompt's prefix in its KV cache (approximate, bounded).

Theory of operation. vLLM's prefix cache keys full blocks of `block_size` tokens by a hash
chain: block i's key covers block i's tokens *and* block i-1's key, so equal keys mean equal
prefixes up to that block, and a cached block implies its whole prefix was there when it was
cached. We mirror that with `block_hashes(token_ids)` (full blocks only, like vLLM; the
partial tail block is never shared) and remember, per engine, the keys of the prompts we sent
it, in LRU order. An engine's score for a new prompt is the number of leading blocks whose key
it remembers; since keys chain, the walk stops at the first miss.

It is an estimate: the engine evicts on its own schedule, and other clients may warm it. So the
memory is bounded (`capacity` keys per engine, least recently used evicted first) and a
restarted or unhealthy engine is forgotten. Cost: O(prompt_len) to hash and O(blocks) dict
lookups per engine per request.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["PrefixIndex", "block_hashes"]

_ROOT = 0x5EED  # parent key of the first block


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained keys of the full blocks of `token_ids`."""
    keys: list[int] = []
    parent = _ROOT
    full = len(token_ids) - len(token_ids) % block_size
    for start in range(0, full, block_size):
        parent = hash((parent, tuple(token_ids[start:start + block_size])))
        keys.append(parent)
    return keys


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
