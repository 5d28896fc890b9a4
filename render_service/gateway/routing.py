"""Routing policies: pick one engine among a pool's healthy candidates.

    round_robin        next engine in turn
    least_outstanding  fewest requests in flight through this gateway (ties: in turn)
    prefix_aware       most leading prompt blocks recently sent to it (see prefix_index); no
                       match, a tie, or a winner busier than the least loaded engine by more
                       than IMBALANCE_ABS requests -> least_outstanding

A policy is a small object with `choose(candidates, keys)`; `keys` are the prompt's block
hashes (only prefix_aware reads them) and `record(engine, keys)` is called with the engine
finally used. Policies hold no engine state besides their own counters and the prefix index.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol

from render_service.gateway.prefix_index import PrefixIndex

__all__ = ["Routable", "RoutingPolicy", "RoundRobin", "LeastOutstanding", "PrefixAware",
           "make_policy", "IMBALANCE_ABS"]

# A cache hit saves one prefill; 8 queued requests ahead cost more than that on a busy engine.
IMBALANCE_ABS = 8


class Routable(Protocol):
    url: str
    outstanding: int


class RoutingPolicy(Protocol):
    name: str

    def choose(self, candidates: Sequence[Routable], keys: Sequence[int]) -> Routable: ...

    def record(self, engine: Routable, keys: Sequence[int]) -> None: ...

    def forget(self, engine: Routable) -> None: ...


class RoundRobin:
    name = "round_robin"

    def __init__(self) -> None:
        self._turn = itertools.count()

    def choose(self, candidates: Sequence[Routable], keys: Sequence[int]) -> Routable:
        return candidates[next(self._turn) % len(candidates)]

    def record(self, engine: Routable, keys: Sequence[int]) -> None:
        pass

    def forget(self, engine: Routable) -> None:
        pass


class LeastOutstanding:
    name = "least_outstanding"

    def __init__(self) -> None:
        self._turn = itertools.count()

    def choose(self, candidates: Sequence[Routable], keys: Sequence[int]) -> Routable:
        start = next(self._turn) % len(candidates)
        rotated = [*candidates[start:], *candidates[:start]]  # ties go round in turn
        return min(rotated, key=lambda e: e.outstanding)

    def record(self, engine: Routable, keys: Sequence[int]) -> None:
        pass

    def forget(self, engine: Routable) -> None:
        pass


class PrefixAware:
    name = "prefix_aware"

    def __init__(self, index: PrefixIndex) -> None:
        self.index = index
        self._fallback = LeastOutstanding()

    def choose(self, candidates: Sequence[Routable], keys: Sequence[int]) -> Routable:
        scores = [self.index.match_blocks(e.url, keys) for e in candidates]
        best = max(scores)
        if best == 0:
            return self._fallback.choose(candidates, keys)
        top = [e for e, s in zip(candidates, scores) if s == best]
        chosen = self._fallback.choose(top, keys)
        least = min(e.outstanding for e in candidates)
        if chosen.outstanding - least > IMBALANCE_ABS:
            return self._fallback.choose(candidates, keys)
        return chosen

    def record(self, engine: Routable, keys: Sequence[int]) -> None:
        self.index.record(engine.url, keys)

    def forget(self, engine: Routable) -> None:
        self.index.forget(engine.url)


def make_policy(name: str, prefix_capacity: int) -> RoutingPolicy:
    if name == "round_robin":
        return RoundRobin()
    if name == "least_outstanding":
        return LeastOutstanding()
    if name == "prefix_aware":
        return PrefixAware(PrefixIndex(prefix_capacity))
    raise ValueError(f"unknown routing policy {name!r}")
