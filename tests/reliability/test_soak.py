"""Soak, short form (the long form is bench/soak.py): two real `render-service serve` replicas
sharing one stream-state secret, ~1000 mixed render and streaming-derender requests, each
stream's chunks sent to random replicas. Every stream's concatenated output equals its batch
derender; no request fails; server RSS does not grow after warm-up beyond a small bound.
Loopback only; both servers are stopped by PID.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 1000
TRAFFIC_SECONDS = 40  # bound on the traffic phase; server start has its own bound
MAX_RSS_GROWTH_MIB = 32


def _soak_module():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("bench_soak", ROOT / "bench" / "soak.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_soak"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(300)
def test_two_replicas_soak(tmp_path: Path) -> None:
    result = _soak_module().run_soak(REQUESTS, TRAFFIC_SECONDS, seed=1, workdir=tmp_path, ready_timeout_s=200)
    summary = result.summary()
    assert not result.errors, summary
    assert not result.mismatches, summary
    assert result.requests >= REQUESTS * 0.9, summary  # the time bound did not cut the run short
    assert result.streams_done >= 50 and result.streams_crossing_replicas >= 40, summary
    assert result.rss_growth_mib <= MAX_RSS_GROWTH_MIB, summary
