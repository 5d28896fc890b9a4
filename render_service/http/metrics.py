"""Prometheus metrics of the render tier (and the gateway, which adds its own in gateway/).

With several worker processes, prometheus_client's multiprocess mode aggregates them: the CLI
points PROMETHEUS_MULTIPROC_DIR at a fresh folder before the workers start.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

__all__ = ["METRICS", "render_metrics_text", "CONTENT_TYPE_LATEST"]

_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)


class _Metrics:
    def __init__(self) -> None:
        self.requests = Counter(
            "render_service_requests_total",
            "HTTP requests by endpoint and status code.",
            ["endpoint", "status"],
        )
        self.latency = Histogram(
            "render_service_request_duration_seconds",
            "HTTP request latency by endpoint.",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
        )
        self.tokens_rendered = Counter(
            "render_service_prompt_tokens_rendered_total",
            "Prompt token ids produced by /render endpoints.",
        )
        self.tokens_derendered = Counter(
            "render_service_output_tokens_derendered_total",
            "Output token ids turned into text by /derender endpoints.",
        )
        self.rejected = Counter(
            "render_service_rejected_total",
            "Requests refused before any work, by reason.",
            ["reason"],
        )


METRICS = _Metrics()


def render_metrics_text() -> bytes:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # unannotated upstream
        return generate_latest(registry)
    return generate_latest()
